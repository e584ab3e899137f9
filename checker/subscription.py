"""The subscription checker: what watches and streams delivered, against what they promise.

Why a checker of its own: a watch (etcd), a consumer (NATS JetStream, Kafka by offset) or a
ZooKeeper watch is read through a stream of events, not by asking for a value, and its
guarantees are about that stream: every event once, in order, none left out, a re-subscribe
from a position sees exactly what follows it. A register or queue checker cannot see any of
that. Systems promise different subsets, so each guarantee is one option and one anomaly,
and the DB's client (or the workload) declares which it promises: no verdict here assumes
another system's semantics.

The history (docs/subscriptions.md has the same text for plugin authors). Positions are
integers >= 1 (etcd revisions, ZooKeeper zxids, a stream's sequence, a Kafka offset plus
one); a ``stream`` is what one position sequence orders (an etcd key, a subject, a
partition). Values are unique per test (JSON strings or integers, compared as text).

* ``publish``: invoke ``{"events": [{"stream": s, "value": v}, ...]}``, one atomic unit
  (several events: one transaction). ``ok`` value: the same events, each with the
  ``"pos"`` the system gave it. ``fail``: it certainly did not happen; ``info``: unknown.
* ``subscribe``: invoke ``{"streams": [s, ...] | null (every stream), "from": R}``: the
  events after position ``R`` (0: from the beginning); ``"final": true`` for the ones
  after the heal. ``ok`` (or ``info``, when the subscription broke) value ``{"events":
  [{"stream", "value", "pos", "batch"?}, ...], "progress"?: [{"pos", "after",
  "stream"?}, ...]}``: every event in delivery order (``batch``: the response or message
  that carried it), and the progress marks the system gave (``pos``: "everything up to
  here was delivered", given after the first ``after`` events). ``fail``: nothing was
  delivered.
* ``snapshot``: the final state, read after the heal: invoke ``{"final": true}``; ``ok``
  value ``{"pos": P | null, "streams": {s: {"value": v, "pos": p}}}``: each stream's last
  value and its position (``pos`` the position the read was taken at).

What is at a position is known from every observation: the positions ok publishes were
given, and every delivery. The anomalies, each under the option of its guarantee:

* ``watch-unordered`` (``ordered``): an event delivered after one with a higher position
  (within a subscription; per stream when ``scope`` is ``stream``).
* ``watch-gap`` (``no_gap``): a subscription's streams hold an event (acknowledged,
  delivered to another subscriber, or in a final snapshot) between its start and the
  furthest it reached (its highest position delivered or progress mark; per stream
  under scope ``stream``) that it did not deliver.
* ``watch-duplicate`` (``no_duplicate``): a subscription delivered one event twice.
* ``watch-resume-mismatch`` (``resumable``): a subscription from ``R`` delivered an event
  at or before ``R``, or observers disagree on what follows ``R``: two values at one
  position of a stream, or one value at two positions.
* ``watch-non-atomic`` (``atomic``): a subscription delivered part of one publish's
  events on its streams (the rest within its reach), or split them across batches.
* ``watch-went-back`` (``monotonic``): a progress mark below an earlier mark or delivered
  event, or an event at or below a mark given before it.
* ``watch-final-mismatch`` (``final_state``): a final snapshot disagrees with the last
  event observed on a stream (missing, older than it, or another value at its position).
* ``watch-phantom`` (always): a delivered event that no publish tried, or whose publish
  failed.

``valid`` is False on any anomaly; ``"unknown"`` when no subscription delivered anything
(nothing was judged). A malformed record is a :class:`HistoryError` naming its index and
field.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.core.checker import ALL, CheckConfig, CheckerSpec, Example, OpShape
from harness.core.errors import HistoryError
from harness.core.history import Op, pair_ops
from harness.core.options import option, parse_options

__all__ = [
    "ANOMALY_KINDS",
    "SUBSCRIPTION",
    "SUBSCRIPTION_FS",
    "SubscriptionOptions",
    "check_subscription",
    "examples",
    "value_key",
]

SUBSCRIPTION_FS = frozenset({"publish", "subscribe", "snapshot"})
ANOMALY_KINDS = (
    "watch-unordered",
    "watch-gap",
    "watch-duplicate",
    "watch-resume-mismatch",
    "watch-non-atomic",
    "watch-went-back",
    "watch-final-mismatch",
    "watch-phantom",
)
GUARANTEE_OF = {
    "watch-unordered": "ordered",
    "watch-gap": "no_gap",
    "watch-duplicate": "no_duplicate",
    "watch-resume-mismatch": "resumable",
    "watch-non-atomic": "atomic",
    "watch-went-back": "monotonic",
    "watch-final-mismatch": "final_state",
}
"""The option that declares each guarantee (``watch-phantom`` is always judged)."""
MISSING_SHOWN = 5
"""Missing positions listed per gap example (``count`` is whole)."""


@dataclass(frozen=True)
class SubscriptionOptions:
    """The guarantees the system declares; an undeclared one is not judged."""

    ordered: bool = option(True, "events arrive in position order")
    no_gap: bool = option(True, "a subscription delivers every event up to where it reached")
    no_duplicate: bool = option(True, "a subscription delivers each event once")
    resumable: bool = option(True, "a subscription from R delivers exactly what follows R")
    atomic: bool = option(True, "one publish's events arrive together, in one batch")
    monotonic: bool = option(True, "progress marks never go back")
    final_state: bool = option(True, "the last events agree with a final snapshot")
    scope: Literal["subscription", "stream"] = option(
        "subscription",
        "what one position sequence orders: the whole subscription (etcd revisions, "
        "ZooKeeper zxids) or each stream alone (Kafka partitions, NATS streams)",
    )


def value_key(value: Any) -> str:
    """A value as the text both engines compare: a string as itself, anything else as
    compact JSON (keep values of one type: ``7`` and ``"7"`` are one value)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# the parsed history ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    stream: str
    value: str
    pos: int
    batch: int | None = None


