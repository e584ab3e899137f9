"""The membership fault on a real lab: a quick remove-and-add-back, then issue 29's campaigns.

The quick test runs the whole harness (journal, history, heal, check) with one variant:
a follower removed and added back wiped under a fresh identity, the final configuration
the original five nodes. The slow ones are the "done when" of issue 29 (60 s each): the
correct node VALID under membership, partition and kill; ``reconfig-before-term-commit``
INVALID in at least 2 of 3 seeds; etcd reaching a verdict.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.core.history import read_history
from harness.core.spec import TestSpec as Spec
from harness.run.runner import RunOptions, run_test

pytestmark = [pytest.mark.integration, pytest.mark.lab]


def _campaign(
    lab: Any,
    tmp_path: Path,
    tag: str,
    *,
    nemesis: tuple[str, ...],
    time_limit: float,
    seed: int,
    bug: str | None = None,
    db: str = "dledger",
    workload: str = "mixed",
    interval: float = 5.0,
) -> Any:
    hosts = lab.hosts()
    spec = Spec(
        name=f"t{os.getpid()}-membership-{tag}",
        nodes=tuple(h.name for h in hosts),
        db=db,
        workload=workload,
        nemesis=nemesis,
        time_limit=time_limit,
        seed=seed,
        bug=bug,
        nemesis_interval=interval,
    )
    return run_test(spec, hosts, store_root=tmp_path, options=RunOptions(progress=False))


def _nemesis_ops(res: Any, f: str) -> list[Any]:
    ops = read_history(Path(res.store_dir) / "history.jsonl")
    return [op for op in ops if op.f == f and op.type == "info"]


def test_a_node_removed_and_added_back_wiped_then_all_five_are_voters(
    lab: Any, tmp_path: Path
) -> None:
    res = _campaign(
        lab,
        tmp_path,
        "quick",
        nemesis=("membership-remove-add",),
        time_limit=8.0,
        seed=29,
        interval=1.0,
    )
    assert not res.interrupted, res.reason
    starts = _nemesis_ops(res, "start-membership")
    assert starts, "no membership change landed"
    changes = starts[0].value["changes"]
    assert [(c["op"], c["ok"]) for c in changes] == [("remove", True), ("add", True)], changes
    node = changes[0]["node"]
    assert changes[1]["node"] == node
    # out of the configuration the cluster reported after the removal, back under a fresh id
    assert node not in changes[0]["members"]["voters"]
    assert changes[1]["id"] != changes[0]["id"] and changes[1]["id"].startswith(f"{node}.")
    final = _nemesis_ops(res, "stop-membership")[-1].value
    assert final["restored"] is True
    assert sorted(final["members"]["voters"]) == sorted(h.name for h in lab.hosts())
    assert res.valid is True, json.dumps(res.results, default=str)[:2000]


@pytest.mark.slow
def test_correct_node_is_valid_under_membership_partition_and_kill(
    lab: Any, tmp_path: Path
) -> None:
    res = _campaign(
        lab,
        tmp_path,
        "valid",
        nemesis=("membership", "partition", "kill"),
        time_limit=60.0,
        seed=2902,
    )
    assert not res.interrupted, res.reason
    assert _nemesis_ops(res, "start-membership")
    assert res.valid is True, json.dumps(res.results, default=str)[:2000]


@pytest.mark.slow
def test_reconfig_before_term_commit_is_found_in_two_of_three_seeds(
    lab: Any, tmp_path: Path
) -> None:
    verdicts = []
    for seed in (2911, 2912, 2913):
        res = _campaign(
            lab,
            tmp_path,
            f"bug{seed}",
            nemesis=("membership", "partition", "kill"),
            time_limit=60.0,
            seed=seed,
            bug="reconfig-before-term-commit",
        )
        assert not res.interrupted, res.reason
        verdicts.append(res.valid)
    assert verdicts.count(False) >= 2, verdicts


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed")
def test_etcd_reaches_a_verdict_under_membership_and_partition(lab: Any, tmp_path: Path) -> None:
    res = _campaign(
        lab,
        tmp_path,
        "etcd",
        nemesis=("membership", "partition"),
        time_limit=60.0,
        seed=2921,
        db="etcd",
        workload="etcd-register",
    )
    assert not res.interrupted, res.reason
    assert res.exit_code in (0, 1), json.dumps(res.results, default=str)[:2000]
    assert _nemesis_ops(res, "start-membership")
