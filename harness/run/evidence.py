"""How much a verdict rests on: ok client ops before, during and after the fault windows.

A checker that finds nothing wrong in a history where nothing succeeded while faults were
in force has judged the quiet parts of the run only; "valid" would then claim more than
was tested. This module counts, from the history alone, the client ops that completed
``ok`` before the first fault, inside each fault window and after it, and holds the run
to a floor per workload (:data:`FLOORS`): below it the run is ``unknown`` ("too little
evidence"), never ``valid``. An invalid verdict stands whatever the evidence: one
anomaly is enough.

A fault window is the union of overlapping fault spans (from a fault's ``start``
invocation to its ``stop`` completion, :mod:`harness.core.periods`); client ops are every
op not of the nemesis and not a sampler's (``f`` ``sample``). Ops are placed by their
completion time.

The floors were chosen from measured runs (docs/zoo.md, "Evidence floors"): a floor is
well below what a correct node's default run gives on a loaded machine, so a short test
campaign does not flap to unknown, and well above what a run whose cluster stayed down
gives. A workload without a floor here is reported, never floored.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.op import Op
from harness.core.periods import Span
from harness.core.spec import TestSpec

__all__ = [
    "FLOORS", "Floor", "apply_floor", "evidence", "fault_windows", "recheck_evidence",
    "summary_line",
]  # fmt: skip

NOT_CLIENT_FS = frozenset({"sample"})
"""Ops of extra workers (the per-node samplers), which say nothing a checker judges."""


@dataclass(frozen=True)
class Floor:
    """The fewest ok client ops a run of a workload needs in each part to be judged."""

    before: int
    """Before the first fault: the cluster served at all."""
    during_per_s: float
    """Inside the fault windows, per second of them (a longer campaign must show more):
    the checkers saw what the faults did to clients, not only the quiet stretches."""
    after: int
    """After the last fault window closed (the final reads included): it came back."""
    before_s: float = 2.0
    """The ``before`` floor holds only when the clients ran this long before the first
    fault opened. The default deck opens its first fault 0.25-1.5 s after the first
    client op (measured, docs/zoo.md): below that the count is a race with the load (a
    correct run at load 28 had its first ok 0.16 s after the first fault, and was
    ``unknown`` for it), and the windows' and final reads' floors still say whether
    the cluster served."""

    def during(self, window_s: float) -> int:
        return math.ceil(self.during_per_s * window_s)

    def to_json(self) -> dict[str, float]:
        return {
            "before": self.before, "during_per_s": self.during_per_s, "after": self.after,
            "before_s": self.before_s,
        }  # fmt: skip


FLOORS: Mapping[str, Floor] = {
    # the reference node's default workload (harness/dbs/dledger.py STRONGEST_WORKLOAD,
    # 60 ops/s offered): docs/zoo.md "Evidence floors" has the measured counts behind these
    "mixed": Floor(before=1, during_per_s=1.0, after=1),
}
"""Per workload name; a run is held only to the parts it has (a run with no fault has no
"during" and no "after" to fall short of)."""


def fault_windows(spans: Iterable[Span]) -> list[tuple[int, int, list[str]]]:
    """Overlapping fault spans merged: ``(start, end, kinds)`` in time order."""
    out: list[tuple[int, int, list[str]]] = []
    for s in sorted(spans, key=lambda s: (s.start, s.end)):
        if out and s.start <= out[-1][1]:
            start, end, kinds = out[-1]
            out[-1] = (start, max(end, s.end), kinds if s.kind in kinds else [*kinds, s.kind])
        else:
            out.append((s.start, s.end, [s.kind]))
    return out


def _ok_times(ops: Iterable[Op]) -> list[int]:
    return sorted(
        op.time
        for op in ops
        if op.type == "ok" and op.process != "nemesis" and op.f not in NOT_CLIENT_FS
    )


def evidence(
    ops: Sequence[Op],
    spans: Iterable[Span],
    *,
    workload: str | None = None,
    configuration: Mapping[str, Any] | None = None,
    floors: Mapping[str, Floor] = FLOORS,
) -> dict[str, Any]:
    """The ``evidence`` block of ``results.json``.

    ``windows``: each fault window with its kinds, start and end (s from the history's
    start) and the ok ops before it (since the previous one closed), during and after it
    (until the next one opened, or the end); ``ok``: the totals before the first, during
    all, after the last; ``configuration``: what the DB ran as (one run, one
    configuration); ``floor`` and ``short``: the workload's floor and the parts below it.
    """
    times = _ok_times(ops)
    wins = fault_windows(spans)
    started = min(
        (op.time for op in ops if op.process != "nemesis" and op.f not in NOT_CLIENT_FS),
        default=None,
    )

    def count(lo: int | None, hi: int | None, *, closed: bool = False) -> int:
        """Ok ops in the open interval (lo, hi), or the closed [lo, hi]; None: unbounded."""
        if closed:
            a = 0 if lo is None else bisect_left(times, lo)
            b = len(times) if hi is None else bisect_right(times, hi)
        else:
            a = 0 if lo is None else bisect_right(times, lo)
            b = len(times) if hi is None else bisect_left(times, hi)
        return max(0, b - a)

    windows: list[dict[str, Any]] = []
    during = 0
    for i, (start, end, kinds) in enumerate(wins):
        prev_end = wins[i - 1][1] if i else None
        next_start = wins[i + 1][0] if i + 1 < len(wins) else None
        during += count(start, end, closed=True)
        windows.append(
            {
                "kinds": kinds,
                "start_s": round(start / 1e9, 3),
                "end_s": round(end / 1e9, 3),
                "ok_before": count(prev_end, start),
                "ok_during": count(start, end, closed=True),
                "ok_after": count(end, next_start),
            }
        )
    window_s = sum(end - start for start, end, _ in wins) / 1e9
    total = {
        "before": count(None, wins[0][0]) if wins else len(times),
        "during": during,
        "after": count(wins[-1][1], None) if wins else 0,
        "all": len(times),
    }
    out: dict[str, Any] = {"ok": total, "fault_s": round(window_s, 3), "windows": windows}
    if configuration is not None:
        out["configuration"] = dict(configuration)
    floor = floors.get(workload or "")
    lead = None if not wins or started is None else max(0, wins[0][0] - started) / 1e9
    if lead is not None:
        out["clients_before_s"] = round(lead, 3)  # clients' time before the first fault
    if floor is not None:
        before = floor.before if lead is None or lead >= floor.before_s else 0
        need = {"before": before, "during": floor.during(window_s), "after": floor.after}
        out["floor"] = {"workload": workload, **floor.to_json(), "need": need}
        parts = ("before", "during", "after") if wins else ("before",)
        out["short"] = {p: {"ok": total[p], "floor": need[p]} for p in parts if total[p] < need[p]}
    return out


def apply_floor(results: dict[str, Any], ev: Mapping[str, Any]) -> None:
    """A valid verdict resting on less than the floor becomes unknown, with the reason;
    an invalid or unknown one stands."""
    short = ev.get("short") or {}
    if not short or results.get("valid") is not True:
        return
    said = ", ".join(f"{p} {v['ok']} < {v['floor']}" for p, v in short.items())
    results["valid"] = "unknown"
    why = f"too little evidence: ok client ops {said} (docs/zoo.md, evidence floors)"
    results["reason"] = f"{results['reason']}; {why}" if results.get("reason") else why


def summary_line(ev: Mapping[str, Any], titles: Callable[[str], str] = str) -> str:
    """One line: the totals, the windows and what fell short."""
    ok = ev.get("ok") or {}
    line = (
        f"evidence: ok ops {ok.get('before', 0)} before, {ok.get('during', 0)} during "
        f"{len(ev.get('windows') or [])} fault windows, {ok.get('after', 0)} after"
    )
    short = ev.get("short") or {}
    if short:
        line += " - below the floor: " + ", ".join(
            f"{titles(p)} {v['ok']} < {v['floor']}" for p, v in short.items()
        )
    return line


def recheck_evidence(
    run_dir: Path,
    spec: TestSpec,
    results: dict[str, Any],
    configuration: Mapping[str, Any] | None = None,
) -> None:
    """``splitbrain check RUN_DIR``: the evidence and its floor again, from the stored
    history (``configuration``: what the DB ``test.json`` builds runs as)."""
    from harness.core.history import iter_history
    from harness.core.layout import history_file
    from nemesis.registry import timeline

    ops = list(iter_history(history_file(run_dir)))
    ev = evidence(ops, timeline(ops).spans, workload=spec.workload, configuration=configuration)
    results["evidence"] = ev
    apply_floor(results, ev)
