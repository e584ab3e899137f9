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
  same ``process`` (:func:`harness.core.history.pair_ops`); a malformed history raises
  :class:`~harness.core.errors.HistoryError`.
* **Samples** are the records with ``f == "sample"`` and ``type == "ok"``; no
  pairing is needed. The sampled node is the record's ``node``; its ``value`` is
  ``{role, term, leader, begin, end, committed, incarnation}``. A sample whose
  field needed by a check is not an integer is ignored by that check
  (``incarnation`` may be anything hashable, including null).
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
  :func:`duplicate_payload`).
* **Value ordering.** Where an example lists ``[term, payload]`` values, they are
  sorted by ``(term, json.dumps(payload, sort_keys=True))``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from harness.core.history import Op, pair_ops

__all__ = [
    "KINDS",
    "NOTE_KINDS",
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
    "append_order",
    "check_log_safety",
    "is_log_safety_op",
]

KINDS = (
    "committed-regress",
    "committed-beyond-end",
    "two-leaders-in-term",
    "term-regress",
    "divergent-committed",
    "lost-ack",
    "failed-append-present",
    "duplicate-payload",
    "append-order",
)
NOTE_KINDS = ("committed-regress-restart",)


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
    """Sorted ops that remember their parsed samples, appends and reads.

    :func:`check_log_safety` runs every anomaly function over one history;
    this spares each of them re-pairing it.
    """

    samples: list[Any]
    appends: list[Any]
    reads: list[Any]


def _prepare(ops: Sequence[Op]) -> _Prepared:
    prep = _Prepared(_sorted_ops(ops))
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
    index: int
    node: Any
    incarnation: Any
    value: dict[str, Any]


def _samples(ops: Sequence[Op]) -> list[_Sample]:
    if isinstance(ops, _Prepared) and hasattr(ops, "samples"):
        return ops.samples
    out = []
    for op in _sorted_ops(ops):
        if op.f == "sample" and op.type == "ok" and isinstance(op.value, dict):
            out.append(_Sample(op.index, op.node, _freeze(op.value.get("incarnation")), op.value))
    return out


def _pairs(ops: Sequence[Op], f: str) -> list[tuple[Op, Op | None]]:
    ops = _sorted_ops(ops)
    return [
        (ops[i], None if c is None else ops[c]) for i, c in pair_ops(ops).items() if ops[i].f == f
    ]


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
    """Whether a final read's entries reach the node's ledger ``end`` it reports.

    A final read without an integer ``end`` is taken as the whole log, as it always
    was; with one, only the chunk holding the end (or an empty chunk past it) is.
    """
    end = val.get("end")
    if not _is_int(end):
        return True
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
        c = s.value.get("committed")
        if not _is_int(c):
            continue
        k = (s.node, s.incarnation)
        prev = best.get(k)
        if prev is None or c > prev[0]:
            best[k] = (c, s.index)
        elif c < prev[0] and k not in reported:
            reported.add(k)
            out.append(
                {
                    "node": s.node,
                    "incarnation": s.value.get("incarnation"),
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
        c = s.value.get("committed")
        if not _is_int(c):
            continue
        prev = last.get(s.node)
        last[s.node] = s
        if prev is None or prev.incarnation == s.incarnation:
            continue
        pc = prev.value.get("committed")
        if _is_int(pc) and c < pc:
            out.append(
                {
                    "node": s.node,
                    "incarnation": s.value.get("incarnation"),
                    "previous_incarnation": prev.value.get("incarnation"),
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
        c, e = s.value.get("committed"), s.value.get("end")
        if _is_int(c) and _is_int(e) and c > e:
            out.append(
                {
                    "node": s.node,
                    "incarnation": s.value.get("incarnation"),
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
        t = s.value.get("term")
        if s.value.get("role") == "leader" and _is_int(t):
            first.setdefault(t, {}).setdefault(s.node, s.index)
    out = []
    for t, nodes in first.items():
        if len(nodes) > 1:
            out.append(
                {"term": t, "nodes": sorted(nodes, key=str), "indexes": sorted(nodes.values())}
            )
    return _by_indexes(out)


def term_regress(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """I6: a node's term went down, possibly across a restart (currentTerm not fsynced).

    Per node (all incarnations together) in history order: every sample whose
    integer ``term`` is below the maximum term of that node's earlier samples is
    one example::

        {"node", "incarnation", "from": earlier max, "to": term,
         "indexes": [index of the first sample that reached the max, offending index]}
    """
    best: dict[Any, tuple[int, int]] = {}
    out = []
    for s in _samples(ops):
        t = s.value.get("term")
        if not _is_int(t):
            continue
        prev = best.get(s.node)
        if prev is None or t > prev[0]:
            best[s.node] = (t, s.index)
        elif t < prev[0]:
            out.append(
                {
                    "node": s.node,
                    "incarnation": s.value.get("incarnation"),
                    "from": prev[0],
                    "to": t,
                    "indexes": [prev[1], s.index],
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
    "append-order": append_order,
}


def is_log_safety_op(op: Op) -> bool:
    """Whether an op feeds this checker: appends, samples and keyless dict-valued reads."""
    if op.f in ("append", "sample"):
        return True
    return op.f == "read" and op.key is None and isinstance(op.value, dict)


def check_log_safety(ops: Sequence[Op], ha: dict[str, Any] | None = None) -> dict[str, Any]:
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
    anomalies = {}
    for kind, fn in _FUNCS.items():
        ex = fn(ops)
        if ex:
            anomalies[kind] = ex
    notes = {}
    if ha is not None and not ha.get("sync"):  # mode ha, async master: a loss window
        for kind, note in (("lost-ack", "loss-window"), ("append-order", "loss-window-order")):
            if kind in anomalies:
                notes[note] = anomalies.pop(kind)
    restart = committed_regress_restart(ops)
    if restart:
        notes["committed-regress-restart"] = restart
    unknown = [] if lost_ack_judgeable(ops) else ["lost-ack"]
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
