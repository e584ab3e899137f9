"""Undoing what the fault journal holds: each kind's registered cure, run through the host's Remote.

Apart from :mod:`nemesis.journal` because the cures belong to the fault modules (a
partition's chain, a clock's offset file, a frozen cgroup: ``JournalKind.undo``, found
through :mod:`nemesis.registry`) while every fault module writes to the journal: one
direction of imports each way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from nemesis import registry
from nemesis.base import on_nodes
from nemesis.journal import Entry, HostJournal, connected

if TYPE_CHECKING:
    from harness.core.remote import Remote

__all__ = ["undo", "replay"]

log = logging.getLogger(__name__)


def undo(remote: Remote | None, entry: Entry) -> None:
    """Undo one entry on its host; raises if the host could not be made healthy.

    ``remote`` may be None only for kinds undone on this machine (``local``, e.g. a
    frozen cgroup); an entry of a kind no fault registers is an error naming its file.
    """
    kind = registry.journal_kind(entry.kind)
    if kind is None:
        known = ", ".join(registry.journal_kinds())
        raise ValueError(f"unknown journal kind {entry.kind!r} in {entry.path}; known: {known}")
    kind.undo(remote if kind.local else connected(remote, entry), entry)


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

    js = {j.host.name: j for j in journals}
    for name, r in on_nodes(js, lambda n: one(js[n])).items():
        if isinstance(r, BaseException):
            problems[name] = [f"replay failed: {r}"]
        elif r:
            problems[name] = r
    return problems
