"""splitbrain lazyfs: a FUSE passthrough that forgets what was never fsynced.

This file runs on a lab host, alone: it imports only the standard library and, to
serve a mount, ``mfusepy`` (ctypes bindings of libfuse 3). It is shipped like
``node_impl`` and started over the host's Remote, so the mount lives in the mount
namespace of that host's sshd, which is where the DB node's processes run.

The mount sits *over* the directory it serves: the daemon opens the directory
before mounting and does every operation relative to that descriptor, so the
node sees the same path, and after an unmount (even of a killed daemon) the
files are where they always were, holding every write (as after ``kill -9``).

What is "un-fsynced" (docs/disk-faults.md has the table):

- a ``write``/``truncate`` of a file is pending until ``fsync`` or ``fdatasync``
  of any descriptor of that file (the same inode);
- a ``create``/``mkdir``/``unlink``/``rmdir``/``rename``/``link``/``symlink`` is
  pending until ``fsync`` of *every* directory whose entries it changed (a
  rename: both parents). ``fsync`` of a file never makes its name durable.

Pending operations are kept as undo records in this daemon's memory, in issue
order; the data itself is written through to the directory at once, so reads
need no overlay and the node runs at near-passthrough speed. A removed or
replaced file is kept (hard-linked) in the hidden ``.splitbrain-lazyfs``
directory until its removal is durable. A ``crash`` command, given once the
node's processes are dead, applies the records:

- ``lose-unfsynced``: undo every pending record, newest first: every file is back
  to its last fsynced content and every pending name change is undone;
- ``torn-write``: the disk took the pending operations in order and lost power in
  the middle of the last pending write (optionally: the last one to a file named
  ``path``): records after it are undone, it keeps only a prefix of ``keep``
  bytes (seeded random when not given: any length, or with ``tail`` all but the
  last 1..``tail`` bytes), records before it stay.

If this daemon dies, its memory goes with it: the files then hold every write,
which is what a process crash (not a power cut) leaves. The control channel is a
unix socket under ``/run/splitbrain-lazyfs`` (private per lab host), one JSON
request and one JSON answer per connection.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

MARKER = "splitbrain-lazyfs"
"""fsname and subtype of every mount: ``/proc/mounts`` shows type ``fuse.splitbrain-lazyfs``."""
FSTYPE = "fuse." + MARKER
STASH = ".splitbrain-lazyfs"
"""Hidden directory at the mount's root keeping removed files until their removal is durable."""
CONTROL_DIR = "/run/splitbrain-lazyfs"
MODES = ("lose-unfsynced", "torn-write")

__all__ = [
    "CONTROL_DIR",
    "FSTYPE",
    "MARKER",
    "MODES",
    "STASH",
    "LazyOps",
    "control",
    "find_mounts",
    "socket_path",
    "unmount",
]


def _key(mountpoint: str) -> str:
    return hashlib.sha1(os.path.abspath(mountpoint).encode()).hexdigest()[:16]


def socket_path(mountpoint: str) -> str:
    """The control socket of the daemon serving ``mountpoint`` (short: sun_path is 108 bytes)."""
    return f"{CONTROL_DIR}/{_key(mountpoint)}.sock"


def pid_path(mountpoint: str) -> str:
    return f"{CONTROL_DIR}/{_key(mountpoint)}.pid"


def log_path(mountpoint: str) -> str:
    return f"{CONTROL_DIR}/{_key(mountpoint)}.log"


def find_mounts(mounts_file: str = "/proc/self/mounts") -> list[str]:
    """Mount points of every lazyfs mount this mount namespace sees (leftovers included)."""
    out = []
    with open(mounts_file) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == FSTYPE:
                out.append(parts[1].replace("\\040", " "))
    return out


