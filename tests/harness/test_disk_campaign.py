"""Issue 28's "done when", as a user runs it: 45 s campaigns with disk faults on a namespace lab.

Each test is one ``splitbrain run`` (a subprocess, as from a shell) on this pytest
process's own lab, and asserts the verdict and that the faults really landed: the
history's nemesis ops carry what the lazy fs dropped or tore, or which file, offsets
and bits a corruption hit. A fault that never lands would make a VALID verdict
worthless and an INVALID one unexplained. A bug's campaign must find it; the
correct node's must not raise an alarm (docs/disk-faults.md has the measured table).

Slow (about a minute per campaign on a loaded two-core machine): ``-m slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]

needs_fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse here")


def campaign(lab: Any, tmp_path: Path, name: str, *args: str) -> tuple[int, dict, list[dict]]:
    """Exit code, results.json and the completed nemesis ops of one 45 s campaign."""
    store = tmp_path / "store"
    p = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--time-limit", "45"]
        + ["--no-progress", "--store", str(store), "--name", name, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(f"{name}: exit {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}")
    run_dir = store / name / "latest"
    results = json.loads((run_dir / "results.json").read_text())
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    nemesis = [o for o in ops if o["process"] == "nemesis" and o["type"] != "invoke"]
    return p.returncode, results, nemesis


def landed(nemesis: list[dict], f: str) -> list[dict]:
    """The per-node records of every ``f`` that did something to a node's disk."""
    out = []
    for o in nemesis:
        if o["f"] == f and not o.get("error"):
            out += [r for r in (o["value"] or {}).get("records", {}).values() if r]
    return out


def dropped_something(records: list[dict]) -> bool:
    return any(r.get("dropped") or r.get("torn") for r in records)


@needs_fuse
def test_lose_unfsynced_on_every_node_finds_skip_fsync(lab: Any, tmp_path: Path) -> None:
    rc, res, nem = campaign(
        lab,
        tmp_path,
        "skip-fsync",
        "--bug",
        "skip-fsync",
        "--nemesis",
        "lose-unfsynced",
        "--nemesis-option",
        "targets=all",
    )
    assert rc == 1 and res["valid"] is False, res
    records = landed(nem, "start-lose-unfsynced")
    assert any(
        f.endswith("data.log") and d.get("write") for r in records for f, d in r["dropped"].items()
    ), records


@needs_fuse
def test_correct_node_is_valid_under_lose_unfsynced_kill_partition(
    lab: Any, tmp_path: Path
) -> None:
    # seed 3: its schedule starts each of the three kinds at least twice in 45 s
    rc, res, nem = campaign(
        lab,
        tmp_path,
        "correct-lose",
        "--nemesis",
        "lose-unfsynced,kill,partition",
        "--nemesis-interval",
        "2.5",
        "--seed",
        "3",
    )
    assert rc == 0 and res["valid"] is True, res
    assert dropped_something(landed(nem, "start-lose-unfsynced"))
    started = {o["f"] for o in nem if o["f"].startswith("start-") and not o.get("error")}
    assert {"start-kill", "start-partition"} <= started, started


def test_correct_node_is_valid_under_corrupt_kill(lab: Any, tmp_path: Path) -> None:
    rc, res, nem = campaign(
        lab, tmp_path, "correct-corrupt", "--nemesis", "corrupt,kill", "--nemesis-interval", "2.5"
    )
    assert rc == 0 and res["valid"] is True, res
    ops = {r["op"] for r in landed(nem, "start-corrupt")}
    assert ops & {"bitflip", "truncate", "copy-chunk", "rollback"}, ops


def test_corrupt_bitflip_finds_skip_crc(lab: Any, tmp_path: Path) -> None:
    # Only bitflips, every 2.5 s: a flip in a header field skip-crc still checks is cut
    # as the correct node cuts it, so one flip in three or so shows (docs/disk-faults.md)
    rc, res, nem = campaign(
        lab,
        tmp_path,
        "skip-crc",
        "--bug",
        "skip-crc",
        "--nemesis",
        "corrupt-bitflip",
        "--nemesis-interval",
        "2.5",
    )
    assert rc == 1 and res["valid"] is False, res
    flips = [r for r in landed(nem, "start-corrupt") if r["op"] == "bitflip"]
    assert flips and all(r["bits"] and r["file"].endswith("data.log") for r in flips)


@needs_fuse
def test_torn_write_finds_trust_torn_tail(lab: Any, tmp_path: Path) -> None:
    # every node torn at once: a single torn follower gets its last entry replaced by
    # the leader's copy, so only a leader elected among torn nodes serves the tail, and
    # what it serves is a padded body no client wrote (log safety's unproposed-committed)
    rc, res, nem = campaign(
        lab,
        tmp_path,
        "torn-tail",
        "--bug",
        "trust-torn-tail",
        "--nemesis",
        "torn-write",
        "--nemesis-option",
        "targets=all",
    )
    assert rc == 1 and res["valid"] is False, res
    assert "unproposed-committed" in res["anomalies"], sorted(res["anomalies"])
    torn = [r["torn"] for r in landed(nem, "start-torn-write") if r.get("torn")]
    assert torn and all(0 <= t["kept"] < t["length"] for t in torn), torn
    holds = [r["hold"] for r in landed(nem, "start-torn-write") if r.get("hold")]
    assert any(h["held"] for h in holds), holds  # the cut waited for a write in flight


def test_term_file_rollback_finds_trust_term_file(lab: Any, tmp_path: Path) -> None:
    # Leader kills move the terms on between the copy and the rollback; without them a
    # rollback of a follower often restores the term it still has (a run did nothing).
    rc, res, nem = campaign(
        lab,
        tmp_path,
        "term-file",
        "--bug",
        "trust-term-file",
        "--nemesis",
        "corrupt-rollback,kill",
        "--nemesis-interval",
        "2.5",
        "--nemesis-option",
        "kill_targets=leader",
    )
    assert rc == 1 and res["valid"] is False, res
    rolled = [r for r in landed(nem, "start-corrupt") if r["op"] == "rollback"]
    assert any(r["sha256_after"] != r["sha256_before"] for r in rolled), rolled


@needs_fuse
def test_bench_campaign_measures_the_lazy_fs_beside_the_plain_disk(
    lab: Any, tmp_path: Path
) -> None:
    """`splitbrain bench campaign --lazy-fs`: the same campaign on a plain directory and on
    a lazy fs, in one run, with their ratio; the lazy run really mounted one (its log)."""
    out = tmp_path / "bench.json"
    p = subprocess.run(
        [sys.executable, "-m", "harness.cli", "bench", "campaign", "--lab", lab.name]
        + ["--skip-etcd", "--lazy-fs", "-w", "append", "--seconds", "8", "--no-check"]
        + ["--store", str(tmp_path / "store"), "--output", str(out)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    plain, lazy = doc["runs"]["append"], doc["runs"]["append+lazyfs"]
    assert plain["ok_per_s"] > 0 and lazy["ok_per_s"] > 0
    assert doc["lazyfs_vs_plain"]["append"] == round(lazy["ok_per_s"] / plain["ok_per_s"], 2)
    logs = list(
        (tmp_path / "store").glob("bench-campaign-dledger-append-lazyfs-*/2*/splitbrain.log")
    )
    assert logs and "fsd.py mount" in logs[0].read_text()
