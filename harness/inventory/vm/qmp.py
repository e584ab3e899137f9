"""QMP, qemu's JSON control socket, and the :class:`Machine` built on it.

A short connection per command (greeting, ``qmp_capabilities``, the command)
keeps no state in the harness: any process, for example a run started long
after ``lab up``, reaches a guest through its socket path alone. A power cut
is SIGKILL to qemu, not a QMP command: nothing in the guest or in qemu gets to
flush, so whatever the guest had only in its page cache is gone, exactly as
when a plug is pulled (what the guest had already written to its virtual disk
is in this machine's page cache and survives, as on a disk with no volatile
cache).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import LabError

__all__ = ["qmp", "QmpMachine"]


def qmp(
    path: Path, command: str, arguments: dict[str, Any] | None = None, *, timeout: float = 10.0
) -> Any:
    """Run one QMP command on the socket at ``path``; its ``return`` value."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(path))
        except OSError as e:
            raise LabError(f"QMP socket {path}: {e}") from None
        f = s.makefile("rwb")
        _reply(f, path)  # the greeting
        for cmd, args in (("qmp_capabilities", None), (command, arguments)):
            msg: dict[str, Any] = {"execute": cmd}
            if args:
                msg["arguments"] = args
            f.write(json.dumps(msg).encode() + b"\n")
            f.flush()
            reply = _reply(f, path)
            if "error" in reply:
                raise LabError(f"QMP {cmd} on {path}: {reply['error'].get('desc', reply['error'])}")
        return reply.get("return")


def _reply(f: Any, path: Path) -> dict[str, Any]:
    """The next message that is not an asynchronous event."""
    while True:
        line = f.readline()
        if not line:
            raise LabError(f"QMP socket {path} closed")
        msg = json.loads(line)
        if "event" not in msg:
            return dict(msg)


class QmpMachine:
    """:class:`harness.core.machine.Machine` for one guest of a VM lab.

    ``power_on`` is the lab's own launch of the guest (same overlay, same seed
    disk), handed in so this class knows QMP and nothing about building guests.
    """

    def __init__(
        self,
        name: str,
        socket_path: Path,
        *,
        running: Callable[[], bool],
        kill: Callable[[], None],
        boot: Callable[[], None],
    ) -> None:
        self.name = name
        self.socket_path = socket_path
        self._running, self._kill, self._boot = running, kill, boot

    def __repr__(self) -> str:
        return f"QmpMachine({self.name!r}, {str(self.socket_path)!r})"

    def power_cut(self) -> None:
        self._kill()

    def power_on(self) -> None:
        if not self._running():
            self._boot()

    def suspend(self) -> None:
        if self._running():
            qmp(self.socket_path, "stop")

    def resume(self) -> None:
        if self._running():
            qmp(self.socket_path, "cont")

    def state(self) -> str:
        if not self._running():
            return "off"
        try:
            status = qmp(self.socket_path, "query-status")
        except LabError:
            # qemu is alive but its socket is not up yet (just launched): give it a moment.
            time.sleep(0.5)
            status = qmp(self.socket_path, "query-status")
        return "paused" if status.get("status") in ("paused", "prelaunch") else "running"
