"""The queue checker: what producers were told against what consumers can pull.

Pure, one function per anomaly, each returning examples that carry sorted
history ``indexes`` (the shape of :mod:`checker.sets` and :mod:`checker.log_safety`).
History values are the queue workload's (workloads/queue.py, docs/architecture.md §3):

* a **send** is a pair with ``f == "send"``; invoke ``{"topic", "queue", "body"}``,
  ok adds ``{"offset", "queue_offset"}``. Bodies are unique per attempt, so a body
  names one message.
* a **pull** is an ok completion with ``f == "pull"`` and ``{"topic", "queue",
  "offset", "messages": [[queue_offset, offset, body], ...]}``; ``"final": true``
  marks the drains after healing, one per node and queue.

Only ok pulls are evidence. A slave may be behind its master, so pulls are
compared by *position*, never by length: a lagging replica is not an anomaly,
a replica that disagrees is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checker.families import QUEUE_FS, is_queue
from checker.models import freeze
from harness.core.checker import ALL, CheckConfig, CheckerSpec, OpShape
from harness.core.op import Op
from harness.core.options import option
from harness.core.paired import PairedHistory

__all__ = [
    "QUEUE",
    "LOSS_WINDOW",
    "QUEUE_FS",
    "QueueCheckOptions",
    "check_queue",
    "queue_ack_mismatch",
    "queue_divergence",
    "queue_duplicate",
    "queue_failed_appears",
    "queue_gap",
    "queue_lost",
    "queue_order",
    "queue_phys_conflict",
    "queue_phys_regress",
    "queue_unexpected",
]


@dataclass(frozen=True, slots=True)
class Seen:
    """One message in one ok pull."""

    topic: Any
    queue: Any
    queue_offset: int
    offset: Any
    body: Any
    index: int  # the pull completion's history index
    node: str | None
    final: bool


def _sorted(ops: Sequence[Op]) -> PairedHistory:
    return PairedHistory.of(ops)


def _sends(ops: Sequence[Op]) -> list[tuple[Op, Op | None]]:
    return [(i, c) for i, c in PairedHistory.of(ops).pairs("send") if isinstance(i.value, dict)]


def _pulls(ops: Sequence[Op]) -> list[Op]:
    return [op for op in ops if op.f == "pull" and op.type == "ok" and isinstance(op.value, dict)]


def _seen(ops: Sequence[Op]) -> list[Seen]:
    out = []
    for p in _pulls(ops):
        v = p.value
        for m in v.get("messages") or []:
            if isinstance(m, list) and len(m) >= 3 and isinstance(m[0], int):
                out.append(
                    Seen(
                        v.get("topic"),
                        v.get("queue"),
                        m[0],
                        m[1],
                        freeze(m[2]),
                        p.index,
                        p.node,
                        bool(v.get("final")),
                    )
                )
    return out


def _msg_key(v: dict) -> tuple[Any, Any, Any]:
    return (v.get("topic"), v.get("queue"), freeze(v.get("body")))


def queue_lost(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Acknowledged sends that no node's final drain of their queue holds.

    ``{"topic", "queue", "body", "indexes": [send ok, first final pull of that queue]}``;
    nothing when no final drain reached that queue (then :func:`check_queue` says unknown).
    """
    s = _sorted(ops)
    seen = _seen(s)
    final_of: dict[tuple[Any, Any], int] = {}
    for p in _pulls(s):
        if p.value.get("final"):
            final_of.setdefault((p.value.get("topic"), p.value.get("queue")), p.index)
    have = {(x.topic, x.queue, x.body) for x in seen if x.final}
    out = []
    for inv, comp in _sends(s):
        if comp is None or comp.type != "ok":
            continue
        k = _msg_key(inv.value)
        fin = final_of.get(k[:2])
        if fin is not None and k not in have:
            out.append(
                {
                    "topic": k[0],
                    "queue": k[1],
                    "body": inv.value.get("body"),
                    "indexes": sorted([comp.index, fin]),
                }
            )
    return out


