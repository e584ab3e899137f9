"""The total-queue checker: consume-and-ack queues, judged over every dequeue of a run.

Why a second queue checker: :mod:`checker.queue` judges RocketMQ-style queues, where
a consumer reads at an offset and the message stays, so the final drains alone show
what the queue holds. In an AMQP-style queue (Redis lists with a processing list,
NATS JetStream work queues, ZooKeeper's queue recipe) a consumer that acks a message
*removes* it: a message consumed mid-run is gone from the final drain, and a checker
that looks only there calls it lost. Here every dequeue of the history counts, the
ones during the load and the final drains alike (Jepsen's total-queue notions).

The history (docs/queues.md has the same text for plugin authors):

* ``enqueue``: invoke value ``{"body": b}``; bodies are unique per test (JSON strings
  or integers, compared by text). ``ok`` may add ``"id"`` (the system's message id).
  ``ok``: the queue has it. ``fail``: it certainly does not. ``info`` (or no
  completion): it may or may not.
* ``dequeue``: invoke value ``{}``, or ``{"final": true}`` for the drains after
  healing; ``"max": n`` (optional) says the op takes at most ``n`` messages off the
  queue, which bounds what an unknown dequeue can have consumed. ``ok`` value
  ``{"messages": [{"body": b, "acked": bool}, ...]}`` in delivery order: each delivery,
  and whether its ack was confirmed (a redelivery is simply the same body again);
  ``[]`` means the queue looked empty. ``fail``: nothing was delivered or removed.
  ``info``: it may have consumed up to ``max`` messages we never saw; its value may
  still list the deliveries the client did see (they count as seen).

The anomalies:

* ``lost``: an ok enqueue whose body no dequeue ever delivered. Judged only when a
  final drain saw the queue empty (else a message may still sit in it). Unknown
  dequeues may have taken messages silently, so the count of missing messages is
  compared with the most those could have taken (the sum of their ``max``;
  unbounded when one has none): at most that many missing is ``unknown``, more is
  ``lost`` (``stats.lost_provable`` is how many at least).
* ``unexpected``: a delivered body that no enqueue ever tried.
* ``failed-enqueue-delivered``: a delivered body whose enqueue failed.
* ``duplicated``: a body delivered again after a delivery of it was acked: in a
  dequeue invoked after the completion that confirmed the ack, or later in the same
  dequeue's list. A redelivery before any confirmed ack is what at-least-once
  allows: ``notes.redelivered`` and ``stats.redelivered``, not an anomaly.
* ``order`` (option ``ordered``): FIFO across real time. Message ``b`` overtook ``a``
  when ``a``'s enqueue was ok before ``b``'s was invoked and ``b``'s first delivery
  came strictly before ``a``'s: its dequeue completed before ``a``'s was invoked, or
  it stands before ``a`` in one dequeue's list. An unknown dequeue invoked before
  ``b``'s delivery completed may have held ``a`` (and ``a`` came back by
  redelivery), so such overtakes are counted in ``stats.order_unjudged`` instead.

A history lacking a field these need raises :class:`HistoryError` naming the op's
history index and the field.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.checker import ALL, CheckConfig, CheckerSpec, OpShape
from harness.core.errors import HistoryError
from harness.core.history import Op, pair_ops
from harness.core.options import option, parse_options

__all__ = [
    "ANOMALY_KINDS",
    "QUEUE_FS",
    "TOTAL_QUEUE",
    "TotalQueueOptions",
    "body_key",
    "check_total_queue",
    "verdict_of",
]

QUEUE_FS = frozenset({"enqueue", "dequeue"})
ANOMALY_KINDS = ("lost", "unexpected", "failed-enqueue-delivered", "duplicated", "order")
EXAMPLES = 20
"""Examples kept per kind here (the counts in ``stats.anomaly_counts`` are whole)."""


@dataclass(frozen=True)
class TotalQueueOptions:
    """What the system promises beyond consume-and-ack."""

    ordered: bool = option(False, "the queue promises FIFO order: check it")


def body_key(body: Any) -> str:
    """A body as the text both engines compare: a string as itself, anything else as
    compact JSON (so ``7`` and ``"7"`` are one body: keep bodies of one type)."""
    if isinstance(body, str):
        return body
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message in one dequeue's value."""

    body: str
    inv: int  # the dequeue's invocation index
    comp: int  # its completion's index
    pos: int  # place in the dequeue's message list
    acked: bool
    final: bool


