"""Node events: what a DB's own logs say about roles, terms, votes and truncations.

The history shows what clients saw and the sampler shows a node's status a few times a
second; an election that lasts 30 ms falls between two samples. A DB whose nodes log
their role changes, votes and truncations can hand them to the harness after the run
(the node logs are fetched in cleanup, ``store/<run>/nodes/<node>/``) through the
optional capability :class:`ReportsEvents`, so the coverage report
(:mod:`checker.situations`) sees windows the samples miss. A DB without it is not
wrong: the situations that need events are then reported as not observable, never as
not reached.

Times: a node stamps its lines with its own wall clock, which a ``clock`` fault moves;
the DB reports that stamp (``wall_s``) and the harness maps it onto the history's clock
(``time``), correcting the periods it shifted itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["EVENT_KINDS", "INVARIANTS", "NodeEvent", "ReportsEvents", "event_invariants"]

EVENT_KINDS = (
    "start", "role", "vote", "truncate", "candidacy", "vote-refused", "read-refused", "safety",
    "commit", "elected",
)  # fmt: skip
"""What an event can be:

- ``start``: the node's process started (a restart: in-memory state is gone);
- ``role``: the node's (term, role, leader) changed; ``role`` is ``leader``,
  ``follower`` or ``candidate`` (a node that became a candidate in ``term``);
- ``vote``: the node granted its vote in ``term`` to ``candidate`` (itself included:
  a candidate votes for itself when it asks for votes, so every candidacy shows);
- ``truncate``: the node removed entries from ``index`` on (its log diverged from the
  leader's and was cut back), in ``term``; ``removed`` the terms of what it cut, as
  ``(term, first, last)`` runs, when the node says;
- ``candidacy``: the node asked for votes in ``term`` (once per term);
- ``vote-refused``: the node refused its vote in ``term`` to ``candidate``, ``why`` the
  voter's rule (e.g. it had already voted in that term);
- ``read-refused``: the node refused a client read, ``why`` how far it got (``not-leader``,
  or a leader whose read-index confirmation failed: ``confirm-failed``);
- ``safety``: the node's own check of an invariant failed (the reference node's
  ``SAFETY`` lines), ``why`` the check's name: the node says it is wrong;
- ``commit``: the node's commit index became ``index``, the entry there of term
  ``entry_term``, while it was ``role`` in ``term``; a follower says how far its log was
  known to match its leader's (``match``);
- ``elected``: the node became leader of ``term`` with a log ending at ``index``, of term
  ``entry_term``, before it wrote anything of its own term.
"""

INVARIANTS = (
    "one-vote-per-term", "one-leader-per-term", "leader-completeness", "follower-commit-bound"
)  # fmt: skip
"""What a DB may promise of its events (:attr:`ReportsEvents.event_invariants`), each
judged after the run by ``checker/node_events.py``:

- ``one-vote-per-term``: a member grants its vote to at most one candidate per term, its
  own candidacy included, across restarts (Raft's persisted ``votedFor``);
- ``one-leader-per-term``: at most one member is leader in a term (Raft's election
  safety), seen in the nodes' own role events, not only in the 10 Hz samples;
- ``leader-completeness``: a leader of term T holds every entry a leader committed in a
  term before T (Raft's leader completeness), from the ``commit``, ``elected`` and
  ``truncate`` events: a new leader's log too short or too old for an entry committed
  earlier, or a follower cutting away, in a term at or after the one it was committed
  in, a committed entry its leader is not known to hold (a leader may have a follower
  cut entries it holds and re-send them: checker/node_events.py);
- ``follower-commit-bound``: a follower never takes a commit index beyond the prefix of
  its log it knows to match its leader's (``commit`` events with ``match``).

A ``safety`` event is an anomaly for any DB that reports it.
"""


@dataclass(frozen=True)
class NodeEvent:
    """One event on one node. ``time`` is the history's clock (ns), set by the harness."""

    node: str
    kind: str
    wall_s: float | None = None
    term: int | None = None
    role: str | None = None
    leader: str | None = None
    candidate: str | None = None
    index: int | None = None
    time: int | None = None
    why: str | None = None
    mono_s: float | None = None
    """The node's ``CLOCK_MONOTONIC`` stamp, when it logs one: exact on the history's
    clock when the node shares the harness's kernel (``boot``), whatever its wall clock."""
    boot: str | None = None
    """On ``start`` events: the node's kernel boot id, which says whether ``mono_s`` is
    the harness's clock too."""
    member: str | None = None
    """The cluster member that wrote it, when the log says (a host re-added wiped runs a
    new member, whose vote in a term is its own, not its predecessor's)."""
    entry_term: int | None = None
    """``commit``/``elected``: the term of the entry at ``index``."""
    match: int | None = None
    """``commit`` on a follower: the last index its log is known to share with its leader's."""
    removed: tuple[tuple[int, int, int], ...] = ()
    """``truncate``: what was cut, as ``(term, first index, last index)`` runs."""

    def at(self, time_ns: int | None) -> NodeEvent:
        """This event placed on the history's clock."""
        return replace(self, time=time_ns)


@runtime_checkable
class ReportsEvents(Protocol):
    """A DB whose nodes' logs say when roles, terms and votes changed.

    ``event_kinds`` names the kinds of :data:`EVENT_KINDS` this DB's logs carry (a
    situation that needs another kind is then "not observable with this DB");
    ``node_events`` reads the log files fetched from ``node`` after the run and yields
    the events in the order the node wrote them (the harness relies on that order to
    undo clock faults), skipping, never raising on, lines it does not understand.
    """

    def event_kinds(self) -> frozenset[str]: ...

    def node_events(self, node: str, files: Sequence[Path]) -> Iterable[NodeEvent]: ...


def event_invariants(db: object) -> frozenset[str]:
    """The invariants of :data:`INVARIANTS` a DB declares its events keep (class attribute
    ``event_invariants``); none unless declared, so no DB is judged by another's rules."""
    declared = frozenset(getattr(db, "event_invariants", ()) or ())
    unknown = declared - set(INVARIANTS)
    if unknown:
        raise ValueError(
            f"{type(db).__name__}.event_invariants: unknown {sorted(unknown)}; known {INVARIANTS}"
        )
    return declared
