"""What the harness needs from a host, whatever reaches it (docs/architecture.md §2).

Every inventory (lab, Vagrant, Docker, nodes file) ends as a list of
:class:`Host`; :func:`harness.control.connect` turns one into a :class:`Remote`.
Nemeses, the DB lifecycle and clients above this layer only see ``Remote``, so a
test of their logic can pass an in-memory fake while real runs use paramiko.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.core.machine import Machine

__all__ = ["Host", "CommandResult", "Remote", "UploadsTrees"]


@dataclass(frozen=True)
class Host:
    """SSH coordinates of one host, plus facts its inventory knows about it.

    ``extras`` carries inventory-specific facts that faults need, for example a
    lab host's ``faketime_file`` (per-host clock offset) or ``cgroup`` (freezer).
    ``known_hosts`` is the file used to verify the host key; ``verify_host_key``
    False is the explicit opt-out. ``machine`` is set only by an inventory that
    owns the host's hypervisor (the VM lab): power faults need it.
    """

    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_path: str | None = None
    known_hosts: str | None = None
    verify_host_key: bool = True
    extras: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    machine: Machine | None = field(default=None, hash=False, compare=False)
    emulated_cpu: bool = False
    """The host's CPU is emulated in software (a VM guest under qemu's TCG): everything
    on it runs many times slower, so SSH, elections and recovery need more patience."""


@dataclass(frozen=True)
class CommandResult:
    host: str
    cmd: str
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


@runtime_checkable
class Remote(Protocol):
    """One host's control channel. Methods block; callers use threads for parallelism.

    ``run`` raises :class:`harness.core.errors.RemoteCommandError` (host, command,
    exit status, stderr tail) on a non-zero exit when ``check`` is true, and on
    timeout always. ``stdin`` is the command's whole input; without it the command
    reads an empty input (``/dev/null``), never a stream left open.
    """

    host: Host

    def run(
        self,
        cmd: str,
        *,
        sudo: bool = False,
        timeout: float | None = 60.0,
        env: dict[str, str] | None = None,
        check: bool = True,
        stdin: str | bytes | None = None,
    ) -> CommandResult: ...

    def upload(self, local: str, remote: str) -> None: ...

    def download(self, remote: str, local: str) -> None: ...

    def start_daemon(
        self,
        cmd: str,
        *,
        pidfile: str,
        logfile: str,
        env: dict[str, str] | None = None,
        chdir: str | None = None,
    ) -> int:
        """Start ``cmd`` detached, write its pid to ``pidfile``; return the pid."""
        ...

    def signal_daemon(self, pidfile: str, sig: str = "TERM") -> bool:
        """Send a signal by pid file; False if no such process runs."""
        ...

    def stop_daemon(self, pidfile: str, *, timeout: float = 10.0) -> None:
        """TERM, wait up to ``timeout``, then KILL; remove the pid file."""
        ...

    def daemon_running(self, pidfile: str) -> bool: ...

    def close(self) -> None: ...


@runtime_checkable
class UploadsTrees(Protocol):
    """A Remote that copies a whole directory in one go (SSH: one tar stream).

    Without it, a DB ships a tarball through ``upload`` and unpacks it with ``run``.
    """

    def upload_tree(self, local_dir: str, remote_dir: str) -> None: ...