@dataclass
class _Parsed:
    enq: dict[str, tuple[int, str, int | None]]  # body -> (invoke index, outcome, completion)
    deliveries: list[Delivery]
    deq_types: dict[str, int]
    finals: int
    drained: bool
    capacity: float  # what unknown dequeues may have consumed unseen
    unknown_deq_invokes: list[int]  # invocation indexes of unknown dequeues, sorted


def _need(cond: bool, op: Op, field: str, what: str) -> None:
    if not cond:
        raise HistoryError(f"{op.f} {op.type}: {what}", index=op.index, field=field)


def _parse(ops: Sequence[Op]) -> _Parsed:
    s = sorted((o for o in ops if o.is_client and o.f in QUEUE_FS), key=lambda o: o.index)
    enq: dict[str, tuple[int, str, int | None]] = {}
    deliveries: list[Delivery] = []
    deq_types = {"ok": 0, "fail": 0, "info": 0}
    finals, drained, capacity = 0, False, 0.0
    unknown: list[int] = []
    for i, c in pair_ops(s).items():
        inv = s[i]
        comp = None if c is None else s[c]
        outcome = "info" if comp is None else comp.type
        if inv.f == "enqueue":
            v = inv.value
            _need(
                isinstance(v, dict) and v.get("body") is not None,
                inv,
                "value.body",
                "needs {'body': b}",
            )
            b = body_key(v["body"])
            if b in enq:
                raise HistoryError(
                    f"body {b!r} enqueued again (first at op {enq[b][0]}); bodies must be unique",
                    index=inv.index,
                    field="value.body",
                )
            enq[b] = (inv.index, outcome, None if comp is None else comp.index)
            continue
        v = inv.value
        _need(v is None or isinstance(v, dict), inv, "value", "needs {} or {'final': true}")
        final = bool((v or {}).get("final"))
        most = (v or {}).get("max")
        _need(
            most is None or (isinstance(most, int) and not isinstance(most, bool) and most >= 0),
            inv,
            "value.max",
            "must be a non-negative integer",
        )
        deq_types[outcome] += 1
        finals += final
        if outcome == "fail":
            continue
        msgs: Any = None
        if comp is not None and isinstance(comp.value, dict):
            msgs = comp.value.get("messages")
        if outcome == "ok":
            _need(
                comp is not None and isinstance(comp.value, dict) and isinstance(msgs, list),
                comp or inv,
                "value.messages",
                "needs {'messages': [{'body', 'acked'}, ...]}",
            )
        else:
            capacity += math.inf if most is None else most
            unknown.append(inv.index)
        if not isinstance(msgs, list):
            continue
        assert comp is not None
        if outcome == "ok" and final and not msgs:
            drained = True
        for pos, m in enumerate(msgs):
            _need(
                isinstance(m, dict) and m.get("body") is not None,
                comp,
                f"value.messages[{pos}].body",
                "each delivered message needs a body",
            )
            _need(
                isinstance(m.get("acked"), bool),
                comp,
                f"value.messages[{pos}].acked",
                "each delivered message needs 'acked': true or false",
            )
            deliveries.append(
                Delivery(body_key(m["body"]), inv.index, comp.index, pos, m["acked"], final)
            )
    return _Parsed(enq, deliveries, deq_types, finals, drained, capacity, sorted(unknown))


@dataclass(frozen=True, slots=True)
class _Seen:
    """Per body: the earliest start and the earliest end of its deliveries."""

    first_inv: int  # the earliest invocation of a dequeue that delivered it
    first_comp: int  # the earliest completion of a dequeue that delivered it
    first_pos: int  # its first place in the dequeue invoked at first_inv


def _seen(deliveries: list[Delivery]) -> dict[str, _Seen]:
    out: dict[str, _Seen] = {}
    for d in deliveries:
        cur = out.get(d.body)
        if cur is None:
            out[d.body] = _Seen(d.inv, d.comp, d.pos)
            continue
        inv, pos = min((cur.first_inv, cur.first_pos), (d.inv, d.pos))
        out[d.body] = _Seen(inv, min(cur.first_comp, d.comp), pos)
    return out


