"""What a report shows, computed from a history and its results, with no I/O.

Kept apart from rendering (``harness/report/page.py`` and ``html.py``) so that the numbers a user
reads in a plot can be tested directly: latencies, throughput buckets, fault
periods, committed indexes over time and the ops around a failing key.
"""

from __future__ import annotations

import heapq
import json
import sys
from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from harness.core.completed import Completed, completed_ops, pair_stream
from harness.core.errors import ConfigError
from harness.core.history import NEMESIS, Op
from harness.core.periods import Timeline
from harness.core.periods import timeline as derive_timeline

__all__ = [
    "Completed",
    "DIGEST_VALUES",
    "FaultPeriod",
    "completed_ops",
    "fault_periods",
    "fault_timeline",
    "throughput",
    "downsample",
    "committed_series",
    "failing_focus",
    "FocusRequest",
    "focus_request",
    "focus_window",
    "select_focus",
    "pair_stream",
    "Throughput",
    "Envelope",
    "Digest",
    "digest",
    "Lane",
    "timeline",
    "Interner",
    "OpColumns",
    "NodeStates",
    "named_indexes",
    "coverage_rows",
]


@dataclass(frozen=True)
class FaultPeriod:
    """A fault kind in force, as the report draws it: ``detail`` is its start's value,
    ``nodes`` whom its starts hit, ``effects`` what it declares it does (``kills``, ...)."""

    kind: str  # the op kind: start-<kind>
    start: int
    end: int
    detail: Any = None
    nodes: tuple[str, ...] = ()
    effects: tuple[str, ...] = ()


def fault_timeline(ops: Iterable[Op], *, end_time: int | None = None) -> Timeline:
    """The history's faults as the registered faults declare them; a registry that cannot
    load (a plugin since broken or uninstalled) leaves them without effects, never the
    report without its faults."""
    from nemesis.registry import timeline

    ops = list(ops)
    try:
        return timeline(ops, end_time=end_time)
    except ConfigError:
        return derive_timeline(ops, lambda kind: None, end_time=end_time)


def fault_periods(ops: Sequence[Op], *, end_time: int | None = None) -> list[FaultPeriod]:
    """Spans during which a fault was in force, from ``start-X`` to the next ``stop-X``.

    The span opens at the start's invocation and closes at the stop's completion:
    while a fault is being applied or healed, the cluster may already see it.
    A fault never stopped lasts to the end of the history (:class:`Timeline.spans`).
    """
    return _periods(fault_timeline(ops, end_time=end_time))


def _periods(t: Timeline) -> list[FaultPeriod]:
    return [FaultPeriod(s.kind, s.start, s.end, s.value, s.nodes, s.effects.words) for s in t.spans]


