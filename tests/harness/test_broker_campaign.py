"""Mode ``broker`` campaigns on a real lab: the queue workload under leader partitions and kills.

The correct broker must come out VALID, and the seeded ``broker-stale-master``
(a deposed master that keeps acking sends) INVALID with lost acked sends.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.core.spec import TestSpec as Spec
from harness.run.runner import RunOptions, run_test

pytestmark = [pytest.mark.integration, pytest.mark.lab, pytest.mark.slow]


def broker_campaign(lab: Any, tmp_path: Path, tag: str, *, bug: str | None = None) -> Any:
    hosts = lab.hosts()
    spec = Spec(
        name=f"t{os.getpid()}-broker-{tag}",
        nodes=tuple(h.name for h in hosts),
        workload="queue",
        # Cutting the master off is what deposes it; random grudges leave it in the
        # majority often enough that one seed can miss the bug.
        nemesis=("partition-leader", "kill"),
        time_limit=25.0,
        concurrency=6,
        rate=60.0,
        seed=11,
        bug=bug,
        nemesis_interval=3.0,
        options={"db": {"mode": "broker"}},
    )
    return run_test(
        spec, hosts, store_root=tmp_path, options=RunOptions(progress=False, recovery_s=3.0)
    )


def test_correct_broker_is_valid_and_stale_master_is_caught(lab: Any, tmp_path: Path) -> None:
    res = broker_campaign(lab, tmp_path, "ok")
    assert not res.interrupted, res.reason
    assert res.valid is True, json.dumps(res.results, default=str)[:2000]
    q = res.results["checkers"]["queue"]
    assert q["stats"]["sends"]["ok"] >= 10 and q["stats"]["final_pulls"] > 0

    res = broker_campaign(lab, tmp_path, "stale", bug="broker-stale-master")
    assert not res.interrupted, res.reason
    assert res.valid is False, json.dumps(res.results, default=str)[:2000]
    assert "queue-lost" in res.results["anomalies"]
