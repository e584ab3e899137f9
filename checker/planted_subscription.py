"""Subscription histories with planted anomalies: the checker's ``examples`` and the
generator its tests use to find every planted kind and no false alarm.

Why a simulation rather than recorded runs: a planted history must be valid by
construction, whatever the checker says. Here a store assigns positions to publishes
(one position per publish under scope ``subscription``, as etcd's revisions do; one per
event and stream under scope ``stream``, as Kafka's offsets do), and every subscription
delivers exactly the events after its start up to where it stops, a publish's events in
one batch. Each anomaly is then planted by one edit of one subscription (or snapshot),
named where it is made.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from harness.core.checker import Example
from harness.core.op import Op

__all__ = ["PLANTABLE", "World", "examples", "history", "plant", "simulate"]

PLANTABLE = (
    "watch-unordered",
    "watch-gap",
    "watch-duplicate",
    "watch-resume-mismatch",
    "watch-non-atomic",
    "watch-went-back",
    "watch-final-mismatch",
    "watch-phantom",
)


@dataclass
class Pub:
    events: list[dict[str, Any]]  # {"stream", "value", "pos"}
    outcome: str  # ok, fail, info (an info publish may have happened: then it has positions)
    happened: bool


@dataclass
class Sub:
    streams: list[str] | None
    start: int
    events: list[dict[str, Any]]
    progress: list[dict[str, Any]] = field(default_factory=list)
    final: bool = False
    outcome: str = "ok"


@dataclass
class World:
    scope: str
    pubs: list[Pub]
    subs: list[Sub]
    snapshot: dict[str, Any] | None


def simulate(
    seed: int,
    *,
    publishes: int = 40,
    streams: int = 3,
    subscriptions: int = 8,
    scope: str = "subscription",
    txn_percent: int = 30,
) -> World:
    """A valid world: publishes with positions, subscriptions delivering exact slices."""
    rng = random.Random(seed)
    names = [f"k{i}" for i in range(streams)]
    pubs: list[Pub] = []
    rev = 1  # scope subscription: the store's revision (the empty store's is 1)
    offsets = {s: 0 for s in names}  # scope stream: each stream's last position
    n = 0
    for _ in range(publishes):
        k = 2 if rng.randrange(100) < txn_percent and streams >= 2 else 1
        chosen = rng.sample(names, k)
        outcome = rng.choices(["ok", "fail", "info"], [85, 5, 10])[0]
        happened = outcome == "ok" or (outcome == "info" and rng.random() < 0.5)
        evs = []
        if happened:
            rev += 1
        for s in chosen:
            n += 1
            e: dict[str, Any] = {"stream": s, "value": f"v{n}"}
            if happened:
                if scope == "subscription":
                    e["pos"] = rev
                else:
                    offsets[s] += 1
                    e["pos"] = offsets[s]
            evs.append(e)
        pubs.append(Pub(evs, outcome, happened))
    log = [(e["pos"], i, e) for i, p in enumerate(pubs) if p.happened for e in p.events]
    log.sort(key=lambda t: (t[0], t[1]))
    top = max((t[0] for t in log), default=1)
    subs: list[Sub] = []
    for j in range(subscriptions + 1):
        final = j == subscriptions
        watched = (
            None
            if final or rng.random() < 0.5
            else sorted(rng.sample(names, rng.randint(1, streams)))
        )
        start = 0 if final else rng.randint(0, top)
        stop = top if final else rng.randint(start, top)
        evs = []
        for pos, i, e in log:
            if not (start < pos <= stop) or (watched is not None and e["stream"] not in watched):
                continue
            evs.append({**e, "batch": i})  # one batch per publish
        if scope == "stream":  # per-stream offsets: order the delivery per stream only
            evs.sort(key=lambda e: (e["stream"], e["pos"]))
        sub = Sub(watched, start, evs, final=final)
        if scope == "subscription" and rng.random() < 0.5:
            sub.progress.append({"pos": stop, "after": len(evs)})
        subs.append(sub)
    state: dict[str, Any] = {}
    for pos, _i, e in log:
        state[e["stream"]] = {"value": e["value"], "pos": pos}
    return World(scope, pubs, subs, {"pos": top, "streams": state})


def _txn_sub(w: World) -> tuple[Sub, int] | None:
    """A subscription holding a whole publish of two events, and the first one's place."""
    for sub in w.subs:
        for i in range(len(sub.events) - 1):
            a, b = sub.events[i], sub.events[i + 1]
            if a["batch"] == b["batch"] and a["stream"] != b["stream"]:
                return sub, i
    return None


