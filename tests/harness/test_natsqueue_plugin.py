"""examples/natsqueue (with examples/nats for the servers), pip-installed and run on the lab.

A NATS JetStream work queue: consumers ack through one durable pull consumer and
each ack deletes its message, so only ``total-queue`` (every dequeue of the run)
can judge it. Needs Debian's ``nats-server`` (skipped without it) and PyPI or a
mirror for ``nats-py``. Only the public API and entry points are used.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checker.total_queue import check_total_queue
from harness.core.history import read_history

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path("/usr/sbin/nats-server")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not BINARY.exists(), reason="Debian's nats-server is not installed"),
]


def test_nats_workqueue_campaign_on_the_lab(lab, tmp_path):
    site = tmp_path / "site"
    for name in ("nats", "natsqueue"):  # copies: pip builds in the source tree
        shutil.copytree(ROOT / "examples" / name, tmp_path / name)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(site)]
        + [str(tmp_path / "nats"), str(tmp_path / "natsqueue")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    cli = [sys.executable, "-m", "harness.cli"]
    listing = subprocess.run(
        [*cli, "plugins"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert "splitbrain-natsqueue" in listing.stdout, listing.stdout

    store = tmp_path / "store"
    proc = subprocess.run(
        [
            *cli,
            "run",
            "--lab",
            lab.name,
            "--nodes",
            "3",
            "--db",
            "nats",
            "-w",
            "nats-workqueue",
            "--nemesis",
            "kill",
            "--nemesis-interval",
            "3",
            "--time-limit",
            "40",
            "--concurrency",
            "4",
            "--rate",
            "60",
            "--no-progress",
            "--store",
            str(store),
            "--name",
            "natsq",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    run = store / "natsq" / "latest"
    results = json.loads((run / "results.json").read_text())
    tq = results["checkers"]["total-queue"]
    # Kills only: under partitions and pauses nats-server 2.9.10 loses acknowledged
    # publishes and forgets confirmed acks (examples/natsqueue/README.md, measured).
    assert results["valid"] is True, (tq, proc.stderr[-3000:])
    stats = tq["stats"]
    assert stats["enqueues"]["ok"] > 80 and stats["drained"] is True
    ops = read_history(run / "history.jsonl")
    assert "start-kill" in {o.f for o in ops if o.process == "nemesis"}
    # most messages were consumed during the load, not by the final drains
    final = sum(
        len(o.value["messages"])
        for o in ops
        if o.f == "dequeue" and o.type == "ok" and o.value.get("final")
    )
    assert stats["delivered_messages"] - final > 0.8 * stats["delivered_messages"]
    # a planted loss: the one delivery of acked messages deleted from the history, two
    # more than unknown dequeues could have taken (those would make it unknown)
    k = stats["unknown_dequeue_capacity"] + 2
    counts: dict[str, int] = {}
    for o in ops:
        if o.f == "dequeue" and o.type == "ok":
            for m in o.value["messages"]:
                counts[m["body"]] = counts.get(m["body"], 0) + 1
    acked = {o.value["body"] for o in ops if o.f == "enqueue" and o.type == "ok"}
    victims = set(sorted(b for b, n in counts.items() if n == 1 and b in acked)[:k])
    planted = [
        o.replace(
            value={
                **o.value,
                "messages": [m for m in o.value["messages"] if m["body"] not in victims],
            }
        )
        if o.f == "dequeue" and o.type == "ok"
        else o
        for o in ops
    ]
    r = check_total_queue(planted, {})
    assert len(victims) == k
    assert r["valid"] is False and r["stats"]["anomaly_counts"] == {"lost": k}
    assert r["stats"]["lost_provable"] == 2
