"""The harness's hands on a host's lazy fs (``fsd.py``), through that host's Remote.

The daemon must run in the mount namespace of the DB node's processes. On the
namespace lab every host has its own mount namespace (``unshare --mount`` under
its init), shared by its sshd and everything started over it; so the daemon is
started over the same Remote as the node, and its mount is invisible from this
machine's namespace. Detection and cleanup therefore also go over the Remote
(:func:`find_mounts`, :func:`cleanup_commands`).

Order of a disk fault: kill the node's processes, :meth:`LazyFs.crash` (the daemon
waits for their files to close, then undoes what was not fsynced), start the node.
"""

from __future__ import annotations

import json
import posixpath
import shlex
import time
from pathlib import Path
from typing import Any

from harness.control.disk import fsd
from harness.core.errors import NemesisError, RemoteCommandError
from harness.core.remote import Remote

__all__ = ["LazyFs", "find_mounts", "cleanup_commands", "FSD_SOURCE", "REMOTE_SCRIPT"]

FSD_SOURCE = Path(fsd.__file__)
REMOTE_SCRIPT = posixpath.join(fsd.CONTROL_DIR, "fsd.py")
"""Where :meth:`LazyFs.ship` puts the daemon on a host (``/run``: private per lab host)."""
_MOUNTS = f"awk '$3 == \"{fsd.FSTYPE}\" {{ print $2 }}' /proc/self/mounts"


def find_mounts(remote: Remote) -> list[str]:
    """Every lazy fs mount the host's processes see, leftovers of a killed harness included.

    Plain ``awk`` over ``/proc/self/mounts`` (no script needed): run over the host's
    Remote, it reads the mount namespace of the host's sshd.
    """
    res = remote.run(_MOUNTS, timeout=30.0)
    return [line.replace("\\040", " ") for line in res.stdout.split() if line]


def cleanup_commands(mountpoint: str) -> str:
    """Shell that removes a leftover mount and its state; safe to run twice."""
    q = shlex.quote(mountpoint)
    key = fsd._key(mountpoint)
    return (
        f"if {_MOUNTS} | grep -qxF {q}; then umount {q} 2>/dev/null || umount -l {q}; fi; "
        f"pid=$(cat {fsd.CONTROL_DIR}/{key}.pid 2>/dev/null) && kill -9 $pid 2>/dev/null; "
        f"rm -f {fsd.CONTROL_DIR}/{key}.sock {fsd.CONTROL_DIR}/{key}.pid "
        f"{fsd.CONTROL_DIR}/{key}.log; "
        f"rm -rf {q}/{fsd.STASH}; true"
    )