def unmount(mountpoint: str, *, timeout: float = 10.0) -> str:
    """Unmount; a busy or dead mount gets a lazy unmount. Returns how: ``umount``, ``lazy`` or ``none``.

    Whatever is left of the daemon's state goes too: its control files, and the
    stash directory (its files were removed by the node; they stay removed).
    """
    mp = os.path.abspath(mountpoint)
    how = "none"
    if mp in find_mounts():
        r = subprocess.run(["umount", mp], capture_output=True, text=True)
        if r.returncode == 0:
            how = "umount"
        else:
            subprocess.run(["umount", "-l", mp], capture_output=True, text=True, check=True)
            how = "lazy"
    pid = _read_pid(mp)
    deadline = time.monotonic() + timeout
    while pid is not None and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid is not None and _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    for p in (socket_path(mp), pid_path(mp), log_path(mp)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    if mp not in find_mounts():
        shutil.rmtree(os.path.join(mp, STASH), ignore_errors=True)
    return how


def _read_pid(mp: str) -> int | None:
    try:
        return int(open(pid_path(mp)).read().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie counts as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def control(mountpoint: str, request: dict, *, timeout: float = 60.0) -> dict:
    """Send one request to the daemon of ``mountpoint``; its JSON answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(socket_path(mountpoint))
        s.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    return json.loads(buf)


# ---------------------------------------------------------------------- the undo log


@dataclass
class Rec:
    """One pending operation and what undoes it."""

    seq: int
    kind: str
    path: str
    ino: int = -1  # data records: the file's inode in the backing directory
    offset: int = 0
    length: int = 0
    old_size: int = 0
    old: bytes = b""  # bytes the operation overwrote (a write) or cut (a truncate)
    dirs: set[int] = field(default_factory=set)  # name records: directories still to fsync
    dst: str = ""  # rename: the new name
    stash: str = ""  # the stashed file an unlink or a rename replaced
    mode: int = 0o755  # rmdir: the removed directory's mode


def _rel(path: str) -> str:
    p = path.lstrip("/")
    return p or "."


def _parent(rel: str) -> str:
    return os.path.dirname(rel) or "."


def _under(path: str, under: str | None) -> bool:
    top = (under or "").strip("/")
    p = path.lstrip("/")
    return not top or p == top or p.startswith(top + "/")


def _within(rec: Rec, under: str) -> bool:
    return any(_under(p, under) for p in (rec.path, rec.dst) if p)


def _names(path: str | None, file: str) -> bool:
    """``path`` (a crash's or a hold's ``path`` option) names ``file``: in full, or by base name."""
    return path is None or path.lstrip("/") in (file.lstrip("/"), os.path.basename(file))


def _rmtree_at(parent: int, name: str) -> None:
    """``rm -rf`` of ``name`` relative to directory fd ``parent`` (shutil's dir_fd is 3.11+)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError:  # not a directory (or a symlink to one)
        os.unlink(name, dir_fd=parent)
        return
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for ename, is_dir in entries:
            if is_dir:
                _rmtree_at(fd, ename)
            else:
                os.unlink(ename, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


class LazyOps:
    """The passthrough operations plus the undo log; mfusepy calls these from its threads.

    Mutations and the log change under one lock, so a record's "old" bytes are
    exactly what the operation replaced. Reads take no lock.
    """

    use_ns = True

    def __init__(self, root_fd: int, *, sync_backing: bool = True) -> None:
        self.root = root_fd
        self.sync_backing = sync_backing
        self.lock = threading.RLock()
        self.seq = 0
        self.pending: dict[int, Rec] = {}
        self.by_ino: dict[int, list[int]] = {}
        self.by_dir: dict[int, set[int]] = {}
        self.keep: dict[int, int] = {}  # ino -> O_RDWR fd kept while it has pending data
        self.fh_ino: dict[int, int] = {}
        self.appending: set[int] = set()
        self.mounted = False
        self.stats = {"writes": 0, "fsyncs": 0, "crashes": 0, "holds": 0}
        # A hold (see hold()): armed for the next write to ``hold_path`` under ``hold_under``;
        # once it lands the disk is gone below ``hold_under`` (``gone``) until the crash.
        self.hold_armed = False
        self.hold_path: str | None = None  # None: any file
        self.hold_under: str | None = None
        self.hold_hit = threading.Event()
        self.held: Rec | None = None
        self.gone = False
        self.calls: dict[str, int] = {}
        with contextlib.suppress(FileExistsError):
            os.mkdir(STASH, 0o700, dir_fd=root_fd)

    # ------------------------------------------------------------ bookkeeping

    def _add(self, rec: Rec) -> None:
        self.pending[rec.seq] = rec
        if rec.ino >= 0 and rec.kind in ("write", "truncate"):
            self.by_ino.setdefault(rec.ino, []).append(rec.seq)
        for d in rec.dirs:
            self.by_dir.setdefault(d, set()).add(rec.seq)

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def _dir_ino(self, rel: str) -> int:
        return os.stat(rel, dir_fd=self.root, follow_symlinks=False).st_ino

    def _keep_fd(self, ino: int, fh: int) -> int:
        fd = self.keep.get(ino)
        if fd is None:
            fd = os.open(f"/proc/self/fd/{fh}", os.O_RDWR)
            self.keep[ino] = fd
        return fd

    def _hidden(self, rel: str) -> bool:
        return rel == STASH or rel.startswith(STASH + "/")

    def _check(self, path: str) -> str:
        rel = _rel(path)
        if self._hidden(rel):
            raise OSError(errno.ENOENT, "hidden")
        return rel

    def _change(self, path: str) -> str:
        """``_check`` for an operation that changes the disk (EIO once it lost power)."""
        rel = self._check(path)
        self._powered(rel)
        return rel

    def _powered(self, rel: str | None) -> None:
        """EIO for every change below the held directory once the power failed there.

        A call the kernel makes without a path (``None``) fails too: it cannot be shown
        to be outside, and an fsync let through would claim the held write durable.
        """
        if self.gone and (not rel or rel == "?" or _under(rel, self.hold_under)):
            raise OSError(errno.EIO, "the lazy fs lost power here (hold)")

    def _stash(self, rel: str) -> str:
        """Hard-link ``rel`` into the stash (same inode, kept until the removal is durable)."""
        name = f"{STASH}/{self._next()}"
        os.link(rel, name, src_dir_fd=self.root, dst_dir_fd=self.root, follow_symlinks=False)
        return name

    def durable_data(self, ino: int) -> None:
        for s in self.by_ino.pop(ino, ()):
            self.pending.pop(s, None)
        fd = self.keep.pop(ino, None)
        if fd is not None:
            os.close(fd)

    def durable_dir(self, dino: int) -> None:
        for s in self.by_dir.pop(dino, ()):
            rec = self.pending.get(s)
            if rec is None:
                continue
            rec.dirs.discard(dino)
            if not rec.dirs:
                del self.pending[s]
                if rec.stash:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(rec.stash, dir_fd=self.root)

    def sync_all(self) -> int:
        """Everything pending becomes durable (a checkpoint, e.g. after the node's install)."""
        with self.lock:
            n = len(self.pending)
            for ino in list(self.by_ino):
                self.durable_data(ino)
            for d in list(self.by_dir):
                self.durable_dir(d)
            self.pending.clear()
            return n

    # ------------------------------------------------------------ metadata

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = (
            os.fstat(fh)
            if fh is not None
            else os.stat(self._check(path), dir_fd=self.root, follow_symlinks=False)
        )
        return {
            "st_mode": st.st_mode,
            "st_ino": st.st_ino,
            "st_nlink": st.st_nlink,
            "st_uid": st.st_uid,
            "st_gid": st.st_gid,
            "st_size": st.st_size,
            "st_blocks": st.st_blocks,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
        }

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._check(path), amode, dir_fd=self.root):
            raise OSError(errno.EACCES, path)
        return 0

    def readlink(self, path: str) -> str:
        return os.readlink(self._check(path), dir_fd=self.root)

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.root)
        return {
            k: getattr(sv, k)
            for k in (
                "f_bsize",
                "f_frsize",
                "f_blocks",
                "f_bfree",
                "f_bavail",
                "f_files",
                "f_ffree",
                "f_namemax",
            )
        }

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._check(path), mode, dir_fd=self.root)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._check(path), uid, gid, dir_fd=self.root, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        rel = self._check(path)
        if times is None:
            os.utime(rel, dir_fd=self.root, follow_symlinks=False)
        else:
            os.utime(rel, ns=times, dir_fd=self.root, follow_symlinks=False)
        return 0

    # ------------------------------------------------------------ directories

    def opendir(self, path: str) -> int:
        self._check(path)
        return 0

    def releasedir(self, path: str, fh: int) -> int:
        return 0

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        # Each entry carries its inode: with use_ino, an entry of inode 0 is skipped by readdir(3).
        rel = self._check(path)
        out = []
        fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.root)
        try:
            with os.scandir(fd) as it:  # scandir of a descriptor leaves it open
                for e in it:
                    if rel == "." and e.name == STASH:
                        continue
                    st = e.stat(follow_symlinks=False)
                    out.append((e.name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0))
        finally:
            os.close(fd)
        for name in (".", ".."):
            st = os.stat(rel if name == "." else _parent(rel), dir_fd=self.root)
            out.append((name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0))
        return out

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        rel = self._change(path)
        fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.root)
        try:
            if self.sync_backing:
                os.fsync(fd)
            dino = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        with self.lock:
            self.stats["fsyncs"] += 1
            self.durable_dir(dino)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        rel = self._change(path)
        with self.lock:
            os.mkdir(rel, mode, dir_fd=self.root)
            self._add(Rec(self._next(), "mkdir", rel, dirs={self._dir_ino(_parent(rel))}))
        return 0

    def rmdir(self, path: str) -> int:
        rel = self._change(path)
        with self.lock:
            mode = stat.S_IMODE(os.stat(rel, dir_fd=self.root).st_mode)
            os.rmdir(rel, dir_fd=self.root)
            self._add(
                Rec(self._next(), "rmdir", rel, mode=mode, dirs={self._dir_ino(_parent(rel))})
            )
        return 0

    # ------------------------------------------------------------ names

    def unlink(self, path: str) -> int:
        rel = self._change(path)
        with self.lock:
            stash = self._stash(rel)
            os.unlink(rel, dir_fd=self.root)
            self._add(
                Rec(self._next(), "unlink", rel, stash=stash, dirs={self._dir_ino(_parent(rel))})
            )
        return 0

    def rename(self, old: str, new: str) -> int:
        src, dst = self._change(old), self._change(new)
        with self.lock:
            stash = ""
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(dst, dir_fd=self.root, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    stash = self._stash(dst)
            try:
                os.rename(src, dst, src_dir_fd=self.root, dst_dir_fd=self.root)
            except OSError:
                if stash:
                    os.unlink(stash, dir_fd=self.root)
                raise
            dirs = {self._dir_ino(_parent(src)), self._dir_ino(_parent(dst))}
            self._add(Rec(self._next(), "rename", src, dst=dst, stash=stash, dirs=dirs))
        return 0

    def link(self, target: str, source: str) -> int:
        new, old = self._change(target), self._change(source)
        with self.lock:
            os.link(old, new, src_dir_fd=self.root, dst_dir_fd=self.root)
            self._add(Rec(self._next(), "link", new, dirs={self._dir_ino(_parent(new))}))
        return 0

    def symlink(self, target: str, source: str) -> int:
        new = self._change(target)
        with self.lock:
            os.symlink(source, new, dir_fd=self.root)
            self._add(Rec(self._next(), "symlink", new, dirs={self._dir_ino(_parent(new))}))
        return 0

    # ------------------------------------------------------------ files

    def _opened(self, fd: int, flags: int) -> int:
        self.fh_ino[fd] = os.fstat(fd).st_ino
        if flags & os.O_APPEND:
            self.appending.add(fd)
        return fd

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        rel = self._change(path)
        with self.lock:
            existed = True
            try:
                os.stat(rel, dir_fd=self.root, follow_symlinks=False)
            except FileNotFoundError:
                existed = False
            if existed and flags & os.O_TRUNC:
                self._truncate_locked(rel, 0, None)
            fd = os.open(
                rel, (flags & ~(os.O_APPEND | os.O_TRUNC)) | os.O_CREAT, mode, dir_fd=self.root
            )
            if not existed:
                ino = os.fstat(fd).st_ino
                self._add(
                    Rec(self._next(), "create", rel, ino=ino, dirs={self._dir_ino(_parent(rel))})
                )
            return self._opened(fd, flags)

    def open(self, path: str, flags: int) -> int:
        rel = self._check(path)
        with self.lock:
            if flags & os.O_TRUNC:
                self._truncate_locked(rel, 0, None)
            fd = os.open(rel, flags & ~(os.O_APPEND | os.O_TRUNC | os.O_CREAT), dir_fd=self.root)
            return self._opened(fd, flags)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self.lock:
            self._powered(path)
            ino = self.fh_ino[fh]
            keep = self._keep_fd(ino, fh)
            size = os.fstat(keep).st_size
            if fh in self.appending:
                offset = size
            old = os.pread(keep, min(len(data), size - offset), offset) if offset < size else b""
            n = os.pwrite(fh, data, offset)
            self.stats["writes"] += 1
            rec = Rec(self._next(), "write", path or "?", ino, offset, n, size, old)
            self._add(rec)
            if (
                self.hold_armed
                and n > 0
                and _under(rec.path, self.hold_under)
                and _names(self.hold_path, rec.path)
            ):
                self.gone, self.held, self.hold_armed = True, rec, False
                self.hold_hit.set()
            return n

    def _truncate_locked(self, rel: str, length: int, fh: int | None) -> None:
        fd = fh if fh is not None else os.open(rel, os.O_RDWR, dir_fd=self.root)
        try:
            ino = os.fstat(fd).st_ino
            keep = self._keep_fd(ino, fd)
            size = os.fstat(keep).st_size
            if size == length:
                return
            old = os.pread(keep, size - length, length) if length < size else b""
            os.ftruncate(fd, length)
            self._add(Rec(self._next(), "truncate", "/" + rel, ino, length, 0, size, old))
        finally:
            if fh is None:
                os.close(fd)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        rel = self._check(path) if path is not None else "."
        self._powered(rel)
        with self.lock:
            self._truncate_locked(rel, length, fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._powered(path)
        if self.sync_backing:
            (os.fdatasync if datasync else os.fsync)(fh)
        with self.lock:  # the power may have failed since the check above: look again
            self._powered(path)
            self.stats["fsyncs"] += 1
            self.durable_data(self.fh_ino[fh])
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        with self.lock:
            self.fh_ino.pop(fh, None)
            self.appending.discard(fh)
        os.close(fh)
        return 0

    # ------------------------------------------------------------ the crash

    def _undo(self, rec: Rec, problems: list[str]) -> None:
        r = self.root
        try:
            if rec.kind in ("write", "truncate"):
                fd = self.keep[rec.ino]
                if rec.kind == "write":
                    if rec.old:
                        _pwrite_all(fd, rec.old, rec.offset)
                    if rec.offset + rec.length > rec.old_size:
                        os.ftruncate(fd, rec.old_size)
                elif rec.old_size < rec.offset:  # it grew the file
                    os.ftruncate(fd, rec.old_size)
                else:
                    _pwrite_all(fd, rec.old, rec.offset)
            elif rec.kind == "create":
                if os.stat(rec.path, dir_fd=r, follow_symlinks=False).st_ino == rec.ino:
                    os.unlink(rec.path, dir_fd=r)
                else:
                    problems.append(f"create {rec.path}: another file has its name now; kept")
            elif rec.kind in ("link", "symlink"):
                os.unlink(rec.path, dir_fd=r)
            elif rec.kind == "mkdir":
                _rmtree_at(r, rec.path)
            elif rec.kind == "rmdir":
                os.mkdir(rec.path, rec.mode, dir_fd=r)
            elif rec.kind == "unlink":
                os.rename(rec.stash, rec.path, src_dir_fd=r, dst_dir_fd=r)
            elif rec.kind == "rename":
                os.rename(rec.dst, rec.path, src_dir_fd=r, dst_dir_fd=r)
                if rec.stash:
                    os.rename(rec.stash, rec.dst, src_dir_fd=r, dst_dir_fd=r)
        except OSError as e:
            problems.append(f"undo {rec.kind} {rec.path}: {e}")

    def _summary(self, recs: list[Rec]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for rec in recs:
            name = rec.path.lstrip("/") if rec.kind in ("write", "truncate") else rec.path
            s = out.setdefault(name, {})
            s[rec.kind] = s.get(rec.kind, 0) + 1
            if rec.kind == "write":
                s["bytes"] = s.get("bytes", 0) + rec.length
        return out

    def crash(
        self,
        mode: str,
        *,
        path: str | None = None,
        keep: int | None = None,
        seed: int | None = None,
        wait_s: float = 5.0,
        under: str | None = None,
        tail: int | None = None,
    ) -> dict[str, Any]:
        """Apply a power cut to the pending records (the node's processes must be dead).

        ``tail`` (torn-write, no ``keep``): the tear cuts 1..``tail`` bytes off the
        write's end, so it lands in the write's last record, past that record's
        header when the header is shorter than the record less ``tail``: the torn
        record is the one recovery reads last, whole in length if padded. A prefix
        of any length (``tail`` None) tears a header or drops whole records most of
        the time, which any recovery cuts.

        ``under`` limits the cut to one subdirectory of the mount (e.g. the node's
        ``data`` when the mount covers its whole directory, code and logs too):
        pending records elsewhere are left done, as if that disk never lost power.
        """
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
        deadline = time.monotonic() + wait_s
        while self.fh_ino and time.monotonic() < deadline:
            time.sleep(0.02)  # the kernel releases a killed process's files asynchronously
        with self.lock:
            out: dict[str, Any] = {"mode": mode, "open_files": len(self.fh_ino)}
            if under is not None:
                out["under"] = under
            problems: list[str] = []
            recs = list(self.pending.values())
            if under is not None:
                recs = [r for r in recs if _within(r, under)]
            cut = 0  # records recs[cut:] are undone
            torn: dict[str, Any] | None = None
            if mode == "torn-write":
                target = None
                for i in range(len(recs) - 1, -1, -1):
                    rec = recs[i]
                    if (
                        rec.kind == "write"
                        and rec.length > 0
                        and (
                            path is None
                            or path.lstrip("/")
                            in (rec.path.lstrip("/"), os.path.basename(rec.path))
                        )
                    ):
                        target = i
                        break
                if target is None:
                    cut = len(recs)  # nothing to tear: nothing lost
                else:
                    w = recs[target]
                    rng = random.Random(seed)
                    if keep is not None:
                        k = keep
                    elif w.length <= 1:
                        k = 0
                    elif tail:
                        k = w.length - rng.randint(1, min(tail, w.length - 1))
                    else:
                        k = rng.randrange(1, w.length)
                    k = max(0, min(k, w.length - 1 if w.length > 0 else 0))
                    for rec in reversed(recs[target + 1 :]):
                        self._undo(rec, problems)
                    fd = self.keep[w.ino]
                    prefix = os.pread(fd, k, w.offset)
                    self._undo(w, problems)
                    if prefix:
                        _pwrite_all(fd, prefix, w.offset)
                    torn = {
                        "path": w.path.lstrip("/"),
                        "offset": w.offset,
                        "length": w.length,
                        "kept": len(prefix),
                        "seed": seed,
                        **({"tail": tail} if tail and keep is None else {}),
                    }
                    cut = target
            else:
                for rec in reversed(recs):
                    self._undo(rec, problems)
            out["dropped"] = self._summary(recs[cut:])
            out["kept_pending"] = len(recs[:cut]) if mode == "torn-write" else 0
            if mode == "torn-write":
                out["torn"] = torn
            out["problems"] = problems
            for fd in self.keep.values():
                os.close(fd)
            self.keep.clear()
            self.pending.clear()
            self.by_ino.clear()
            self.by_dir.clear()
            sfd = os.open(STASH, os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.root)
            try:
                for name in os.listdir(sfd):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=sfd)
            finally:
                os.close(sfd)
            if self.held is not None:
                out["held"] = {"path": self.held.path.lstrip("/"), "offset": self.held.offset}
            self.gone, self.held, self.hold_armed = False, None, False
            self.hold_hit.clear()
            self.stats["crashes"] += 1
            return out

    def hold(self, path: str | None, *, under: str | None = None, wait_s: float = 3.0) -> dict:
        """Wait up to ``wait_s`` for the next write to ``path`` below ``under`` (to any file
        there if ``path`` does not exist below ``under``: ``any_file``); at that write
        the power fails there: it is done and pending, and every later change or fsync below
        ``under`` fails with EIO, so nothing after it becomes durable or is acknowledged as
        durable. The caller then kills the node and sends ``crash``, which brings power back.

        Without it a fault lands wherever the node happens to be, mostly between two
        group commits, with nothing in flight to lose or tear. ``held`` False: no such
        write came (an idle node); the disk is left as it was.
        """
        t0 = time.monotonic()
        want = (path or "").lstrip("/") or None
        if want is not None:
            top = (under or "").strip("/") or "."
            try:
                os.stat(os.path.join(top, want), dir_fd=self.root)
            except OSError:  # another DB's files (etcd has no data.log): any write will do
                want = None
        with self.lock:
            self.hold_armed = True
            self.hold_path = want
            self.hold_under = under
            self.hold_hit.clear()
            self.stats["holds"] += 1
        self.hold_hit.wait(wait_s)
        with self.lock:  # a write may land between the wait's end and here: it counts
            held = self.held
            if held is None:
                self.hold_armed = False
                return {"held": False, "waited_s": round(time.monotonic() - t0, 3)}
        return {
            "held": True,
            "any_file": want is None,
            "waited_s": round(time.monotonic() - t0, 3),
            "path": held.path.lstrip("/"),
            "offset": held.offset,
            "length": held.length,
        }

    def status(self) -> dict[str, Any]:
        with self.lock:
            recs = list(self.pending.values())
            return {
                "mounted": self.mounted,
                "pending": len(recs),
                "pending_by_path": self._summary(recs),
                "open_files": len(self.fh_ino),
                "gone": self.gone,
                "calls": dict(self.calls),
                **self.stats,
            }

    def handle(self, req: dict) -> dict[str, Any]:
        cmd = req.get("cmd")
        if cmd == "status":
            return self.status()
        if cmd == "sync":
            return {"synced": self.sync_all()}
        if cmd == "hold":
            return self.hold(
                req.get("path"), under=req.get("under"), wait_s=float(req.get("wait_s", 3.0))
            )
        if cmd == "crash":
            return self.crash(
                str(req.get("mode")),
                path=req.get("path"),
                keep=req.get("keep"),
                seed=req.get("seed"),
                wait_s=float(req.get("wait_s", 5.0)),
                under=req.get("under"),
                tail=req.get("tail"),
            )
        raise ValueError(f"unknown command {cmd!r} (status, sync, hold, crash)")


# ---------------------------------------------------------------------- serving


def _answer(ops: LazyOps, conn: socket.socket) -> None:
    with conn:
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
        try:
            ans = ops.handle(json.loads(buf))
        except Exception as e:  # the answer says what failed; the daemon lives on
            ans = {"error": f"{type(e).__name__}: {e}"}
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(ans).encode() + b"\n")


def _serve_control(ops: LazyOps, sock: socket.socket) -> None:
    """One thread per request: a ``hold`` waits for the node's next write, and a ``status``
    or ``crash`` must still be answered meanwhile."""
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        threading.Thread(target=_answer, args=(ops, conn), daemon=True).start()


_OPS = (
    "getattr",
    "access",
    "readlink",
    "statfs",
    "chmod",
    "chown",
    "utimens",
    "opendir",
    "releasedir",
    "readdir",
    "fsyncdir",
    "mkdir",
    "rmdir",
    "unlink",
    "rename",
    "link",
    "symlink",
    "create",
    "open",
    "read",
    "write",
    "truncate",
    "fsync",
    "flush",
    "release",
)


def _counted(ops: LazyOps, name: str) -> Any:
    """``ops.<name>``, counting its calls in ``ops.calls`` (shown by ``status``)."""
    fn = getattr(ops, name)
    calls = ops.calls

    def call(*args: Any) -> Any:
        calls[name] = calls.get(name, 0) + 1
        return fn(*args)

    return call


def serve(mountpoint: str, *, sync_backing: bool = True, debug: bool = False) -> int:
    """Mount over ``mountpoint`` and serve until unmounted (foreground)."""
    if not os.path.exists("/dev/fuse"):
        print(f"{socket.gethostname()}: no /dev/fuse: cannot mount a lazy fs", file=sys.stderr)
        return 4
    try:
        import mfusepy  # type: ignore[import-untyped]
    except ImportError as e:
        print(f"{socket.gethostname()}: cannot import mfusepy ({e})", file=sys.stderr)
        return 4
    mp = os.path.abspath(mountpoint)
    if mp in find_mounts():
        print(f"{mp} is already a lazy fs mount", file=sys.stderr)
        return 5
    root = os.open(mp, os.O_RDONLY | os.O_DIRECTORY)
    ops = LazyOps(root, sync_backing=sync_backing)
    os.makedirs(CONTROL_DIR, exist_ok=True)
    sp = socket_path(mp)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sp)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(sp)
    sock.listen(8)
    with open(pid_path(mp), "w") as f:
        f.write(f"{os.getpid()}\n")

    class Ops(mfusepy.Operations):
        pass

    # mfusepy looks operations up by name on the object it is given; bind ours.
    fs = Ops()
    for name in _OPS:
        setattr(fs, name, _counted(ops, name))
    fs.use_ns = True

    def init(path: str) -> None:
        ops.mounted = True
        threading.Thread(target=_serve_control, args=(ops, sock), daemon=True).start()

    fs.init = init
    try:
        mfusepy.FUSE(
            fs,
            mp,
            foreground=True,
            debug=debug,
            fsname=MARKER,
            subtype=MARKER,
            use_ino=True,
            attr_timeout=0,
            entry_timeout=0,
            negative_timeout=0,
        )
    finally:
        sock.close()
        for p in (sp, pid_path(mp)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
        # A clean exit is no crash: pending operations stay done; drop the stash.
        with contextlib.suppress(OSError):
            _rmtree_at(root, STASH)
        os.close(root)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fsd.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mount", help="serve a lazy fs over DIR (foreground)")
    m.add_argument("dir")
    m.add_argument("--no-sync-backing", action="store_true")
    m.add_argument("--debug", action="store_true")
    c = sub.add_parser("ctl", help="send a JSON request to the daemon of DIR")
    c.add_argument("dir")
    c.add_argument("request")
    c.add_argument("--timeout", type=float, default=60.0)
    sub.add_parser("find", help="list lazy fs mounts (this mount namespace)")
    u = sub.add_parser("umount", help="unmount DIR (lazily if busy) and remove its leftovers")
    u.add_argument("dir")
    a = ap.parse_args(argv)
    if a.cmd == "mount":
        return serve(a.dir, sync_backing=not a.no_sync_backing, debug=a.debug)
    if a.cmd == "ctl":
        try:
            ans = control(a.dir, json.loads(a.request), timeout=a.timeout)
        except (OSError, ValueError) as e:
            print(f"{socket.gethostname()}: lazy fs at {a.dir}: {e}", file=sys.stderr)
            return 6
        print(json.dumps(ans))
        return 1 if "error" in ans else 0
    if a.cmd == "find":
        for mp in find_mounts():
            print(mp)
        return 0
    print(json.dumps({"unmounted": unmount(a.dir)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
