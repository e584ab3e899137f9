"""examples/zkqueue (with examples/zookeeper for the servers) on the lab, judged by ``total-queue``.

Needs Debian's ``zookeeper`` package on this machine (skipped without it) and PyPI or
a mirror for ``kazoo``. Both plugins are pip-installed into a throwaway target and
found by their entry-point names (``zookeeper``, ``zk-workqueue``): the workload
reuses the other package's DB by name, which is what this exercises.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from checker.total_queue import check_total_queue
from harness.core.history import read_history

ROOT = Path(__file__).resolve().parents[2]
JAR = Path("/usr/share/java/zookeeper.jar")

pytestmark = pytest.mark.skipif(not JAR.exists(), reason="Debian's zookeeper is not installed")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """examples/zookeeper and examples/zkqueue pip-installed into a throwaway target
    (kazoo with them): the environment that finds them."""
    tmp = tmp_path_factory.mktemp("zkqueue")
    site = tmp / "site"
    srcs = []
    for name in ("zookeeper", "zkqueue"):  # copies: pip builds in the source tree
        shutil.copytree(ROOT / "examples" / name, tmp / name)
        srcs.append(str(tmp / name))
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), *srcs],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


def campaign(
    lab: Any, tmp: Path, env: dict[str, str], nodes: int, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """One zk-workqueue run on the lab's first ``nodes`` hosts; (process, results.json, run dir)."""
    store = tmp / "store"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--lab",
            lab.name,
            "--nodes",
            str(nodes),
            "--db",
            "zookeeper",
            "-w",
            "zk-workqueue",
            "--no-progress",
            "--store",
            str(store),
            "--name",
            "zkwq",
            *args,
        ],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    run = store / "zkwq" / "latest"
    assert (run / "results.json").exists(), proc.stderr[-3000:]
    return proc, json.loads((run / "results.json").read_text()), run


def deliveries(ops: Sequence[Any]) -> Counter[str]:
    """How many times each body was delivered, over every dequeue of the history."""
    seen: Counter[str] = Counter()
    for o in ops:
        if o.f == "dequeue" and o.type in ("ok", "info") and isinstance(o.value, dict):
            seen.update(m["body"] for m in o.value.get("messages") or [])
    return seen


def strip(ops: Sequence[Any], bodies: set[str]) -> list[Any]:
    """The history with every delivery of ``bodies`` deleted (a planted loss)."""
    out = []
    for o in ops:
        if o.f == "dequeue" and isinstance(o.value, dict) and "messages" in o.value:
            o = o.replace(
                value={
                    **o.value,
                    "messages": [m for m in o.value["messages"] if m["body"] not in bodies],
                }
            )
        out.append(o)
    return out


def explain(results: dict[str, Any], run: Path) -> str:
    """A failed verdict's evidence in full: the anomalies and every history record they
    name (pytest's temporary directories do not outlive a few later sessions)."""
    tq = results["checkers"]["total-queue"]
    named = {
        i for kind in tq.get("anomalies", {}).values() for a in kind for i in a.get("indexes", [])
    }
    lines = (run / "history.jsonl").read_text().splitlines()
    records = [lines[i] for i in sorted(named) if i < len(lines)]
    return "\n".join([json.dumps(tq.get("anomalies"))[:6000], *records[:40]])


def assert_recipe_held(ops: Sequence[Any]) -> None:
    """What the client's mapping promises, checked on a real history: every acked
    enqueue names its own znode, and no znode's delete was confirmed to two consumers
    (a double ``ok`` delete would be ZooKeeper's duplicate, not a redelivery)."""
    ids = [o.value["id"] for o in ops if o.f == "enqueue" and o.type == "ok"]
    assert len(ids) == len(set(ids)), "two acked creates share a znode"
    acked = Counter(
        m["znode"]
        for o in ops
        if o.f == "dequeue" and o.type == "ok"
        for m in o.value["messages"]
        if m["acked"]
    )
    assert not [z for z, n in acked.items() if n > 1], acked.most_common(3)


