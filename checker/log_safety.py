"""Safety of the replicated log itself: DLedger invariants I1-I6 (dledger-protocol §12).

Elle's shape: one pure function per anomaly, each taking the whole history
(a sequence of :class:`~harness.core.history.Op`) and returning a list of small
example dicts. Every example carries ``"indexes"``: the sorted history ``index``
values of the ops that prove it, so a report can point at them. Each function
returns its examples sorted by ``indexes`` (lexicographically), so two engines
computing the same anomaly give byte-identical lists.

The Spark engine mirrors these semantics exactly; the docstrings are the
specification, the code the reference. Conventions shared by all functions:

* **History order** is the op's ``index`` field (ops are sorted by it first).
* **Pairing.** A client op's invocation is paired with the next record of the
  same ``process`` (:class:`harness.core.paired.PairedHistory`, built once per
  check); a malformed history raises :class:`~harness.core.errors.HistoryError`.
* **Samples** are the records with ``f == "sample"`` and ``type == "ok"``; no
  pairing is needed. The sampled host is the record's ``node``; its ``value`` is
  ``{role, term, leader, begin, end, committed, incarnation, member, config}``. The
  per-node checks key a sample by its **member**: ``member`` when it is a string,
  else the host (a host re-added wiped runs a new member, whose term and committed
  index start again), and examples name it as ``node``. ``config`` (``{voters,
  learners, index}``, by member id) is the configuration in force on it, read by the
  membership checks only. A sample whose field needed by a check is not an integer
  is ignored by that check (``incarnation`` may be anything hashable, including null).
* **Appends** are pairs with ``f == "append"``. An ``ok`` completion's value is
  ``{"payload", "index", "term"}`` (the payload falls back to the invocation's
  ``{"payload": p}``); ``fail`` = certainly not appended; ``info`` or no
  completion = unknown, never judged.
* **Log reads** are pairs with ``f == "read"``, ``key`` null, and an ``ok``
  completion whose value is a dict with ``"entries"``: ``[[index, term, payload],
  ...]`` and optionally ``"committed": c``. A read is named by the ``index`` of
  its **ok completion**. It is *final* when its invocation value is a dict with
  ``"final": true``; a final read whose ok value has an integer ``"end"`` (the
  node's ledger end) *reaches the end* when its highest entry index is at least
  ``end`` or it has no entries, and one without ``"end"`` always does. When no final
  read reaches its end, lost-ack judges only acks at or below the highest committed
  final observation.
* **Committed observations** of a read: its entries with ``index <= c``, or all
  its entries when ``committed`` is absent/null. An entry with a null payload is a
  NOOP: it counts for :func:`divergent_committed` but is ignored by the payload
  checks (:func:`lost_ack` only looks up acked payloads, :func:`failed_append_present`,
  :func:`duplicate_payload`, :func:`unproposed_committed`).
* **Value ordering.** Where an example lists ``[term, payload]`` values, they are
  sorted by ``(term, json.dumps(payload, sort_keys=True))``.

:func:`check_log_safety_columns` is the local engine's second implementation, over a
Parquet history's columns (``LOG_SAFETY.columnar``); these functions stay the reference
it is tested against (tests/checker/test_log_safety_fast.py). Like the Spark engine it
compares terms and payloads as canonical JSON text, where these functions compare Python
values: only values Python equates across JSON types (``1``, ``1.0`` and ``true``) differ.
:func:`unproposed_committed` compares canonical JSON text here too, so all three agree on it.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from checker.families import is_log
from harness.core.checker import ALL, CheckConfig, CheckerSpec, OpShape
from harness.core.op import Op
from harness.core.options import option
from harness.core.paired import PairedHistory

__all__ = [
    "ANOMALIES",
    "NOTES",
    "LOSS_WINDOW",
    "LOG_SAFETY",
    "HaOptions",
    "LogSafetyOptions",
    "committed_regress",
    "committed_regress_restart",
    "committed_beyond_end",
    "two_leaders_in_term",
    "term_regress",
    "divergent_committed",
    "lost_ack",
    "lost_ack_judgeable",
    "lost_ack_unjudged",
    "failed_append_present",
    "duplicate_payload",
    "unproposed_committed",
    "append_order",
    "leader_after_removal",
    "ack_after_removal",
    "check_log_safety",
    "check_log_safety_columns",
    "ha_of",
]


# --------------------------------------------------------------------------- helpers


def _is_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _freeze(x: Any) -> Any:
    """A hashable twin of a JSON value, so payloads can be dict/set keys."""
    if isinstance(x, list):
        return tuple(_freeze(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    return x


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"), default=str)


def _value_key(tp: Any) -> tuple[Any, str]:
    term, payload = tp
    return (term if _is_int(term) else -1, _canon(payload))


class _Prepared(list):
    """Sorted client ops that remember their pairs and parsed samples, appends and reads.

    :func:`check_log_safety` runs every anomaly function over one history;
    this spares each of them re-pairing it.
    """

    paired: PairedHistory
    samples: list[Any]
    acks: list[Any]  # the columnar path's ok appends for the membership checks (_acks)
    appends: list[Any]
    reads: list[Any]


def _prepare(ops: Sequence[Op]) -> _Prepared:
    paired = PairedHistory.of(ops)
    prep = _Prepared(paired)
    prep.paired = paired
    prep.samples = _samples(prep)
    prep.appends = _appends(prep)
    prep.reads = _log_reads(prep)
    return prep


def _sorted_ops(ops: Sequence[Op]) -> Sequence[Op]:
    if isinstance(ops, _Prepared):
        return ops
    if all(ops[i].index < ops[i + 1].index for i in range(len(ops) - 1)):
        return ops
    return sorted(ops, key=lambda o: o.index)


def _by_indexes(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(examples, key=lambda e: e["indexes"])


@dataclass(frozen=True, slots=True)
class _Sample:
    """An ok sample's fields the checks read; the integers are None when not integers."""

    index: int
    node: Any
    incarnation: Any  # hashable (frozen), for grouping
    inc: Any  # as recorded, for examples
    committed: int | None
    end: int | None
    term: int | None
    leader: bool
    # The member that answered (its ``member`` id, else the host) and the configuration
    # in force on it: voters and learners by member id, the config entry's log index
    # (-1: the startup list); None when the sample carries none.
    member: Any = None
    voters: frozenset[str] | None = None
    learners: frozenset[str] = frozenset()
    config_index: int | None = None
    unsettled: bool = False
    """It answered in a role other than leader or follower (a candidate, a node stopped by
    an error): its term may not be saved yet."""


SETTLED_ROLES = ("leader", "follower")


def _unsettled(role: Any) -> bool:
    """A sample's role says its term may not be saved yet (a string, not leader/follower)."""
    return isinstance(role, str) and role not in SETTLED_ROLES


_NO_LEARNERS: frozenset[str] = frozenset()
"""Shared: an empty frozenset is a new 200-byte object per call, once per sample."""


def _int_or_none(x: Any) -> int | None:
    return x if _is_int(x) else None


def _samples(ops: Sequence[Op]) -> list[_Sample]:
    if isinstance(ops, _Prepared) and hasattr(ops, "samples"):
        return ops.samples
    out = []
    for op in _sorted_ops(ops):
        if op.f == "sample" and op.type == "ok" and isinstance(op.value, dict):
            v = op.value
            inc = v.get("incarnation")
            out.append(
                _Sample(
                    op.index,
                    op.node,
                    _freeze(inc),
                    inc,
                    _int_or_none(v.get("committed")),
                    _int_or_none(v.get("end")),
                    _int_or_none(v.get("term")),
                    v.get("role") == "leader",
                    *_member_config(op.node, v.get("member"), v.get("config")),
                    unsettled=_unsettled(v.get("role")),
                )
            )
    return out