class Throughput:
    """Completions per time bucket and series, in at most ``max_buckets`` buckets.

    Buckets start ``bucket_ns`` wide; when a completion lands past the last bucket the
    width doubles and neighbours merge, so an hour-long run costs as much memory as a
    minute-long one and still draws as one line per series.
    """

    def __init__(self, *, bucket_ns: int = 1_000_000_000, max_buckets: int = 2_000) -> None:
        self.bucket_ns = bucket_ns
        self.max_buckets = max_buckets
        self.counts: dict[tuple[str, str], dict[int, int]] = {}

    def add(self, series: tuple[str, str], t_ns: int) -> None:
        b = t_ns // self.bucket_ns
        while b >= self.max_buckets:
            self._widen()
            b = t_ns // self.bucket_ns
        per = self.counts.setdefault(series, {})
        per[b] = per.get(b, 0) + 1

    def _widen(self) -> None:
        self.bucket_ns *= 2
        for series, per in self.counts.items():
            merged: dict[int, int] = {}
            for b, n in per.items():
                merged[b // 2] = merged.get(b // 2, 0) + n
            self.counts[series] = merged

    def rates(self) -> dict[tuple[str, str], list[tuple[float, float]]]:
        """Per series, (bucket start in s, completions per second), in time order."""
        width_s = self.bucket_ns / 1e9
        return {
            k: [(b * width_s, per[b] / width_s) for b in sorted(per)]
            for k, per in sorted(self.counts.items())
        }


def throughput(
    done: Iterable[Completed], *, bucket_ns: int = 1_000_000_000
) -> dict[tuple[str, str], dict[int, int]]:
    """Completions per bucket, keyed by (f, completion type)."""
    acc = Throughput(bucket_ns=bucket_ns, max_buckets=sys.maxsize)
    for c in done:
        if c.completion is not None:
            acc.add((c.invoke.f, c.type), c.completion.time)
    return acc.counts


def downsample(points: Sequence[tuple[float, float]], cap: int) -> list[tuple[float, float]]:
    """At most about ``cap`` of time-ordered (x, y) points, keeping each stretch's envelope.

    A plot of millions of points takes minutes to draw and shows no more than a few
    thousand: the points are cut into ``cap // 3`` runs of equal count and each run
    keeps its first, lowest and highest point, so spikes (the slow ops of a fault
    window) survive wherever they are.
    """
    n = len(points)
    if n <= cap:
        return list(points)
    runs = max(1, cap // 3)
    out: list[tuple[float, float]] = []
    for r in range(runs):
        chunk = points[r * n // runs : (r + 1) * n // runs]
        if not chunk:
            continue
        keep = {0, min(range(len(chunk)), key=lambda i: chunk[i][1])}
        keep.add(max(range(len(chunk)), key=lambda i: chunk[i][1]))
        out.extend(chunk[i] for i in sorted(keep))
    return out


class Envelope:
    """:func:`downsample` on the fly: at most about ``cap`` points of a stream, whatever its length.

    Every point is kept until there are more than ``cap``; then the points are cut
    into runs of equal count (a power of two) and each run keeps its first, lowest and
    highest point, as :func:`downsample` does. When the runs exceed ``cap // 3``
    neighbouring runs merge and the width doubles, so memory stays at about ``cap``
    points for any length of history, and a spike survives wherever it is.
    """

    def __init__(self, cap: int) -> None:
        self.cap = max(3, cap)
        self.n = 0
        self._width = 1
        # Each run: [count, first, lowest, highest]; a point is (seq, x, y).
        self._runs: list[list[Any]] = []

    def add(self, x: float, y: float) -> None:
        p = (self.n, x, y)
        self.n += 1
        runs = self._runs
        if runs and runs[-1][0] < self._width:
            r = runs[-1]
            r[0] += 1
            if y < r[2][2]:
                r[2] = p
            if y > r[3][2]:
                r[3] = p
            return
        runs.append([1, p, p, p])
        if self._width == 1 and len(runs) <= self.cap:
            return
        while len(self._runs) > max(1, self.cap // 3):
            self._merge()

    def _merge(self) -> None:
        runs = self._runs
        merged = []
        for i in range(0, len(runs), 2):
            a = runs[i]
            if i + 1 == len(runs):
                merged.append(a)
                continue
            b = runs[i + 1]
            lo = a[2] if a[2][2] <= b[2][2] else b[2]
            hi = a[3] if a[3][2] >= b[3][2] else b[3]
            merged.append([a[0] + b[0], a[1], lo, hi])
        self._runs = merged
        self._width *= 2

    def points(self) -> list[tuple[float, float]]:
        """The kept points in the order they came."""
        out: list[tuple[float, float]] = []
        for _, first, lo, hi in self._runs:
            seen: set[int] = set()
            for seq, x, y in sorted((first, lo, hi)):
                if seq not in seen:
                    seen.add(seq)
                    out.append((x, y))
        return out


def committed_series(ops: Sequence[Op]) -> dict[str, list[tuple[int, int]]]:
    """Per node, (time, committedIndex) from every successful status sample."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for op in ops:
        if op.f == "sample" and op.type == "ok" and isinstance(op.value, Mapping) and op.node:
            c = op.value.get("committed")
            if isinstance(c, int):
                out[op.node].append((op.time, c))
    return dict(out)


def _example_indexes(results: Mapping[str, Any]) -> list[tuple[str, list[int]]]:
    found: list[tuple[str, list[int]]] = []
    for kind, examples in (results.get("anomalies") or {}).items():
        for ex in examples or []:
            if isinstance(ex, Mapping) and ex.get("indexes"):
                found.append((kind, [int(i) for i in ex["indexes"]]))
    return found


@dataclass
class Focus:
    """The slice of history a reader should look at first."""

    title: str
    key: str | None
    highlight: set[int] = field(default_factory=set)
    ops: list[Completed] = field(default_factory=list)


@dataclass(frozen=True)
class FocusRequest:
    """What the results ask a reader to look at: a failing key, or an anomaly's ops."""

    title: str
    key: str | None  # the non-linearizable key; None for an anomaly
    highlight: frozenset[int]  # history indexes the checker names

    def wants(self, c: Completed) -> bool:
        """Whether ``c`` is one of the named ops (its window is cut around these)."""
        return (self.key is None or c.invoke.key == self.key) and _touches(c, self.highlight)


def focus_request(results: Mapping[str, Any]) -> FocusRequest | None:
    """The failing key of a linearizability counterexample, else the first anomaly example."""
    lin = (results.get("checkers") or {}).get("linearizable") or {}
    cex = lin.get("counterexample") if isinstance(lin, Mapping) else None
    if isinstance(cex, Mapping) and cex.get("key") is not None:
        key = str(cex["key"])
        window = frozenset(int(i) for i in (cex.get("window") or cex.get("indexes") or []))
        return FocusRequest(f"key {key}: not linearizable", key, window)
    examples = _example_indexes(results)
    if not examples:
        return None
    kind, idxs = examples[0]
    return FocusRequest(kind, None, frozenset(idxs))


def focus_window(hits: Iterable[Completed], *, pad_ns: int = 500_000_000) -> tuple[int, int] | None:
    """The time span of the named ops, padded; None when the history holds none of them."""
    hits = list(hits)
    if not hits:
        return None
    return min(c.start for c in hits) - pad_ns, max((c.end or c.start) for c in hits) + pad_ns


def select_focus(
    req: FocusRequest,
    pairs: Iterable[Completed],
    window: tuple[int, int] | None,
    *,
    max_ops: int = 200,
) -> Focus:
    """The ops a timeline shows, from a stream of pairs, holding at most ``max_ops`` others.

    For a failing key: that key's ops in the window (all of them without a window), the
    ``max_ops`` earliest. For an anomaly: the named ops first, then whatever ran at the
    same time, earliest first (the concurrency is what makes an anomaly readable; other
    processes' samples are left out), cut to ``max_ops`` and shown in time order.
    """
    if req.key is None and window is None:
        return Focus(req.title, None, set(req.highlight), [])
    named: list[Completed] = []
    # A max-heap (negated) of the earliest others: (-start, -seq, seq) with seq breaking ties
    # as a stable sort by start would.
    others: list[tuple[int, int, int]] = []
    kept: dict[int, Completed] = {}
    for seq, c in enumerate(pairs):
        if req.key is not None and c.invoke.key != req.key:
            continue
        if window is not None and ((c.end or c.start) < window[0] or c.start > window[1]):
            continue
        if req.key is None:
            if _touches(c, req.highlight):
                named.append(c)
                continue
            if c.invoke.f == "sample":
                continue
        item = (-c.start, -seq, seq)
        if len(others) < max_ops:
            heapq.heappush(others, item)
            kept[seq] = c
        elif item > others[0]:
            dropped = heapq.heapreplace(others, item)
            del kept[dropped[2]]
            kept[seq] = c
    rest = [kept[seq] for _, _, seq in sorted(others, reverse=True)]
    named.sort(key=lambda c: c.start)
    chosen = (named + rest)[:max_ops]
    chosen.sort(key=lambda c: c.start)
    return Focus(req.title, req.key, set(req.highlight), chosen)


def failing_focus(
    ops: Sequence[Op], results: Mapping[str, Any], *, pad_ns: int = 500_000_000, max_ops: int = 200
) -> Focus | None:
    """Pick the failing key (or the first anomaly) and the ops around it.

    For a non-linearizable key: that key's ops, with the counterexample window
    highlighted. For a log anomaly: the ops it names, plus whatever ran at the
    same time. The in-memory form of what the streaming report does in two passes
    (:func:`focus_request`, :func:`focus_window`, :func:`select_focus`).
    """
    req = focus_request(results)
    if req is None:
        return None
    done = completed_ops(ops)
    window = focus_window((c for c in done if req.wants(c)), pad_ns=pad_ns)
    return select_focus(req, done, window, max_ops=max_ops)


def _touches(c: Completed, indexes: AbstractSet[int]) -> bool:
    return c.invoke.index in indexes or (c.completion is not None and c.completion.index in indexes)


@dataclass(frozen=True)
class Lane:
    process: Any
    bars: list[tuple[Completed, bool]]  # (op, highlighted)


def timeline(focus: Focus) -> tuple[list[Lane], int, int]:
    """Processes as lanes, ops as bars; returns the lanes and the time span they cover."""
    lanes: dict[Any, list[tuple[Completed, bool]]] = defaultdict(list)
    for c in focus.ops:
        lanes[c.invoke.process].append((c, _touches(c, focus.highlight)))
    if not focus.ops:
        return [], 0, 1
    t0 = min(c.start for c in focus.ops)
    t1 = max((c.end or c.start) for c in focus.ops)
    ordered = sorted(lanes.items(), key=lambda kv: min(b[0].start for b in kv[1]))
    return [Lane(p, bars) for p, bars in ordered], t0, max(t1, t0 + 1)


class Interner:
    """Small integer ids for repeated strings (fs, nodes, keys, errors), at most ``cap`` of them.

    A column of ids is a fraction of the size of a column of strings, in memory and in
    the page's JSON; past ``cap`` distinct values every new one shares the id of
    ``other`` so that a history of unique error texts cannot grow the table unboundedly.
    """

    def __init__(self, cap: int = 100_000, other: str = "(other)") -> None:
        self.cap = cap
        self.other = other
        self.ids: dict[str, int] = {}
        self.names: list[str] = []

    def id(self, name: Any) -> int:
        """The id of ``name`` (-1 for None)."""
        if name is None:
            return -1
        text = name if isinstance(name, str) else json.dumps(name, default=str)
        got = self.ids.get(text)
        if got is not None:
            return got
        if len(self.names) >= self.cap:
            text = self.other
            got = self.ids.get(text)
            if got is not None:
                return got
        self.ids[text] = len(self.names)
        self.names.append(text)
        return self.ids[text]


TYPE_CODES = {"ok": 0, "fail": 1, "info": 2}
"""Completion type codes of :class:`OpColumns` (3: never completed)."""


class _Lanes:
    """Processes packed into lanes as a timeline draws them: one lane per worker thread.

    A process whose op ended ``info`` never issues again and its worker carries on
    under a fresh process id (architecture §3), so a lane is reused by the next new
    process whose first op starts after the lane's last op ended. Without this, every
    timeout would open a lane, and a run with faults shows hundreds of near-empty lanes.
    """

    def __init__(self) -> None:
        self.of: dict[Any, int] = {}
        self.free: list[tuple[int, int]] = []  # (free from time, lane)
        self.labels: list[list[str]] = []
        self.counts: list[int] = []

    def lane(self, c: Completed) -> int:
        p = c.invoke.process
        lane = self.of.get(p)
        if lane is None:
            pick = None
            for i, (t, cand) in enumerate(self.free):
                if t <= c.start and (pick is None or cand < self.free[pick][1]):
                    pick = i
            if pick is None:
                lane = len(self.labels)
                self.labels.append([])
                self.counts.append(0)
            else:
                lane = self.free.pop(pick)[1]
            self.of[p] = lane
            self.counts[lane] += 1
            if len(self.labels[lane]) < 3:
                self.labels[lane].append(f"p{p}")
        if c.type == "info" and c.completion is not None:
            # The process is done: its lane is free from this op's end.
            self.free.append((c.completion.time, lane))
        return lane

    def names(self) -> list[str]:
        return [
            ", ".join(lbl) + (f" +{n - len(lbl)}" if n > len(lbl) else "")
            for lbl, n in zip(self.labels, self.counts, strict=True)
        ]


class OpColumns:
    """Every client op (samples aside) as parallel integer arrays: the page's timeline data.

    An op costs about 70 bytes here (``array`` columns, no Python object per op), so a
    report of a million ops stays within tens of megabytes; past ``max_ops`` only ops
    the results name are kept (``dropped`` counts the rest), so neither the report's
    memory nor the page grows without bound. Times are microseconds since the test
    started. Rows come in completion order (:func:`pair_stream`'s), which the page
    does not rely on.
    """

    def __init__(self, max_ops: int = 1_000_000) -> None:
        self.max_ops = max_ops
        self.dropped = 0
        self.start = array("q")
        self.dur = array("q")  # -1: never completed
        self.lane = array("l")
        self.type = array("b")
        self.f = array("l")
        self.inv = array("q")
        self.comp = array("q")  # -1: never completed
        self.node = array("l")
        self.key = array("l")
        self.err = array("l")
        self.fs = Interner()
        self.nodes = Interner()
        self.keys = Interner()
        self.errors = Interner(cap=500)
        self.lanes = _Lanes()

    def __len__(self) -> int:
        return len(self.start)

    def add(self, c: Completed, *, force: bool = False) -> None:
        """Record one paired op; past ``max_ops`` only when ``force`` (a named op)."""
        lane = self.lanes.lane(c)  # always: lanes must see every process end
        if len(self.start) >= self.max_ops and not force:
            self.dropped += 1
            return
        inv, comp = c.invoke, c.completion
        self.start.append(inv.time // 1000)
        self.dur.append(-1 if comp is None else max(0, (comp.time - inv.time) // 1000))
        self.lane.append(lane)
        self.type.append(3 if comp is None else TYPE_CODES.get(comp.type, 2))
        self.f.append(self.fs.id(inv.f))
        self.inv.append(inv.index)
        self.comp.append(-1 if comp is None else comp.index)
        self.node.append(self.nodes.id(inv.node if comp is None else (comp.node or inv.node)))
        self.key.append(self.keys.id(inv.key))
        err = None if comp is None else comp.error
        self.err.append(self.errors.id(err))

    def to_json(self) -> dict[str, Any]:
        """Columns as JSON lists, made short: starts and invoke indexes as deltas from the
        row before, completion indexes as the distance from the invoke, and columns that
        hold one value throughout (no keys, no errors) as that value alone."""

        def deltas(col: array[int]) -> list[int]:
            out = []
            prev = 0
            for v in col:
                out.append(v - prev)
                prev = v
            return out

        def flat(col: array[int]) -> list[int] | int:
            if col and all(v == col[0] for v in col):
                return col[0]
            return col.tolist()

        return {
            "n": len(self.start),
            "dropped": self.dropped,
            "start": deltas(self.start),
            "dur": self.dur.tolist(),
            "lane": flat(self.lane),
            "type": flat(self.type),
            "f": flat(self.f),
            "inv": deltas(self.inv),
            "comp": [-1 if c < 0 else c - i for c, i in zip(self.comp, self.inv, strict=True)],
            "node": flat(self.node),
            "key": flat(self.key),
            "err": flat(self.err),
            "fs": self.fs.names,
            "nodes": self.nodes.names,
            "keys": self.keys.names,
            "errors": self.errors.names,
            "lanes": self.lanes.names(),
        }


class NodeStates:
    """Per node, role, term and leader from the sampler's samples, kept only when they change.

    A sampler reads every node several times a second, but a role changes a few times
    a run: keeping the changes (at most ``max_changes`` per node) holds the whole story
    in a few kilobytes. A sample that failed or timed out marks the node unreachable,
    which is what a reader of a kill or a partition wants to see; a new ``incarnation``
    (the node restarted) is a change even when role and term are the same.
    """

    def __init__(self, max_changes: int = 20_000) -> None:
        self.max_changes = max_changes
        self.rows: dict[str, list[tuple[int, str, Any, Any]]] = {}
        self._last: dict[str, tuple[str, Any, Any, Any]] = {}
        self.cut: set[str] = set()

    def add(self, op: Op) -> None:
        """One sample completion (``ok``, ``fail`` or ``info``)."""
        node = op.node
        if not node:
            return
        v = op.value if isinstance(op.value, Mapping) else {}
        if op.type == "ok":
            role = str(v.get("role") or "?")
            state = (role, v.get("term"), v.get("leader"), v.get("incarnation"))
        else:
            state = ("unreachable", None, None, self._last.get(node, (None,) * 4)[3])
        if self._last.get(node) == state:
            return
        self._last[node] = state
        rows = self.rows.setdefault(node, [])
        if len(rows) >= self.max_changes:
            self.cut.add(node)
            return
        rows.append((op.time // 1000, state[0], state[1], state[2]))


def named_indexes(results: Mapping[str, Any]) -> set[int]:
    """Every history index the results cite: anomaly and note examples, the counterexample.

    Bounded by the results' own caps (a few examples per kind), so the ops kept whole
    for the page's detail pane are few whatever the history's length.
    """
    out: set[int] = set()

    def take(ex: Any) -> None:
        if isinstance(ex, Mapping):
            for i in ex.get("indexes") or ():
                if isinstance(i, int) and not isinstance(i, bool):
                    out.add(i)

    for examples in (results.get("anomalies") or {}).values():
        for ex in examples or ():
            take(ex)
    for res in (results.get("checkers") or {}).values():
        if not isinstance(res, Mapping):
            continue
        for section in ("anomalies", "notes"):
            for examples in (res.get(section) or {}).values():
                for ex in examples or ():
                    take(ex)
        cex = res.get("counterexample")
        if isinstance(cex, Mapping):
            for i in cex.get("window") or cex.get("indexes") or ():
                if isinstance(i, int):
                    out.add(i)
    return out


MAX_POINTS = 30_000
"""Points kept per plotted series (latency per (f, type), committed index per node)."""


@dataclass
class Digest:
    """Everything the report shows that comes from the whole history, in bounded memory.

    Built in one pass by :func:`digest`: counts, throughput buckets, fault ops,
    committed samples and latency points per series kept as :class:`Envelope` s, and
    the named ops of the focus (at most as many as the results name). What grows with
    the history is only the nemesis's own ops (a few per fault) and the bucket count
    (capped by :class:`Throughput`).
    """

    records: int = 0
    end_time: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    latency: dict[tuple[str, str], Envelope] = field(default_factory=dict)
    throughput: Throughput = field(default_factory=Throughput)
    committed: dict[str, Envelope] = field(default_factory=dict)
    nemesis: list[Op] = field(default_factory=list)
    max_latency_ns: int = 0
    hits: list[Completed] = field(default_factory=list)
    columns: OpColumns | None = None
    states: NodeStates | None = None
    named_ops: dict[int, Op] = field(default_factory=dict)
    named_pairs: dict[int, Completed] = field(default_factory=dict)

    def faults(self) -> Timeline:
        """What the faults did, when and where (one derivation for periods and clock shifts)."""
        return fault_timeline(self.nemesis, end_time=self.end_time)

    def periods(self) -> list[FaultPeriod]:
        return _periods(self.faults())


DIGEST_VALUES = frozenset({"sample"})
"""The client ops whose values :func:`digest` reads (the nemesis's it always does): a
reader may leave the others undecoded (``iter_history(values_for=...)``)."""


def digest(
    ops: Iterable[Op],
    *,
    focus: FocusRequest | None = None,
    cap: int = MAX_POINTS,
    columns: OpColumns | None = None,
    states: NodeStates | None = None,
    named: AbstractSet[int] = frozenset(),
) -> Digest:
    """One pass over a history (any iterable: a file streamed by ``iter_history``).

    With ``columns`` and ``states`` the same pass also fills the interactive page's
    compact arrays; ``named`` (history indexes the results cite) keeps those ops whole,
    raw in ``named_ops`` and paired (client ops) in ``named_pairs`` by invoke index:
    as many as the results name, never more.
    """
    d = Digest(columns=columns, states=states)

    def noted(ops: Iterable[Op]) -> Iterator[Op]:
        for op in ops:
            d.records += 1
            if op.time > d.end_time:
                d.end_time = op.time
            if named and op.index in named:
                d.named_ops[op.index] = op
            if op.process == NEMESIS:
                d.nemesis.append(op)
            elif op.f == "sample" and op.type != "invoke" and op.node:
                if states is not None:
                    states.add(op)
                if op.type != "ok":
                    yield op
                    continue
                v = op.value
                c = v.get("committed") if isinstance(v, Mapping) else None
                if isinstance(c, int) and not isinstance(c, bool):
                    env = d.committed.get(op.node)
                    if env is None:
                        env = d.committed[op.node] = Envelope(cap)
                    env.add(op.time, c)
            yield op

    for c in pair_stream(noted(ops)):
        comp = c.completion
        if focus is not None and focus.wants(c):
            d.hits.append(c)
        if named and _touches(c, named):
            d.named_pairs[c.invoke.index] = c
        if comp is not None and comp.time - c.invoke.time > d.max_latency_ns:
            d.max_latency_ns = comp.time - c.invoke.time
        f = c.invoke.f
        if f == "sample":
            continue
        if columns is not None:
            columns.add(c, force=bool(named) and _touches(c, named))
        typ = c.type
        d.counts[typ] = d.counts.get(typ, 0) + 1
        if comp is None:
            continue
        series = (f, typ)
        d.throughput.add(series, comp.time)
        env = d.latency.get(series)
        if env is None:
            env = d.latency[series] = Envelope(cap)
        env.add(c.invoke.time / 1e9, (comp.time - c.invoke.time) / 1e6)
    return d


def coverage_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The results' ``coverage`` block as table rows, in the vocabulary's order.

    Each row: ``name``, ``title``, ``doc``, ``state`` (``reached``, ``not reached``,
    ``by design``: one the DB declares a correct run cannot reach, or ``unobservable``),
    ``count``, ``first_s`` and ``why`` (for unobservable and by-design ones). A situation
    the DB could not show, or rules out, is never listed as not reached. Names the
    vocabulary no longer knows (an older run) are kept, after the known ones. Empty
    when the run has no coverage block (written before coverage existed).
    """
    cov = results.get("coverage")
    if not isinstance(cov, Mapping):
        return []
    from checker.situations import SITUATIONS

    known = {s.name: s for s in SITUATIONS}
    got_blind = cov.get("unobservable")
    blind: Mapping[str, Any] = got_blind if isinstance(got_blind, Mapping) else {}
    got_design = cov.get("by_design")
    design: Mapping[str, Any] = got_design if isinstance(got_design, Mapping) else {}
    names = [s.name for s in SITUATIONS if s.name in cov or s.name in blind]
    reserved = {"unobservable", "sources", "events", "by_design"}  # the block's own fields
    names += [
        n
        for n, v in cov.items()
        if n not in known and n not in reserved and isinstance(v, Mapping) and "count" in v
    ]
    names += [n for n in blind if n not in known and n not in names]
    rows = []
    for n in names:
        s = known.get(n)
        got = cov.get(n)
        entry: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
        count = entry.get("count") if isinstance(entry.get("count"), int) else 0
        state = (
            "unobservable"
            if n in blind
            else "reached"
            if count
            else "by design"
            if n in design
            else "not reached"
        )
        why = blind.get(n) if state == "unobservable" else design.get(n)
        rows.append(
            {
                "name": n,
                "title": s.title if s else n,
                "doc": s.doc if s else "",
                "state": state,
                "count": count if state != "unobservable" else None,
                "first_s": entry.get("first_s") if state == "reached" else None,
                "why": why if state in ("unobservable", "by design") else None,
            }
        )
    return rows
