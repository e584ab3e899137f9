"""examples/redisqueue on the lab: a consume-and-ack queue judged by ``total-queue``.

Needs Debian's ``redis-server`` on this machine (skipped without it). The quick test
loads the plugin from ``PYTHONPATH`` (``module:factory``, no packaging) and runs a
short campaign; the slow ones install it with pip into a throwaway target, find it by
its entry-point names, and run whole campaigns under partitions, kills and pauses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from checker.total_queue import check_total_queue
from harness.core.history import read_history

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "redisqueue"

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="Debian's redis-server is not installed"
)


def campaign(
    lab: Any, tmp: Path, env: dict[str, str], db: str, workload: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """Run one campaign on the lab's first three hosts; (process, results.json, run dir)."""
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
            "3",
            "--db",
            db,
            "-w",
            workload,
            "--no-progress",
            "--store",
            str(store),
            "--name",
            "redisq",
            *args,
        ],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    run = store / "redisq" / "latest"
    assert (run / "results.json").exists(), proc.stderr[-3000:]
    return proc, json.loads((run / "results.json").read_text()), run


def deliveries(ops: Sequence[Any]) -> dict[str, int]:
    """How many times each body was delivered, over every dequeue of the history."""
    seen: dict[str, int] = {}
    for o in ops:
        if o.f == "dequeue" and o.type in ("ok", "info") and isinstance(o.value, dict):
            for m in o.value.get("messages") or []:
                seen[m["body"]] = seen.get(m["body"], 0) + 1
    return seen


def strip(ops: Sequence[Any], bodies: set[str]) -> list[Any]:
    """The history with every delivery of ``bodies`` deleted (a planted loss)."""
    out = []
    for o in ops:
        if o.f == "dequeue" and isinstance(o.value, dict) and "messages" in o.value:
            kept = [m for m in o.value["messages"] if m["body"] not in bodies]
            o = o.replace(value={**o.value, "messages": kept})
        out.append(o)
    return out


def test_quick_campaign_valid_and_a_planted_loss_is_found(lab, tmp_path):
    """A short run under kills and pauses is VALID; deleting the one delivery of acked
    messages from its history, three more than unknown dequeues could have taken, makes
    it INVALID with exactly those lost (and three provably)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGIN), str(ROOT)])}
    proc, results, run = campaign(
        lab,
        tmp_path,
        env,
        "splitbrain_redisqueue:db",
        "splitbrain_redisqueue:workload",
        "--nemesis",
        "kill,pause",
        "--nemesis-interval",
        "1.5",
        "--time-limit",
        "6",
        "--concurrency",
        "3",
        "--rate",
        "60",
    )
    tq = results["checkers"]["total-queue"]
    assert proc.returncode == 0 and results["valid"] is True, (tq, proc.stderr[-2000:])
    ops = read_history(run / "history.jsonl")
    stats = tq["stats"]
    assert stats["enqueues"]["ok"] > 50 and stats["drained"] is True
    once = sorted(b for b, n in deliveries(ops).items() if n == 1)
    acked = {o.value["body"] for o in ops if o.f == "enqueue" and o.type == "ok"}
    victims = {b for b in once if b in acked}
    k = stats["unknown_dequeue_capacity"] + 3
    victims = set(sorted(victims)[:k])
    assert len(victims) == k
    planted = check_total_queue(strip(ops, victims), {})
    assert planted["valid"] is False
    assert planted["stats"]["anomaly_counts"] == {"lost": k}
    assert planted["stats"]["lost_provable"] == 3
    assert {e["body"] for e in planted["anomalies"]["lost"]} == victims


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The plugin pip-installed into a throwaway target: the env that finds it."""
    tmp = tmp_path_factory.mktemp("redisqueue")
    site, src = tmp / "site", tmp / "src"
    shutil.copytree(PLUGIN, src)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}


@pytest.mark.slow
def test_campaign_under_partition_kill_pause_is_valid(lab, tmp_path, installed):
    """Consumers active throughout a minute of partitions, kills and pauses: VALID."""
    listing = subprocess.run(
        [sys.executable, "-m", "harness.cli", "plugins"],
        env=installed,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "splitbrain-redisqueue" in listing.stdout, listing.stdout
    proc, results, run = campaign(
        lab,
        tmp_path,
        installed,
        "redis-queue",
        "redis-queue",
        "--nemesis",
        "partition,kill,pause",
        "--nemesis-interval",
        "3",
        "--time-limit",
        "60",
        "--concurrency",
        "5",
        "--rate",
        "80",
    )
    tq = results["checkers"]["total-queue"]
    assert results["valid"] is True, (tq, proc.stderr[-2000:])
    ops = read_history(run / "history.jsonl")
    assert tq["stats"]["enqueues"]["ok"] > 500 and tq["stats"]["missing"] == 0
    faults = {o.f for o in ops if o.process == "nemesis"}
    assert {"start-kill", "start-pause", "start-partition"} <= faults, faults
    # consumers took messages all through the load, not only in the final drains (a
    # tenth may fall wholly in an outage of the primary: 6 s of a kill or pause)
    load_ns = 60 * 10**9
    tenths = {
        o.time * 10 // load_ns
        for o in ops
        if o.f == "dequeue" and o.type == "ok" and o.value["messages"] and o.time < load_ns
    }
    assert len(tenths) >= 8, tenths
    finals = [o for o in ops if o.f == "dequeue" and o.type == "ok" and o.value.get("final")]
    midrun = tq["stats"]["delivered_messages"] - sum(len(o.value["messages"]) for o in finals)
    assert midrun > 0.8 * tq["stats"]["delivered_messages"]


@pytest.mark.slow
def test_client_that_drops_acked_messages_is_caught(lab, tmp_path, installed):
    """``drop_acked=4``: the client acks four messages but leaves them out of the history;
    the run is INVALID with exactly those lost."""
    proc, results, run = campaign(
        lab,
        tmp_path,
        installed,
        "redis-queue",
        "redis-queue",
        "--workload-option",
        "drop_acked=4",
        "--nemesis",
        "kill",
        "--time-limit",
        "10",
        "--concurrency",
        "3",
        "--rate",
        "60",
    )
    ops = read_history(run / "history.jsonl")
    dropped = {
        b
        for o in ops
        if o.f == "dequeue" and o.type == "ok"
        for b in o.value.get("dropped_on_purpose") or []
    }
    assert len(dropped) == 4
    expected = dropped - set(deliveries(ops))  # unless also delivered elsewhere
    tq = results["checkers"]["total-queue"]
    assert proc.returncode == 1 and results["valid"] is False, tq
    assert tq["stats"]["anomaly_counts"] == {"lost": len(expected)}
    assert {e["body"] for e in tq["anomalies"]["lost"]} == expected
