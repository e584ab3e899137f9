"""When, and on which nodes, each fault was in force: read once from a history's nemesis ops.

Coverage (``checker/situations.py``, ``harness/run/coverage.py``) and the report
(``harness/report``) used to read the nemesis ops each its own way, by fault name: the
kills were a list of ``start-`` names, the clock periods were derived twice and the two
derivations disagreed, and a plugin's fault that killed nodes was never counted. Here
there is one derivation, driven by what each fault declares (``Fault.effects``,
``Fault.periods``, :mod:`harness.core.fault`), and nothing in it names a fault.

Pure and layer 0: the caller hands in how to find a kind's :class:`Fault` (the registry
does, ``nemesis.registry.timeline``); a kind nobody registered still gets its spans, with
no effects.

What it gives (:class:`Timeline`):

* ``landings``: every ``start-<kind>`` completion, with the nodes it says it hit;
* ``periods``: per node (or for the whole cluster), from the start's completion to the
  completion of the ``stop-<kind>`` that ended it (None: never ended in this history);
* ``spans``: per kind, from a start's *invocation* (while a fault is being applied the
  cluster may already see it) to the next stop's completion: what a report draws.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harness.core.fault import Effects, Fault, Periods
from harness.core.op import NEMESIS, Op

__all__ = [
    "FaultOf",
    "Landing",
    "NodePeriod",
    "Span",
    "ClockShift",
    "Timeline",
    "timeline",
    "op_kind",
]

FaultOf = Callable[[str], "Fault | None"]
"""The registered fault of an op kind, or None (``nemesis.registry.fault_of``)."""

_NO_EFFECTS = Effects()
_DEFAULT_PERIODS = Periods()


def op_kind(f: str) -> tuple[str, str] | None:
    """``("start", kind)`` or ``("stop", kind)`` for a fault op's ``f``; None for others."""
    for edge in ("start", "stop"):
        if f.startswith(edge + "-") and len(f) > len(edge) + 1:
            return edge, f[len(edge) + 1 :]
    return None


@dataclass(frozen=True)
class Landing:
    """One ``start-<kind>`` completion: the fault landed on ``hit`` (node → its detail)."""

    kind: str
    invoked: int
    time: int
    hit: Mapping[str, Any]
    value: Any
    effects: Effects = _NO_EFFECTS

    @property
    def nodes(self) -> list[str]:
        return list(self.hit)


@dataclass(frozen=True)
class NodePeriod:
    """A fault in force on ``node`` (None: the whole cluster) from ``start`` to ``end``.

    ``invoked``: the start's invocation; ``end`` None: no stop ended it in this history
    (the final heal was cut off, or the history is a prefix). ``detail``: what the start
    said of this node (the clock's offset in ms, None when it cannot be told); for the
    whole cluster, its grudge when the fault declares one (``Periods.grudge``).
    """

    kind: str
    node: str | None
    invoked: int
    start: int
    end: int | None
    detail: Any = None
    value: Any = None
    effects: Effects = _NO_EFFECTS


@dataclass(frozen=True)
class Span:
    """A fault kind in force, as a report draws it: ``value`` is the first start's invocation
    value, ``nodes`` every node its starts hit within the span."""

    kind: str
    start: int
    end: int
    value: Any = None
    nodes: tuple[str, ...] = ()
    effects: Effects = _NO_EFFECTS


@dataclass(frozen=True)
class ClockShift:
    """A node's clock moved by ``offset_ms`` from ``start`` to ``end`` (history ns)."""

    node: str
    start: int
    end: int
    offset_ms: float | None  # None: strobing, the stamps cannot be corrected


@dataclass(frozen=True)
class Timeline:
    """A history's faults: what landed, and what was in force where and when."""

    landings: tuple[Landing, ...] = ()
    periods: tuple[NodePeriod, ...] = ()
    spans: tuple[Span, ...] = ()
    end_time: int = 0

    def landed(self, effect: str) -> list[Landing]:
        """The landings of faults that declare ``effect`` (an ``Effects`` field name)."""
        return [x for x in self.landings if getattr(x.effects, effect)]

    def during(self, effect: str) -> list[NodePeriod]:
        """The periods of faults that declare ``effect``."""
        return [p for p in self.periods if getattr(p.effects, effect)]

    def clock_shifts(self, end: int | None = None) -> list[ClockShift]:
        """Per node, the periods its clock was moved (``end`` for one never reset: by
        default the history's last op)."""
        last = self.end_time if end is None else end
        out = []
        for p in self.during("moves_clock"):
            if p.node is None:
                continue
            off = p.detail
            ms = float(off) if isinstance(off, (int, float)) and not isinstance(off, bool) else None
            out.append(ClockShift(p.node, p.start, last if p.end is None else p.end, ms))
        return out


