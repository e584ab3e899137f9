"""examples/nats, installed with pip into a throwaway target and run on the lab.

The servers are the built-in DB ``nats`` at ``version=debian``. Needs Debian's
``nats-server`` on this machine (skipped without it) and PyPI or a mirror for
``nats-py``. Only entry points are used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path("/usr/sbin/nats-server")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not BINARY.exists(), reason="Debian's nats-server is not installed"),
]


def test_nats_plugin_campaign_on_the_lab(lab, tmp_path):
    site, src = tmp_path / "site", tmp_path / "src"
    subprocess.run(["cp", "-r", str(ROOT / "examples" / "nats"), str(src)], check=True)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), str(src)],
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
    names = {tuple(line.split()[:1] + line.split()[-1:]) for line in listing.stdout.splitlines()}
    # the servers are splitbrain's built-in DB; the plugin brings the workload
    assert {("nats", "splitbrain"), ("nats-stream", "splitbrain-nats")} <= names, listing.stdout

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
            "--db-option",
            "version=debian",  # Debian's 2.9.10, what this test has always run
            "-w",
            "nats-stream",
            # Partitions and pauses are left out: both leave replicas diverged in
            # nats-server 2.9 (docs/thirdparty.md); this test is about the plugin.
            "--nemesis",
            "kill,clock",
            "--nemesis-interval",
            "3",
            # Unseeded, the schedule draws clock faults only in about one run in eight: this seed
            # starts a kill 1.7 s in and a clock fault 9 s in (the schedule is a pure
            # function of the seed).
            "--seed",
            "8",
            "--time-limit",
            "20",
            "--concurrency",
            "3",
            "--rate",
            "40",
            "--no-progress",
            "--store",
            str(store),
            "--name",
            "nats",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    run = store / "nats" / "latest"
    results = json.loads((run / "results.json").read_text())
    assert json.loads((run / "test.json").read_text())["artifacts"]["version"] == "debian"
    assert proc.returncode in (0, 1, 2) and "log-safety" in results["checkers"], proc.stderr[-3000:]
    ops = [json.loads(x) for x in (run / "history.jsonl").read_text().splitlines()]
    acked = [o for o in ops if o["f"] == "append" and o["type"] == "ok"]
    finals = {
        o["node"] for o in ops if o["f"] == "read" and o["type"] == "ok" and o["value"].get("end")
    }
    assert len(acked) > 100, len(acked)
    assert finals == {"n1", "n2", "n3"}  # every node's replica was read back
    assert "start-kill" in {o["f"] for o in ops if o["process"] == "nemesis"}
    # The wait after the heal (Converges): recorded, before every final read, and the
    # restarted servers caught up well within its 60 s.
    conv = [o for o in ops if o["f"] == "converge"]
    assert [o["type"] for o in conv] == ["invoke", "info"], conv
    final_reads = [
        o["index"]
        for o in ops
        if o["f"] == "read" and isinstance(o["value"], dict) and o["value"].get("final")
    ]
    assert final_reads and conv[1]["index"] < min(final_reads)
    waited = results["run"]["converge"]
    assert waited["converged"] is True and waited["elapsed_s"] < 60, waited
    assert waited["last"]["streams"]["$G/SPLITBRAIN"]["leader"] in {"n1", "n2", "n3"}
    # A verdict, not a fixed one: nats-server 2.9 itself lets replicas diverge after a
    # kill now and then (docs/thirdparty.md), and that is the harness's finding.
    assert results["valid"] in (True, False), results.get("reason")