def _duplicates(deliveries: list[Delivery]) -> tuple[list[dict], list[dict]]:
    """(duplicated examples, redelivered notes), one per body delivered more than once.

    Duplicated: some delivery was invoked after the completion that confirmed an
    ack of that body, or follows an acked delivery in the same dequeue's list.
    """
    by_body: dict[str, list[Delivery]] = {}
    for d in deliveries:
        by_body.setdefault(d.body, []).append(d)
    dup, redel = [], []
    for body, ds in by_body.items():
        if len(ds) < 2:
            continue
        pairs = [
            (a, d)
            for a in ds
            if a.acked
            for d in ds
            if d.inv > a.comp or (d.comp == a.comp and d.pos > a.pos)
        ]
        if pairs:
            # the example: the earliest ack confirmation, and the first delivery
            # completed after it (none when the duplicate is later in that same list)
            acked_at = min(d.comp for d in ds if d.acked)
            after = [d.comp for d in ds if d.comp > acked_at]
            dup.append(
                {
                    "body": body,
                    "deliveries": len(ds),
                    "acked_at": acked_at,
                    "indexes": [acked_at, min(after)] if after else [acked_at],
                }
            )
        else:
            redel.append(
                {"body": body, "deliveries": len(ds), "indexes": sorted({d.comp for d in ds})}
            )
    return sorted(dup, key=_by_indexes), sorted(redel, key=_by_indexes)


def _fail_index(e: tuple[int, str, int | None]) -> int:
    return e[0] if e[2] is None else e[2]


def _by_indexes(e: Mapping[str, Any]) -> tuple[list[int], str]:
    """Examples in history order (both engines sort alike: indexes, then body)."""
    return list(e["indexes"]), str(e["body"])


def _order(p: _Parsed, seen: dict[str, _Seen]) -> tuple[list[dict], int]:
    """(order examples, unjudged count): one per body that overtook an earlier-enqueued one.

    ``b`` overtook ``a`` when ``a``'s enqueue was ok before ``b``'s was invoked and
    either some dequeue delivering ``b`` completed before any dequeue delivering ``a``
    was invoked, or ``b`` stands before ``a``'s first place in the dequeue where
    ``a`` was first delivered.
    """
    ok_at = {
        b: comp
        for b, (_, outcome, comp) in p.enq.items()
        if outcome == "ok" and comp is not None and b in seen
    }
    # across dequeues: a's by ok index, with the running max of their first invocation
    cands = sorted((c, b) for b, c in ok_at.items())
    oks = [c for c, _ in cands]
    best: list[tuple[int, str]] = []
    for _, a in cands:
        item = (seen[a].first_inv, a)
        best.append(item if not best or item > best[-1] else best[-1])
    # the example names the least (by text) of the messages found overtaken
    overtook: dict[str, str] = {}

    def note(b: str, a: str) -> None:
        overtook[b] = min(overtook.get(b, a), a)

    for b, sb in seen.items():
        e = p.enq.get(b)
        if e is None:
            continue
        k = bisect.bisect_left(oks, e[0])  # a's ok strictly before b's invocation
        if k and best[k - 1][0] > sb.first_comp:
            note(b, best[k - 1][1])
    # within one dequeue: b before a's first place in a's first dequeue (per delivery of
    # b, the a with the least ok index among those later in that list)
    firsts: dict[int, list[tuple[int, int, str]]] = {}  # dequeue invoke -> (pos, ok, a)
    for a, c in ok_at.items():
        firsts.setdefault(seen[a].first_inv, []).append((seen[a].first_pos, c, a))
    for d in p.deliveries:
        e = p.enq.get(d.body)
        later = [(c, a) for pos, c, a in firsts.get(d.inv, ()) if pos > d.pos]
        if e is not None and later and min(later)[0] < e[0]:
            note(d.body, min(later)[1])
    first_unknown = p.unknown_deq_invokes[0] if p.unknown_deq_invokes else math.inf
    out, unjudged = [], 0
    for b, a in overtook.items():
        if first_unknown < seen[b].first_comp:
            unjudged += 1
        else:
            out.append({"body": b, "overtook": a, "indexes": [seen[b].first_comp]})
    return sorted(out, key=_by_indexes), unjudged


def verdict_of(
    anomalies: Mapping[str, Any], missing: int, capacity: float, drained: bool
) -> tuple[bool | str, list[str], str | None]:
    """(valid, unknown kinds, reason): the rule both engines apply to their counts."""
    if missing and not drained:
        reason = (
            f"{missing} acked message(s) never dequeued and no final drain saw the queue "
            "empty: they may still be in it"
        )
        return (False if anomalies else "unknown"), ["lost"], reason
    if missing and missing <= capacity:
        cap = "unbounded" if math.isinf(capacity) else int(capacity)
        reason = (
            f"{missing} acked message(s) never dequeued, and unknown (info) dequeues may "
            f"have consumed up to {cap} unseen"
        )
        return (False if anomalies else "unknown"), ["lost"], reason
    return (not anomalies), [], None


