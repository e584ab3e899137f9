"""The fault journal: every fault in force, on disk, with its cure.

A harness killed with SIGKILL runs no ``finally``: the partition rules, clock
offsets, stopped processes and frozen hosts it had applied stay in force, and
so does the cluster it had started. So every fault is written down *before* it
is applied (one small JSON file per fault, fsynced, then renamed into place and
the directory fsynced) and the file is removed only once the fault is healed.
Whatever a dead harness leaves is therefore either healed or in the journal,
and any later command (``run``, ``heal``, ``lab status``, ``lab down``) can
read the journal and undo each entry through the same :class:`Remote` the
nemeses use. Undoing is idempotent, so an entry written for a fault that was
never applied (the harness died between the two) is harmless.

Layout (see docs/crash-cleanup.md)::

    <journal root>/<host name>/<kind>.<key digest>.json

The root is ``<lab state dir>/journal`` for a namespace lab host, else
``$SPLITBRAIN_JOURNAL_DIR`` or ``~/.splitbrain/journal``, then one directory per
inventory identity (``docker-<lab>`` for a docker lab, ``ssh-<address>_<port>``
for any other host), so the same host is found whatever inventory or subset of
nodes a later command names.

The nemeses only call :func:`note` and :func:`clear`; both do nothing unless the
runner attached a journal to the context (``ctx.state["journal"]``), so pure
unit tests with fake contexts write nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.control.base import Host, Remote
    from harness.test import RunContext

__all__ = ["Entry", "HostJournal", "KINDS", "journal_dir", "attach", "note", "clear",
           "undo", "replay", "db_pidfiles"]

log = logging.getLogger(__name__)

VERSION = 1
KINDS = ("freeze", "iptables-chain", "netem", "daemon", "faketime", "real-clock", "sigstop",
         "db-node")
"""Entry kinds, in the order a replay undoes them: a frozen host first (nothing else can
reach it), then the network (so restarted processes see their peers), clocks, stopped
processes, and last the cluster itself (stopped and wiped)."""


@dataclass
class Entry:
    """One fault in force (or about to be) on one host, and how to undo it."""

    host: str
    kind: str
    key: str
    undo: dict[str, Any]
    what: str = ""
    written_at: float = 0.0
    writer_pid: int = 0
    run: str | None = None
    path: Path | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "host": self.host, "kind": self.kind, "key": self.key,
                "undo": self.undo, "what": self.what, "written_at": self.written_at,
                "writer_pid": self.writer_pid, "run": self.run}

    def describe(self) -> str:
        return f"{self.kind} {self.key}" + (f" ({self.what})" if self.what else "")


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80] or "_"


def journal_dir(host: Host) -> Path:
    """Where ``host``'s entries live (see the module docstring for the rule)."""
    extras = host.extras or {}
    state_dir, lab = extras.get("state_dir"), extras.get("lab")
    if state_dir and lab:
        return Path(str(state_dir)).parent / "journal" / _safe(host.name)
    root = Path(os.environ.get("SPLITBRAIN_JOURNAL_DIR")
                or Path.home() / ".splitbrain" / "journal")
    if lab:
        inv = f"{_safe(str(extras.get('driver') or 'lab'))}-{_safe(str(lab))}"
        return root / inv / _safe(host.name)
    return root / _safe(f"ssh-{host.address}_{host.port}") / _safe(host.name)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class HostJournal:
    """The entries of one host: write-ahead records of faults, removed once healed."""

    def __init__(self, host: Host, directory: Path | None = None) -> None:
        self.host = host
        self.dir = directory if directory is not None else journal_dir(host)

    def __repr__(self) -> str:
        return f"HostJournal({self.host.name!r}, {str(self.dir)!r})"

    def _file(self, kind: str, key: str) -> Path:
        digest = hashlib.sha1(key.encode()).hexdigest()[:12]
        return self.dir / f"{kind}.{digest}.json"

    def record(self, kind: str, key: str, undo: Mapping[str, Any], what: str = "",
               run: str | None = None) -> Entry:
        """Write (or overwrite) the entry durably; returns only once it is on disk."""
        if kind not in KINDS:
            raise ValueError(f"unknown journal kind {kind!r}; known: {', '.join(KINDS)}")
        entry = Entry(host=self.host.name, kind=kind, key=key, undo=dict(undo), what=what,
                      written_at=time.time(), writer_pid=os.getpid(), run=run)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._file(kind, key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(entry)}.tmp")
        data = json.dumps(entry.to_json(), sort_keys=True).encode() + b"\n"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _fsync_dir(self.dir)
        entry.path = path
        return entry

    def clear(self, kind: str, key: str) -> None:
        """Forget an entry (its fault is healed); absent entries are fine."""
        path = self._file(kind, key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        _fsync_dir(self.dir)

    def entries(self) -> list[Entry]:
        """Every entry, in undo order (kinds as in :data:`KINDS`, then oldest first).

        An unreadable file (it cannot be half-written: entries are renamed into
        place) is logged and skipped, never silently deleted.
        """
        if not self.dir.is_dir():
            return []
        for tmp in self.dir.glob(".*.tmp"):  # a writer killed before its rename: never applied
            with contextlib.suppress(OSError):
                if time.time() - tmp.stat().st_mtime > 60:
                    tmp.unlink()
        out = []
        for p in sorted(self.dir.glob("*.json")):
            try:
                d = json.loads(p.read_text())
                out.append(Entry(host=str(d["host"]), kind=str(d["kind"]), key=str(d["key"]),
                                 undo=dict(d.get("undo") or {}), what=str(d.get("what", "")),
                                 written_at=float(d.get("written_at", 0.0)),
                                 writer_pid=int(d.get("writer_pid", 0)), run=d.get("run"),
                                 path=p))
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.error("%s: unreadable journal entry %s: %s", self.host.name, p, e)
        rank = {k: i for i, k in enumerate(KINDS)}
        out.sort(key=lambda e: (rank.get(e.kind, len(KINDS)), e.written_at))
        return out

    def forget(self, entry: Entry) -> None:
        if entry.path is not None:
            with contextlib.suppress(FileNotFoundError):
                entry.path.unlink()
            with contextlib.suppress(OSError):
                _fsync_dir(entry.path.parent)


# --- the nemeses' side ---------------------------------------------------------------


def attach(ctx: RunContext) -> dict[str, HostJournal]:
    """Give the run a journal per node (``ctx.state["journal"]``); nemeses then write to it."""
    journals = {n: HostJournal(ctx.hosts[n]) for n in ctx.nodes if n in ctx.hosts}
    ctx.state["journal"] = journals
    return journals


def _journal(ctx: RunContext, node: str) -> HostJournal | None:
    state = getattr(ctx, "state", None)
    journals = state.get("journal") if isinstance(state, dict) else None
    return journals.get(node) if isinstance(journals, dict) else None


def note(ctx: RunContext, node: str, kind: str, key: str, undo: Mapping[str, Any],
         what: str = "") -> None:
    """Journal a fault on ``node`` before applying it (no-op without a journal)."""
    j = _journal(ctx, node)
    if j is not None:
        j.record(kind, key, undo, what, run=getattr(ctx, "store_dir", None))


def clear(ctx: RunContext, node: str, kind: str, key: str) -> None:
    """Forget a healed fault on ``node`` (no-op without a journal)."""
    j = _journal(ctx, node)
    if j is not None:
        j.clear(kind, key)


def db_pidfiles(ctx: RunContext, node: str) -> list[str]:
    """The pid files of the DB's processes on ``node``, for DBs that run by pid file."""
    paths = getattr(ctx.db, "_paths", None)
    if paths is None:
        return []
    try:
        p = paths(ctx, node)
    except Exception:  # noqa: BLE001 - a DB without this layout simply has none
        return []
    return [v for k, v in sorted(p.items()) if isinstance(v, str) and k in ("pid", "spid")]


# --- undoing -------------------------------------------------------------------------


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
    """
    u = entry.undo
    kind = entry.kind
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

        remote.run(remove_chain_script(str(u.get("iptables", "iptables -w 10")), str(u["chain"])),
                   sudo=sudo, timeout=30)
    elif kind == "netem":
        remote.run(f"tc qdisc del dev {shlex.quote(str(u['iface']))} root 2>/dev/null; true",
                   sudo=sudo, timeout=30)
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
    elif kind == "db-node":
        for pf in u.get("pidfiles", []):
            _stop_pidfile(remote, str(pf))
        d, root = str(u["dir"]), str(u.get("root", ""))
        parents = []
        p = d
        while root and len(p.rsplit("/", 1)[0]) > len(root):
            p = p.rsplit("/", 1)[0]
            parents.append(f"rmdir {shlex.quote(p)} 2>/dev/null")
        remote.run(f"rm -rf {shlex.quote(d)}; " + "; ".join([*parents, "true"]), sudo=sudo,
                   timeout=60)
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
