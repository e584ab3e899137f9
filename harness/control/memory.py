"""A Remote that runs nowhere: commands go to a handler function you write.

Logic that sits above SSH (a nemesis building iptables rules, a DB composing a
start command, a leftover scanner parsing ``ps``) can then be tested without a
lab, the way HTTPX's mock transport lets a client be tested without sockets:
the test says what each command answers, and reads back what was run, uploaded
and started. Daemons and files live in dictionaries; nothing touches the machine.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.core.errors import RemoteCommandError
from harness.core.remote import CommandResult, Host

__all__ = ["Command", "Handler", "MemoryRemote", "answer"]


@dataclass(frozen=True)
class Command:
    """One call of :meth:`MemoryRemote.run`, as the handler sees it."""

    host: str
    cmd: str
    sudo: bool = False
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | bytes | None = None


Handler = Callable[[Command], "CommandResult | tuple[int, str, str] | str | None"]
"""Answers a command: a full result, ``(exit, stdout, stderr)``, stdout alone
(exit 0), or None (exit 0, no output)."""


def answer(_: Command) -> None:
    """The default handler: every command succeeds and prints nothing."""
    return None


class MemoryRemote:
    """The :class:`~harness.core.remote.Remote` protocol over a handler and dictionaries.

    ``commands`` records every command run, in order; ``files`` maps remote paths
    to uploaded bytes (downloads read from it); ``daemons`` maps a pid file to
    the pid and command of a started daemon while it "runs".
    """

    _pids = itertools.count(1000)
    hostless = True
    """It reaches no machine: a run's clean start has nothing to scan, heal or journal."""

    def __init__(self, host: Host | str, handler: Handler = answer) -> None:
        self.host = host if isinstance(host, Host) else Host(name=host, address="127.0.0.1")
        self.handler = handler
        self.commands: list[Command] = []
        self.files: dict[str, bytes] = {}
        self.daemons: dict[str, tuple[int, str]] = {}
        self.closed = False
        self._lock = threading.Lock()

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
        c = Command(host=self.host.name, cmd=cmd, sudo=sudo, env=dict(env or {}), stdin=stdin)
        with self._lock:
            self.commands.append(c)
        got = self.handler(c)
        if isinstance(got, CommandResult):
            res = got
        elif isinstance(got, tuple):
            res = CommandResult(self.host.name, cmd, got[0], got[1], got[2])
        else:
            res = CommandResult(self.host.name, cmd, 0, got or "", "")
        if check and res.exit_status != 0:
            raise RemoteCommandError(
                host=self.host.name,
                cmd=cmd,
                exit_status=res.exit_status,
                stdout=res.stdout,
                stderr=res.stderr,
            )
        return res

    def upload(self, local: str, remote: str) -> None:
        with open(local, "rb") as f:
            self.files[remote] = f.read()

    def download(self, remote: str, local: str) -> None:
        try:
            data = self.files[remote]
        except KeyError:
            raise RemoteCommandError(
                host=self.host.name,
                cmd=f"download {remote}",
                exit_status=1,
                stdout="",
                stderr=f"{remote}: no such file",
            ) from None
        with open(local, "wb") as f:
            f.write(data)

    def start_daemon(
        self,
        cmd: str,
        *,
        pidfile: str,
        logfile: str,
        env: dict[str, str] | None = None,
        chdir: str | None = None,
    ) -> int:
        pid = next(self._pids)
        self.daemons[pidfile] = (pid, cmd)
        self.files[pidfile] = f"{pid}\n".encode()
        return pid

    def signal_daemon(self, pidfile: str, sig: str = "TERM") -> bool:
        if pidfile not in self.daemons:
            return False
        if sig in ("KILL", "TERM", "INT"):
            del self.daemons[pidfile]
        return True

    def stop_daemon(self, pidfile: str, *, timeout: float = 10.0) -> None:
        self.daemons.pop(pidfile, None)
        self.files.pop(pidfile, None)

    def daemon_running(self, pidfile: str) -> bool:
        return pidfile in self.daemons

    def close(self) -> None:
        self.closed = True