def plant(w: World, kind: str, rng: random.Random) -> bool:
    """Plant one anomaly of ``kind`` into ``w``; False when this world has no place for it."""
    done = _plant(w, kind, rng)
    for sub in w.subs:  # a mark given after the last event stays after it
        for m in sub.progress:
            m["after"] = min(m["after"], len(sub.events))
    return done


def _plant(w: World, kind: str, rng: random.Random) -> bool:
    subs = [s for s in w.subs if s.events]
    if kind == "watch-phantom":
        # the final subscription delivers, after everything, a value nobody wrote (and the
        # final snapshot agrees with it, so that nothing but the phantom is wrong)
        final = next((s for s in w.subs if s.final and s.events), None)
        if final is None or w.snapshot is None:
            return False
        e = final.events[-1]
        ghost = {**e, "value": "never-written", "pos": e["pos"] + 1, "batch": -2}
        if w.scope == "stream":
            top = max(x["pos"] for x in final.events if x["stream"] == e["stream"])
            ghost["pos"] = top + 1
        final.events.append(ghost)
        w.snapshot["streams"][e["stream"]] = {"value": "never-written", "pos": ghost["pos"]}
        return True
    if kind == "watch-non-atomic":
        found = _txn_sub(w)
        if found is None:
            return False
        sub, i = found
        if rng.random() < 0.5:
            del sub.events[i + 1]  # half a transaction
        else:
            sub.events[i + 1] = {**sub.events[i + 1], "batch": -3}
        return True
    if kind == "watch-gap":
        # drop an event that is neither the last one nor part of a two-event publish
        cands = []
        for sub in subs:
            for i, e in enumerate(sub.events[:-1]):
                mates = [x for x in sub.events if x["batch"] == e["batch"]]
                nxt = sub.events[i + 1]
                pub = _pub_of(w, e)
                known = pub is not None and pub.outcome == "ok"  # else only deliveries show it
                if (
                    known
                    and len(mates) == 1
                    and (w.scope == "subscription" or nxt["stream"] == e["stream"])
                ):
                    cands.append((sub, i))
        if not cands:
            return False
        sub, i = rng.choice(cands)
        del sub.events[i]
        return True
    if kind == "watch-duplicate":
        if not subs:
            return False
        sub = rng.choice(subs)
        i = rng.randrange(len(sub.events))
        _insert(sub, i + 1, dict(sub.events[i]))
        return True
    if kind == "watch-unordered":
        cands = []
        for sub in subs:
            for i in range(len(sub.events) - 1):
                a, b = sub.events[i], sub.events[i + 1]
                same = w.scope == "subscription" or a["stream"] == b["stream"]
                if a["pos"] < b["pos"] and same:
                    cands.append((sub, i))
        if not cands:
            return False
        sub, i = rng.choice(cands)
        sub.events[i], sub.events[i + 1] = sub.events[i + 1], sub.events[i]
        return True
    if kind == "watch-resume-mismatch":
        if rng.random() < 0.5:
            # resumed one position too early: the event at its start is delivered again
            starts: list[tuple[Sub, dict[str, Any]]] = []
            for sub in w.subs:
                for p in w.pubs:
                    if not p.happened or len(p.events) != 1 or sub.start == 0:
                        continue
                    e = p.events[0]
                    if e["pos"] == sub.start and (
                        sub.streams is None or e["stream"] in sub.streams
                    ):
                        starts.append((sub, e))
            if starts:
                sub, first = rng.choice(starts)
                _insert(sub, 0, {**first, "batch": -1})
                return True
        # or: another value at a position an ok publish was given
        cands2 = []
        for sub in subs:
            for i, e in enumerate(sub.events):
                pub = _pub_of(w, e)
                if pub is not None and pub.outcome == "ok" and len(pub.events) == 1:
                    cands2.append((sub, i))
        if not cands2:
            return False
        sub, i = rng.choice(cands2)
        sub.events[i] = {**sub.events[i], "value": sub.events[i]["value"] + "-other"}
        _publish_other(w, sub.events[i])
        return True
    if kind == "watch-went-back":
        if w.scope != "subscription" or not subs:
            return False
        sub = rng.choice(subs)
        sub.progress = [{"pos": sub.events[-1]["pos"] - 1, "after": len(sub.events)}]
        return True
    if kind == "watch-final-mismatch":
        if not w.snapshot or not w.snapshot["streams"]:
            return False
        st = rng.choice(sorted(w.snapshot["streams"]))
        del w.snapshot["streams"][st]
        return True
    raise ValueError(f"unknown anomaly kind {kind!r}")


