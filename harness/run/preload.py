"""Running a DB's processes without the lab's libfaketime, when the DB says so.

The namespace lab preloads libfaketime into every SSH session (sshd's ``SetEnv
LD_PRELOAD=...``, harness/inventory/lab/hosts.py), so that clock faults reach the nodes.
Some processes must not run under it (a JVM's threads hang), and a DB declares that with
``runs_under_faketime = False`` (:func:`harness.core.db.runs_under_faketime`). The runner
then hands everyone in the run (the DB, the nemesis, the cleanup) remotes whose commands
run with the preload removed, instead of each plugin prefixing ``env -u LD_PRELOAD``.
"""

from __future__ import annotations

from typing import Any

from harness.core.remote import CommandResult, Remote

__all__ = ["WithoutPreload", "without_preload", "needs_unpreload"]


def needs_unpreload(remote: Remote) -> bool:
    """Whether ``remote``'s host preloads libfaketime (a lab host with a clock file)."""
    return bool(remote.host.extras.get("faketime_file"))


class WithoutPreload:
    """A :class:`Remote` whose commands and daemons run with ``LD_PRELOAD`` unset.

    ``run`` starts its shell command with ``unset LD_PRELOAD;`` (the commands it starts
    inherit no preload); ``start_daemon`` execs the daemon through ``env -u LD_PRELOAD``,
    so the pid in the pid file is still the daemon's own. Everything else is the wrapped
    remote's.
    """

    def __init__(self, inner: Remote) -> None:
        self.inner = inner
        self.host = inner.host

    def run(self, cmd: str, **kw: Any) -> CommandResult:
        return self.inner.run(f"unset LD_PRELOAD; {cmd}", **kw)

    def start_daemon(self, cmd: str, **kw: Any) -> int:
        return self.inner.start_daemon(f"env -u LD_PRELOAD {cmd}", **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def without_preload(remotes: dict[str, Remote]) -> dict[str, Remote]:
    """``remotes``, those whose host preloads libfaketime wrapped in :class:`WithoutPreload`."""
    return {n: (WithoutPreload(r) if needs_unpreload(r) else r) for n, r in remotes.items()}
