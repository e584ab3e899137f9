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
runner set a journal on the context (``ctx.journal``, from :func:`run_journal`), so
pure unit tests with contexts of their own write nothing. The entry kinds, their undo
and their undo order belong to the faults that write them (``Fault.journal``, gathered
by :mod:`nemesis.registry`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.db import HasFootprint

if TYPE_CHECKING:
    from harness.core.fault import JournalRecord
    from harness.core.remote import Host, Remote
    from harness.core.spec import RunContext

__all__ = [
    "Entry",
    "HostJournal",
    "RunJournal",
    "journal_dir",
    "run_journal",
    "note",
    "clear",
    "db_pidfiles",
    "connected",
]

log = logging.getLogger(__name__)

VERSION = 1


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
        return {
            "version": VERSION,
            "host": self.host,
            "kind": self.kind,
            "key": self.key,
            "undo": self.undo,
            "what": self.what,
            "written_at": self.written_at,
            "writer_pid": self.writer_pid,
            "run": self.run,
        }

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
    root = Path(os.environ.get("SPLITBRAIN_JOURNAL_DIR") or Path.home() / ".splitbrain" / "journal")
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

    def record(
        self, kind: str, key: str, undo: Mapping[str, Any], what: str = "", run: str | None = None
    ) -> Entry:
        """Write (or overwrite) the entry durably; returns only once it is on disk."""
        from nemesis import registry

        kinds = registry.journal_kinds()
        if kind not in kinds:
            raise ValueError(f"unknown journal kind {kind!r}; known: {', '.join(kinds)}")
        entry = Entry(
            host=self.host.name,
            kind=kind,
            key=key,
            undo=dict(undo),
            what=what,
            written_at=time.time(),
            writer_pid=os.getpid(),
            run=run,
        )
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
        """Every entry, in undo order (each kind's registered rank, then oldest first).

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
                out.append(
                    Entry(
                        host=str(d["host"]),
                        kind=str(d["kind"]),
                        key=str(d["key"]),
                        undo=dict(d.get("undo") or {}),
                        what=str(d.get("what", "")),
                        written_at=float(d.get("written_at", 0.0)),
                        writer_pid=int(d.get("writer_pid", 0)),
                        run=d.get("run"),
                        path=p,
                    )
                )
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.error("%s: unreadable journal entry %s: %s", self.host.name, p, e)
        from nemesis import registry

        kinds = registry.journal_kinds()
        last = max((k.rank for k in kinds.values()), default=0) + 1
        out.sort(key=lambda e: (kinds[e.kind].rank if e.kind in kinds else last, e.written_at))
        return out

    def forget(self, entry: Entry) -> None:
        if entry.path is not None:
            with contextlib.suppress(FileNotFoundError):
                entry.path.unlink()
            with contextlib.suppress(OSError):
                _fsync_dir(entry.path.parent)


# --- the nemeses' side ---------------------------------------------------------------


class RunJournal:
    """One run's :class:`~harness.core.nemesis.FaultJournal`: a host journal per node."""

    def __init__(self, hosts: Mapping[str, Host], run: str | None = None) -> None:
        self.hosts = {n: HostJournal(h) for n, h in hosts.items()}
        self.run = run

    def note(self, node: str, kind: str, key: str, undo: Mapping[str, Any], what: str = "") -> None:
        j = self.hosts.get(node)
        if j is not None:
            j.record(kind, key, undo, what, run=self.run)

    def clear(self, node: str, kind: str, key: str) -> None:
        j = self.hosts.get(node)
        if j is not None:
            j.clear(kind, key)


def run_journal(ctx: RunContext) -> RunJournal:
    """The run's journal, one host journal per node; the runner sets it as ``ctx.journal``."""
    return RunJournal({n: ctx.hosts[n] for n in ctx.nodes if n in ctx.hosts}, ctx.store_dir)


def note(
    ctx: RunContext, node: str, kind: str, key: str, undo: Mapping[str, Any], what: str = ""
) -> None:
    """Journal a fault on ``node`` before applying it (no-op without a journal)."""
    if ctx.journal is not None:
        ctx.journal.note(node, kind, key, undo, what)


def clear(ctx: RunContext, node: str, kind: str, key: str) -> None:
    """Forget a healed fault on ``node`` (no-op without a journal)."""
    if ctx.journal is not None:
        ctx.journal.clear(node, kind, key)


def db_pidfiles(ctx: RunContext, node: str) -> list[str]:
    """The pid files of the DB's processes on ``node`` (none for a DB with no footprint)."""
    return ctx.db.pidfiles(ctx, node) if isinstance(ctx.db, HasFootprint) else []


def connected(remote: Remote | None, entry: JournalRecord) -> Remote:
    """The connection an entry's undo runs through; None (its host could not be reached)
    is a ValueError naming the entry and the host, which the replay reports and keeps the
    entry for the next one. Every undo but a ``local`` kind's starts with this."""
    if remote is None:
        raise ValueError(f"undoing {entry.describe()} needs a connection to {entry.host}")
    return remote
