"""`splitbrain run` with no options is the strongest campaign the DB can take (issue 25).

On a real lab: the reference node gets its strongest workload and the whole deck, and a
DB that declares less gets the scripts it can take, with the rest named and why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import ConfigError
from harness.dbs.dledger import BROKER_WORKLOAD, STRONGEST_WORKLOAD
from harness.run.roles import default_workload
from nemesis.profiles import SCRIPTS


def test_each_db_names_its_strongest_workload() -> None:
    assert default_workload("dledger", {}) == STRONGEST_WORKLOAD
    assert STRONGEST_WORKLOAD.name == "mixed" and STRONGEST_WORKLOAD.concurrency == 15
    assert default_workload("dledger", {"mode": "ha"}).name == "append"
    assert default_workload("dledger", {"mode": "broker"}) == BROKER_WORKLOAD
    assert default_workload("etcd", {}).name == "etcd-register"
    assert default_workload("redis", {}).name == "redis-register"
    with pytest.raises(ConfigError, match="names no default workload.*-w"):
        default_workload("yaml:examples/tinykv/system.yaml", {})


def _run(lab: Any, store: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    cmd = [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--store", str(store)]
    out = subprocess.run(
        [*cmd, "--no-progress", "--seed", "7", *args], capture_output=True, text=True, timeout=400
    )
    runs = sorted(p for p in store.glob("*/*") if p.is_dir() and p.name != "latest")
    assert runs, out.stdout + out.stderr
    return out, runs[-1]


def test_run_with_no_options_plays_the_deck_with_the_dbs_strongest_workload(
    lab: Any, tmp_path: Path
) -> None:
    out, run_dir = _run(lab, tmp_path, "--time-limit", "12")
    text = out.stdout + out.stderr
    assert out.returncode in (0, 1), text
    assert "faults: fault scripts lease, rejoin" in out.stdout, text
    spec = json.loads((run_dir / "test.json").read_text())
    assert spec["workload"] == "mixed" and spec["concurrency"] == 15, spec
    assert set(spec["options"]["deck"]["scripts"]) == set(SCRIPTS)  # a lab takes every one
    assert spec["options"]["deck"]["passes"] is None  # --time-limit given: the deck cycles
    assert spec["options"]["client_timeout"] == STRONGEST_WORKLOAD.client_timeout
    results = json.loads((run_dir / "results.json").read_text())
    deck = results["run"]["deck"]
    assert deck["played"] and set(deck["played"]) | set(deck["not_played"]) == set(SCRIPTS)
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    started = {o["f"] for o in history if o["process"] == "nemesis" and o["type"] == "invoke"}
    assert any(f.startswith("start-") for f in started), started


def test_a_db_that_declares_less_gets_the_scripts_it_can_take_and_is_told_the_rest(
    lab: Any, tmp_path: Path
) -> None:
    out, run_dir = _run(lab, tmp_path, "--db", "null", "--time-limit", "8", "--nodes", "3")
    text = out.stdout + out.stderr
    assert out.returncode == 2 and "verdict: UNKNOWN" in out.stdout, text  # null judges nothing
    assert "left out: " in out.stdout and "needs a DB that declares Killable" in out.stdout, text
    assert "does not report its leader" in out.stdout, text
    spec = json.loads((run_dir / "test.json").read_text())
    assert spec["workload"] == "null"
    deck = spec["options"]["deck"]
    assert set(deck["scripts"]) == {"lease", "bridge", "clock-split"}, deck
    assert "crash" in deck["left_out"] and "disk" in deck["left_out"]
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    aimed = [o for o in history if isinstance(o.get("value"), dict) and o["value"].get("aimed")]
    kinds = {o["f"] for o in history if o["process"] == "nemesis"}
    assert kinds <= {"start-partition", "stop-partition", "start-clock", "stop-clock"}, kinds
    if any(o["f"] == "start-partition" and o["type"] == "invoke" for o in history):
        # lease cuts "the leader" off: a DB that cannot say gets a seeded node, recorded so
        assert aimed or "bridge" in results_played(run_dir), history[:5]


def results_played(run_dir: Path) -> list[str]:
    return list(json.loads((run_dir / "results.json").read_text())["run"]["deck"]["played"])