def _member_config(
    node: Any, member: Any, config: Any
) -> tuple[Any, frozenset[str] | None, frozenset[str], int | None]:
    """A sample's member key (its ``member`` id when it is a string, else the host) and
    its configuration, as :class:`_Sample` keeps them (None: no usable configuration)."""
    key = member if isinstance(member, str) else node
    if not isinstance(config, dict) or not isinstance(config.get("voters"), list):
        return key, None, _NO_LEARNERS, None
    learners = config.get("learners")
    return (
        key,
        frozenset(map(str, config["voters"])),
        frozenset(map(str, learners)) if isinstance(learners, list) else _NO_LEARNERS,
        _int_or_none(config.get("index")),
    )


def _pairs(ops: Sequence[Op], f: str) -> list[tuple[Op, Op | None]]:
    paired = ops.paired if isinstance(ops, _Prepared) else PairedHistory.of(ops)
    return paired.pairs(f)


@dataclass(frozen=True, slots=True)
class _Read:
    index: int  # the ok completion's history index
    final: bool
    committed: list[tuple[int, Any, Any]]  # (log index, term, payload) committed observations
    # A final read that reached its node's end (see :func:`_reached_end`).
    complete: bool = False


def _log_reads(ops: Sequence[Op]) -> list[_Read]:
    if isinstance(ops, _Prepared) and hasattr(ops, "reads"):
        return ops.reads
    reads = []
    for inv, comp in _pairs(ops, "read"):
        if comp is None or comp.type != "ok" or inv.key is not None:
            continue
        val = comp.value
        if not isinstance(val, dict) or not isinstance(val.get("entries"), list):
            continue
        c = val.get("committed")
        obs = []
        for e in val["entries"]:
            if not isinstance(e, (list, tuple)) or len(e) != 3 or not _is_int(e[0]):
                continue
            if c is None or (_is_int(c) and e[0] <= c):
                obs.append((e[0], e[1], e[2]))
        final = isinstance(inv.value, dict) and inv.value.get("final") is True
        reads.append(_Read(comp.index, final, obs, final and _reached_end(val)))
    return reads


def _reached_end(val: dict) -> bool:
    """Whether a final read judges the node's whole log: its entries reach the ledger
    ``end`` it reports, and its committed index covers that end.

    A final read without an integer ``end`` is taken as the whole log, as it always
    was; with one, only the chunk holding the end (or an empty chunk past it) is. A
    node whose committed index stops short of its end (a DLedger leader restarted with
    no entry of its term yet, which keeps its committed index in memory) shows entries
    it does not call committed: an ack beyond every final committed index is then not
    judged (unknown), not lost.
    """
    end = val.get("end")
    if not _is_int(end):
        return True
    c = val.get("committed")
    if c is not None and not (_is_int(c) and c >= end):
        return False
    idx = [e[0] for e in val["entries"] if isinstance(e, (list, tuple)) and e and _is_int(e[0])]
    return not idx or max(idx) >= end


def _final_reach(reads: Sequence[_Read]) -> int | None:
    """How far lost-ack can judge: None when some final read reached its node's end
    (every acked index), else the highest committed final observation.

    Final reads walk each node's log in chunks from 0; a run whose final phase ran
    out of time (a long soak: millions of entries) read only a prefix, and an ack
    beyond it was not looked for, so it is not judged rather than called lost.
    """
    if any(r.complete for r in reads):
        return None
    return max((i for r in reads if r.final for i, _, _ in r.committed), default=-1)


def lost_ack_unjudged(ops: Sequence[Op]) -> int:
    """Ok appends :func:`lost_ack` leaves out: acked past the final reads' reach."""
    reads = _log_reads(ops)
    if not any(r.final for r in reads):
        return 0
    reach = _final_reach(reads)
    if reach is None:
        return 0
    return sum(1 for a in _appends(ops) if a.type == "ok" and _is_int(a.index) and a.index > reach)


@dataclass(frozen=True, slots=True)
class _Append:
    inv_index: int
    comp_index: int | None
    type: str  # ok / fail / info (info also when never completed)
    payload: Any
    index: Any  # acked log index (ok only)
    term: Any


def _appends(ops: Sequence[Op]) -> list[_Append]:
    if isinstance(ops, _Prepared) and hasattr(ops, "appends"):
        return ops.appends
    out = []
    for inv, comp in _pairs(ops, "append"):
        p = inv.value.get("payload") if isinstance(inv.value, dict) else None
        if comp is None or comp.type == "info":
            out.append(
                _Append(inv.index, None if comp is None else comp.index, "info", p, None, None)
            )
            continue
        if comp.type == "ok":
            v = comp.value if isinstance(comp.value, dict) else {}
            out.append(
                _Append(
                    inv.index, comp.index, "ok", v.get("payload", p), v.get("index"), v.get("term")
                )
            )
        else:
            out.append(_Append(inv.index, comp.index, "fail", p, None, None))
    return out


# --------------------------------------------------------------------------- samples