@dataclass(frozen=True, slots=True)
class Mark:
    pos: int
    after: int
    stream: str | None = None


@dataclass
class Publish:
    inv: int
    comp: int | None
    outcome: str
    events: list[tuple[str, str]]  # (stream, value) as invoked
    acked: list[Event]  # with positions, when ok


@dataclass
class Subscription:
    inv: int
    comp: int
    outcome: str
    streams: frozenset[str] | None  # None: every stream
    start: int
    final: bool
    events: list[Event]
    marks: list[Mark]


@dataclass
class Snapshot:
    comp: int
    pos: int | None
    streams: dict[str, tuple[int, str]]  # stream -> (pos, value)


@dataclass
class Parsed:
    publishes: list[Publish] = field(default_factory=list)
    subscriptions: list[Subscription] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)


def _need(cond: bool, op: Op, fld: str, what: str) -> None:
    if not cond:
        raise HistoryError(f"{op.f} {op.type}: {what}", index=op.index, field=fld)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _event(op: Op, raw: Any, where: str, *, pos_needed: bool) -> tuple[str, str, Any, Any]:
    _need(isinstance(raw, dict), op, where, "each event is an object")
    _need(isinstance(raw.get("stream"), str), op, f"{where}.stream", "needs a string stream")
    _need(raw.get("value") is not None, op, f"{where}.value", "needs a value")
    pos, batch = raw.get("pos"), raw.get("batch")
    if pos_needed:
        _need(_is_int(pos) and pos >= 1, op, f"{where}.pos", "needs an integer position >= 1")
    _need(batch is None or _is_int(batch), op, f"{where}.batch", "must be an integer")
    return raw["stream"], value_key(raw["value"]), pos, batch