class LazyFs:
    """One lazy fs mounted over ``mountpoint`` on the host of ``remote``."""

    def __init__(
        self,
        remote: Remote,
        mountpoint: str,
        *,
        python: str = "python3",
        script: str | None = None,
        sync_backing: bool = False,
    ) -> None:
        """``script`` None ships ``fsd.py`` to :data:`REMOTE_SCRIPT` at :meth:`mount`.

        ``sync_backing`` False (the default) records fsyncs without passing them to
        the disk below: the lazy fs *is* the model of durability, and the machine
        under the lab is not what is tested; passing them on costs the node up to a
        third of its throughput on a loaded machine (docs/disk-faults.md).
        """
        self.remote = remote
        self.host = remote.host.name
        self.mountpoint = posixpath.normpath(mountpoint)
        self.python = python
        self.script = script
        self.sync_backing = sync_backing

    def _fsd(self, args: str) -> str:
        return f"{self.python} {shlex.quote(self.script or REMOTE_SCRIPT)} {args}"

    def ship(self) -> None:
        self.remote.run(f"mkdir -p {fsd.CONTROL_DIR}", timeout=30.0)
        self.remote.upload(str(FSD_SOURCE), REMOTE_SCRIPT)

    def preflight(self) -> None:
        """A clear error naming the host when it cannot serve a FUSE mount."""
        res = self.remote.run(
            "test -c /dev/fuse || echo no-dev-fuse; "
            f"{self.python} -c 'import mfusepy' 2>/dev/null || echo no-mfusepy",
            check=False,
            timeout=30.0,
        )
        if "no-dev-fuse" in res.stdout:
            raise NemesisError(f"{self.host}: no /dev/fuse, so no lazy fs (disk faults need FUSE)")
        if "no-mfusepy" in res.stdout:
            raise NemesisError(
                f"{self.host}: {self.python} cannot import mfusepy (pip install mfusepy==3.1.1; "
                "and libfuse3-3), so no lazy fs"
            )

    def mount(self, *, timeout: float = 15.0) -> None:
        """Mount over ``mountpoint`` (made if missing); returns once the daemon answers."""
        self.preflight()
        if self.script is None:
            self.ship()
        q = shlex.quote(self.mountpoint)
        self.remote.run(f"mkdir -p {q}", timeout=30.0)
        if self.mountpoint in find_mounts(self.remote):
            raise NemesisError(f"{self.host}: {self.mountpoint} is already a lazy fs mount")
        flag = "" if self.sync_backing else " --no-sync-backing"
        self.remote.start_daemon(
            self._fsd(f"mount {q}{flag}"),
            pidfile=fsd.pid_path(self.mountpoint),
            logfile=fsd.log_path(self.mountpoint),
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.status(timeout=5.0).get("mounted"):
                    return
            except NemesisError:
                pass
            if time.monotonic() > deadline:
                log = self.remote.run(
                    f"tail -5 {fsd.log_path(self.mountpoint)}", check=False, timeout=30.0
                ).stdout
                self.unmount()
                raise NemesisError(
                    f"{self.host}: lazy fs at {self.mountpoint} did not come up in "
                    f"{timeout:.0f} s: {log.strip()}"
                )
            time.sleep(0.1)

    def _ctl(self, req: dict[str, Any], *, timeout: float = 60.0) -> dict[str, Any]:
        cmd = self._fsd(
            f"ctl {shlex.quote(self.mountpoint)} {shlex.quote(json.dumps(req))} --timeout {timeout}"
        )
        try:
            res = self.remote.run(cmd, timeout=timeout + 30.0)
        except RemoteCommandError as e:
            raise NemesisError(
                f"{self.host}: lazy fs at {self.mountpoint}: {req.get('cmd')} failed: "
                f"{(e.stderr or e.stdout or '').strip()[-300:]}"
            ) from e
        ans: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
        return ans

    def status(self, *, timeout: float = 60.0) -> dict[str, Any]:
        return self._ctl({"cmd": "status"}, timeout=timeout)

    def sync(self) -> int:
        """Make everything written so far durable (e.g. after the node's install)."""
        return int(self._ctl({"cmd": "sync"})["synced"])

    def hold(
        self, path: str | None = None, *, under: str | None = None, wait_s: float = 3.0
    ) -> dict[str, Any]:
        """Wait up to ``wait_s`` for the node's next write to ``path`` (below ``under``) and
        fail the power there: that write is pending, every later change or fsync below
        ``under`` gets EIO. Kill the node next, then :meth:`crash`, which brings power back.

        Answers ``held`` (False: no such write came in time, the disk is untouched) and
        the held write's ``path``, ``offset``, ``length``.
        """
        req: dict[str, Any] = {"cmd": "hold", "wait_s": wait_s}
        if path is not None:
            req["path"] = path
        if under is not None:
            req["under"] = under
        return self._ctl(req, timeout=wait_s + 60.0)

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
        """Apply ``lose-unfsynced`` or ``torn-write``; the node's processes must be dead.

        ``under``: only that subdirectory of the mount loses power (the node's data
        directory when the mount covers the node's whole directory). ``tail``
        (torn-write without ``keep``): the tear cuts 1..``tail`` bytes off the torn
        write's end, into its last record, instead of keeping a prefix of any length.

        Returns the daemon's record: what was dropped per file, the torn write, and
        ``open_files`` (files still open when it acted: a process that survived).
        """
        if mode not in fsd.MODES:
            raise NemesisError(f"unknown lazy fs mode {mode!r} (known: {', '.join(fsd.MODES)})")
        req: dict[str, Any] = {"cmd": "crash", "mode": mode, "wait_s": wait_s}
        if path is not None:
            req["path"] = path
        if keep is not None:
            req["keep"] = keep
        if seed is not None:
            req["seed"] = seed
        if under is not None:
            req["under"] = under
        if tail:
            req["tail"] = tail
        return self._ctl(req, timeout=wait_s + 60.0)

    def unmount(self) -> str:
        """Unmount (lazily if busy), stop the daemon, remove its leftovers; never leaves a mount.

        Returns ``umount``, ``lazy`` or ``none`` (nothing was mounted).
        """
        res = self.remote.run(
            self._fsd(f"umount {shlex.quote(self.mountpoint)}"), check=False, timeout=60.0
        )
        how = "none"
        if res.ok:
            how = str(json.loads(res.stdout.strip().splitlines()[-1])["unmounted"])
        if not res.ok or self.mountpoint in find_mounts(self.remote):
            self.remote.run(cleanup_commands(self.mountpoint), check=False, timeout=60.0)
            how = "lazy"
        if self.mountpoint in find_mounts(self.remote):
            raise NemesisError(f"{self.host}: cannot unmount the lazy fs at {self.mountpoint}")
        return how