def shaped(
    valid: bool | str,
    unknown: list[str],
    reason: str | None,
    anomalies: Mapping[str, Any],
    notes: Mapping[str, Any],
    stats: Mapping[str, Any],
) -> dict[str, Any]:
    """The result map both engines return, from what :func:`verdict_of` decided."""
    out: dict[str, Any] = {
        "valid": valid,
        "anomalies": dict(anomalies),
        "unknown": unknown,
        "notes": dict(notes),
        "stats": dict(stats),
    }
    if reason:
        out["reason"] = reason
    return out


def check_total_queue(
    ops: Sequence[Op],
    opts: Mapping[str, Any] | TotalQueueOptions | None = None,
    *,
    cap: int = EXAMPLES,
) -> dict[str, Any]:
    """The consume-and-ack queue anomalies of a history, as one result map.

    ``valid`` is False on any anomaly, ``"unknown"`` when missing messages may be
    explained by what was not measured (see the module docstring), else True.
    """
    o = (
        opts
        if isinstance(opts, TotalQueueOptions)
        else parse_options(TotalQueueOptions, opts, role="checker total-queue")
    )
    p = _parse(ops)
    seen = _seen(p.deliveries)
    delivered = set(seen)
    anomalies: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, int] = {}

    def put(kind: str, examples: list[dict[str, Any]]) -> None:
        if examples:
            counts[kind] = len(examples)
            anomalies[kind] = examples[:cap]

    missing = sorted(
        (comp, b)
        for b, (_, outcome, comp) in p.enq.items()
        if outcome == "ok" and comp is not None and b not in delivered
    )
    unexpected: list[dict[str, Any]] = sorted(
        ({"body": b, "indexes": [d.first_comp]} for b, d in seen.items() if b not in p.enq),
        key=_by_indexes,
    )
    put("unexpected", unexpected)
    failed: list[dict[str, Any]] = sorted(
        (
            {"body": b, "indexes": sorted({_fail_index(p.enq[b]), d.first_comp})}
            for b, d in seen.items()
            if b in p.enq and p.enq[b][1] == "fail"
        ),
        key=_by_indexes,
    )
    put("failed-enqueue-delivered", failed)
    dup, redel = _duplicates(p.deliveries)
    put("duplicated", dup)
    order_unjudged = 0
    if o.ordered:
        order, order_unjudged = _order(p, seen)
        put("order", order)
    lost_examples = [{"body": b, "indexes": [c]} for c, b in missing]
    provable = 0
    if missing and p.drained and len(missing) > p.capacity:
        provable = int(len(missing) - p.capacity)
        put("lost", lost_examples)
    valid, unknown, reason = verdict_of(anomalies, len(missing), p.capacity, p.drained)
    notes: dict[str, list[dict[str, Any]]] = {}
    if redel:
        notes["redelivered"] = redel[:cap]
    if unknown:
        notes["possibly-lost"] = lost_examples[:cap]
    enq_types = {"ok": 0, "fail": 0, "info": 0}
    for _, outcome, _c in p.enq.values():
        enq_types[outcome] += 1
    stats = {
        "enqueues": enq_types,
        "dequeues": p.deq_types,
        "final_dequeues": p.finals,
        "drained": p.drained,
        "deliveries": len(p.deliveries),
        "delivered_messages": len(delivered),
        "recovered": sum(
            1 for b, (_, outcome, _c) in p.enq.items() if outcome == "info" and b in delivered
        ),
        "missing": len(missing),
        "unknown_dequeue_capacity": ("unbounded" if math.isinf(p.capacity) else int(p.capacity)),
        "lost_provable": provable,
        "redelivered": len(redel),
        "order_checked": o.ordered,
        "order_unjudged": order_unjudged,
        "anomaly_counts": counts,
    }
    return shaped(valid, unknown, reason, anomalies, notes, stats)


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    """Every enqueue and dequeue, whatever its value (a malformed one is an error, not
    someone else's op)."""
    return ALL if shape.f in QUEUE_FS else None


def _local(history: Sequence[Op], config: CheckConfig) -> dict[str, Any]:
    return check_total_queue(history, config.options, cap=config.cap)


TOTAL_QUEUE = CheckerSpec(
    name="total-queue",
    claims=_claims,
    anomalies=ANOMALY_KINDS,
    notes=("redelivered", "possibly-lost"),
    options=TotalQueueOptions,
    local=_local,
    spark="checker.spark.total_queue:spark_check",
    examples="checker.planted:total_queue",
    doc="consume-and-ack queues: acked enqueues never dequeued, unexpected and "
    "duplicated deliveries, FIFO order (option ordered), over every dequeue of the run",
)
"""The registered checker (entry point ``total-queue`` of ``splitbrain.checkers``)."""