def committed_regress(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """I1: committedIndex went backwards within one process lifetime of a node.

    Per (node, incarnation), samples in history order: a sample whose
    ``committed`` is below the maximum ``committed`` of the earlier samples is a
    regression. Only the **first** offending sample of each (node, incarnation)
    is reported (a flapping node would otherwise flood the report). Example::

        {"node", "incarnation", "from": earlier max, "to": offending committed,
         "indexes": [index of the first sample that reached the max, offending index]}
    """
    best: dict[tuple[Any, Any], tuple[int, int]] = {}  # (node, inc) -> (max, sample index)
    reported: set[tuple[Any, Any]] = set()
    out = []
    for s in _samples(ops):
        c = s.committed
        if c is None:
            continue
        k = (s.member, s.incarnation)
        prev = best.get(k)
        if prev is None or c > prev[0]:
            best[k] = (c, s.index)
        elif c < prev[0] and k not in reported:
            reported.add(k)
            out.append(
                {
                    "node": s.member,
                    "incarnation": s.inc,
                    "from": prev[0],
                    "to": c,
                    "indexes": [prev[1], s.index],
                }
            )
    return _by_indexes(out)


def committed_regress_restart(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """A note, not a violation: a restarted node reports a lower committedIndex.

    committedIndex is not persisted by DLedger, so after a restart it may start
    lower and climb back. For each node, when a sample's incarnation differs from
    that node's previous sample's, and its ``committed`` is below the previous
    sample's, one note::

        {"node", "incarnation", "previous_incarnation", "from", "to",
         "indexes": [previous sample index, first sample of the new incarnation]}
    """
    last: dict[Any, _Sample] = {}
    out = []
    for s in _samples(ops):
        c = s.committed
        if c is None:
            continue
        prev = last.get(s.member)
        last[s.member] = s
        if prev is None or prev.incarnation == s.incarnation:
            continue
        pc = prev.committed
        if pc is not None and c < pc:
            out.append(
                {
                    "node": s.member,
                    "incarnation": s.inc,
                    "previous_incarnation": prev.inc,
                    "from": pc,
                    "to": c,
                    "indexes": [prev.index, s.index],
                }
            )
    return _by_indexes(out)


def committed_beyond_end(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """I1: a node claims an index committed that its own log does not hold.

    One example per sample with integer ``committed`` > integer ``end``::

        {"node", "incarnation", "committed", "end", "indexes": [sample index]}
    """
    out = []
    for s in _samples(ops):
        c, e = s.committed, s.end
        if c is not None and e is not None and c > e:
            out.append(
                {
                    "node": s.member,
                    "incarnation": s.inc,
                    "committed": c,
                    "end": e,
                    "indexes": [s.index],
                }
            )
    return _by_indexes(out)


def two_leaders_in_term(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """I5: two different nodes sampled as leader of the same term.

    Samples with ``role == "leader"`` and an integer ``term``, grouped by term.
    One example per term led by two or more distinct nodes; ``indexes`` holds,
    for each of those nodes, its first (lowest-index) leader sample of that term::

        {"term", "nodes": sorted node names, "indexes": sorted}
    """
    first: dict[int, dict[Any, int]] = {}
    for s in _samples(ops):
        t = s.term
        if s.leader and t is not None:
            first.setdefault(t, {}).setdefault(s.member, s.index)
    out = []
    for t, nodes in first.items():
        if len(nodes) > 1:
            out.append(
                {"term": t, "nodes": sorted(nodes, key=str), "indexes": sorted(nodes.values())}
            )
    return _by_indexes(out)


def term_regress(ops: Sequence[Op], *, settled_terms_only: bool = False) -> list[dict[str, Any]]:
    """I6: a node's term went down, possibly across a restart (currentTerm not fsynced).

    Per node (all incarnations together) in history order: every sample whose
    integer ``term`` is below the maximum term of that node's earlier samples is
    one example. With ``settled_terms_only`` (a DB that persists a term before it
    answers an RPC in it, as Raft asks, but shows it before that, while a candidate or
    once an error stopped it), a term seen only in such samples sets no floor: a crash
    may take it back harmlessly, since the node neither led nor followed anyone in it (a
    vote it then gives twice is the node-events check's ``event-double-vote``)::

        {"node", "incarnation", "from": earlier max, "to": term,
         "indexes": [index of the first sample that reached the max, offending index]}
    """
    best: dict[Any, tuple[int, int]] = {}
    out = []
    for s in _samples(ops):
        t = s.term
        if t is None:
            continue
        prev = best.get(s.member)
        if prev is not None and t < prev[0]:
            out.append(
                {
                    "node": s.member,
                    "incarnation": s.inc,
                    "from": prev[0],
                    "to": t,
                    "indexes": [prev[1], s.index],
                }
            )
        elif (prev is None or t > prev[0]) and not (settled_terms_only and s.unsettled):
            best[s.member] = (t, s.index)
    return _by_indexes(out)


# --------------------------------------------------------------------------- membership
#
# Samples that carry ``member`` and ``config`` (docs/membership.md M14) say which member
# answered and which configuration was in force on it. A configuration is *committed* on
# the node that reports it when its index is at or below that node's committed index; a
# member is *removed* by a committed configuration at log index ci when some
# configuration below ci listed it (a startup list, index -1, counts only its voters: a
# node that joins lists itself there as a learner) and none at or above ci does (ids are
# never reused, so a member listed again was never removed). Everything a removed member
# reports in a term up to the one in which its removal was seen committed is stale, not
# wrong: only what it does in a later term is judged.


def _removals(ops: Sequence[Op]) -> dict[Any, tuple[int, int, int]]:
    """Each removed member: (the lowest term of a sample showing its removal committed,
    that sample's history index, the removing configuration's log index); ties in term
    go to the earliest sample."""
    samples = _samples(ops)
    first_in: dict[str, int] = {}
    last_in: dict[str, int] = {}
    seen: dict[tuple[int, frozenset[str], frozenset[str]], tuple[int, int]] = {}
    for s in samples:
        ci = s.config_index
        if s.voters is None or ci is None:
            continue
        for m in s.voters if ci < 0 else s.voters | s.learners:
            if first_in.get(m, ci + 1) > ci:
                first_in[m] = ci
            if last_in.get(m, ci - 1) < ci:
                last_in[m] = ci
        if ci >= 0 and s.committed is not None and ci <= s.committed and s.term is not None:
            k = (ci, s.voters, s.learners)
            if k not in seen or (s.term, s.index) < seen[k]:
                seen[k] = (s.term, s.index)
    out: dict[Any, tuple[int, int, int]] = {}
    for (ci, voters, learners), (term, index) in seen.items():
        for m, lo in first_in.items():
            if lo < ci and last_in[m] < ci and m not in voters and m not in learners:
                cur = out.get(m)
                if cur is None or (term, index) < cur[:2]:
                    out[m] = (term, index, ci)
    return out


def leader_after_removal(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """M12: a member sampled as leader in a term above the one in which its removal was
    seen committed (a removed member can win no election: the new voters refuse it, and a
    majority of them hold the entry that removed it).

    One example per member, at its first such leader sample::

        {"node": member, "term", "removed_term", "config_index": the removing entry,
         "indexes": sorted [sample showing the removal committed, leader sample]}
    """
    gone = _removals(ops)
    out = []
    done: set[Any] = set()
    for s in _samples(ops):
        r = gone.get(s.member)
        if r is None or not s.leader or s.term is None or s.term <= r[0] or s.member in done:
            continue
        done.add(s.member)
        out.append(
            {
                "node": s.member,
                "term": s.term,
                "removed_term": r[0],
                "config_index": r[2],
                "indexes": sorted([r[1], s.index]),
            }
        )
    return _by_indexes(out)


def _acks(ops: Sequence[Op]) -> list[tuple[int, int, Any, Any, Any]]:
    """Ok appends as (invocation index, completion index, answering node, acked term,
    acked log index)."""
    if isinstance(ops, _Prepared) and hasattr(ops, "acks"):
        acks: list[tuple[int, int, Any, Any, Any]] = ops.acks
        return acks
    out = []
    for inv, comp in _pairs(ops, "append"):
        if comp is not None and comp.type == "ok":
            v = comp.value if isinstance(comp.value, dict) else {}
            out.append((inv.index, comp.index, comp.node, v.get("term"), v.get("index")))
    return out


def ack_after_removal(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """An append acknowledged by a removed member in a term above the one in which its
    removal was seen committed: only a leader acks, and it can lead no such term.

    The member that answered is the one its host's samples name on both sides of the
    append: the last sample completed before its invocation and the first completed after
    its completion (member ids are never reused, so the host ran that member throughout);
    an append whose host changed member in between, or has no sample on one side, is not
    judged. One example per ack::

        {"node": member, "term": acked term, "index": acked log index, "removed_term",
         "indexes": sorted [sample showing the removal committed, ack completion]}
    """
    gone = _removals(ops)
    if not gone:
        return []
    hosts: dict[Any, tuple[list[int], list[Any]]] = {}
    for s in _samples(ops):
        at, who = hosts.setdefault(s.node, ([], []))
        at.append(s.index)
        who.append(s.member)
    out = []
    for inv, comp, node, term, li in _acks(ops):
        h = hosts.get(node)
        if h is None or not _is_int(term):
            continue
        at, who = h
        k = bisect.bisect_left(at, inv)
        j = bisect.bisect_right(at, comp)
        if k == 0 or j == len(at) or who[k - 1] != who[j]:
            continue
        r = gone.get(who[j])
        if r is not None and term > r[0]:
            out.append(
                {
                    "node": who[j],
                    "term": term,
                    "index": li,
                    "removed_term": r[0],
                    "indexes": sorted([r[1], comp]),
                }
            )
    return _by_indexes(out)


# --------------------------------------------------------------------------- log contents


def divergent_committed(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """I2: two committed observations of the same log index disagree.

    Over the committed observations of all log reads (final or not, NOOPs
    included), grouped by log index: an index seen with two or more distinct
    ``(term, payload)`` is one example::

        {"index": log index, "values": sorted distinct [term, payload],
         "indexes": sorted distinct read indexes that observed that log index}
    """
    seen: dict[int, dict[Any, tuple[Any, Any]]] = {}
    readers: dict[int, set[int]] = {}
    for r in _log_reads(ops):
        for idx, term, payload in r.committed:
            seen.setdefault(idx, {}).setdefault((_freeze(term), _freeze(payload)), (term, payload))
            readers.setdefault(idx, set()).add(r.index)
    out = []
    for idx, vals in seen.items():
        if len(vals) > 1:
            out.append(
                {
                    "index": idx,
                    "values": [list(v) for v in sorted(vals.values(), key=_value_key)],
                    "indexes": sorted(readers[idx]),
                }
            )
    return _by_indexes(out)


def lost_ack_judgeable(ops: Sequence[Op]) -> bool:
    """Whether :func:`lost_ack` judges every ok append: there is a final read and it
    reached every acked index, or there is no ok append at all."""
    if any(r.final for r in _log_reads(ops)):
        return lost_ack_unjudged(ops) == 0
    return not any(a.type == "ok" for a in _appends(ops))


def lost_ack(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """I3: an acknowledged append is not in the final committed log.

    The final log is the union of the committed observations of the final reads.
    An ok append with acked ``(index, term, payload)`` is lost when no final
    observation at that log index equals ``(term, payload)``. ``found`` is the
    smallest (in value ordering) ``[term, payload]`` observed there, or null if no
    final read covered that index. Appends whose acked index is not an integer are
    skipped, and so are those past the final reads' reach when no final read got to
    its node's end (:func:`lost_ack_unjudged` counts them). Returns ``[]`` when there
    is no final read: the caller must then report "unknown" (see
    :func:`lost_ack_judgeable`), not valid. Example::

        {"payload", "index", "term", "found": [term, payload] | null,
         "indexes": [ok completion index]}
    """
    final: dict[int, dict[Any, tuple[Any, Any]]] = {}
    any_final = False
    reads = _log_reads(ops)
    reach = _final_reach(reads)
    for r in reads:
        if not r.final:
            continue
        any_final = True
        for idx, term, payload in r.committed:
            final.setdefault(idx, {}).setdefault((_freeze(term), _freeze(payload)), (term, payload))
    if not any_final:
        return []
    out = []
    for a in _appends(ops):
        if a.type != "ok" or not _is_int(a.index) or (reach is not None and a.index > reach):
            continue
        there = final.get(a.index)
        if there is not None and (_freeze(a.term), _freeze(a.payload)) in there:
            continue
        found = None if not there else list(min(there.values(), key=_value_key))
        out.append(
            {
                "payload": a.payload,
                "index": a.index,
                "term": a.term,
                "found": found,
                "indexes": [a.comp_index],
            }
        )
    return _by_indexes(out)


def failed_append_present(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """I3: an append that ended ``fail`` (certainly not appended) shows up committed.

    For each fail-completed append with a non-null payload that occurs in any
    committed observation (any read, final or not), one example naming the
    lowest-index read that shows it and the log index it shows it at (the
    smallest, if that read shows it more than once)::

        {"payload", "index": log index, "indexes": sorted [fail completion index, read index]}
    """
    where: dict[Any, tuple[int, int]] = {}  # payload -> (read index, log index), first read
    for r in sorted(_log_reads(ops), key=lambda r: r.index):
        for idx, _term, payload in r.committed:
            if payload is None:
                continue
            k = _freeze(payload)
            cur = where.get(k)
            if cur is None or (cur[0] == r.index and idx < cur[1]):
                where[k] = (r.index, idx)
    out = []
    for a in _appends(ops):
        if a.type != "fail" or a.payload is None:
            continue
        hit = where.get(_freeze(a.payload))
        if hit is not None:
            out.append(
                {
                    "payload": a.payload,
                    "index": hit[1],
                    "indexes": sorted(i for i in (a.comp_index, hit[0]) if i is not None),
                }
            )
    return _by_indexes(out)


def duplicate_payload(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """I4: one payload committed at two or more distinct log indexes.

    Over the committed observations of all reads, NOOPs excluded. One example per
    such payload::

        {"payload", "log_indexes": sorted distinct log indexes,
         "indexes": sorted distinct read indexes that observed the payload}
    """
    at: dict[Any, set[int]] = {}
    readers: dict[Any, set[int]] = {}
    orig: dict[Any, Any] = {}
    for r in _log_reads(ops):
        for idx, _term, payload in r.committed:
            if payload is None:
                continue
            k = _freeze(payload)
            orig.setdefault(k, payload)
            at.setdefault(k, set()).add(idx)
            readers.setdefault(k, set()).add(r.index)
    out = [
        {"payload": orig[k], "log_indexes": sorted(idxs), "indexes": sorted(readers[k])}
        for k, idxs in at.items()
        if len(idxs) > 1
    ]
    return _by_indexes(out)


def _is_system(payload: Any) -> bool:
    """An entry the system wrote for itself, not a client's append: a NOOP (null), or a
    JSON object with a key ``"kind"`` (workloads/append.py reports kv, config and read
    entries as ``{"kind", "at", "op"}``; their identity is their index)."""
    return payload is None or (isinstance(payload, dict) and "kind" in payload)


def _lowest_ack(ops: Sequence[Op]) -> int | None:
    """The lowest integer log index an ok append was acked at (None: no such append)."""
    return min(
        (a.index for a in _appends(ops) if a.type == "ok" and _is_int(a.index)), default=None
    )


def unproposed_committed(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """A committed entry no client proposed: a replicated log commits only what some
    client appended, or its own entries. A recovery that keeps a torn or corrupted record
    (zero-padded, checksum re-stamped) commits a body nobody wrote; lost-ack does not see
    it (no acked entry need be replaced) and neither does divergent-committed (every node
    may hold the same bad body).

    Over the committed observations of all log reads (final or not), one example per
    distinct log index at which some committed observation holds a payload P such that:

    * P is not null (a NOOP) and is not a *system entry*, a JSON object with a key
      ``"kind"`` (the append workload's kv, config and read entries; a node reports a
      body it cannot decode as ``{"undecodable": hex}``, no system entry, so it counts);
    * P equals, as canonical JSON text (sorted keys, compact: how the columnar path and
      the Spark engine compare payloads), no append invocation's ``payload`` and no ok
      append completion's ``payload`` in the history, whatever the append's outcome
      (ok, fail, info, never completed): an entry some client sent, even one whose
      append failed, is judged by failed-append-present, not here;
    * the log index is at least the lowest integer acked index of an ok append (below
      it may lie entries from before the run, on a DB that does not wipe); with no
      such ok append no index is judged.

    ``payload`` is the smallest such P at that index (by canonical JSON text) and
    ``indexes`` the sorted distinct read indexes whose committed observations hold
    one there::

        {"index": log index, "payload": P, "indexes": sorted read indexes}
    """
    lo = _lowest_ack(ops)
    if lo is None:
        return []
    proposed: set[str] = set()
    for inv, comp in _pairs(ops, "append"):
        if isinstance(inv.value, dict) and "payload" in inv.value:
            proposed.add(_canon(inv.value["payload"]))
        done = comp.value if comp is not None and comp.type == "ok" else None
        if isinstance(done, dict) and "payload" in done:
            proposed.add(_canon(done["payload"]))
    seen: dict[int, dict[str, Any]] = {}  # log index -> {canonical text: payload}
    readers: dict[int, set[int]] = {}
    for r in _log_reads(ops):
        for idx, _term, payload in r.committed:
            if idx < lo or _is_system(payload):
                continue
            text = _canon(payload)
            if text in proposed:
                continue
            seen.setdefault(idx, {}).setdefault(text, payload)
            readers.setdefault(idx, set()).add(r.index)
    out = [
        {"index": idx, "payload": vals[min(vals)], "indexes": sorted(readers[idx])}
        for idx, vals in seen.items()
    ]
    return _by_indexes(out)


def append_order(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Real-time order: an append that started after another was acked got a lower or equal index.

    For ok appends A and B with A's completion before B's invocation (history
    order) and B's acked index <= A's acked index. Each B is reported once,
    paired with the A of the largest acked index among those completed before B
    was invoked (ties: the earliest completion). Appends with a non-integer acked
    index are ignored. Example::

        {"a_index": A's acked index, "b_index": B's acked index,
         "indexes": [A completion index, B completion index]}
    """
    ok = [a for a in _appends(ops) if a.type == "ok" and _is_int(a.index)]
    events: list[tuple[int, int, _Append]] = []  # (history index, 0=completion 1=invoke, append)
    for a in ok:
        events.append((a.comp_index, 0, a))  # type: ignore[arg-type]
        events.append((a.inv_index, 1, a))
    events.sort(key=lambda e: (e[0], e[1]))
    best: tuple[int, int] | None = None  # (acked index, completion index) of the max so far
    at_invoke: dict[int, tuple[int, int] | None] = {}
    out = []
    for _, kind, a in events:
        if kind == 1:
            at_invoke[a.inv_index] = best
            continue
        prior = at_invoke.get(a.inv_index)
        if prior is not None and a.index <= prior[0]:
            out.append(
                {"a_index": prior[0], "b_index": a.index, "indexes": [prior[1], a.comp_index]}
            )
        if best is None or a.index > best[0]:
            best = (a.index, a.comp_index)  # type: ignore[assignment]
    return _by_indexes(out)


# --------------------------------------------------------------------------- the checker

_FUNCS = {
    "committed-regress": committed_regress,
    "committed-beyond-end": committed_beyond_end,
    "two-leaders-in-term": two_leaders_in_term,
    "term-regress": term_regress,
    "divergent-committed": divergent_committed,
    "lost-ack": lost_ack,
    "failed-append-present": failed_append_present,
    "duplicate-payload": duplicate_payload,
    "unproposed-committed": unproposed_committed,
    "append-order": append_order,
    "leader-after-removal": leader_after_removal,
    "ack-after-removal": ack_after_removal,
}
ANOMALIES = tuple(_FUNCS)
"""Every anomaly kind, in the order results list them (the Spark engine's too)."""

LOSS_WINDOW = (("lost-ack", "loss-window"), ("append-order", "loss-window-order"))
"""Mode ha with an async master: these anomalies are measured as these notes instead."""

NOTES = ("committed-regress-restart", *(note for _, note in LOSS_WINDOW))


def check_log_safety(
    ops: Sequence[Op], ha: dict[str, Any] | None = None, *, settled_terms_only: bool = False
) -> dict[str, Any]:
    """Every log-safety anomaly over one history, as one result map.

    ``{"valid", "anomalies": {kind: [examples]} (non-empty kinds only),
    "notes": {kind: [examples]}, "unknown": [check names that could not judge],
    "stats": {...}}``. ``valid`` is False if any anomaly was found, else
    ``"unknown"`` if lost-ack could not judge every ok append (no final read, or
    final reads cut short before some acked index: ``stats.lost_ack_unjudged``),
    else True.

    ``ha`` (classic master/slave, ``{"sync": bool}``): an async master's failover
    loses acked appends by design (spec §12), so there lost-ack and the append-order
    it causes are measured as the note ``loss-window`` instead of anomalies.
    """
    ops = _prepare(ops)
    found = {kind: fn(ops) for kind, fn in _FUNCS.items()}
    if settled_terms_only:
        found["term-regress"] = term_regress(ops, settled_terms_only=True)
    apps = _appends(ops)
    reads = _log_reads(ops)
    stats = {
        "samples": len(_samples(ops)),
        "appends": {t: sum(1 for a in apps if a.type == t) for t in ("ok", "fail", "info")},
        "reads": len(reads),
        "final_reads": sum(1 for r in reads if r.final),
        "committed_observations": sum(len(r.committed) for r in reads),
        "lost_ack_unjudged": lost_ack_unjudged(ops),
    }
    return _result(found, committed_regress_restart(ops), stats, lost_ack_judgeable(ops), ha)


def _result(
    found: dict[str, list[dict[str, Any]]],
    restart: list[dict[str, Any]],
    stats: dict[str, Any],
    judgeable: bool,
    ha: dict[str, Any] | None,
) -> dict[str, Any]:
    """The result map from every anomaly function's examples (both local paths share it)."""
    anomalies = {kind: ex for kind, ex in found.items() if ex}
    notes = {}
    if ha is not None and not ha.get("sync"):  # mode ha, async master: a loss window
        for kind, note in LOSS_WINDOW:
            if kind in anomalies:
                notes[note] = anomalies.pop(kind)
    if restart:
        notes["committed-regress-restart"] = restart
    unknown = [] if judgeable else ["lost-ack"]
    if ha is not None:
        stats["loss_window"] = len(notes.get("loss-window", anomalies.get("lost-ack", [])))
    valid: bool | str = False if anomalies else ("unknown" if unknown else True)
    return {
        "valid": valid,
        "anomalies": anomalies,
        "notes": notes,
        "unknown": unknown,
        "stats": stats,
    }


# --------------------------------------------------------------------------- columnar path
#
# The same checks over a Parquet history's columns (ColumnarHistory), for the local
# engine: profiled on a 1M-record history, reading an Op per record (JSON-decoding every
# value, a thousand entries per final read) and the per-observation Python loops of the
# payload checks were nearly all of the time and memory. Here no Op is built; log
# entries are streamed a Parquet batch at a time and reduced at once, by Arrow's hash
# aggregation, to one row per distinct (log index, term, payload), so memory follows the
# log's length, not the number of observations. Terms and payloads are compared as the
# columns' canonical JSON text (as the Spark engine does) and decoded only for examples.
# The sample checks and append bookkeeping are the functions above, fed from columns.

_SENTINEL_NONE = -1  # committed-observation mode of a read: none (committed not an integer)
_SENTINEL_ALL = 1  # all entries (committed absent or null)


def _ints(arr: Any) -> list[int | None]:
    """JSON texts to ints, None where a text is not an integer (``true``, ``1.5``, ``"1"``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    m = pc.fill_null(pc.match_substring_regex(arr, r"^-?[0-9]+$"), False)
    txt = pc.if_else(m, arr, pa.scalar(None, pa.string()))
    try:
        ints: list[int | None] = pc.cast(txt, pa.int64()).to_pylist()
        return ints
    except (pa.ArrowInvalid, OverflowError):  # beyond int64: Python ints
        return [None if x is None else int(x) for x in txt.to_pylist()]


def _loads(x: str | None) -> Any:
    return None if x is None else json.loads(x)


def _decoded(h: Any, name: str, take: Any) -> list[Any]:
    """A typed column's JSON texts at ``take``, decoded (a sample's member and
    configuration take a handful of values); None where absent, and for a history
    written before the column existed."""
    if name not in h.table.column_names:
        return [None] * len(take)
    return _per_distinct(h.column(name).take(take), _loads)


def _per_distinct(
    arr: Any, fn: Callable[[str], Any] | None = None, missing: Any = None
) -> list[Any]:
    """A string column as Python values, ``fn`` applied once per distinct text and one
    object shared by every row holding it (node names, terms and incarnations repeat on
    every sample and ack); ``missing`` where the column is null."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    texts = enc.dictionary.to_pylist()
    known = texts if fn is None else [fn(t) for t in texts]
    return [missing if i is None else known[i] for i in enc.indices.to_pylist()]


def _incarnations(arr: Any) -> list[tuple[Any, Any]]:
    """Each sample's incarnation as recorded and frozen (a node has a handful)."""

    def both(text: str) -> tuple[Any, Any]:
        v = _loads(text)
        return v, _freeze(v)

    return _per_distinct(arr, both, missing=(None, None))


class _ReadCols:
    """The log reads of a columnar history: per read (ok completion, keyless, in history
    order) its table position, history index, finality, committed mode and limit, end;
    filled in by the first pass over the entries: whether it is a log read at all (has
    ``entries``), its entry count and highest entry index."""

    def __init__(self, h: Any, pos: Any, inv: Any) -> None:
        import numpy as np
        import pyarrow as pa

        order = np.argsort(pos, kind="stable")
        self.pos, inv = pos[order], inv[order]
        take = pa.array(self.pos)
        n = len(self.pos)
        self.index = h.column("index").take(take).to_numpy()
        fin = h.column("v_final").take(pa.array(inv))
        self.final = np.array([x == "true" for x in fin.to_pylist()], dtype=bool)
        ctext = h.column("v_committed").take(take).to_pylist()
        cint = _ints(h.column("v_committed").take(take))
        self.mode = np.zeros(n, np.int8)
        self.limit = np.zeros(n, np.int64)
        for i, (t, c) in enumerate(zip(ctext, cint, strict=True)):
            if t is None or t == "null":
                self.mode[i] = _SENTINEL_ALL
            elif c is None or not -(2**63) <= c < 2**63:
                self.mode[i] = _SENTINEL_NONE
            else:
                self.limit[i] = c
        self.end = _ints(h.column("v_end").take(take))
        self.is_read = np.zeros(n, bool)
        self.n_entries = np.zeros(n, np.int64)
        self.max_li = np.full(n, np.iinfo(np.int64).min, np.int64)

    def observations(self, h: Any, *, first: bool) -> Iterator[Any]:
        """Per Parquet batch, a table of committed observations ``(li, term, payload, r,
        fin)``; on the ``first`` pass also fills ``is_read``/``n_entries``/``max_li``."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        for pos, ents in _bounded(h.entries(self.pos)):
            k = np.searchsorted(self.pos, pos)
            if first:
                self.is_read[k] = ents.is_valid().to_numpy(zero_copy_only=False)
                self.n_entries[k] = pc.fill_null(pc.list_value_length(ents), 0).to_numpy()
            parent = pc.list_parent_indices(ents).to_numpy()
            flat = pc.list_flatten(ents)
            li = pc.fill_null(flat.field("index"), 0).to_numpy()
            rid = k[parent]
            if first and len(li):
                np.maximum.at(self.max_li, rid, li)
            mode = self.mode[rid]
            keep = (mode == _SENTINEL_ALL) | ((mode == 0) & (li <= self.limit[rid]))
            idx = np.flatnonzero(keep)
            rk = rid[idx]
            yield pa.table(
                {
                    "li": li[idx],
                    "term": flat.field("term").take(pa.array(idx)),
                    "payload": flat.field("payload").take(pa.array(idx)),
                    "r": self.index[rk],
                    "fin": self.final[rk].astype(np.int8),
                }
            )


OBSERVATIONS_PER_SLICE = 1 << 17
"""Entries flattened at once: a batch of final reads holds a thousand each, and the
flattened columns, their copies and the hash table of one slice are the check's peak."""


def _bounded(batches: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """Each ``(positions, entries)`` batch cut into slices of whole reads holding about
    :data:`OBSERVATIONS_PER_SLICE` entries (a read longer than that is a slice alone)."""
    import numpy as np
    import pyarrow.compute as pc

    for pos, ents in batches:
        sizes = pc.fill_null(pc.list_value_length(ents), 0).to_numpy()
        total = int(sizes.sum())
        if total <= OBSERVATIONS_PER_SLICE:
            yield pos, ents
            continue
        ends = np.cumsum(sizes)
        lo = 0
        while lo < len(pos):
            base = ends[lo - 1] if lo else 0
            hi = int(np.searchsorted(ends, base + OBSERVATIONS_PER_SLICE, side="right"))
            hi = max(hi, lo + 1)
            yield pos[lo:hi], ents.slice(lo, hi - lo)
            lo = hi


def _distinct(parts: list[Any]) -> Any:
    """One row per distinct (li, term, payload): first reader and whether a final read
    showed it."""
    import pyarrow as pa

    t = pa.concat_tables(parts)
    g = t.group_by(["li", "term", "payload"], use_threads=False).aggregate(
        [("r", "min"), ("fin", "max")]
    )
    return g.select(["li", "term", "payload", "r_min", "fin_max"]).rename_columns(
        ["li", "term", "payload", "r", "fin"]
    )


def check_log_safety_columns(
    h: Any, ha: dict[str, Any] | None = None, *, settled_terms_only: bool = False
) -> dict[str, Any] | None:
    """:func:`check_log_safety` over a :class:`~harness.core.parquet.ColumnarHistory`: the
    same result map, with no Op per record and memory bounded by the log's distinct
    (index, term, payload) triples rather than by its observations. None for the rare
    history it cannot judge from columns (an acked index beyond int64)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    inv, comp = h.inv, h.comp
    has = comp >= 0
    cpos = np.where(has, comp, 0)

    def eq(name: str, pos: Any, value: str) -> Any:
        col = h.column(name).take(pa.array(pos))
        return pc.fill_null(pc.equal(col, value), False).to_numpy(zero_copy_only=False)

    f_inv = h.column("f").take(pa.array(inv))
    ok = has & eq("type", cpos, "ok")

    def is_f(name: str) -> Any:
        return pc.fill_null(pc.equal(f_inv, name), False).to_numpy(zero_copy_only=False)

    # appends
    am = is_f("append")
    ai, ahas = inv[am], has[am]
    acp = cpos[am]
    a_ok, a_info = ok[am], ~ahas | eq("type", acp, "info")
    a_fail = ahas & ~a_ok & ~a_info
    idx_col = h.column("index")
    a_inv_idx = idx_col.take(pa.array(ai)).to_numpy()
    a_comp_idx = idx_col.take(pa.array(acp)).to_numpy()
    p_inv = h.column("v_payload").take(pa.array(ai))
    p_comp = h.column("v_payload").take(pa.array(acp))
    oks = np.flatnonzero(a_ok)
    acked = _ints(h.column("v_index").take(pa.array(acp[oks])))
    li_ok = np.array([x is not None for x in acked], dtype=bool)
    ack = oks[li_ok]
    try:
        ack_li = np.array([x for x in acked if x is not None], dtype=np.int64)
    except OverflowError:  # an acked index beyond int64: the Op path judges it
        return None
    n_ok = len(oks)

    # log reads: keyless ok reads; which of them hold entries, the first pass tells
    rm = (
        is_f("read")
        & ok
        & ~pc.is_valid(h.column("key").take(pa.array(inv))).to_numpy(zero_copy_only=False)
    )
    reads = _ReadCols(h, comp[rm], inv[rm])
    parts: list[Any] = []
    rows = merged = n_obs = 0
    final_reach = -1
    for t in reads.observations(h, first=True):
        n_obs += t.num_rows
        fl = t["fin"].to_numpy() == 1
        if fl.any():
            final_reach = max(final_reach, int(t["li"].to_numpy()[fl].max()))
        parts.append(_distinct([t]))
        rows += parts[-1].num_rows
        # merge once the parts outgrow twice what the last merge kept: the rows held stay
        # within a small multiple of the distinct entries, whatever the reads repeat
        if len(parts) > 1 and rows > 2 * merged + OBSERVATIONS_PER_SLICE:
            parts = [_distinct(parts)]
            rows = merged = parts[0].num_rows
            pa.default_memory_pool().release_unused()
    schema = pa.schema(
        [
            ("li", pa.int64()),
            ("term", pa.string()),
            ("payload", pa.string()),
            ("r", pa.int64()),
            ("fin", pa.int8()),
        ]
    )
    d = _distinct(parts) if parts else schema.empty_table()
    is_read = reads.is_read
    final = reads.final & is_read
    # checker.log_safety._reached_end: the node's end reached, and covered by committed
    complete = final & np.array(
        [
            e is None or ((md == _SENTINEL_ALL or (md == 0 and lim >= e)) and (n == 0 or m >= e))
            for e, n, m, md, lim in zip(
                reads.end, reads.n_entries, reads.max_li, reads.mode, reads.limit, strict=True
            )
        ],
        dtype=bool,
    )
    n_final = int(final.sum())
    reach = None if complete.any() else final_reach

    # The samples are built only now, once the pass above has let go of its memory: the
    # two peaks do not stack.
    pa.default_memory_pool().release_unused()
    # Samples: the functions above, over _Sample rows made from the typed columns
    sp = np.sort(comp[is_f("sample") & ok & eq("v_kind", cpos, "object")])
    take = pa.array(sp)
    incs = _incarnations(h.column("v_incarnation").take(take))
    leader = eq("v_role", sp, '"leader"').tolist()
    unsettled = [
        _unsettled(json.loads(r)) if r else False for r in h.column("v_role").take(take).to_pylist()
    ]
    prep = _Prepared()
    nodes = _per_distinct(h.column("node").take(take))
    prep.samples = [
        _Sample(i, n, inc[1], inc[0], c, e, t, ld, *_member_config(n, mem, cfg), unsettled=cd)
        for i, n, inc, c, e, t, ld, mem, cfg, cd in zip(
            h.column("index").take(take).to_pylist(),
            nodes,
            incs,
            _ints(h.column("v_committed").take(take)),
            _ints(h.column("v_end").take(take)),
            _ints(h.column("v_term").take(take)),
            leader,
            _decoded(h, "v_member", take),
            _decoded(h, "v_config", take),
            unsettled,
            strict=True,
        )
    ]

    found: dict[str, list[dict[str, Any]]] = {}
    found["committed-regress"] = committed_regress(prep)
    found["committed-beyond-end"] = committed_beyond_end(prep)
    found["two-leaders-in-term"] = two_leaders_in_term(prep)
    found["term-regress"] = term_regress(prep, settled_terms_only=settled_terms_only)
    a_ok_pos = acp[oks]
    prep.acks = list(
        zip(
            a_inv_idx[oks].tolist(),
            a_comp_idx[oks].tolist(),
            _per_distinct(h.column("node").take(pa.array(a_ok_pos))),
            _decoded(h, "v_term", pa.array(a_ok_pos)),
            _decoded(h, "v_index", pa.array(a_ok_pos)),
            strict=True,
        )
    )
    found["leader-after-removal"] = leader_after_removal(prep)
    found["ack-after-removal"] = ack_after_removal(prep)
    restart = committed_regress_restart(prep)
    n_samples = len(prep.samples)
    del prep  # the samples are done with: the joins below need the room

    # divergent-committed and duplicate-payload: candidates from d, readers by a second pass
    lis = d.group_by("li").aggregate([("term", "count")])
    cand_li = lis.filter(pc.greater(lis["term_count"], 1))["li"]
    nonnull = d.filter(pc.not_equal(d["payload"], "null"))
    pays = nonnull.group_by("payload").aggregate([("li", "count_distinct")])
    cand_pay = pays.filter(pc.greater(pays["li_count_distinct"], 1))["payload"]
    # unproposed-committed: candidates from d too (few: most entries are acked payloads)
    proposed = pc.unique(pa.concat_arrays([p_inv, p_comp.filter(pa.array(a_ok))]).drop_null())
    unprop = _unproposed(nonnull, proposed, int(ack_li.min()) if len(ack_li) else None)
    readers_li: dict[int, set[int]] = {}
    readers_pay: dict[str, set[int]] = {}
    readers_un: dict[int, set[int]] = {}
    if len(cand_li) or len(cand_pay) or unprop.num_rows:
        for t in reads.observations(h, first=False):
            hit = pc.or_(pc.is_in(t["li"], cand_li), pc.is_in(t["payload"], cand_pay))
            for row in t.filter(hit).select(["li", "payload", "r"]).to_pylist():
                readers_li.setdefault(row["li"], set()).add(row["r"])
                readers_pay.setdefault(row["payload"], set()).add(row["r"])
            if unprop.num_rows:
                un = t.select(["li", "payload", "r"]).join(
                    unprop, keys=["li", "payload"], join_type="left semi"
                )
                for li, r in zip(un["li"].to_pylist(), un["r"].to_pylist(), strict=True):
                    readers_un.setdefault(li, set()).add(r)
    div = []
    for row_li in cand_li.to_pylist():
        at = d.filter(pc.equal(d["li"], row_li)).select(["term", "payload"]).to_pylist()
        vals = [[_loads(v["term"]), _loads(v["payload"])] for v in at]
        div.append(
            {
                "index": row_li,
                "values": sorted(vals, key=_value_key),
                "indexes": sorted(readers_li[row_li]),
            }
        )
    found["divergent-committed"] = _by_indexes(div)

    # lost-ack: acked triples that no final read shows, within the final reads' reach
    lost: list[dict[str, Any]] = []
    if n_final:
        judged = np.ones(len(ack), bool) if reach is None else ack_li <= reach
        j = ack[judged]
        pay = pc.coalesce(p_comp.take(pa.array(j)), p_inv.take(pa.array(j)), pa.scalar("null"))
        term = pc.coalesce(
            h.column("v_term").take(pa.array(acp[j])), pa.scalar("null", pa.string())
        )
        acks = pa.table(
            {
                "li": pa.array(ack_li[judged]),
                "term": term,
                "payload": pay,
                "comp": pa.array(a_comp_idx[j]),
            }
        )
        fin = d.filter(pc.equal(d["fin"], 1)).select(["li", "term", "payload"])
        missing = acks.join(fin, keys=["li", "term", "payload"], join_type="left anti")
        if missing.num_rows:
            at_li = fin.filter(pc.is_in(fin["li"], missing["li"])).to_pylist()
            there: dict[int, list[list[Any]]] = {}
            for v in at_li:
                there.setdefault(v["li"], []).append([_loads(v["term"]), _loads(v["payload"])])
            for m in missing.to_pylist():
                at_m = there.get(m["li"])
                lost.append(
                    {
                        "payload": _loads(m["payload"]),
                        "index": m["li"],
                        "term": _loads(m["term"]),
                        "found": min(at_m, key=_value_key) if at_m else None,
                        "indexes": [m["comp"]],
                    }
                )
    found["lost-ack"] = _by_indexes(lost)

    # failed-append-present: each failed payload's first committed reader, and where
    fails = np.flatnonzero(a_fail)
    fail_pay = p_inv.take(pa.array(fails))
    fpm = pc.fill_null(pc.not_equal(fail_pay, "null"), False).to_numpy(zero_copy_only=False)
    fails, fail_pay = fails[fpm], fail_pay.filter(pa.array(fpm))
    first: dict[str, tuple[int, int]] = {}
    for v in nonnull.filter(pc.is_in(nonnull["payload"], fail_pay)).to_pylist():
        cur = first.get(v["payload"])
        if cur is None or (v["r"], v["li"]) < cur:
            first[v["payload"]] = (v["r"], v["li"])
    failed = []
    for n, p in zip(fails, fail_pay.to_pylist(), strict=True):
        hit = first.get(p)
        if hit is not None:
            failed.append(
                {
                    "payload": _loads(p),
                    "index": hit[1],
                    "indexes": sorted([int(a_comp_idx[n]), hit[0]]),
                }
            )
    found["failed-append-present"] = _by_indexes(failed)

    dup = []
    for p in cand_pay.to_pylist():
        at_p = nonnull.filter(pc.equal(nonnull["payload"], p))["li"].to_pylist()
        dup.append(
            {
                "payload": _loads(p),
                "log_indexes": sorted(set(at_p)),
                "indexes": sorted(readers_pay[p]),
            }
        )
    found["duplicate-payload"] = _by_indexes(dup)
    at_un: dict[int, list[str]] = {}
    for li, p in zip(unprop["li"].to_pylist(), unprop["payload"].to_pylist(), strict=True):
        at_un.setdefault(li, []).append(p)
    found["unproposed-committed"] = _by_indexes(
        [
            {
                "index": li,
                "payload": min(map(_loads, ps), key=_canon),
                "indexes": sorted(readers_un[li]),
            }
            for li, ps in at_un.items()
        ]
    )
    found["append-order"] = _append_order_columns(a_inv_idx[ack], a_comp_idx[ack], ack_li)
    found = {kind: found[kind] for kind in _FUNCS}

    unjudged = 0
    if n_final and reach is not None:
        unjudged = int((ack_li > reach).sum())
    stats = {
        "samples": n_samples,
        "appends": {"ok": n_ok, "fail": int(a_fail.sum()), "info": int(a_info.sum())},
        "reads": int(is_read.sum()),
        "final_reads": n_final,
        "committed_observations": n_obs,
        "lost_ack_unjudged": unjudged,
    }
    judgeable = unjudged == 0 if n_final else n_ok == 0
    return _result(found, restart, stats, judgeable, ha)


_SURELY_SYSTEM = r'^\{(?:"(?:[^"\\]|\\.)*":(?:[^"{}\[\],]*|"(?:[^"\\]|\\.)*"),)*"kind":'
"""JSON object text whose keys before ``"kind"`` all hold scalars: ``"kind"`` is then a key
of the object itself, not of one nested in it (a kv entry's ``{"at":5,"kind":...}``)."""


def _unproposed(obs: Any, proposed: Any, lo: int | None) -> Any:
    """:func:`unproposed_committed`'s committed (log index, payload) pairs, from distinct
    non-null observations ``obs`` and the proposed payloads' texts (``li``, ``payload``
    columns; empty when no ok append was acked at an integer index).

    System entries are told apart by their text: not an object, or no ``"kind":`` in it,
    is none; an object whose keys before ``"kind"`` hold scalars is one; only what is left
    (a nested ``"kind"``) is decoded."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    empty = pa.table({"li": pa.array([], pa.int64()), "payload": pa.array([], pa.string())})
    if lo is None:
        return empty
    x = obs.filter(pc.greater_equal(obs["li"], lo)).select(["li", "payload"])
    x = x.filter(pc.invert(pc.is_in(x["payload"], proposed)))
    if not x.num_rows:
        return empty
    p = x["payload"]
    maybe = pc.and_(pc.starts_with(p, "{"), pc.match_substring(p, '"kind":'))
    sure = pc.match_substring_regex(p, _SURELY_SYSTEM)
    system = np.array(sure.to_numpy(), dtype=bool)  # a writable copy
    unsure = np.flatnonzero(pc.and_(maybe, pc.invert(sure)).to_numpy())
    if len(unsure):
        texts = p.take(pa.array(unsure)).to_pylist()
        system[unsure] = [_is_system(_loads(t)) for t in texts]
    x = x.filter(pa.array(~system))
    return x.group_by(["li", "payload"]).aggregate([]) if x.num_rows else empty


def _append_order_columns(inv_idx: Any, comp_idx: Any, li: Any) -> list[dict[str, Any]]:
    """:func:`append_order` as array passes: completions in history order with a running
    maximum of their acked index (and where it was first reached); each append looks up
    the maximum over the completions before its invocation."""
    import numpy as np

    if len(li) == 0:
        return []
    o = np.argsort(comp_idx, kind="stable")
    cs, ls = comp_idx[o], li[o]
    run = np.maximum.accumulate(ls)
    new = np.ones(len(run), bool)
    new[1:] = run[1:] > run[:-1]
    first = np.maximum.accumulate(np.where(new, np.arange(len(run)), 0))
    k = np.searchsorted(cs, inv_idx)
    out = []
    for b in np.flatnonzero(k > 0):
        j = k[b] - 1
        if li[b] <= run[j]:
            out.append(
                {
                    "a_index": int(run[j]),
                    "b_index": int(li[b]),
                    "indexes": [int(cs[first[j]]), int(comp_idx[b])],
                }
            )
    return _by_indexes(out)


# --------------------------------------------------------------------------- registration


@dataclass(frozen=True)
class HaOptions:
    """Mode ha (classic master/slave, docs/ha-mode.md)."""

    sync: bool = option(False, "the master acks only what a slave holds (no loss window)")


@dataclass(frozen=True)
class LogSafetyOptions:
    ha: HaOptions | None = option(
        None,
        "mode ha: {sync: bool}; with an async master, lost acks are the loss-window note",
    )
    settled_terms_only: bool = option(
        False,
        "only terms a node was seen leading or following in set a floor for term-regress "
        "(a DB that persists its term before answering in it, as Raft asks, but shows it "
        "earlier; declared by the DB)",
    )


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    return ALL if is_log(shape) else None


def ha_of(config: CheckConfig) -> dict[str, Any] | None:
    """The mode-ha setting of a check, as :func:`check_log_safety` takes it."""
    ha = config.options.ha if config.options is not None else None
    return None if ha is None else {"sync": ha.sync}


def volatile_of(config: CheckConfig) -> bool:
    """Whether the DB declared only settled terms binding (:class:`LogSafetyOptions`)."""
    return bool(config.options is not None and config.options.settled_terms_only)


def _local(history: PairedHistory, config: CheckConfig) -> dict[str, Any]:
    return check_log_safety(history, ha=ha_of(config), settled_terms_only=volatile_of(config))


def _columnar(history: Any, config: CheckConfig) -> dict[str, Any] | None:
    return check_log_safety_columns(
        history, ha=ha_of(config), settled_terms_only=volatile_of(config)
    )


LOG_SAFETY = CheckerSpec(
    name="log-safety",
    claims=_claims,
    anomalies=ANOMALIES,
    notes=NOTES,
    options=LogSafetyOptions,
    local=_local,
    columnar=_columnar,
    spark="checker.spark.log_safety:check_log_safety_spark",
    doc="DLedger log invariants over appends, log reads and samples",
    examples="checker.planted:log_safety",
)