def _insert(sub: Sub, at: int, e: dict[str, Any]) -> None:
    """Insert a delivery, keeping every progress mark after the events it followed."""
    sub.events.insert(at, e)
    for m in sub.progress:
        if m["after"] >= at:
            m["after"] += 1


def _pub_of(w: World, e: dict[str, Any]) -> Pub | None:
    for p in w.pubs:
        if any(x["value"] == e["value"] for x in p.events):
            return p
    return None


def _publish_other(w: World, e: dict[str, Any]) -> None:
    """Make the planted other value a publish that was tried (so it is no phantom)."""
    w.pubs.append(Pub([{"stream": e["stream"], "value": e["value"]}], "info", False))


def history(w: World) -> list[Op]:
    """The world as a history: publishes, then subscriptions, then the snapshot."""
    ops: list[Op] = []

    def op(process: int, f: str, inv: Any, typ: str, out: Any) -> None:
        invocation = Op("invoke", process, f, inv, index=len(ops))
        ops.append(invocation)
        ops.append(invocation.replace(type=typ, value=out, index=len(ops)))

    proc = 0
    for p in w.pubs:
        asked = {"events": [{"stream": e["stream"], "value": e["value"]} for e in p.events]}
        op(proc, "publish", asked, p.outcome, {"events": p.events} if p.outcome == "ok" else asked)
        proc = proc + 1 if p.outcome == "info" else proc
    for s in w.subs:
        proc += 1
        inv: dict[str, Any] = {"streams": s.streams, "from": s.start}
        if s.final:
            inv["final"] = True
        out: dict[str, Any] = {"events": s.events}
        if s.progress:
            out["progress"] = s.progress
        op(proc, "subscribe", inv, s.outcome, out)
    if w.snapshot is not None:
        op(proc + 1, "snapshot", {"final": True}, "ok", w.snapshot)
    return ops


def examples() -> dict[str, Example]:
    """Valid worlds in both scopes, and one world with every anomaly kind planted (few
    histories: Spark checks each in the default test run)."""
    out: dict[str, Example] = {}
    for scope in ("subscription", "stream"):
        opts = {"options": {"subscription": {"scope": scope}}}
        out[f"valid-{scope}"] = (history(simulate(7, scope=scope)), opts, ())
    w = simulate(11, publishes=24, subscriptions=6)
    rng = random.Random(11)
    for kind in PLANTABLE:
        if not plant(w, kind, rng):  # pragma: no cover - seed 11 has a place for each
            raise AssertionError(f"no place to plant {kind}")
    opts = {"options": {"subscription": {"scope": "subscription"}}}
    out["every-anomaly"] = (history(w), opts, PLANTABLE)
    return out