def parse(ops: Iterable[Op]) -> Parsed:
    """The publishes, subscriptions and snapshots of a history, checked for shape."""
    s = sorted((o for o in ops if o.is_client and o.f in SUBSCRIPTION_FS), key=lambda o: o.index)
    p = Parsed(counts={f: {"ok": 0, "fail": 0, "info": 0} for f in sorted(SUBSCRIPTION_FS)})
    for i, c in pair_ops(s).items():
        inv = s[i]
        comp = None if c is None else s[c]
        outcome = "info" if comp is None else comp.type
        p.counts[inv.f][outcome] += 1
        v = inv.value
        if inv.f == "publish":
            _need(
                isinstance(v, dict) and isinstance(v.get("events"), list) and v["events"],
                inv,
                "value.events",
                "needs {'events': [{'stream', 'value'}, ...]}",
            )
            evs = [
                _event(inv, e, f"value.events[{k}]", pos_needed=False)[:2]
                for k, e in enumerate(v["events"])
            ]
            acked: list[Event] = []
            if outcome == "ok":
                assert comp is not None
                cv = comp.value
                _need(
                    isinstance(cv, dict) and isinstance(cv.get("events"), list),
                    comp,
                    "value.events",
                    "needs the events with their positions",
                )
                for k, e in enumerate(cv["events"]):
                    st, val, pos, _b = _event(comp, e, f"value.events[{k}]", pos_needed=True)
                    acked.append(Event(st, val, pos))
            p.publishes.append(
                Publish(inv.index, None if comp is None else comp.index, outcome, evs, acked)
            )
        elif inv.f == "subscribe":
            _need(isinstance(v, dict), inv, "value", "needs {'streams', 'from'}")
            streams = v.get("streams")
            _need(
                streams is None
                or (isinstance(streams, list) and all(isinstance(x, str) for x in streams)),
                inv,
                "value.streams",
                "must be a list of stream names or null (every stream)",
            )
            start = v.get("from", 0)
            _need(_is_int(start) and start >= 0, inv, "value.from", "must be an integer >= 0")
            if outcome == "fail" or comp is None:
                continue
            cv = comp.value
            if outcome == "info" and not (isinstance(cv, dict) and "events" in cv):
                continue  # broke before recording anything
            _need(
                isinstance(cv, dict) and isinstance(cv.get("events"), list),
                comp,
                "value.events",
                "needs {'events': [{'stream', 'value', 'pos'}, ...]}",
            )
            events = [
                Event(*_event(comp, e, f"value.events[{k}]", pos_needed=True))
                for k, e in enumerate(cv["events"])
            ]
            marks: list[Mark] = []
            for k, m in enumerate(cv.get("progress") or []):
                where = f"value.progress[{k}]"
                _need(isinstance(m, dict), comp, where, "each progress mark is an object")
                _need(_is_int(m.get("pos")), comp, f"{where}.pos", "needs an integer position")
                after = m.get("after")
                _need(
                    _is_int(after) and 0 <= after <= len(events),
                    comp,
                    f"{where}.after",
                    "needs the count of events delivered before it",
                )
                st = m.get("stream")
                _need(st is None or isinstance(st, str), comp, f"{where}.stream", "a string")
                marks.append(Mark(m["pos"], after, st))
            p.subscriptions.append(
                Subscription(
                    inv.index,
                    comp.index,
                    outcome,
                    None if streams is None else frozenset(streams),
                    start,
                    bool(v.get("final")),
                    events,
                    marks,
                )
            )
        else:
            if outcome != "ok":
                continue
            assert comp is not None
            cv = comp.value
            _need(
                isinstance(cv, dict) and isinstance(cv.get("streams"), dict),
                comp,
                "value.streams",
                "needs {'pos', 'streams': {stream: {'value', 'pos'}}}",
            )
            snap: dict[str, tuple[int, str]] = {}
            for st, e in cv["streams"].items():
                where = f"value.streams.{st}"
                _need(
                    isinstance(e, dict) and _is_int(e.get("pos")) and e.get("value") is not None,
                    comp,
                    where,
                    "needs {'value', 'pos'}",
                )
                snap[st] = (e["pos"], value_key(e["value"]))
            pos = cv.get("pos")
            _need(pos is None or _is_int(pos), comp, "value.pos", "must be an integer or null")
            p.snapshots.append(Snapshot(comp.index, pos, snap))
    return p


