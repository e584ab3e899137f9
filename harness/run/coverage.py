"""A run's coverage: which situations (:mod:`checker.situations`) it reached, and when.

Computed after the check, from the stored history, the samples in it and, when the DB
reports events (:class:`harness.core.events.ReportsEvents`), the node logs fetched in
cleanup. Written to results.json under ``coverage``.

Node logs are stamped with each node's wall clock; the history counts from the test's
start on the harness's monotonic clock. The runner knows both clocks at once and gives
the offset (``origin_wall_ns``: the wall time at which the history read 0); a stored run
falls back to its directory's name, a UTC stamp made just before the history began.
A node whose clock a fault moved (one that declares ``moves_clock``) stamped its lines
that much off; those lines are moved back by the offset the fault's completion recorded
(the same periods the report uses, :meth:`harness.core.periods.Timeline.clock_shifts`).
A strobed clock cannot be corrected: its events keep their stamps (ordering within a
node still holds).

Exact when it can be: a node that stamps ``CLOCK_MONOTONIC`` too (``mono_s``) and started
on the harness's own kernel (its ``start`` event's boot id is ours: lab namespaces,
containers; not VMs or remote machines) is placed by that stamp, which no clock fault
moves. That needs the history's origin on the monotonic clock, known only to a live run
(``run_coverage`` given ``origin_wall_ns``); a stored run re-analysed later falls back to
the wall stamps.
"""

from __future__ import annotations

import bisect
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from checker.situations import SITUATIONS, Situation, coverage, observed_from
from harness.core.db import unreachable_situations
from harness.core.events import NodeEvent, ReportsEvents
from harness.core.history import Op
from harness.core.layout import NODES
from harness.core.periods import ClockShift
from nemesis.registry import timeline

__all__ = [
    "run_coverage",
    "collect_events",
    "origin_from_dir",
    "never_reached",
    "situation_titles",
    "election_timeout_s",
]

log = logging.getLogger(__name__)

_DIR_STAMP = re.compile(r"^(\d{8}T\d{6})(?:\.(\d{1,6}))?Z$")