def test_quick_campaign_valid_and_a_planted_loss_is_found(lab, tmp_path, installed):
    """A short run under kills and pauses on a 3-server ensemble is VALID and drained;
    deleting the one delivery of acked messages from its history, three more than the
    unknown dequeues could have taken, makes it INVALID with exactly those lost."""
    proc, results, run = campaign(
        lab,
        tmp_path,
        installed,
        3,
        "--nemesis",
        "kill,pause",
        "--nemesis-interval",
        "2",
        "--time-limit",
        "8",
        "--concurrency",
        "3",
        "--rate",
        "40",
    )
    tq = results["checkers"]["total-queue"]
    assert proc.returncode == 0 and results["valid"] is True, explain(results, run)
    stats = tq["stats"]
    assert stats["enqueues"]["ok"] > 30 and stats["drained"] is True, stats
    ops = read_history(run / "history.jsonl")
    assert_recipe_held(ops)
    acked = {o.value["body"] for o in ops if o.f == "enqueue" and o.type == "ok"}
    once = sorted(b for b, n in deliveries(ops).items() if n == 1 and b in acked)
    k = stats["unknown_dequeue_capacity"] + 3
    assert len(once) >= k, (len(once), k)
    victims = set(once[:k])
    planted = check_total_queue(strip(ops, victims), {})
    assert planted["valid"] is False
    assert planted["stats"]["anomaly_counts"] == {"lost": k}
    assert planted["stats"]["lost_provable"] == 3
    assert {e["body"] for e in planted["anomalies"]["lost"]} == victims


@pytest.mark.slow
def test_campaign_under_partition_kill_pause_is_valid(lab, tmp_path, installed):
    """A minute of partitions, kills and pauses on a 5-server ensemble, consumers active
    throughout: VALID, nothing missing, most messages consumed during the load.

    The seed fixes the fault schedule (a measured run's: 5 partitions, 4 kills, a
    pause); a random one may kill all five servers thrice and leave little load."""
    proc, results, run = campaign(
        lab,
        tmp_path,
        installed,
        5,
        "--seed",
        "1313615524",
        "--nemesis",
        "partition,kill,pause",
        "--nemesis-interval",
        "3",
        "--time-limit",
        "60",
        "--concurrency",
        "5",
        "--rate",
        "40",
    )
    tq = results["checkers"]["total-queue"]
    assert results["valid"] is True, explain(results, run)
    stats = tq["stats"]
    assert stats["enqueues"]["ok"] > 150 and stats["missing"] == 0 and stats["drained"], stats
    ops = read_history(run / "history.jsonl")
    assert_recipe_held(ops)
    faults = {o.f for o in ops if o.process == "nemesis"}
    assert {"start-kill", "start-pause", "start-partition"} <= faults, faults
    # consumers took messages all through the load (a tenth may fall wholly in an
    # outage: a paused or killed majority serves nothing)
    load_ns, start = 60 * 10**9, min(o.time for o in ops if o.process != "nemesis")
    tenths = {
        (o.time - start) * 10 // load_ns
        for o in ops
        if o.f == "dequeue" and o.type == "ok" and o.value["messages"] and o.time - start < load_ns
    }
    assert len(tenths) >= 7, tenths
    final_invokes = {
        o.process for o in ops if o.f == "dequeue" and o.type == "invoke" and o.value.get("final")
    }
    in_drains = sum(
        len(o.value["messages"])
        for o in ops
        if o.f == "dequeue" and o.type == "ok" and o.process in final_invokes
    )
    assert stats["delivered_messages"] - in_drains > 0.7 * stats["delivered_messages"]


@pytest.mark.slow
def test_client_that_drops_acked_messages_is_caught(lab, tmp_path, installed):
    """``drop_acked=4``: the client deletes four znodes but leaves their deliveries out
    of the history; the harness's own verdict is INVALID with exactly those lost."""
    proc, results, run = campaign(
        lab,
        tmp_path,
        installed,
        3,
        "--workload-option",
        "drop_acked=4",
        "--nemesis",
        "kill",
        "--time-limit",
        "10",
        "--concurrency",
        "3",
        "--rate",
        "40",
    )
    ops = read_history(run / "history.jsonl")
    dropped = {
        b
        for o in ops
        if o.f == "dequeue" and o.type == "ok"
        for b in o.value.get("dropped_on_purpose") or []
    }
    assert len(dropped) == 4
    expected = dropped - set(deliveries(ops))  # unless delivered again elsewhere
    tq = results["checkers"]["total-queue"]
    assert proc.returncode == 1 and results["valid"] is False, tq
    assert tq["stats"]["anomaly_counts"] == {"lost": len(expected)}
    assert {e["body"] for e in tq["anomalies"]["lost"]} == expected