# the facts both engines derive ------------------------------------------------------------


@dataclass
class Known:
    """What every observation says is at each position (acks and deliveries)."""

    at: dict[tuple[str, int], dict[str, list[int]]]  # (stream, pos) -> value -> op indexes
    where: dict[tuple[str, str], dict[int, list[int]]]  # (stream, value) -> pos -> indexes
    positions: dict[str, list[int]]  # stream -> sorted positions to be delivered (+ snapshots)
    txn_of: dict[tuple[str, str], int]  # (stream, value) -> publish invocation index
    txns: dict[int, list[tuple[str, str]]]  # publish invocation -> its events, if >= 2


def known(p: Parsed) -> Known:
    at: dict[tuple[str, int], dict[str, list[int]]] = {}
    where: dict[tuple[str, str], dict[int, list[int]]] = {}

    def saw(stream: str, value: str, pos: int, index: int) -> None:
        at.setdefault((stream, pos), {}).setdefault(value, []).append(index)
        where.setdefault((stream, value), {}).setdefault(pos, []).append(index)

    txn_of: dict[tuple[str, str], int] = {}
    txns: dict[int, list[tuple[str, str]]] = {}
    for pub in p.publishes:
        for sv in pub.events:
            txn_of[sv] = pub.inv
        if len(pub.events) >= 2:
            txns[pub.inv] = list(pub.events)
        for e in pub.acked:
            assert pub.comp is not None
            saw(e.stream, e.value, e.pos, pub.comp)
    for sub in p.subscriptions:
        for e in sub.events:
            saw(e.stream, e.value, e.pos, sub.comp)
    pos_sets: dict[str, set[int]] = {}
    for st, pos in at:
        pos_sets.setdefault(st, set()).add(pos)
    for snap in p.snapshots:
        for st, (pos, _v) in snap.streams.items():
            pos_sets.setdefault(st, set()).add(pos)
    positions = {st: sorted(ps) for st, ps in pos_sets.items()}
    return Known(at, where, positions, txn_of, txns)


def _first(indexes: Iterable[int]) -> int:
    return min(indexes)


def _horizons(sub: Subscription, scope: str) -> dict[str | None, int]:
    """How far a subscription reached: its highest position delivered or marked, as one
    number (key None) under scope ``subscription``, per stream under ``stream``."""
    out: dict[str | None, int] = {}

    def reach(st: str | None, pos: int) -> None:
        k = None if scope == "subscription" else st
        out[k] = max(out.get(k, sub.start), pos)

    for e in sub.events:
        reach(e.stream, e.pos)
    for m in sub.marks:
        if scope == "subscription" or m.stream is not None:
            reach(m.stream, m.pos)
        else:  # a mark without a stream under scope stream: every watched stream
            for st in sub.streams or ():
                reach(st, m.pos)
    return out


def _streams_of(sub: Subscription, k: Known) -> list[str]:
    return sorted(k.positions if sub.streams is None else sub.streams)


def _reach(h: dict[str | None, int], stream: str, scope: str, start: int) -> int:
    return h.get(None if scope == "subscription" else stream, start)


def _txn_parts(sub: Subscription, k: Known, scope: str) -> tuple[list[dict], set[tuple[str, str]]]:
    """Non-atomic deliveries of one subscription, and the events they leave missing
    (which are reported here rather than as gaps)."""
    h = _horizons(sub, scope)
    got: dict[int, dict[tuple[str, str], set[int | None]]] = {}
    for e in sub.events:
        t = k.txn_of.get((e.stream, e.value))
        if t is not None and t in k.txns:
            got.setdefault(t, {}).setdefault((e.stream, e.value), set()).add(e.batch)
    out: list[dict] = []
    excused: set[tuple[str, str]] = set()
    for t, delivered in sorted(got.items()):
        mine = [sv for sv in k.txns[t] if sub.streams is None or sv[0] in sub.streams]
        missing = []
        for sv in mine:
            if sv in delivered:
                continue
            spots = k.where.get(sv)
            if scope == "subscription":
                missing.append(sv)  # one position for the whole transaction: within reach
            elif spots and sub.start < min(spots) <= _reach(h, sv[0], scope, sub.start):
                missing.append(sv)
        batches = {b for bs in delivered.values() for b in bs}
        split = len(batches) > 1 and None not in batches
        if missing or split:
            excused.update(missing)
            out.append(
                {
                    "indexes": [t, sub.comp],
                    "delivered": len(delivered),
                    "of": len(mine),
                    "split": split,
                }
            )
    return out, excused