def queue_duplicate(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """One message delivered under two different (topic, queue, queue offset) positions."""
    pos: dict[Any, dict[tuple[Any, Any, int], int]] = {}
    for x in _seen(_sorted(ops)):
        pos.setdefault(x.body, {}).setdefault((x.topic, x.queue, x.queue_offset), x.index)
    out = []
    for body, where in pos.items():
        if len(where) > 1:
            out.append(
                {
                    "body": body,
                    "positions": [list(w) for w in sorted(where, key=str)],
                    "indexes": sorted(set(where.values())),
                }
            )
    return sorted(out, key=lambda e: e["indexes"])


def queue_divergence(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """One queue position holding different messages (on two nodes, or at two times)."""
    at: dict[tuple[Any, Any, int], dict[Any, tuple[int, str | None]]] = {}
    for x in _seen(_sorted(ops)):
        at.setdefault((x.topic, x.queue, x.queue_offset), {}).setdefault(x.body, (x.index, x.node))
    out = []
    for (t, q, qo), bodies in at.items():
        if len(bodies) > 1:
            out.append(
                {
                    "topic": t,
                    "queue": q,
                    "queue_offset": qo,
                    "bodies": {str(b): n for b, (_, n) in bodies.items()},
                    "indexes": sorted({i for i, _ in bodies.values()}),
                }
            )
    return sorted(out, key=lambda e: e["indexes"])


def queue_gap(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """A pull whose messages do not carry dense queue offsets from the offset asked."""
    out = []
    for p in _pulls(_sorted(ops)):
        msgs = p.value.get("messages") or []
        qos = [m[0] for m in msgs if isinstance(m, list) and m]
        start = p.value.get("offset")
        if qos and (
            qos != list(range(qos[0], qos[0] + len(qos)))
            or (isinstance(start, int) and qos[0] != max(start, 0))
        ):
            out.append(
                {
                    "topic": p.value.get("topic"),
                    "queue": p.value.get("queue"),
                    "asked": start,
                    "queue_offsets": qos[:20],
                    "node": p.node,
                    "indexes": [p.index],
                }
            )
    return out


def queue_order(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """A queue's messages not in commit order: physical offsets must grow with queue offset.

    Within one pull, and across pulls by the first physical offset seen at each position.
    """
    s = _sorted(ops)
    out = []
    for p in _pulls(s):
        msgs = [m for m in p.value.get("messages") or [] if isinstance(m, list) and len(m) >= 2]
        for a, b in zip(msgs, msgs[1:], strict=False):
            if isinstance(a[1], int) and isinstance(b[1], int) and b[1] <= a[1]:
                out.append(
                    {
                        "topic": p.value.get("topic"),
                        "queue": p.value.get("queue"),
                        "queue_offsets": [a[0], b[0]],
                        "offsets": [a[1], b[1]],
                        "node": p.node,
                        "indexes": [p.index],
                    }
                )
                break
    first: dict[tuple[Any, Any], dict[int, tuple[int, int]]] = {}
    for x in _seen(s):
        if isinstance(x.offset, int):
            first.setdefault((x.topic, x.queue), {}).setdefault(x.queue_offset, (x.offset, x.index))
    reported = {tuple(e["indexes"]) for e in out}
    for (t, q), by_qo in first.items():
        prev: tuple[int, int, int] | None = None
        for qo in sorted(by_qo):
            off, idx = by_qo[qo]
            if prev is not None and off <= prev[1]:
                ix = sorted({prev[2], idx})
                if tuple(ix) not in reported:
                    out.append(
                        {
                            "topic": t,
                            "queue": q,
                            "queue_offsets": [prev[0], qo],
                            "offsets": [prev[1], off],
                            "indexes": ix,
                        }
                    )
                break
            prev = (qo, off, idx)
    return sorted(out, key=lambda e: e["indexes"])


def queue_phys_conflict(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """One physical commitlog offset holding two different messages."""
    at: dict[Any, dict[Any, int]] = {}
    for x in _seen(_sorted(ops)):
        if isinstance(x.offset, int):
            at.setdefault(x.offset, {}).setdefault((x.topic, x.queue, x.body), x.index)
    return sorted(
        (
            {
                "offset": off,
                "messages": [list(k) for k in msgs],
                "indexes": sorted(set(msgs.values())),
            }
            for off, msgs in at.items()
            if len(msgs) > 1
        ),
        key=lambda e: e["indexes"],
    )


def queue_ack_mismatch(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """An acked send found at another (offset, queue offset) than the ack said."""
    s = _sorted(ops)
    where: dict[tuple[Any, Any, Any], Seen] = {}
    for x in _seen(s):
        where.setdefault((x.topic, x.queue, x.body), x)
    out = []
    for inv, comp in _sends(s):
        if comp is None or comp.type != "ok" or not isinstance(comp.value, dict):
            continue
        found = where.get(_msg_key(inv.value))
        if found is None:
            continue
        acked = (comp.value.get("offset"), comp.value.get("queue_offset"))
        if acked != (found.offset, found.queue_offset):
            out.append(
                {
                    "body": inv.value.get("body"),
                    "acked": list(acked),
                    "seen": [found.offset, found.queue_offset],
                    "node": found.node,
                    "indexes": sorted([comp.index, found.index]),
                }
            )
    return out


def queue_phys_regress(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Physical offsets must grow in real time: a send acked before another was invoked
    must have the lower offset (the log only grows)."""
    s = _sorted(ops)
    inv_of = {c.index: i.index for i, c in s.pairs() if c is not None}
    best: tuple[int, int] | None = None  # (offset, ok index) of the highest ack so far
    before: dict[int, tuple[int, int] | None] = {}
    out = []
    for op in s:
        if op.f != "send":
            continue
        if op.type == "invoke":
            before[op.index] = best
            continue
        if op.type != "ok" or not isinstance(op.value, dict):
            continue
        off = op.value.get("offset")
        if not isinstance(off, int):
            continue
        inv_index = inv_of.get(op.index)
        prior = before.get(inv_index) if inv_index is not None else None
        if prior is not None and off <= prior[0]:
            out.append(
                {
                    "body": op.value.get("body"),
                    "offset": off,
                    "earlier_offset": prior[0],
                    "indexes": sorted([prior[1], op.index]),
                }
            )
        if best is None or off > best[0]:
            best = (off, op.index)
    return out


def queue_failed_appears(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """A send that failed (certainly not written) yet is pulled."""
    s = _sorted(ops)
    first: dict[tuple[Any, Any, Any], int] = {}
    for x in _seen(s):
        first.setdefault((x.topic, x.queue, x.body), x.index)
    out = []
    for inv, comp in _sends(s):
        if comp is not None and comp.type == "fail":
            i = first.get(_msg_key(inv.value))
            if i is not None:
                out.append({"body": inv.value.get("body"), "indexes": sorted([comp.index, i])})
    return out


def queue_unexpected(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """A pulled message that no send ever tried (in that queue)."""
    s = _sorted(ops)
    tried = {_msg_key(inv.value) for inv, _ in _sends(s)}
    first: dict[tuple[Any, Any, Any], int] = {}
    for x in _seen(s):
        k = (x.topic, x.queue, x.body)
        if k not in tried:
            first.setdefault(k, x.index)
    return [
        {"topic": k[0], "queue": k[1], "body": k[2], "indexes": [i]}
        for k, i in sorted(first.items(), key=lambda t: t[1])
    ]


CHECKS = (
    ("queue-lost", queue_lost),
    ("queue-duplicate", queue_duplicate),
    ("queue-divergence", queue_divergence),
    ("queue-gap", queue_gap),
    ("queue-order", queue_order),
    ("queue-phys-conflict", queue_phys_conflict),
    ("queue-phys-regress", queue_phys_regress),
    ("queue-ack-mismatch", queue_ack_mismatch),
    ("queue-failed-appears", queue_failed_appears),
    ("queue-unexpected", queue_unexpected),
)


LOSS_WINDOW = (
    ("queue-lost", "queue-loss-window"),
    ("queue-divergence", "queue-loss-window-divergence"),
    ("queue-phys-conflict", "queue-loss-window-phys-conflict"),
    ("queue-phys-regress", "queue-loss-window-phys-regress"),
    ("queue-ack-mismatch", "queue-loss-window-ack-mismatch"),
)
"""A declared loss window (e.g. RocketMQ's ASYNC_FLUSH): acked messages lost, and what a
lost tail rewritten by new messages shows (positions holding other messages, offsets that
go back), are measured as these notes instead of anomalies."""


def check_queue(ops: Sequence[Op], loss_window: str | None = None) -> dict[str, Any]:
    """Every queue anomaly as one result map (``valid``, ``anomalies``, ``notes``,
    ``unknown``, ``stats``).

    ``valid`` is False on any anomaly, ``"unknown"`` when acked sends exist but no
    final drain does (nothing to judge losses by). ``loss_window`` is the DB's declared
    window (its words): the kinds of :data:`LOSS_WINDOW` become notes, and
    ``stats.loss_window`` says which promise was checked.
    """
    s = _sorted(ops)
    anomalies = {}
    for kind, fn in CHECKS:
        ex = fn(s)
        if ex:
            anomalies[kind] = ex
    notes = {}
    if loss_window:
        for kind, note in LOSS_WINDOW:
            if kind in anomalies:
                notes[note] = anomalies.pop(kind)
    sends = _sends(s)
    pulls = _pulls(s)
    finals = [p for p in pulls if p.value.get("final")]
    ok_sends = sum(1 for _, c in sends if c is not None and c.type == "ok")
    unknown = ["queue-lost"] if ok_sends and not finals else []
    final_bodies = {(x.topic, x.queue, x.body) for x in _seen(s) if x.final}
    stats = {
        "sends": {
            t: sum(1 for _, c in sends if (c.type if c else "info") == t)
            for t in ("ok", "fail", "info")
        },
        "pulls": len(pulls),
        "final_pulls": len(finals),
        "final_nodes": sorted({str(p.node) for p in finals}),
        "final_messages": len(final_bodies),
        "recovered": sum(
            1
            for inv, c in sends
            if (c is None or c.type == "info") and _msg_key(inv.value) in final_bodies
        ),
    }
    if loss_window:
        stats["loss_window"] = loss_window
    valid: bool | str = False if anomalies else ("unknown" if unknown else True)
    return {
        "valid": valid,
        "anomalies": anomalies,
        "notes": notes,
        "unknown": unknown,
        "stats": stats,
    }


@dataclass(frozen=True)
class QueueCheckOptions:
    loss_window: str | None = option(
        None,
        "the DB's declared loss window, in words (e.g. RocketMQ ASYNC_FLUSH): lost acks and a "
        "rewritten tail are measured as queue-loss-window notes, not anomalies",
    )


def _local(history: PairedHistory, config: CheckConfig) -> dict[str, Any]:
    window = config.options.loss_window if config.options is not None else None
    return check_queue(history, loss_window=window)


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    return ALL if is_queue(shape) else None


QUEUE = CheckerSpec(
    name="queue",
    claims=_claims,
    anomalies=tuple(kind for kind, _ in CHECKS),
    notes=tuple(note for _, note in LOSS_WINDOW),
    options=QueueCheckOptions,
    local=_local,
    doc="the broker queue: acked sends survive, pulls agree by position (send/pull)",
    examples="checker.planted:queue",
)
