"""The history's own file system failing mid-run (issue 43 item 2).

Real file systems, mounted by the test and unmounted on every exit path: a small
tmpfs that fills up, and an ext4 image on a loop device mounted ``errors=remount-ro``
whose kernel error trigger (``/sys/fs/ext4/<dev>/trigger_fs_error``, what a failing
disk sets off) turns it read-only under the writer. The writer must stop with one
line naming the file, keep every whole record it wrote, and the run must end
``unknown`` with that line, its recorded prefix still checkable.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.core.history import Op, read_jsonl
from harness.core.jsonl import HistoryStoreError, HistoryWriter

REPO = Path(__file__).resolve().parents[2]


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")


def _umount(path: Path) -> None:
    for args in (["umount", str(path)], ["umount", "-l", str(path)]):
        if subprocess.run(args, capture_output=True).returncode == 0:
            return


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``, unmounted however the test ends."""
    _need_root()
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=755", "sb-store-test", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        _umount(path)


@contextlib.contextmanager
def ext4_loop(tmp_path: Path, size_mb: int = 16) -> Iterator[tuple[Path, Path]]:
    """An ext4 image mounted on a loop device with ``errors=remount-ro``; yields the mount
    point and the kernel's error trigger. Unmounted (which frees the loop device) on exit."""
    _need_root()
    if shutil.which("mkfs.ext4") is None or not os.path.exists("/dev/loop-control"):
        pytest.skip("no mkfs.ext4 or loop devices")
    img, mnt = tmp_path / "store.img", tmp_path / "ro-store"
    mnt.mkdir()
    with open(img, "wb") as fh:
        fh.truncate(size_mb << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True, capture_output=True)
    subprocess.run(
        ["mount", "-o", "loop,errors=remount-ro", str(img), str(mnt)],
        check=True,
        capture_output=True,
    )
    try:
        dev = subprocess.run(
            ["findmnt", "-no", "SOURCE", str(mnt)], capture_output=True, text=True, check=True
        ).stdout.strip()
        trigger = Path("/sys/fs/ext4") / Path(dev).name / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip(f"this kernel has no {trigger}")
        yield mnt, trigger
    finally:
        _umount(mnt)


def _op(i: int) -> Op:
    return Op(type="invoke", process=i % 7, f="append", value={"payload": f"p{i:08d}" * 4})


def _fill(w: HistoryWriter, limit: int = 10**6) -> tuple[int, HistoryStoreError]:
    for n in range(limit):
        try:
            w.append(_op(n))
        except HistoryStoreError as e:
            return n, e
    raise AssertionError(f"{limit} records fit")


def test_a_full_file_system_stops_the_writer_with_every_whole_record_kept(tmp_path):
    with small_tmpfs(tmp_path / "full", "64k") as d:
        path = d / "history.jsonl"
        w = HistoryWriter(path)
        n, err = _fill(w)
        text = str(err)
        assert "\n" not in text and text.startswith(f"{path}: ")
        assert "No space left on device" in text and f"first {n} records are intact" in text
        assert w.failure is err
        with pytest.raises(HistoryStoreError):  # every later append: the same error, at once
            w.append(_op(n))
        w.close()  # never raises for the store
        assert path.read_bytes().endswith(b"\n")  # the line that did not fit was cut off
        ops = read_jsonl(path)
        assert [o.index for o in ops] == list(range(n)) and n > 100
        assert ops[-1].value == _op(n - 1).value


def test_a_file_system_turned_read_only_stops_the_writer(tmp_path):
    with ext4_loop(tmp_path) as (mnt, trigger):
        path = mnt / "history.jsonl"
        w = HistoryWriter(path)
        for i in range(500):
            w.append(_op(i))
        trigger.write_text("splitbrain test\n")
        with pytest.raises(HistoryStoreError, match="Read-only file system") as ei:
            w.append(_op(500))
        assert str(path) in str(ei.value) and "first 500 records" in str(ei.value)
        w.close()
        assert [o.index for o in read_jsonl(path)] == list(range(500))