def _gap(sub: Subscription, k: Known, scope: str, excused: set[tuple[str, str]]) -> dict | None:
    h = _horizons(sub, scope)
    have = {(e.stream, e.pos) for e in sub.events}
    missing: list[tuple[str, int]] = []
    for st in _streams_of(sub, k):
        ps = k.positions.get(st, [])
        top = _reach(h, st, scope, sub.start)
        lo, hi = bisect.bisect_right(ps, sub.start), bisect.bisect_right(ps, top)
        for pos in ps[lo:hi]:
            if (st, pos) in have:
                continue
            vals = k.at.get((st, pos), {})
            if vals and all((st, v) in excused for v in vals):
                continue
            missing.append((st, pos))
    if not missing:
        return None
    missing.sort(key=lambda sp: (sp[1], sp[0]))
    return {
        "indexes": [sub.comp],
        "from": sub.start,
        "reached": max(h.values(), default=sub.start),
        "missing": [[st, pos] for st, pos in missing[:MISSING_SHOWN]],
        "count": len(missing),
    }


def _order_dup_resume(
    sub: Subscription, scope: str
) -> tuple[dict | None, dict | None, dict | None]:
    """The first out-of-order event, the first duplicate and the first event at or before
    the start, of one subscription (None each when there is none)."""
    unordered = dup = before = None
    top: dict[str | None, int] = {}
    seen: dict[tuple[str, str, int], int] = {}
    dups = 0
    for e in sub.events:
        kk = None if scope == "subscription" else e.stream
        if kk in top and e.pos < top[kk] and unordered is None:
            unordered = {
                "indexes": [sub.comp],
                "stream": e.stream,
                "pos": e.pos,
                "after": top[kk],
            }
        top[kk] = max(top.get(kk, e.pos), e.pos)
        key = (e.stream, e.value, e.pos)
        if key in seen:
            dups += 1
            if dup is None:
                dup = {"indexes": [sub.comp], "stream": e.stream, "value": e.value, "pos": e.pos}
        seen[key] = 1
        if e.pos <= sub.start and before is None:
            before = {
                "indexes": [sub.comp],
                "why": "delivered at or before its start",
                "from": sub.start,
                "stream": e.stream,
                "pos": e.pos,
            }
    if dup is not None:
        dup["count"] = dups
    return unordered, dup, before


def _went_back(sub: Subscription, scope: str) -> dict | None:
    """A mark below what came before it, or an event at or below an earlier mark."""
    if not sub.marks:
        return None
    marks = sorted(sub.marks, key=lambda m: m.after)
    mi = 0
    floor: dict[str | None, int] = {}  # highest mark so far
    top: dict[str | None, int] = {}  # highest of marks and events so far
    for n in range(len(sub.events) + 1):
        while mi < len(marks) and marks[mi].after == n:
            m = marks[mi]
            kk = None if scope == "subscription" else m.stream
            if kk in top and m.pos < top[kk]:
                return {"indexes": [sub.comp], "pos": m.pos, "mark": top[kk], "why": "mark"}
            floor[kk] = max(floor.get(kk, m.pos), m.pos)
            top[kk] = max(top.get(kk, m.pos), m.pos)
            mi += 1
        if n == len(sub.events):
            break
        e = sub.events[n]
        ks = [None] if scope == "subscription" else [e.stream, None]
        for kk in ks:
            if kk in floor and e.pos <= floor[kk]:
                return {"indexes": [sub.comp], "pos": e.pos, "mark": floor[kk], "why": "event"}
        kk = None if scope == "subscription" else e.stream
        top[kk] = max(top.get(kk, e.pos), e.pos)
    return None


