"""Undoing what the fault journal holds: each kind's cure, run through the host's Remote.

Apart from :mod:`nemesis.journal` because the cures belong to the fault modules
(a partition's chain, a clock's offset file, a frozen cgroup) while every
fault module writes to the journal: one direction of imports each way.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from nemesis.journal import Entry, HostJournal

if TYPE_CHECKING:
    from harness.core.remote import Remote

__all__ = ["undo", "replay"]

log = logging.getLogger(__name__)


def _sudo(remote: Remote) -> bool:
    return remote.host.user != "root"


def _stop_pidfile(remote: Remote, pidfile: str) -> None:
    """CONT (a stopped process never handles TERM), then TERM, then KILL, by pid file."""
    kw = {"sudo": True} if _sudo(remote) else {}
    remote.signal_daemon(pidfile, "CONT", **kw)
    remote.stop_daemon(pidfile, timeout=5.0, **kw)


def undo(remote: Remote | None, entry: Entry) -> None:
    """Undo one entry on its host; raises if the host could not be made healthy.

    ``remote`` may be None only for entries undone on this machine (``freeze``).
    A guest's power and pause are undone through ``remote.host.machine``.
    """
    u = entry.undo
    kind = entry.kind
    if kind in ("power", "vm-pause"):
        from nemesis.power import restore

        machine = remote.host.machine if remote is not None else None
        if machine is None:
            raise ValueError(
                f"undoing {entry.describe()} needs the VM lab's hold on guest "
                f"{u.get('machine', entry.host)} (run with the same --lab, or `splitbrain lab down`)"
            )
        restore(remote, machine)
        return
    if kind == "freeze":
        from nemesis.process import _freeze_file

        cg = str(u["cgroup"])
        if os.path.isdir(cg):
            path, _on, off = _freeze_file(cg)
            with open(path, "w") as fh:
                fh.write(off)
        return
    if remote is None:
        raise ValueError(f"undoing {entry.describe()} needs a connection to {entry.host}")
    sudo = _sudo(remote)
    if kind == "iptables-chain":
        from nemesis.net import remove_chain_script

        remote.run(
            remove_chain_script(str(u.get("iptables", "iptables -w 10")), str(u["chain"])),
            sudo=sudo,
            timeout=30,
        )
    elif kind == "netem":
        remote.run(
            f"tc qdisc del dev {shlex.quote(str(u['iface']))} root 2>/dev/null; true",
            sudo=sudo,
            timeout=30,
        )
    elif kind == "daemon":
        _stop_pidfile(remote, str(u["pidfile"]))
    elif kind == "faketime":
        from nemesis.clock import FaketimeClock

        FaketimeClock(remote, str(u["file"])).reset()
    elif kind == "real-clock":
        from nemesis.clock import RealClock

        clock = RealClock(remote)
        if u.get("strobe_pidfile"):
            clock.pidfile = str(u["strobe_pidfile"])
        clock.reset()
    elif kind == "sigstop":
        kw = {"sudo": True} if sudo else {}
        for pf in u.get("pidfiles", []):
            remote.signal_daemon(str(pf), "CONT", **kw)
    elif kind == "upgrade":
        # a node caught between modes: its process stops here, and the run's db-node
        # entry wipes it with the rest of the cluster (a test's cluster never outlives it)
        for pf in u.get("pidfiles", []):
            _stop_pidfile(remote, str(pf))
    elif kind == "db-node":
        for pf in u.get("pidfiles", []):
            _stop_pidfile(remote, str(pf))
        d, root = str(u["dir"]), str(u.get("root", ""))
        parents = []
        p = d
        while root and len(p.rsplit("/", 1)[0]) > len(root):
            p = p.rsplit("/", 1)[0]
            parents.append(f"rmdir {shlex.quote(p)} 2>/dev/null")
        remote.run(
            f"rm -rf {shlex.quote(d)}; " + "; ".join([*parents, "true"]), sudo=sudo, timeout=60
        )
    else:
        raise ValueError(f"unknown journal kind {kind!r} in {entry.path}")


def replay(journals: Iterable[HostJournal], remotes: Mapping[str, Remote]) -> dict[str, list[str]]:
    """Undo every entry of every host; healed entries are removed.

    Returns per host what could not be undone (host unreachable, command failed),
    those entries stay in the journal for the next attempt.
    """
    problems: dict[str, list[str]] = {}

    def one(j: HostJournal) -> list[str]:
        bad = []
        for e in j.entries():
            try:
                undo(remotes.get(j.host.name), e)
            except Exception as ex:  # noqa: BLE001 - reported per entry
                bad.append(f"cannot undo {e.describe()}: {ex}")
                log.error("%s: cannot undo %s: %s", j.host.name, e.describe(), ex)
                continue
            log.info("%s: undid %s left by pid %d", j.host.name, e.describe(), e.writer_pid)
            j.forget(e)
        return bad

    from nemesis.base import on_nodes

    js = {j.host.name: j for j in journals}
    for name, r in on_nodes(js, lambda n: one(js[n])).items():
        if isinstance(r, BaseException):
            problems[name] = [f"replay failed: {r}"]
        elif r:
            problems[name] = r
    return problems