def origin_from_dir(run_dir: Path) -> int | None:
    """The wall time (ns) a run directory's name records (``YYYYmmddTHHMMSS.ffffffZ``)."""
    m = _DIR_STAMP.match(run_dir.name)
    if not m:
        return None
    dt = datetime.strptime(m.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    return int(dt.timestamp()) * 1_000_000_000 + int((m.group(2) or "0").ljust(6, "0")) * 1000


class _Placer:
    """Puts one node's events, in the order it wrote them, on the history's clock.

    A stamp inside a clock fault's period is ambiguous when the offset is negative: a
    line stamped 28 s may be real 28 s, or real 45 s written while the clock ran 17 s
    behind (and a positive offset makes the same kind of pair). Three facts pick the
    reading, in this order: a node's term never goes down, so a reading at which the
    samples (true history times) show the node in a higher term before, or a lower term
    after, is wrong; a role change is seen by the node's next sample, so a reading
    whose next sample (within a second) shows that term and role is preferred; and a
    node writes its lines in real-time order, so of the readings left the earliest not
    before the previous line's is taken. Only monotonic stamps in the log would make
    this exact (docs/zoo.md, issue 27).
    """

    SLACK_NS = 300_000_000  # a sample's own latency: its answer came from its window

    def __init__(
        self,
        origin: int,
        periods: Sequence[ClockShift],
        states: Sequence[tuple[int, int, str | None]] = (),
        *,
        origin_mono: int | None = None,
        boot: str | None = None,
    ) -> None:
        self.origin = origin
        self.origin_mono = origin_mono
        self.boot = boot
        self.mono_ok = False  # the node's current process shares our monotonic clock
        self.periods = [(p.start, p.end, p.offset_ms) for p in periods if p.offset_ms is not None]
        self.last: int | None = None
        self.times = [t for t, _, _ in states]
        self.states = [(term, role) for _, term, role in states]
        terms = [(t, term) for t, term, _ in states]
        self.max_before: list[int] = []  # highest term sampled up to each sample
        self.min_after: list[int] = []  # lowest term sampled from each sample on
        hi = -1
        for _, term in terms:
            hi = max(hi, term)
            self.max_before.append(hi)
        lo = 2**62
        for _, term in reversed(terms):
            lo = min(lo, term)
            self.min_after.append(lo)
        self.min_after.reverse()

    def _fits_terms(self, t: int, term: int | None) -> bool:
        if term is None or not self.times:
            return True
        k = bisect.bisect_left(self.times, t - self.SLACK_NS)
        if k > 0 and self.max_before[k - 1] > term:
            return False
        k = bisect.bisect_right(self.times, t + self.SLACK_NS)
        return not (k < len(self.times) and self.min_after[k] < term)

    def _sampled_as(self, t: int, term: int | None, role: str | None) -> bool:
        """One of the node's first two samples answered after ``t`` (within a second)
        shows ``term`` and ``role`` (the first may have been asked just before ``t``)."""
        k = bisect.bisect_left(self.times, t)
        return any(
            self.times[j] <= t + 1_000_000_000 and self.states[j] == (term, role)
            for j in range(k, min(k + 2, len(self.times)))
        )

    def place(self, ev: NodeEvent) -> NodeEvent:
        if ev.kind == "start":
            self.mono_ok = (
                self.origin_mono is not None and self.boot is not None and ev.boot == self.boot
            )
        if self.mono_ok and ev.mono_s is not None and self.origin_mono is not None:
            real = int(ev.mono_s * 1e9) - self.origin_mono
            self.last = real if self.last is None else max(self.last, real)
            return ev.at(real)
        if ev.wall_s is None:
            return ev
        t = int(ev.wall_s * 1e9) - self.origin
        fits = [] if any(t0 <= t <= t1 for t0, t1, _ in self.periods) else [t]
        for t0, t1, off in self.periods:
            assert off is not None
            moved = t - int(off * 1e6)
            if t0 <= moved <= t1:
                fits.append(moved)
        if len(fits) > 1:
            fits = [x for x in fits if self._fits_terms(x, ev.term)] or fits
        if len(fits) > 1 and ev.kind == "role":
            fits = [x for x in fits if self._sampled_as(x, ev.term, ev.role)] or fits
        if not fits:
            fits = [t]
        later = [x for x in fits if self.last is None or x >= self.last]
        real = min(later or fits)
        self.last = real if self.last is None else max(self.last, real)
        return ev.at(real)


def collect_events(
    db: object,
    run_dir: Path,
    origin_wall_ns: int | None,
    nemesis: Iterable[Op],
    samples: Iterable[Op] = (),
    origin_mono_ns: int | None = None,
) -> tuple[list[NodeEvent], frozenset[str], str | None]:
    """The DB's node events on the history's clock, the kinds it reports, and why none.

    ``origin_mono_ns``: ``CLOCK_MONOTONIC`` when the history read 0; with it, events of
    nodes on this kernel are placed by their monotonic stamps (exact).

    ``samples`` (the sampler's ok ops) tell the terms each node was in when, which
    settles stamps a clock fault made ambiguous (:class:`_Placer`).

    ``why`` is None when events were read; otherwise it says what was missing (the DB
    does not report events, no logs were fetched, the history's origin is unknown).
    """
    if not isinstance(db, ReportsEvents):
        return [], frozenset(), f"{type(db).__name__} does not report node events"
    nodes_dir = run_dir / NODES
    if not nodes_dir.is_dir():
        return [], frozenset(), "no node logs were fetched"
    if origin_wall_ns is None:
        return [], frozenset(), "the history's start in wall time is unknown"
    shifts: dict[str, list[ClockShift]] = {}
    for shift in timeline(nemesis).clock_shifts(end=2**62):  # never reset: to the end of time
        shifts.setdefault(shift.node, []).append(shift)
    states: dict[str, list[tuple[int, int, str | None]]] = {}
    for smp in sorted(samples, key=lambda o: o.time):
        v = smp.value if isinstance(smp.value, Mapping) else {}
        if smp.type == "ok" and isinstance(v.get("term"), int) and smp.node is not None:
            role = v.get("role") if isinstance(v.get("role"), str) else None
            states.setdefault(str(smp.node), []).append((smp.time, v["term"], role))
    events: list[NodeEvent] = []
    for node_dir in sorted(p for p in nodes_dir.iterdir() if p.is_dir()):
        files = sorted(p for p in node_dir.rglob("*") if p.is_file())
        placer = _Placer(
            origin_wall_ns,
            shifts.get(node_dir.name, []),
            states.get(node_dir.name, []),
            origin_mono=origin_mono_ns,
            boot=local_boot_id(),
        )
        try:
            for ev in db.node_events(node_dir.name, files):
                events.append(placer.place(ev))
        except Exception as e:  # a DB's parser must not cost the run its results
            log.warning("%s: reading node events failed: %s", node_dir.name, e)
    return events, frozenset(db.event_kinds()), None


def local_boot_id() -> str | None:
    """This kernel's boot id (Linux): a node logging the same one shares our monotonic clock."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def election_timeout_s(db: object, default: float = 1.0) -> float:
    """The DB's election timeout E, when it says (``election_timeout_ms``), else ``default``.

    The reference node's default is 1000 ms (node_impl/config.py).
    """
    ms = getattr(db, "election_timeout_ms", None)
    return ms / 1000.0 if isinstance(ms, (int, float)) and ms > 0 else default


def run_events(
    run_dir: Path, ops: Sequence[Op], db: object, *, origin_wall_ns: int | None = None
) -> tuple[list[NodeEvent], frozenset[str], str | None, int | None]:
    """The run's node events on the history's clock (:func:`collect_events`), with the
    wall time the history started at (``origin_wall_ns``, else the directory's stamp)."""
    origin = origin_wall_ns if origin_wall_ns is not None else origin_from_dir(run_dir)
    # A live run's origin came from the harness's clocks a moment ago: the monotonic
    # origin is the same instant, as long as the wall clock was not stepped meanwhile.
    mono = None
    if origin_wall_ns is not None:
        mono = origin_wall_ns + time.monotonic_ns() - time.time_ns()
    nemesis = [op for op in ops if op.process == "nemesis"]
    samples = [op for op in ops if op.f == "sample" and op.type == "ok"]
    events, kinds, why = collect_events(db, run_dir, origin, nemesis, samples, mono)
    return events, kinds, why, origin


def run_coverage(
    run_dir: Path,
    history: Iterable[Op],
    db: object,
    nodes: Sequence[str],
    *,
    origin_wall_ns: int | None = None,
    events: tuple[list[NodeEvent], frozenset[str], str | None, int | None] | None = None,
) -> dict[str, Any]:
    """The ``coverage`` block of results.json for one run (see :func:`checker.situations.coverage`).

    Adds ``events``: how many node events were read, or why none were. ``events`` is
    :func:`run_events`'s answer when the caller has it already.
    """
    ops = list(history)
    if events is None:
        events = run_events(run_dir, ops, db, origin_wall_ns=origin_wall_ns)
    evs, kinds, why, origin = events
    obs = observed_from(
        ops, events=evs, event_kinds=kinds, nodes=nodes, election_s=election_timeout_s(db)
    )
    cov = coverage(obs)
    known = {s.name for s in SITUATIONS}
    cov["by_design"] = {k: v for k, v in unreachable_situations(db).items() if k in known}
    cov["events"] = (
        {"count": len(evs), "kinds": sorted(kinds), "origin_wall_ns": origin}
        if why is None
        else {
            "count": 0,
            "why_none": why,
        }
    )
    return cov


def situation_titles() -> dict[str, str]:
    """Situation name → the few words a summary line uses."""
    return {s.name: s.title for s in SITUATIONS}


def never_reached(cov: Mapping[str, Any], situations: Sequence[Situation] = ()) -> list[str]:
    """The observable situations a coverage block counts 0 times, as their titles (not
    those the DB declares a correct run of it cannot reach: ``by_design``)."""
    titles = {s.name: s.title for s in (situations or SITUATIONS)}
    got = cov.get("by_design")
    by_design = got if isinstance(got, Mapping) else {}
    out = []
    for name, title in titles.items():
        entry = cov.get(name)
        if isinstance(entry, Mapping) and not entry.get("count") and name not in by_design:
            out.append(title)
    return out