def _divergent(k: Known) -> list[dict]:
    out: list[dict] = []
    for (st, pos), vals in k.at.items():
        if len(vals) > 1:
            idx = sorted({_first(ix) for ix in vals.values()})
            out.append(
                {
                    "indexes": idx,
                    "why": "two values at one position",
                    "stream": st,
                    "pos": pos,
                    "values": sorted(vals),
                }
            )
    for (st, val), spots in k.where.items():
        if len(spots) > 1:
            idx = sorted({_first(ix) for ix in spots.values()})
            out.append(
                {
                    "indexes": idx,
                    "why": "one value at two positions",
                    "stream": st,
                    "value": val,
                    "positions": sorted(spots),
                }
            )
    return out


def _phantoms(p: Parsed) -> list[dict]:
    tried: dict[tuple[str, str], Publish] = {}
    for pub in p.publishes:
        for sv in pub.events:
            tried[sv] = pub
    first: dict[tuple[str, str], int] = {}
    for sub in p.subscriptions:
        for e in sub.events:
            sv = (e.stream, e.value)
            first[sv] = min(first.get(sv, sub.comp), sub.comp)
    out = []
    for (st, val), at in first.items():
        found = tried.get((st, val))
        if found is None:
            out.append({"indexes": [at], "stream": st, "value": val, "why": "never published"})
        elif found.outcome == "fail":
            done = found.inv if found.comp is None else found.comp
            out.append(
                {"indexes": sorted({done, at}), "stream": st, "value": val, "why": "publish failed"}
            )
    return out


def _final(p: Parsed, k: Known) -> list[dict]:
    last: dict[str, tuple[int, str]] = {}
    for (st, pos), vals in k.at.items():
        if st not in last or pos > last[st][0]:
            last[st] = (pos, min(vals))
    out = []
    for snap in p.snapshots:
        for st in sorted(set(last) | set(snap.streams)):
            fin = snap.streams.get(st)
            seen = last.get(st)
            why = None
            if fin is None:
                why = "no final value on a stream with events"
            elif seen is not None and seen[0] > fin[0]:
                why = "an event after the final value"
            elif (st, fin[0]) in k.at and fin[1] not in k.at[(st, fin[0])]:
                why = "another value at the final value's position"
            if why is not None:
                out.append(
                    {
                        "indexes": [snap.comp],
                        "stream": st,
                        "final": None if fin is None else [fin[0], fin[1]],
                        "last": None if seen is None else [seen[0], seen[1]],
                        "why": why,
                    }
                )
    return out


def _sorted(examples: list[dict]) -> list[dict]:
    return sorted(examples, key=lambda e: (list(e["indexes"]), json.dumps(e, sort_keys=True)))


def judge(p: Parsed, o: SubscriptionOptions, cap: int) -> dict[str, Any]:
    """The result map of a parsed history."""
    k = known(p)
    found: dict[str, list[dict]] = {kind: [] for kind in ANOMALY_KINDS}
    for sub in p.subscriptions:
        unordered, dup, before = _order_dup_resume(sub, o.scope)
        for kind, ex in (
            ("watch-unordered", unordered),
            ("watch-duplicate", dup),
            ("watch-resume-mismatch", before),
        ):
            if ex is not None:
                found[kind].append(ex)
        parts, excused = _txn_parts(sub, k, o.scope)
        found["watch-non-atomic"] += parts
        gap = _gap(sub, k, o.scope, excused if o.atomic else set())
        if gap is not None:
            found["watch-gap"].append(gap)
        back = _went_back(sub, o.scope)
        if back is not None:
            found["watch-went-back"].append(back)
    found["watch-resume-mismatch"] += _divergent(k)
    found["watch-phantom"] += _phantoms(p)
    found["watch-final-mismatch"] += _final(p, k)
    judged = {kind: ex for kind, ex in found.items() if judged_kind(o, kind)}
    stats = {
        "ops": p.counts,
        "subscriptions": len(p.subscriptions),
        "final_subscriptions": sum(1 for s in p.subscriptions if s.final),
        "deliveries": sum(len(s.events) for s in p.subscriptions),
        "progress_marks": sum(len(s.marks) for s in p.subscriptions),
        "positions": sum(len(v) for v in k.positions.values()),
        "streams": len(k.positions),
        "snapshots": len(p.snapshots),
    }
    return shaped(
        o,
        {kind: _sorted(ex)[:cap] for kind, ex in judged.items()},
        {kind: len(ex) for kind, ex in judged.items()},
        stats,
    )


