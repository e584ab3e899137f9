"""What a report shows, computed from a history and its results, with no I/O.

Kept apart from rendering (``harness/report.py``) so that the numbers a user
reads in a plot can be tested directly: latencies, throughput buckets, fault
periods, committed indexes over time and the ops around a failing key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.core.history import Op

__all__ = [
    "Completed",
    "FaultPeriod",
    "completed_ops",
    "fault_periods",
    "throughput",
    "downsample",
    "committed_series",
    "failing_focus",
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


def completed_ops(ops: Sequence[Op]) -> list[Completed]:
    """Pair client invocations with completions, tolerating a truncated history.

    A report must render even for a crashed run, so unlike ``pair_ops`` this
    never raises: a stray completion is ignored, a second invoke closes the first
    as never completed.
    """
    open_: dict[Any, Op] = {}
    out: list[Completed] = []
    for op in ops:
        if not op.is_client:
            continue
        if op.type == "invoke":
            prev = open_.pop(op.process, None)
            if prev is not None:
                out.append(Completed(prev, None))
            open_[op.process] = op
        else:
            inv = open_.pop(op.process, None)
            if inv is not None:
                out.append(Completed(inv, op))
    out.extend(Completed(inv, None) for inv in open_.values())
    out.sort(key=lambda c: c.start)
    return out


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


def throughput(
    done: Iterable[Completed], *, bucket_ns: int = 1_000_000_000
) -> dict[tuple[str, str], dict[int, int]]:
    """Completions per bucket, keyed by (f, completion type)."""
    out: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for c in done:
        if c.completion is None:
            continue
        out[(c.invoke.f, c.type)][c.completion.time // bucket_ns] += 1
    return {k: dict(v) for k, v in out.items()}


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


def failing_focus(
    ops: Sequence[Op], results: Mapping[str, Any], *, pad_ns: int = 500_000_000, max_ops: int = 200
) -> Focus | None:
    """Pick the failing key (or the first anomaly) and the ops around it.

    For a non-linearizable key: that key's ops, with the counterexample window
    highlighted. For a log anomaly: the ops it names, plus whatever ran at the
    same time (the concurrency is what makes an anomaly readable).
    """
    done = completed_ops(ops)
    lin = (results.get("checkers") or {}).get("linearizable") or {}
    cex = lin.get("counterexample") if isinstance(lin, Mapping) else None
    if isinstance(cex, Mapping) and cex.get("key") is not None:
        key = str(cex["key"])
        window = {int(i) for i in (cex.get("window") or cex.get("indexes") or [])}
        mine = [c for c in done if c.invoke.key == key]
        if window:
            lo = (
                min(c.start for c in mine if _touches(c, window)) - pad_ns
                if any(_touches(c, window) for c in mine)
                else None
            )
            if lo is not None:
                hi = max((c.end or c.start) for c in mine if _touches(c, window)) + pad_ns
                mine = [c for c in mine if (c.end or c.start) >= lo and c.start <= hi]
        return Focus(f"key {key}: not linearizable", key, window, mine[:max_ops])
    examples = _example_indexes(results)
    if not examples:
        return None
    kind, idxs = examples[0]
    wanted = set(idxs)
    hits = [c for c in done if _touches(c, wanted)]
    if not hits:
        return Focus(kind, None, wanted, [])
    lo = min(c.start for c in hits) - pad_ns
    hi = max((c.end or c.start) for c in hits) + pad_ns
    around = [
        c
        for c in done
        if c.start <= hi
        and (c.end or c.start) >= lo
        and (c.invoke.f != "sample" or _touches(c, wanted))
    ]
    around.sort(key=lambda c: (not _touches(c, wanted), c.start))
    around = sorted(around[:max_ops], key=lambda c: c.start)
    return Focus(kind, None, wanted, around)


def _touches(c: Completed, indexes: set[int]) -> bool:
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
