"""The lazy fs (harness/control/disk/fsd.py) on real FUSE mounts, and the corruption ops.

Every mount is made through :class:`LazyFs` with a Remote that runs commands on
this machine (real processes, no mocks), and unmounted in ``finally``.

The default suite keeps one test per behaviour a campaign depends on (a mount, a
lost and a torn write, the hold, a killed daemon's cleanup, the corrupt ops, the
registration): about half a minute on a loaded machine. The rest (renames and
truncates, ``under``, ``sync``, busy unmounts, the reference node on a lazy fs, the
lab hosts' mount namespaces) is marked slow: ``pytest -m slow``.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.control.disk import corrupt, fsd
from harness.control.disk.lazyfs import FSD_SOURCE, LazyFs, cleanup_commands, find_mounts
from harness.core.errors import NemesisError, RemoteCommandError
from harness.core.remote import CommandResult, Host

ROOT = Path(__file__).resolve().parents[2]

needs_fuse = pytest.mark.skipif(
    not os.path.exists("/dev/fuse") or os.geteuid() != 0, reason="needs /dev/fuse and root"
)


class LocalRemote:
    """A Remote whose host is this machine: commands run in a local shell."""

    def __init__(self, name: str = "local") -> None:
        self.host = Host(name=name, address="127.0.0.1")

    def run(
        self,
        cmd: str,
        *,
        sudo: bool = False,
        timeout: float | None = 60.0,
        env: dict[str, str] | None = None,
        check: bool = True,
        stdin: str | bytes | None = None,
    ) -> CommandResult:
        p = subprocess.run(
            ["bash", "-c", cmd],
            input=stdin.encode() if isinstance(stdin, str) else stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        res = CommandResult(self.host.name, cmd, p.returncode, p.stdout.decode(), p.stderr.decode())
        if check and not res.ok:
            raise RemoteCommandError(
                host=self.host.name,
                cmd=cmd,
                exit_status=res.exit_status,
                stdout=res.stdout,
                stderr=res.stderr,
            )
        return res

    def upload(self, local: str, remote: str) -> None:
        shutil.copyfile(local, remote)

    def download(self, remote: str, local: str) -> None:
        shutil.copyfile(remote, local)

    def start_daemon(
        self,
        cmd: str,
        *,
        pidfile: str,
        logfile: str,
        env: dict[str, str] | None = None,
        chdir: str | None = None,
    ) -> int:
        q = shlex.quote
        os.makedirs(os.path.dirname(pidfile), exist_ok=True)
        with open(logfile, "ab") as log:
            p = subprocess.Popen(
                ["bash", "-c", f"echo $$ > {q(pidfile)}; exec {cmd}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                cwd=chdir,
            )
        return p.pid

    def signal_daemon(self, pidfile: str, sig: str = "TERM") -> bool:
        raise NotImplementedError

    def stop_daemon(self, pidfile: str, *, timeout: float = 10.0) -> None:
        raise NotImplementedError

    def daemon_running(self, pidfile: str) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _lazy(d: Path, **kw: object) -> LazyFs:
    return LazyFs(LocalRemote(), str(d), python=sys.executable, script=str(FSD_SOURCE), **kw)  # type: ignore[arg-type]


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyFs]:
    lz = _lazy(tmp_path / "data")
    lz.mount()
    try:
        yield lz
    finally:
        lz.unmount()
        assert str(tmp_path / "data") not in fsd.find_mounts()


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(p: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


# ====================================================================== lose-unfsynced


@needs_fuse
@pytest.mark.integration
def test_mount_is_marked_and_passes_through(lazy: LazyFs, tmp_path: Path) -> None:
    d = Path(lazy.mountpoint)
    assert lazy.mountpoint in find_mounts(lazy.remote)
    line = next(ln for ln in Path("/proc/self/mounts").read_text().splitlines() if f" {d} " in ln)
    assert line.split()[2] == "fuse.splitbrain-lazyfs"
    (d / "sub").mkdir()
    (d / "sub" / "f").write_bytes(b"abc")
    assert sorted(os.listdir(d)) == ["sub"]  # the stash stays hidden
    assert (d / "sub" / "f").read_bytes() == b"abc"
    assert (d / "sub" / "f").stat().st_size == 3
    os.rename(d / "sub" / "f", d / "g")
    assert (d / "g").read_bytes() == b"abc"
    st = lazy.status()
    assert st["mounted"] and st["pending"] >= 3


@needs_fuse
@pytest.mark.integration
def test_lose_unfsynced_restores_the_last_fsynced_state(lazy: LazyFs) -> None:
    d = Path(lazy.mountpoint)
    # data: 100 durable bytes, then an append and an overwrite that were never synced
    fd = os.open(d / "log", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"a" * 100)
    os.fsync(fd)
    _fsync_dir(d)
    os.pwrite(fd, b"b" * 50, 100)
    os.pwrite(fd, b"c" * 10, 20)
    os.close(fd)
    # a file and its entry synced: kept
    _write(d / "durable", b"d", sync=True)
    _fsync_dir(d)
    # the atomic-replace idiom without the final directory fsync: the old file comes back
    _write(d / "state.json", b"old", sync=True)
    _fsync_dir(d)
    _write(d / "state.json.tmp", b"new", sync=True)
    os.replace(d / "state.json.tmp", d / "state.json")
    # a file synced, but not its directory entry: strict POSIX loses it
    _write(d / "synced-file-only", b"x", sync=True)
    # an unlink and a mkdir never made durable
    os.unlink(d / "durable")
    (d / "newdir").mkdir()
    (d / "newdir" / "inner").write_bytes(b"i")
    rec = lazy.crash("lose-unfsynced")
    assert rec["mode"] == "lose-unfsynced" and rec["problems"] == [], rec
    assert rec["open_files"] == 0
    assert rec["dropped"]["log"] == {"write": 2, "bytes": 60}
    assert (d / "log").read_bytes() == b"a" * 100
    assert sorted(os.listdir(d)) == ["durable", "log", "state.json"]
    assert (d / "state.json").read_bytes() == b"old"
    assert (d / "durable").read_bytes() == b"d"
    assert lazy.status()["pending"] == 0
    # life goes on after the crash: new writes are tracked again
    _write(d / "log", b"z", sync=False)
    assert lazy.crash("lose-unfsynced")["dropped"]["log"]["truncate"] == 1
    assert (d / "log").read_bytes() == b"a" * 100


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
def test_durable_replace_and_truncate_survive(lazy: LazyFs) -> None:
    d = Path(lazy.mountpoint)
    _write(d / "state.json", b"old", sync=True)
    _write(d / "state.json.tmp", b"new", sync=True)
    os.replace(d / "state.json.tmp", d / "state.json")
    _fsync_dir(d)
    fd = os.open(d / "state.json", os.O_RDWR)
    os.ftruncate(fd, 1)
    os.fdatasync(fd)
    os.ftruncate(fd, 0)  # not synced
    os.close(fd)
    rec = lazy.crash("lose-unfsynced")
    assert rec["dropped"] == {"state.json": {"truncate": 1}}, rec
    assert sorted(os.listdir(d)) == ["state.json"]
    assert (d / "state.json").read_bytes() == b"n"


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
def test_crash_under_a_subdirectory_spares_the_rest(lazy: LazyFs) -> None:
    d = Path(lazy.mountpoint)
    (d / "app").mkdir()
    (d / "app" / "code.py").write_bytes(b"print()")  # the installed code: never synced
    (d / "data").mkdir()
    _fsync_dir(d)
    _write(d / "data" / "data.log", b"entries", sync=False)
    _write(d / "stdout.log", b"log", sync=False)
    rec = lazy.crash("lose-unfsynced", under="data")
    assert rec["under"] == "data" and rec["dropped"] == {
        "data/data.log": {"create": 1, "write": 1, "bytes": 7}
    }
    assert (d / "app" / "code.py").read_bytes() == b"print()"
    assert (d / "stdout.log").read_bytes() == b"log"
    assert os.listdir(d / "data") == []


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
def test_sync_command_makes_everything_durable(lazy: LazyFs) -> None:
    d = Path(lazy.mountpoint)
    _write(d / "installed", b"binary", sync=False)
    assert lazy.sync() >= 2
    assert lazy.crash("lose-unfsynced")["dropped"] == {}
    assert (d / "installed").read_bytes() == b"binary"


# ====================================================================== torn-write


def _three_appends(d: Path) -> bytes:
    fd = os.open(d / "data.log", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"H" * 10)
    os.fsync(fd)
    _fsync_dir(d)
    for ch in (b"1", b"2", b"3"):
        os.write(fd, ch * 20)
    os.close(fd)
    return b"H" * 10 + b"1" * 20 + b"2" * 20


@needs_fuse
@pytest.mark.integration
def test_torn_write_keeps_a_prefix_of_the_last_write(lazy: LazyFs) -> None:
    d = Path(lazy.mountpoint)
    before = _three_appends(d)
    rec = lazy.crash("torn-write", keep=7)
    assert rec["torn"] == {"path": "data.log", "offset": 50, "length": 20, "kept": 7, "seed": None}
    assert (d / "data.log").read_bytes() == before + b"3" * 7
    # seeded: the same seed keeps the same prefix, within (0, length)
    kept = []
    for _ in range(2):
        _three_appends(d)
        os.truncate(d / "data.log", 0)  # reset through the fs; pending again
        _three_appends(d)
        kept.append(lazy.crash("torn-write", seed=42)["torn"]["kept"])
    assert kept[0] == kept[1] and 0 < kept[0] < 20


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
def test_torn_write_of_a_named_file_undoes_what_came_after(lazy: LazyFs) -> None:
    d = Path(lazy.mountpoint)
    before = _three_appends(d)
    _write(d / "index.idx", b"I" * 8, sync=False)  # after the data write: lost with the power
    rec = lazy.crash("torn-write", path="data.log", keep=3)
    assert rec["torn"]["path"] == "data.log" and rec["torn"]["kept"] == 3
    assert (d / "data.log").read_bytes() == before + b"333"
    assert not (d / "index.idx").exists()
    assert "index.idx" in rec["dropped"]
    # nothing pending: nothing to tear, nothing lost
    assert lazy.crash("torn-write")["torn"] is None


@needs_fuse
@pytest.mark.integration
def test_hold_fails_the_power_at_the_next_write_and_crash_tears_it(lazy: LazyFs) -> None:
    """A cut that waits for a write in flight: that write is pending, nothing after it can
    be made durable (EIO, so no fsync is acknowledged), and the crash tears exactly it."""
    import threading

    d = Path(lazy.mountpoint)
    _write(d / "other", b"o", sync=True)
    assert lazy.hold("data.log", wait_s=0.2)["held"] is False  # nothing written: untouched
    _write(d / "other", b"still works", sync=True)

    answer: dict = {}
    t = threading.Thread(target=lambda: answer.update(lazy.hold("data.log", wait_s=20)))
    t.start()
    deadline = time.monotonic() + 30
    while lazy.status()["holds"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # armed (a hold answers only once a write lands)
    fd = os.open(d / "data.log", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"x" * 40)  # the held write: done, pending
        with pytest.raises(OSError) as e:
            os.fsync(fd)  # the power is gone: never durable, and the node is told so
        assert e.value.errno == errno.EIO
        with pytest.raises(OSError):
            os.write(fd, b"later")
    finally:
        os.close(fd)
    t.join(timeout=30)
    assert answer["held"] is True and answer["path"] == "data.log" and answer["length"] == 40
    rec = lazy.crash("torn-write", path="data.log", keep=5)
    assert rec["torn"]["kept"] == 5 and rec["held"]["path"] == "data.log"
    assert (d / "data.log").read_bytes() == b"x" * 5
    _write(d / "other", b"power back", sync=True)  # the crash brought the power back
    assert (d / "other").read_bytes() == b"power back"


# ====================================================================== robustness


@needs_fuse
@pytest.mark.integration
def test_killed_daemon_leaves_a_findable_mount_that_cleanup_removes(tmp_path: Path) -> None:
    lz = _lazy(tmp_path / "data")
    lz.mount()
    try:
        (Path(lz.mountpoint) / "f").write_bytes(b"kept")
        pid = int(Path(fsd.pid_path(lz.mountpoint)).read_text())
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)
        assert lz.mountpoint in find_mounts(lz.remote)  # a dead mount: ENOTCONN
        with pytest.raises(OSError):
            os.listdir(lz.mountpoint)
        lz.remote.run(cleanup_commands(lz.mountpoint))
        lz.remote.run(cleanup_commands(lz.mountpoint))  # twice: still fine
        assert lz.mountpoint not in find_mounts(lz.remote)
        assert os.listdir(lz.mountpoint) == ["f"]  # the writes stay (a process crash)
    finally:
        lz.unmount()


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
def test_busy_mount_is_unmounted_lazily(tmp_path: Path) -> None:
    lz = _lazy(tmp_path / "data")
    lz.mount()
    holder = None
    try:
        holder = subprocess.Popen(["sleep", "60"], cwd=lz.mountpoint)
        assert lz.unmount() == "lazy"
        assert lz.mountpoint not in find_mounts(lz.remote)
    finally:
        if holder:
            holder.kill()
            holder.wait()
        lz.unmount()


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
def test_second_mount_and_bad_mode_are_refused(lazy: LazyFs) -> None:
    with pytest.raises(NemesisError, match="already a lazy fs mount"):
        _lazy(Path(lazy.mountpoint)).mount()
    with pytest.raises(NemesisError, match="unknown lazy fs mode"):
        lazy.crash("power-surge")


@pytest.mark.integration
def test_a_host_without_fuse_gets_an_error_naming_it(tmp_path: Path) -> None:
    class NoFuse(LocalRemote):
        def run(self, cmd: str, **kw: object) -> CommandResult:
            return super().run(cmd.replace("/dev/fuse", "/dev/no-such-fuse"), **kw)  # type: ignore[arg-type]

    lz = LazyFs(NoFuse("db7"), str(tmp_path / "d"), python=sys.executable, script=str(FSD_SOURCE))
    with pytest.raises(NemesisError, match=r"^db7: no /dev/fuse"):
        lz.mount()
    lz2 = LazyFs(LocalRemote("db8"), str(tmp_path / "d"), python="/bin/false")
    with pytest.raises(NemesisError, match=r"^db8: .*cannot import mfusepy"):
        lz2.mount()
    assert not fsd.find_mounts() or str(tmp_path / "d") not in fsd.find_mounts()


# ====================================================================== the reference node


def _store_script(d: Path, n: int) -> str:
    return (
        "import sys, os, signal\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from node_impl.store import LogStore, encode_body\n"
        f"s = LogStore({str(d)!r})\n"
        f"for i in range({n}):\n"
        "    s.append_leader(1, encode_body({'op': 'append', 'p': b'p%d' % i * 30}))\n"
        "    if i == 4: s.flush()\n"
        "s.hand_to_os()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
def test_torn_tail_reaches_recovery_only_through_the_lazy_fs(lazy: LazyFs) -> None:
    """kill -9 alone keeps every byte; the lazy fs tears the store's last write."""
    from node_impl.store import LogStore

    d = Path(lazy.mountpoint)
    p = subprocess.run([sys.executable, "-c", _store_script(d, 12)], capture_output=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    pending = lazy.status()["pending_by_path"]
    assert pending["data.log"]["write"] >= 1
    rec = lazy.crash("torn-write", path="data.log", seed=3)
    torn = rec["torn"]
    assert torn["offset"] > 0 and 0 < torn["kept"] < torn["length"]
    size = (d / "data.log").stat().st_size
    assert size == torn["offset"] + torn["kept"]
    s = LogStore(d)  # the correct recovery cuts to whole entries
    assert 4 <= s.end_index < 11
    assert s.data_length <= size
    s.close()
    # the same again, recovered by the seeded bug: it keeps a record never written whole
    shutil.rmtree(d / "x", ignore_errors=True)
    for f in os.listdir(d):
        os.unlink(d / f)
    p = subprocess.run([sys.executable, "-c", _store_script(d, 12)], capture_output=True)
    rec = lazy.crash("torn-write", path="data.log", keep=100)
    s = LogStore(d, trust_torn_tail=True)
    last = s.get(s.end_index)
    assert last.pos + last.size > rec["torn"]["offset"] + rec["torn"]["kept"]  # padded
    s.close()


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
def test_lose_unfsynced_finds_skip_fsync_and_spares_the_correct_node(tmp_path: Path) -> None:
    from node_impl.local_cluster import LocalCluster
    from tests.node_impl.cluster_helpers import append_ok, local_log

    for bug in (None, "skip-fsync"):
        base = tmp_path / (bug or "correct")
        with LocalCluster(1, base, bug=bug) as c:
            lz = _lazy(c.data_dir("n1"))
            lz.mount()
            try:
                c.start_all()
                c.wait_for_leader(30)
                acked = [append_ok(c, f"v{i}".encode())["index"] for i in range(20)]
                c.kill("n1")
                rec = lz.crash("lose-unfsynced")
                c.start("n1")
                c.wait_for_leader(30)
                entries, _ = local_log(c, "n1")
                if bug is None:
                    assert len(entries) > max(acked), rec
                else:
                    assert len(entries) <= max(acked), (rec, entries)  # acked appends lost
                    assert "data.log" in rec["dropped"]
            finally:
                c.close()
                lz.unmount()


# ====================================================================== corruption ops (pure)


def test_bitflip_is_seeded_recorded_and_reversible(tmp_path: Path) -> None:
    f = tmp_path / "f"
    orig = bytes(range(256)) * 4
    f.write_bytes(orig)
    rec = corrupt.bitflip(str(f), bits=5, seed=9, offset=100, length=50)
    json.dumps(rec)
    assert rec["region"] == [100, 150] and len(rec["bits"]) == 5
    data = f.read_bytes()
    diff = [i for i in range(len(orig)) if orig[i] != data[i]]
    assert diff and all(100 <= i < 150 for i in diff)
    assert sum(bin(orig[i] ^ data[i]).count("1") for i in diff) == 5
    for off, bit, old, new in rec["bits"]:
        assert old ^ new == 1 << bit and orig[off] == old or off in diff
    f.write_bytes(orig)
    assert corrupt.bitflip(str(f), bits=5, seed=9, offset=100, length=50) == rec
    tail = corrupt.bitflip(str(f), bits=1, seed=1, offset=-10)
    assert tail["region"] == [1014, 1024]


def test_truncate_copy_chunk_snapshot_rollback(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"0123456789")
    rec = corrupt.truncate(str(f), drop=3)
    assert rec == {
        "op": "truncate",
        "file": str(f),
        "old_size": 10,
        "new_size": 7,
        "dropped_head": b"789".hex(),
    }
    assert corrupt.truncate(str(f), drop=100)["new_size"] == 0
    f.write_bytes(b"0123456789")
    rec = corrupt.copy_chunk(str(f), src=0, dst=6, length=3)
    assert f.read_bytes() == b"0123450129" and rec["length"] == 3 and rec["changed"] == 3
    rec = corrupt.copy_chunk(str(f), src=0, dst=8, length=5)  # clamped at the end
    assert f.read_bytes() == b"0123450101" and rec["length"] == 2
    snap = corrupt.snapshot(str(f), str(tmp_path / "snap"))
    f.write_bytes(b"later, longer content")
    back = corrupt.rollback(str(f), snap["snapshot"])
    assert f.read_bytes() == b"0123450101"
    assert back["sha256_after"] == snap["sha256"] and back["size_before"] == 21
    os.unlink(f)
    assert corrupt.rollback(str(f), snap["snapshot"])["size_before"] is None
    assert f.read_bytes() == b"0123450101"


def test_corrupt_runs_alone_as_a_script(tmp_path: Path) -> None:
    """What a Remote runs on a host: the file by itself, one JSON line out."""
    f = tmp_path / "f"
    f.write_bytes(b"\0" * 64)
    script = tmp_path / "corrupt.py"
    shutil.copyfile(corrupt.__file__, script)
    out = subprocess.run(
        [sys.executable, "-I", str(script), "bitflip", str(f), "--bits", "2", "--seed", "4"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    rec = json.loads(out)
    assert rec["op"] == "bitflip" and len(rec["bits"]) == 2
    assert sum(bin(b).count("1") for b in f.read_bytes()) == 2
    bad = subprocess.run(
        [sys.executable, "-I", str(script), "truncate", str(tmp_path / "nope"), "--drop", "1"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "error" in json.loads(bad.stdout)


# ====================================================================== on a namespace-lab host


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
@pytest.mark.lab
def test_mount_lives_in_the_lab_hosts_mount_namespace(lab: object, remotes: dict) -> None:
    """Shipped over SFTP, started over SSH: the node's processes (started the same way)
    see the mount; this machine and the other hosts do not."""
    one, other = sorted(remotes)[:2]
    r = remotes[one]
    mp = f"/srv/lazyfs-{os.getpid()}/data"  # /srv is private per host
    lz = LazyFs(r, mp, python=sys.executable)
    lz.mount()
    try:
        assert mp in find_mounts(r)
        assert mp not in fsd.find_mounts()
        assert mp not in find_mounts(remotes[other])
        r.run(f"printf durable > {mp}/f && sync {mp}/f && sync {mp}")  # sync(1): fsync each
        r.run(f"printf lost >> {mp}/f && printf new > {mp}/g")
        assert r.run(f"cat {mp}/f").stdout == "durablelost"
        rec = lz.crash("lose-unfsynced")
        assert set(rec["dropped"]) == {"f", "g"}, rec
        assert r.run(f"ls -A {mp}; cat {mp}/f").stdout == "f\ndurable"
    finally:
        assert lz.unmount() in ("umount", "lazy")
        assert mp not in find_mounts(r)
        r.run(f"rm -rf /srv/lazyfs-{os.getpid()}")


# ====================================================================== the fault wiring (nemesis/disk.py)

_WRITER = """
import json, os, select
d = os.path.join(os.environ['NODE_DIR'], 'data')
os.makedirs(d, exist_ok=True)
for p in (d, os.path.dirname(d)):
    fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.close(fd)
t = os.path.join(d, 'term.json')
n = json.load(open(t))['n'] + 1 if os.path.exists(t) else 1
with open(t + '.tmp', 'w') as f:
    json.dump({'n': n}, f); f.flush(); os.fsync(f.fileno())
os.replace(t + '.tmp', t)
fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)
fd = os.open(os.path.join(d, 'data.log'), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.write(fd, b'd' * 64); os.fsync(fd)
fd2 = os.open(d, os.O_RDONLY); os.fsync(fd2); os.close(fd2)
os.write(fd, b'u')
print('ready', flush=True)
select.select([], [], [])
"""


class WriterDB:
    """A DB whose node is a real process writing to its data directory: durable
    bytes first, then one byte it never syncs, then it waits to be killed."""

    def __init__(self, base: str) -> None:
        self.root = base

    def node_dir(self, ctx: object, node: str) -> str:
        return f"{self.root}/{node}"

    def pidfiles(self, ctx: object, node: str) -> list[str]:
        return [f"/run/sbdisk-{node}.pid"]

    def ports(self, ctx: object, node: str) -> list[int]:
        return []

    def setup(self, ctx: object, node: str) -> None:
        pass

    def teardown(self, ctx: object, node: str) -> None:
        pass

    def start(self, ctx: object, node: str) -> None:
        r = ctx.remotes[node]  # type: ignore[attr-defined]
        log = f"/run/sbdisk-{node}.log"
        r.run(f"rm -f {log}")
        r.start_daemon(
            f"env NODE_DIR={self.node_dir(ctx, node)} {sys.executable} -c {shlex.quote(_WRITER)}",
            pidfile=self.pidfiles(ctx, node)[0],
            logfile=log,
        )
        for _ in range(200):
            if "ready" in r.run(f"cat {log}", check=False).stdout:
                return
            r.run("sleep 0.05")
        raise AssertionError(r.run(f"cat {log}", check=False).stdout)

    def kill(self, ctx: object, node: str) -> None:
        r = ctx.remotes[node]  # type: ignore[attr-defined]
        pf = self.pidfiles(ctx, node)[0]
        r.run(
            f"kill -9 $(cat {pf}) 2>/dev/null; while kill -0 $(cat {pf}) 2>/dev/null; do sleep 0.02; done"
        )


def test_disk_faults_register_beside_the_builtins() -> None:
    from nemesis import registry
    from nemesis.disk import CORRUPT, LOSE_UNFSYNCED, TORN_WRITE

    # registered by the entry points in pyproject.toml, as a plugin's would be
    faults = registry.faults()
    for f in (LOSE_UNFSYNCED, TORN_WRITE, CORRUPT):  # the registry stamps the package
        assert faults[f.name].nemesis is f.nemesis and faults[f.name].package == "splitbrain"
    built = registry._build([(f, f.package) for f in faults.values()], {})
    assert {"lose-unfsynced", "torn-write", "corrupt", "corrupt-bitflip"} <= set(built.names)
    assert "lazyfs" in built.journal
    import random

    from harness.core.fault import Draw

    v = TORN_WRITE.draw(
        Draw(
            rng=random.Random(1),
            nodes=["n1", "n2", "n3"],
            leader_ok=True,
            interval=5,
            targets=("one",),
        )
    )
    assert v["target"] == "one" and len(v["nodes"]) == 1 and isinstance(v["seed"], int)


@pytest.mark.slow
@needs_fuse
@pytest.mark.integration
@pytest.mark.lab
def test_lose_unfsynced_and_corrupt_faults_on_lab_hosts(
    lab: object, remotes: dict, tmp_path: Path
) -> None:
    import random

    from harness.core.fault import Selected
    from harness.core.history import HistoryWriter, Op
    from harness.core.spec import RunContext, TestSpec
    from nemesis.disk import CorruptNemesis, CorruptOptions, DiskFaultOptions, LazyFsNemesis

    names = sorted(remotes)[:2]
    base = f"/srv/sbdisk-{os.getpid()}"
    db = WriterDB(base)
    writer = HistoryWriter(tmp_path / "history.jsonl")
    hosts = {h.name: h for h in lab.hosts() if h.name in names}  # type: ignore[attr-defined]
    ctx = RunContext(
        spec=TestSpec(name="disk-test", nodes=tuple(names)),
        hosts=hosts,
        remotes={n: remotes[n] for n in names},
        db=db,
        history=writer,
        rng=random.Random(3),
        store_dir=str(tmp_path),
    )
    # hold=0: this writer is idle after its start, a cut need not wait for a write
    nem = LazyFsNemesis({"lose-unfsynced": Selected(DiskFaultOptions(hold=0.0))})
    cor = CorruptNemesis({"corrupt": Selected(CorruptOptions(bits=3), ("bitflip", "rollback"))})
    a, b = names

    def cat(n: str, f: str) -> str:
        return remotes[n].run(f"cat {db.node_dir(ctx, n)}/data/{f}").stdout

    try:
        nem.setup(ctx)
        for n in names:
            assert db.node_dir(ctx, n) in find_mounts(remotes[n])
            db.start(ctx, n)
        assert cat(a, "data.log") == "d" * 64 + "u"
        op = Op(type="invoke", process="nemesis", f="start-lose-unfsynced", value={"nodes": [a]})
        done = nem.invoke(ctx, op)
        assert done.error is None, done
        assert done.value["records"][a]["dropped"] == {"data/data.log": {"write": 1, "bytes": 1}}
        assert cat(a, "data.log") == "d" * 64  # the byte never synced is gone
        assert cat(b, "data.log") == "d" * 64 + "u"  # the other node untouched
        stop = Op(type="invoke", process="nemesis", f="stop-lose-unfsynced", value={})
        assert nem.invoke(ctx, stop).value["nodes"] == [a]
        assert cat(a, "data.log") == "d" * 128 + "u"
        assert cat(a, "term.json") == '{"n": 2}'
        # corrupt: a bit flip near the end of data.log, recorded bit by bit
        hit = cor.invoke(
            ctx,
            Op(
                type="invoke",
                process="nemesis",
                f="start-corrupt",
                value={"nodes": [b], "op": "bitflip", "seed": 11},
            ),
        )
        rec = hit.value["records"][b]
        assert rec["op"] == "bitflip" and len(rec["bits"]) == 3, hit
        assert cat(b, "data.log") != "d" * 64 + "u"
        # before the flip, every live node's state file was copied: b's then said 1
        assert cat(b, "term.json") == '{"n": 1}'
        cor.invoke(ctx, Op(type="invoke", process="nemesis", f="stop-corrupt", value={}))
        assert cat(b, "term.json") == '{"n": 2}'
        db.kill(ctx, b)
        db.start(ctx, b)
        assert cat(b, "term.json") == '{"n": 3}'
        back = cor.invoke(
            ctx,
            Op(
                type="invoke",
                process="nemesis",
                f="start-corrupt",
                value={"nodes": [b], "op": "rollback"},
            ),
        )
        assert back.value["records"][b]["op"] == "rollback", back
        # the term file went back to the oldest copy, past two restarts
        assert cat(b, "term.json") == '{"n": 1}'
        assert back.value["records"][b]["sha256_after"] != back.value["records"][b]["sha256_before"]
        cor.teardown(ctx)
    finally:
        for n in names:
            db.kill(ctx, n)
        nem.teardown(ctx)
        writer.close()
        for n in names:
            assert db.node_dir(ctx, n) not in find_mounts(remotes[n])
            remotes[n].run(f"rm -rf {base}")


def test_disk_profile_reaches_each_disk_bug_and_heals_what_it_breaks() -> None:
    """The zoo's ``disk`` script: a power cut and a torn write on every node, bit flips on
    a minority only (a quorum keeps what it acked), then a rollback of one of them after
    the leader's kill moved the terms on; seeded, so a zoo run replays it."""
    import random

    from nemesis.disk import DISK_KINDS, disk_steps

    nodes = ["n1", "n2", "n3", "n4", "n5"]
    steps = disk_steps(nodes, random.Random(5), 2.5, 0.5)
    assert steps == disk_steps(nodes, random.Random(5), 2.5, 0.5)
    fs = [f for _, f, _ in steps]
    for kind in (*DISK_KINDS, "kill"):
        assert fs.count(f"start-{kind}") == fs.count(f"stop-{kind}") >= 1
    by_f = {(f, v.get("op")): v for _, f, v in steps if isinstance(v, dict)}
    assert by_f[("start-lose-unfsynced", None)]["nodes"] == nodes
    assert by_f[("start-torn-write", None)]["nodes"] == nodes
    flipped = by_f[("start-corrupt", "bitflip")]["nodes"]
    assert len(flipped) == 2 and set(flipped) < set(nodes)
    assert by_f[("start-corrupt", "rollback")]["nodes"] == flipped[:1]
    assert fs.index("start-kill") < fs.index("start-corrupt", fs.index("stop-corrupt"))