def declared(o: SubscriptionOptions) -> list[str]:
    """The guarantees ``o`` declares, by option name."""
    return [g for g in GUARANTEE_OF.values() if getattr(o, g)]


def judged_kind(o: SubscriptionOptions, kind: str) -> bool:
    """Whether ``kind`` is judged under ``o`` (its guarantee declared, or always)."""
    guarantee = GUARANTEE_OF.get(kind)
    return guarantee is None or bool(getattr(o, guarantee))


def sort_examples(examples: list[dict]) -> list[dict]:
    """Examples in the order both engines list them: by indexes, then their JSON text."""
    return _sorted(examples)


def shaped(
    o: SubscriptionOptions,
    examples: Mapping[str, list[dict]],
    counts: Mapping[str, int],
    stats: Mapping[str, Any],
) -> dict[str, Any]:
    """The result map both engines return: ``examples`` (sorted, cut at the cap) and whole
    ``counts`` per judged kind, and the stats; invalid on any anomaly, unknown when no
    subscription delivered anything."""
    anomalies = {kind: list(examples[kind]) for kind in ANOMALY_KINDS if counts.get(kind)}
    reason = None
    valid: bool | str = not anomalies
    if valid and not stats.get("deliveries"):
        valid, reason = "unknown", "no subscription delivered any event: nothing was judged"
    out: dict[str, Any] = {
        "valid": valid,
        "anomalies": anomalies,
        "notes": {},
        "stats": {
            **stats,
            "declared": declared(o),
            "scope": o.scope,
            "anomaly_counts": {kind: counts[kind] for kind in anomalies},
        },
    }
    if reason:
        out["reason"] = reason
    return out


def options_of(opts: Mapping[str, Any] | SubscriptionOptions | None) -> SubscriptionOptions:
    if isinstance(opts, SubscriptionOptions):
        return opts
    return parse_options(SubscriptionOptions, opts, role="checker subscription")


def check_subscription(
    ops: Sequence[Op],
    opts: Mapping[str, Any] | SubscriptionOptions | None = None,
    *,
    cap: int = 20,
) -> dict[str, Any]:
    """The subscription anomalies of a history, as one result map (module docstring)."""
    return judge(parse(ops), options_of(opts), cap)


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    """Every publish, subscribe and snapshot, whatever its value (a malformed one is an
    error, not someone else's op)."""
    return ALL if shape.f in SUBSCRIPTION_FS else None


def _local(history: Sequence[Op], config: CheckConfig) -> dict[str, Any]:
    return check_subscription(history, config.options, cap=config.cap)


def examples() -> dict[str, Example]:
    """Planted histories (checker/planted_subscription.py builds them)."""
    from checker.planted_subscription import examples as planted

    return planted()


SUBSCRIPTION = CheckerSpec(
    name="subscription",
    claims=_claims,
    anomalies=ANOMALY_KINDS,
    options=SubscriptionOptions,
    local=_local,
    spark="checker.spark.subscription:spark_check",
    examples="checker.subscription:examples",
    doc="watches and streams: ordered, no gap, no duplicate, resumable, atomic per publish, "
    "never going back, consistent with the final state; each guarantee as declared",
)
"""The registered checker (entry point ``subscription`` of ``splitbrain.checkers``)."""
