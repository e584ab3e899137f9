"""A check that dies or whose disk fills (issue 43 item 3): the recorded results stay whole.

``splitbrain check RUN_DIR`` writes ``recheck.json`` beside the run's ``results.json``.
Killed at any moment (SIGKILL: no handler runs), or meeting a full file system, it must
leave what was there as it was, and the run's own ``results.json`` untouched; run again,
it redoes the check with the same verdict.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.control.memory import MemoryRemote
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.core.workload import Workload
from harness.dbs.null import NullDB
from harness.run.runner import RunOptions, run_test
from tests.harness.test_store_faults import small_tmpfs
from workloads.null import CountingGenerator, NullClient

SPLITBRAIN = str(Path(sys.executable).with_name("splitbrain"))


def _run_dir(root: Path) -> Path:
    hosts = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in (1, 2, 3)]
    spec = TestSpec(
        name="check-faults",
        nodes=tuple(h.name for h in hosts),
        db="null",
        workload="null",
        time_limit=1.0,
        concurrency=2,
        rate=200.0,
        seed=3,
    )
    res = run_test(
        spec,
        hosts,
        store_root=root,
        db=NullDB(),
        workload=Workload(name="null", client=NullClient(), generator=CountingGenerator()),
        options=RunOptions(progress=False, recovery_s=0.0),
        connect_fn=MemoryRemote,
    )
    return res.store_dir


def _check(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SPLITBRAIN, "check", str(run_dir)], capture_output=True, text=True, timeout=300
    )


def test_a_check_killed_as_it_writes_its_results_leaves_them_whole(tmp_path):
    """SIGKILL at the first write(2) to recheck.json (strace injects it; nothing else can
    stop a process at that instant): a writer that truncates in place leaves it empty."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    run_dir = _run_dir(tmp_path)
    first = _check(run_dir)
    recheck = run_dir / "recheck.json"
    verdict = json.loads(recheck.read_text())["valid"]
    killed = subprocess.run(
        [
            strace,
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-P",
            str(recheck),
            "-e",
            "trace=write",
            "-e",
            "inject=write:signal=KILL",
            SPLITBRAIN,
            "check",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert json.loads(recheck.read_text())["valid"] == verdict, killed.stderr[-500:]
    assert killed.returncode == first.returncode, killed.stderr[-500:]  # never written in place


@pytest.mark.slow
def test_a_check_on_a_full_disk_keeps_the_results_already_there(tmp_path):
    with small_tmpfs(tmp_path / "store", "4m") as root:
        run_dir = _run_dir(root)
        first = _check(run_dir)
        assert first.returncode in (0, 2), first.stdout + first.stderr
        recheck = run_dir / "recheck.json"
        before, results_before = recheck.read_bytes(), (run_dir / "results.json").read_bytes()
        with open(root / "filler", "wb") as fh:  # every free block taken
            try:
                while True:
                    fh.write(b"\0" * (1 << 16))
                    fh.flush()
            except OSError:
                pass
        again = _check(run_dir)
        out = again.stdout + again.stderr
        assert "results not written" in out and "No space left on device" in out, out
        assert again.returncode == first.returncode, out  # the verdict is still told
        assert recheck.read_bytes() == before  # whole, as it was
        assert (run_dir / "results.json").read_bytes() == results_before
        assert not list(run_dir.glob(".recheck.json*.tmp"))


@pytest.mark.slow
def test_a_check_killed_at_any_moment_leaves_the_results_whole_and_is_redone(tmp_path):
    run_dir = _run_dir(tmp_path)
    t0 = time.monotonic()
    first = _check(run_dir)
    took = time.monotonic() - t0
    recheck, results = run_dir / "recheck.json", run_dir / "results.json"
    verdict = json.loads(recheck.read_text())["valid"]
    results_before = results.read_bytes()
    rng = random.Random(43)
    for i in range(8):
        proc = subprocess.Popen(
            [SPLITBRAIN, "check", str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        # Early kills land in the imports and the reading; late ones in the write.
        time.sleep(rng.uniform(0.05, took * (1.2 if i % 2 else 0.6)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert json.loads(recheck.read_text())["valid"] == verdict  # never torn
        assert results.read_bytes() == results_before
    redone = _check(run_dir)
    assert redone.returncode == first.returncode, redone.stdout + redone.stderr
    assert json.loads(recheck.read_text())["valid"] == verdict
    shutil.rmtree(run_dir)