def _named(value: Any, keys: Iterable[str]) -> dict[str, Any] | None:
    """Node → detail from the first of ``keys`` present in ``value``; None when none is."""
    if not isinstance(value, Mapping):
        return None
    for key in keys:
        got = value.get(key)
        if got is None:
            continue
        if isinstance(got, Mapping):
            return {str(n): d for n, d in got.items()}
        if isinstance(got, str):
            return {got: None}
        if isinstance(got, (list, tuple)):
            return dict.fromkeys((str(n) for n in got), None)
    return None


@dataclass
class _Open:
    """The derivation's state: what is in force now."""

    periods: dict[tuple[str, str | None], NodePeriod] = field(default_factory=dict)
    spans: dict[str, tuple[int, Any, dict[str, None]]] = field(default_factory=dict)
    invoked: dict[str, int] = field(default_factory=dict)
    done: list[NodePeriod] = field(default_factory=list)

    def close(self, key: tuple[str, str | None], t: int) -> None:
        p = self.periods.pop(key, None)
        if p is not None:
            self.done.append(replace(p, end=t))


def timeline(ops: Iterable[Op], fault_of: FaultOf, *, end_time: int | None = None) -> Timeline:
    """The :class:`Timeline` of ``ops`` (any ops; only the nemesis's are read, in time order).

    ``end_time``: where a span never stopped ends (default: the last op's time).
    """
    ops = list(ops)
    nemesis = sorted((op for op in ops if op.process == NEMESIS), key=lambda o: o.time)
    last = end_time if end_time is not None else max((op.time for op in ops), default=0)
    st = _Open()
    landings: list[Landing] = []
    spans: list[Span] = []
    for op in nemesis:
        edge = op_kind(op.f)
        if edge is None:
            continue
        which, kind = edge
        fault = fault_of(kind)
        rule = fault.periods if fault is not None else _DEFAULT_PERIODS
        effects = fault.effects if fault is not None else _NO_EFFECTS
        if op.type == "invoke":
            if which == "start":
                st.invoked[kind] = op.time
                st.spans.setdefault(kind, (op.time, op.value, {}))
            continue
        if which == "stop":
            ended = _named(op.value, rule.ended) if rule.ended else None
            for key in [k for k in st.periods if k[0] == kind]:
                if ended is None or key[1] in ended:
                    st.close(key, op.time)
            span = st.spans.pop(kind, None)
            if span is not None:
                spans.append(Span(kind, span[0], op.time, span[1], tuple(span[2]), effects))
            continue
        invoked = st.invoked.pop(kind, op.time)
        span = st.spans.setdefault(kind, (invoked, op.value, {}))
        hit: dict[str, Any] = (_named(op.value, rule.hit) or {}) if rule.hit else {}
        span[2].update(dict.fromkeys(hit))
        landings.append(Landing(kind, invoked, op.time, hit, op.value, effects))
        cut = op.value.get(rule.grudge) if rule.grudge and isinstance(op.value, Mapping) else None
        targets: dict[str | None, Any] = {None: cut}
        if rule.hit:
            targets = {n: d for n, d in hit.items()}
        for node, detail in targets.items():
            st.close((kind, node), op.time)
            if rule.neutral is not None and detail == rule.neutral:
                continue  # back to normal: nothing in force on this node any more
            st.periods[(kind, node)] = NodePeriod(
                kind, node, invoked, op.time, None, detail, op.value, effects
            )
    periods = st.done + list(st.periods.values())
    for kind, (t0, value, nodes) in st.spans.items():
        fault = fault_of(kind)
        effects = fault.effects if fault is not None else _NO_EFFECTS
        spans.append(Span(kind, t0, last, value, tuple(nodes), effects))
    return Timeline(
        tuple(landings),
        tuple(sorted(periods, key=lambda p: (p.start, p.kind, p.node or ""))),
        tuple(sorted(spans, key=lambda s: s.start)),
        last,
    )