def _null_run(store_root: Path, *, seconds: float, during: threading.Thread | None = None):
    """A null-client run through the real runner (memory remotes, no hosts)."""
    from harness.control.memory import MemoryRemote
    from harness.core.remote import Host
    from harness.core.spec import TestSpec
    from harness.core.workload import Workload
    from harness.dbs.null import NullDB
    from harness.run.runner import RunOptions, run_test
    from workloads.null import CountingGenerator, NullClient

    hosts = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in (1, 2, 3)]
    spec = TestSpec(
        name="store-fault",
        nodes=tuple(h.name for h in hosts),
        workload="append",
        time_limit=seconds,
        concurrency=4,
        rate=0.0,
        seed=1,
    )
    if during is not None:
        during.start()
    return run_test(
        spec,
        hosts,
        store_root=store_root,
        db=NullDB(),
        workload=Workload(name="null", client=NullClient(), generator=CountingGenerator()),
        options=RunOptions(progress=False, recovery_s=0.0),
        connect_fn=MemoryRemote,
    )


def _check_cli(run_dir: Path, out: Path) -> tuple[int, str, dict]:
    r = subprocess.run(
        [str(REPO / ".venv" / "bin" / "splitbrain"), "check", str(run_dir), "--output", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    return r.returncode, r.stdout + r.stderr, json.loads(out.read_text())


def _assert_store_fault_run(res, why: str, tmp_path: Path) -> None:
    history = res.store_dir / "history.jsonl"
    assert res.results["valid"] == "unknown"
    reason = res.results["run"]["reason"]
    assert "\n" not in reason and str(history) in reason and why in reason, reason
    ops = read_jsonl(history)  # every record before the fault, whole
    assert ops and [o.index for o in ops] == list(range(len(ops)))
    on_disk = json.loads((res.store_dir / "results.json").read_text())
    assert on_disk["valid"] == "unknown"  # the record says unknown too, whole
    assert not list(res.store_dir.glob(".*.tmp"))
    rc, out, rechecked = _check_cli(res.store_dir, tmp_path / "recheck.json")
    assert rc == 2, out  # a run that did not finish stays unknown on a re-check
    # Its prefix is judged: read whole (no HistoryError), every checker ran. Lost acks
    # cannot be judged without the final reads the run never reached: unknown, not invalid.
    assert rechecked["checked_valid"] in (True, "unknown"), out
    assert rechecked["checkers"] and not rechecked.get("error"), out
    assert "could not judge: lost-ack" in out or "the checker alone said VALID" in out, out


@pytest.mark.slow
def test_a_run_whose_store_fills_ends_unknown_naming_the_path(tmp_path):
    with small_tmpfs(tmp_path / "store", "1m") as root:
        t0 = time.monotonic()
        res = _null_run(root, seconds=20.0)
        assert time.monotonic() - t0 < 15  # the run stops when its store does
        _assert_store_fault_run(res, "No space left on device", tmp_path)


@pytest.mark.slow
def test_a_run_whose_store_turns_read_only_ends_unknown_naming_the_path(tmp_path):
    with ext4_loop(tmp_path) as (mnt, trigger):
        flip = threading.Timer(1.5, lambda: trigger.write_text("splitbrain test\n"))
        try:
            res = _null_run(mnt, seconds=20.0, during=flip)
        finally:
            flip.cancel()
        _assert_store_fault_run(res, "Read-only file system", tmp_path)


def test_the_fast_encoder_records_what_the_standard_one_did(tmp_path):
    """orjson on the hot path, the standard encoder for what it refuses: same values back."""
    import datetime

    values = [
        {"payload": "p\u00e9\u4e2d"},
        {"entries": [[1, "2", "x"]], "committed": 2**70},  # beyond 64 bits: standard
        {1: "int key", "k": None},
        [1.5, True, None],
        {"at": datetime.date(2026, 12, 2)},  # not JSON: str(), as before
    ]
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        for v in values:
            w.append(Op(type="invoke", process=0, f="append", value=v))
    back = [o.value for o in read_jsonl(path)]
    assert back == json.loads(json.dumps(values, default=str))
