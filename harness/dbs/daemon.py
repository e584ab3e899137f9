"""What every DB that runs one daemon per node by pid file shares.

The built-in DBs differ in how they install and configure a node, not in how a node's
process is stopped, killed, paused, awaited at start or found on disk. Keeping that here
means a fix to, say, waiting for a killed process applies to all of them: the class for
the node's lifecycle, and the host-side helpers (:func:`stop_process`,
:func:`ensure_package`, :func:`durable_mkdir`, :func:`raise_if_exited`,
:func:`await_status`) that the DB modules call.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError, RemoteError

if TYPE_CHECKING:
    from harness.core.remote import Remote
    from harness.core.spec import RunContext

__all__ = [
    "NO_COND_FIX",
    "PidfileDaemonDB",
    "absolute_root",
    "await_status",
    "durable_mkdir",
    "ensure_package",
    "raise_if_exited",
    "stop_process",
]

log = logging.getLogger(__name__)

NO_COND_FIX = "FAKETIME_FORCE_MONOTONIC_FIX=0"
"""Set in a node's environment so libfaketime (0.9.10; the lab preloads it for clock faults)
leaves its default "monotonic fix" of ``pthread_cond_timedwait`` off. Off, wall-clock reads
are still faked (the clock faults unchanged; ``CLOCK_MONOTONIC`` is not, the lab sets
FAKETIME_DONT_FAKE_MONOTONIC=1); without the preload the variable is ignored. Measured on
the lab with it on: CPython's GIL hand-offs between the reference node's loop and its fsync
thread cost 5-15 ms instead of 0.2 ms (the node capped at ~25 ops/s); DLedger's JVM hung at
start before logging a line (15 s; under 0.1 s to a leader with the variable); a JRaft
server took 11.6 s to start on an idle host instead of 0.9 s, and five starting at once
over 40 s, their first elections timing out (docs/dledger-java.md, docs/jraft.md). RocketMQ's
JVMs are started with it for the same reason."""


def absolute_root(root: str) -> str:
    """``root`` without its trailing slash; a ConfigError on ``root`` when it is relative."""
    if not root.startswith("/"):
        raise ConfigError(f"db root must be an absolute path, got {root!r}", field="root")
    return root.rstrip("/")


def ensure_package(remote: Remote, binary: str, packages: str) -> None:
    """Make ``binary`` present on the host, installing ``packages`` with apt if we may."""
    if remote.run(f"command -v {shlex.quote(binary)}", check=False, timeout=30).ok:
        return
    if remote.run('test "$(id -u)" = 0', check=False, timeout=30).ok:
        log.info("%s: installing %s", remote.host.name, packages)
        res = remote.run(
            f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
            f"--no-install-recommends {packages}",
            check=False,
            timeout=600,
        )
        if res.ok and remote.run(f"command -v {shlex.quote(binary)}", check=False).ok:
            return
        raise RemoteError(
            f"`apt-get install {packages}` did not provide {binary}: {res.stderr.strip()[-300:]}",
            host=remote.host.name,
        )
    raise RemoteError(
        f"{binary} is not installed and we are not root to install {packages}",
        host=remote.host.name,
    )


def stop_process(remote: Remote, pidfile: str, what: str, *, grace: float = 20.0) -> None:
    """TERM then KILL by pid file, tolerating a slow death (a big fsync or unmap on
    a loaded machine can keep a killed process around for seconds)."""
    remote.signal_daemon(pidfile, "CONT")  # a stopped process never handles TERM
    try:
        remote.stop_daemon(pidfile, timeout=5)
    except RemoteError as e:
        log.info("%s: %s slow to stop (%s); waiting", remote.host.name, what, e)
    deadline = time.monotonic() + grace
    while remote.daemon_running(pidfile):
        if time.monotonic() > deadline:
            raise RemoteError(
                f"{what} ({pidfile}) survived SIGKILL for {grace:g} s", host=remote.host.name
            )
        time.sleep(0.2)
    remote.run(f"rm -f {shlex.quote(pidfile)}", check=False)


_MKDIR_PY = (
    "import os, sys\n"
    "d = sys.argv[1]\n"
    "os.makedirs(d, exist_ok=True)\n"
    "for p in (d, os.path.dirname(d)):\n"
    "    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)\n"
    "    os.fsync(fd)\n"
    "    os.close(fd)\n"
)


def durable_mkdir(path: str) -> str:
    """A shell command creating ``path`` and fsyncing it and its parent.

    The data directory is the operator's to create, and an operator's mkdir must survive a
    power cut: under the lazy fs of the disk faults a directory entry never fsynced is lost
    with the power, and the node would come back with no log at all. What the system
    creates inside it (JRaft's ``log/``, ``meta/``) is left to the system.
    """
    return f"python3 -c {shlex.quote(_MKDIR_PY)} {shlex.quote(path)}"


def raise_if_exited(
    remote: Remote, pidfile: str, logfile: str, what: str, *, lines: int = 8
) -> None:
    """While a node starts: a RemoteError ``<what> exited during startup: <the last
    lines of logfile>`` when the daemon of ``pidfile`` is gone, so a crash at start is
    reported at once with its reason rather than as a timeout later."""
    if remote.daemon_running(pidfile):
        return
    tail = remote.run(f"tail -n {lines} {shlex.quote(logfile)}", check=False).stdout.strip()
    raise RemoteError(f"{what} exited during startup: {tail or 'no output'}", host=remote.host.name)


def await_status(
    remote: Remote,
    pidfile: str,
    logfile: str,
    *,
    what: str,
    ask: Callable[[], dict[str, Any] | None],
    done: Callable[[dict[str, Any]], bool],
    within: float,
    lines: int = 8,
) -> tuple[bool, dict[str, Any] | None]:
    """Ask a starting node ``ask()`` every 0.2 s until an answer is ``done``: ``(True, it)``;
    ``(False, the last answer)`` after ``within`` s (the caller says what never happened).
    No answer while the process is gone is :func:`raise_if_exited`'s error."""
    deadline = time.monotonic() + within
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        st = ask()
        if st is not None:
            last = st
            if done(st):
                return True, st
        else:
            raise_if_exited(remote, pidfile, logfile, what, lines=lines)
        time.sleep(0.2)
    return False, last


class PidfileDaemonDB:
    """Killable and Pausable through the pid file named by ``_paths(ctx, node)["pid"]``.

    Subclasses set ``self.root`` (an absolute directory) and define ``_paths``.
    """

    root: str

    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        raise NotImplementedError

    def pidfiles(self, ctx: RunContext, node: str) -> list[str]:
        return [v for k, v in sorted(self._paths(ctx, node).items()) if k in ("pid", "spid")]

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        raise NotImplementedError

    def node_dir(self, ctx: RunContext, node: str) -> str:
        from harness.core.layout import safe_name

        # Labs share this machine's disk: two labs running the same test must not
        # share directories, so a lab host gets its lab's name as an extra level.
        lab = ctx.hosts[node].extras.get("lab")
        base = f"{self.root}/{safe_name(str(lab))}" if lab else self.root
        return f"{base}/{safe_name(ctx.spec.name)}/{safe_name(node)}"

    def remove_node_dir(self, ctx: RunContext, node: str) -> None:
        """Wipe the node's directory, then its parents up to ``root`` once empty (the
        test's and the lab's levels; another node of the same host may still use them)."""
        d = self.node_dir(ctx, node)
        parents = []
        up = d
        while True:
            up = up.rsplit("/", 1)[0]
            if len(up) <= len(self.root.rstrip("/")):
                break
            parents.append(f"rmdir {shlex.quote(up)} 2>/dev/null")
        ctx.remotes[node].run(f"rm -rf {shlex.quote(d)}; " + "; ".join([*parents, "true"]))

    def should_start(self, ctx: RunContext, node: str, removed: Collection[str] = ()) -> bool:
        """Whether ``start`` must launch the node's process: not while it runs, and not for
        a member the cluster removed (``removed``): a kill's heal must not bring it back
        with its old identity and log, a stale member serving reads; the membership heal
        adds it back wiped."""
        if node in removed:
            log.info("%s: removed from the cluster; not restarted", node)
            return False
        return not ctx.remotes[node].daemon_running(self._paths(ctx, node)["pid"])

    def stop_leftover(
        self, ctx: RunContext, node: str, leftover: str, what: str, key: str = "pid"
    ) -> None:
        """At setup: the process of pid file ``key`` that an earlier run left running (a
        ``--leave-db-running`` run of the same test, ``leftover`` in the log line: "a
        Kafka node"), stopped by :func:`stop_process` as ``what``."""
        remote, pidfile = ctx.remotes[node], self._paths(ctx, node)[key]
        if remote.daemon_running(pidfile):
            log.info("%s: stopping %s left running by an earlier run", node, leftover)
            stop_process(remote, pidfile, what)

    def stop_and_remove(
        self,
        ctx: RunContext,
        node: str,
        name: str,
        processes: Mapping[str, str],
        *,
        leave: bool = False,
    ) -> None:
        """A teardown: each of ``processes`` (a ``_paths`` key of a pid file -> what it
        runs, in that order) stopped by :func:`stop_process`, then the node's directory
        removed; with ``leave`` (``--leave-db-running``) only a log line saying where
        ``name`` still runs."""
        p = self._paths(ctx, node)
        if leave:
            log.info("%s: leaving %s running in %s", node, name, p["dir"])
            return
        for key, what in processes.items():
            stop_process(ctx.remotes[node], p[key], what)
        self.remove_node_dir(ctx, node)

    def kill(self, ctx: RunContext, node: str) -> None:
        """SIGKILL, then wait (up to 5 s) until the process is really gone."""
        remote = ctx.remotes[node]
        pid = self._paths(ctx, node)["pid"]
        remote.signal_daemon(pid, "KILL")
        deadline = time.monotonic() + 5
        while remote.daemon_running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def pause(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(self._paths(ctx, node)["pid"], "STOP")

    def resume(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(self._paths(ctx, node)["pid"], "CONT")
