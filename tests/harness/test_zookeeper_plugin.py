"""examples/zookeeper, installed with pip into a throwaway target and run on the lab.

Needs Debian's ``zookeeper`` package on this machine (skipped without it) and
PyPI or a mirror for ``kazoo``. Only the public API and entry points are used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JAR = Path("/usr/share/java/zookeeper.jar")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not JAR.exists(), reason="Debian's zookeeper is not installed"),
]


def test_zookeeper_plugin_campaign_on_the_lab(lab, tmp_path):
    site = tmp_path / "site"
    src = tmp_path / "src"
    subprocess.run(["cp", "-r", str(ROOT / "examples" / "zookeeper"), str(src)], check=True)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    store = tmp_path / "store"
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
            "zookeeper-debian",
            "-w",
            "zk-register",
            "--nemesis",
            "partition,kill",
            "--nemesis-interval",
            "3",
            "--time-limit",
            "20",
            "--concurrency",
            "3",
            "--rate",
            "30",
            "--no-progress",
            "--store",
            str(store),
            "--name",
            "zk",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    results = json.loads((store / "zk" / "latest" / "results.json").read_text())
    assert proc.returncode in (0, 1, 2) and "linearizable" in results["checkers"], proc.stderr
    ops = [
        json.loads(x) for x in (store / "zk" / "latest" / "history.jsonl").read_text().splitlines()
    ]
    assert sum(o["type"] == "ok" and o["process"] != "nemesis" for o in ops) > 50
    assert results["valid"] is True, results.get("anomalies")


def test_zookeeper_queue_on_a_five_node_ensemble(lab, tmp_path):
    site, src = tmp_path / "site", tmp_path / "src"
    subprocess.run(["cp", "-r", str(ROOT / "examples" / "zookeeper"), str(src)], check=True)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    store = tmp_path / "store"
    args = ["--lab", lab.name, "--nodes", "5", "--db", "zookeeper-debian", "-w", "zk-queue"]
    args += ["--nemesis", "partition,kill", "--nemesis-interval", "3", "--time-limit", "20"]
    args += ["--concurrency", "5", "--rate", "30", "--no-progress"]
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", *args, "--store", str(store), "--name", "zkq"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    run = store / "zkq" / "latest"
    results = json.loads((run / "results.json").read_text())
    assert proc.returncode in (0, 1, 2), proc.stderr[-3000:]
    assert results["checkers"]["linearizable"]["model"] == "fifo-queue"
    zoo_cfg = (run / "nodes" / "n1" / "zoo.cfg").read_text()
    assert zoo_cfg.count("server.") == 5  # a 5-node ensemble
    ops = [json.loads(x) for x in (run / "history.jsonl").read_text().splitlines()]
    taken = [o for o in ops if o["f"] == "dequeue" and o["type"] == "ok" and o["value"]]
    assert len(taken) > 50, len(taken)
    assert results["valid"] is True, results.get("anomalies")
