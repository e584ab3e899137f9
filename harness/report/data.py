"""What a report shows, computed from a history and its results, with no I/O.

Kept apart from rendering (``harness/report.py``) so that the numbers a user
reads in a plot can be tested directly: latencies, throughput buckets, fault
periods, committed indexes over time and the ops around a failing key.
"""

from __future__ import annotations

import heapq
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from harness.core.history import NEMESIS, Op

__all__ = [
    "Completed",
    "DIGEST_VALUES",
    "FaultPeriod",
    "completed_ops",
    "fault_periods",
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
]


@dataclass(frozen=True)
class Completed:
    """A client op with both ends: the unit every latency plot and timeline bar is made of."""

    invoke: Op
    completion: Op | None  # None: never completed (the run ended first)

    @property
    def start(self) -> int:
        return self.invoke.time

    @property
    def end(self) -> int | None:
        return None if self.completion is None else self.completion.time

    @property
    def type(self) -> str:
        return "info" if self.completion is None else self.completion.type

    @property
    def latency_ns(self) -> int | None:
        return None if self.completion is None else self.completion.time - self.invoke.time


def pair_stream(ops: Iterable[Op]) -> Iterator[Completed]:
    """Pair client invocations with completions as the history streams past.

    Yields each op when its completion arrives (so in completion order), then the
    invocations never completed. Only the open invocations are held, one per process:
    memory is bounded by the concurrency, not by the history's length.

    A report must render even for a crashed run, so unlike ``pair_ops`` this
    never raises: a stray completion is ignored, a second invoke closes the first
    as never completed.
    """
    open_: dict[Any, Op] = {}
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.type == "invoke":
            prev = open_.pop(op.process, None)
            if prev is not None:
                yield Completed(prev, None)
            open_[op.process] = op
        else:
            inv = open_.pop(op.process, None)
            if inv is not None:
                yield Completed(inv, op)
    yield from (Completed(inv, None) for inv in open_.values())


def completed_ops(ops: Iterable[Op]) -> list[Completed]:
    """Every client op with both ends, ordered by start (:func:`pair_stream`, held whole)."""
    return sorted(pair_stream(ops), key=lambda c: c.start)


@dataclass(frozen=True)
class FaultPeriod:
    kind: str  # partition, clock, kill, pause, loss, delay, ...
    start: int
    end: int
    detail: Any = None


def fault_periods(ops: Sequence[Op], *, end_time: int | None = None) -> list[FaultPeriod]:
    """Spans during which a fault was in force, from ``start-X`` to the next ``stop-X``.

    The span opens at the start's invocation and closes at the stop's completion:
    while a fault is being applied or healed, the cluster may already see it.
    A fault never stopped lasts to the end of the history.
    """
    if end_time is None:
        end_time = max((op.time for op in ops), default=0)
    opened: dict[str, tuple[int, Any]] = {}
    out: list[FaultPeriod] = []
    for op in ops:
        if op.is_client:
            continue
        if op.f.startswith("start-") and op.type == "invoke":
            kind = op.f[len("start-") :]
            opened.setdefault(kind, (op.time, op.value))
        elif op.f.startswith("stop-") and op.type != "invoke":
            kind = op.f[len("stop-") :]
            if kind in opened:
                t0, detail = opened.pop(kind)
                out.append(FaultPeriod(kind, t0, op.time, detail))
    for kind, (t0, detail) in opened.items():
        out.append(FaultPeriod(kind, t0, end_time, detail))
    out.sort(key=lambda p: p.start)
    return out


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

    def periods(self) -> list[FaultPeriod]:
        return fault_periods(self.nemesis, end_time=self.end_time)


DIGEST_VALUES = frozenset({"sample"})
"""The client ops whose values :func:`digest` reads (the nemesis's it always does): a
reader may leave the others undecoded (``iter_history(values_for=...)``)."""


def digest(
    ops: Iterable[Op], *, focus: FocusRequest | None = None, cap: int = MAX_POINTS
) -> Digest:
    """One pass over a history (any iterable: a file streamed by ``iter_history``)."""
    d = Digest()

    def noted(ops: Iterable[Op]) -> Iterator[Op]:
        for op in ops:
            d.records += 1
            if op.time > d.end_time:
                d.end_time = op.time
            if op.process == NEMESIS:
                d.nemesis.append(op)
            elif op.f == "sample" and op.type == "ok" and op.node:
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
        if comp is not None and comp.time - c.invoke.time > d.max_latency_ns:
            d.max_latency_ns = comp.time - c.invoke.time
        f = c.invoke.f
        if f == "sample":
            continue
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
