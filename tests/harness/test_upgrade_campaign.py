"""The rolling upgrade on a real lab: a mode-ha cluster holding messages, switched under load.

One run of the queue workload with ``--nemesis partition,kill,upgrade`` on a
broker cluster that starts in mode ha: every node is switched with one divided
offset, the old messages are still served at their acked offsets, new ones are
acked past the divided offset, and every acked send is in the final drains
(the checker's ``queue-lost``; the run is VALID).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.core.history import read_history
from harness.core.layout import history_file
from harness.core.spec import TestSpec as Spec
from harness.run.runner import RunOptions, run_test

pytestmark = [pytest.mark.integration, pytest.mark.lab, pytest.mark.slow]


def test_upgrade_under_load_keeps_old_offsets_and_every_acked_message(
    lab: Any, tmp_path: Path
) -> None:
    hosts = lab.hosts()[:3]
    spec = Spec(
        name=f"t{os.getpid()}-upgrade",
        nodes=tuple(h.name for h in hosts),
        workload="queue",
        nemesis=("partition", "kill", "upgrade"),
        time_limit=30.0,
        concurrency=6,
        rate=60.0,
        seed=11,
        nemesis_interval=3.0,
        options={"db": {"mode": "broker", "upgrade_from": "ha"}},
    )
    res = run_test(
        spec, hosts, store_root=tmp_path, options=RunOptions(progress=False, recovery_s=3.0)
    )
    assert not res.interrupted, res.reason
    assert res.valid is True, json.dumps(res.results, default=str)[:2000]
    ops = read_history(history_file(res.store_dir))
    steps = [o for o in ops if o.type == "info" and o.f.endswith("-upgrade") and o.value["nodes"]]
    switched = [n for o in steps for n in o.value["nodes"]]
    assert sorted(switched) == sorted(spec.nodes)  # each node once, none twice
    divided = {d for o in steps for d in o.value["divided"].values()}
    assert len(divided) == 1 and min(divided) > 0, divided  # one old log everywhere
    (d,) = divided
    sends = [o for o in ops if o.f == "send" and o.type == "ok"]
    old = [o for o in sends if o.value["offset"] < d]
    new = [o for o in sends if o.value["offset"] >= d]
    assert old and new, (len(old), len(new))  # sends acked on both sides of the switch
    first_switch = steps[0].index
    assert all(o.index < first_switch for o in old)  # nothing lands below D afterwards
    final: dict[str, dict[str, int]] = {}  # node -> body -> offset, from the final drains
    for o in ops:
        if o.f == "pull" and o.type == "ok" and o.value.get("final"):
            for _qo, off, body in o.value["messages"]:
                final.setdefault(str(o.node), {})[body] = off
    for o in old:  # old messages still read at their old offsets, on every node
        for node in spec.nodes:
            assert final[node].get(o.value["body"]) == o.value["offset"], (node, o.value)
