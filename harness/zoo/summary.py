"""The zoo's verdict: per-target rows, the table, the exit code and the JSON for CI.

Pure functions of the run records (plus :func:`read_op_times`, which reads one
run's history for when the first anomaly happened), so the table and the
verdict can be tested without a lab.

The verdict: exit 1 if some bug was never found (in runs that finished) or if
the correct node was ever reported invalid (a false alarm); 2 if some runs
ended unknown and nothing else failed; 0 otherwise.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.layout import HISTORY_JSONL, RESULTS
from harness.zoo.targets import Campaign, Target, campaign_command, describe_campaign, target_label

__all__ = [
    "RunRecord",
    "Row",
    "anomaly_indexes",
    "first_anomaly_seconds",
    "summarize",
    "zoo_exit_code",
    "render_table",
    "summary_json",
    "read_op_times",
    "attach_coverage",
    "CoverageRow",
    "coverage_table",
    "render_coverage",
    "never_reached",
    "coverage_json",
]


def anomaly_indexes(anomalies: Mapping[str, Any]) -> set[int]:
    """Every history index that an anomaly example names (its ``indexes``)."""
    out: set[int] = set()
    for examples in anomalies.values():
        if not isinstance(examples, list):
            continue
        for ex in examples:
            if isinstance(ex, Mapping):
                for i in ex.get("indexes") or ():
                    if isinstance(i, int) and not isinstance(i, bool):
                        out.add(i)
    return out


def first_anomaly_seconds(anomalies: Mapping[str, Any], times: Mapping[int, int]) -> float | None:
    """Seconds from test start to the earliest op any anomaly example names; None if none."""
    ts = [times[i] for i in anomaly_indexes(anomalies) if i in times]
    return min(ts) / 1e9 if ts else None


@dataclass
class RunRecord:
    """One run of the campaign against one target."""

    bug: str | None
    run: int
    seed: int
    valid: Any
    kinds: list[str] = field(default_factory=list)
    first_anomaly_s: float | None = None
    store: str | None = None
    seconds: float = 0.0
    reason: str | None = None
    mode: str = "dledger"
    coverage: Mapping[str, Any] | None = None  # results.json's block (attach_coverage)

    @property
    def label(self) -> str:
        return target_label(self.mode, self.bug)


@dataclass
class Row:
    """One line of the table: a target over all its runs."""

    bug: str | None
    runs: int
    invalid: int
    valid: int
    unknown: int
    median_first_s: float | None
    kinds: list[str]
    stores: list[str]
    status: str
    mode: str = "dledger"

    @property
    def label(self) -> str:
        return target_label(self.mode, self.bug)


def _status(bug: str | None, invalid: int, valid: int, unknown: int) -> str:
    if bug is None:
        if invalid:
            return "FALSE ALARM"
        return "unknown" if unknown else "ok"
    if invalid:
        return "found"
    # Runs that could not finish say nothing about whether the bug escapes.
    return "ESCAPED" if valid else "unknown"


def summarize(records: Iterable[RunRecord]) -> list[Row]:
    """Rows in first-seen target order."""
    by: dict[Target, list[RunRecord]] = {}
    for r in records:
        by.setdefault((r.mode, r.bug), []).append(r)
    rows = []
    for (mode, bug), rs in by.items():
        invalid = sum(1 for r in rs if r.valid is False)
        valid = sum(1 for r in rs if r.valid is True)
        unknown = len(rs) - invalid - valid
        firsts = [
            r.first_anomaly_s for r in rs if r.valid is False and r.first_anomaly_s is not None
        ]
        kinds = sorted({k for r in rs if r.valid is False for k in r.kinds})
        rows.append(
            Row(
                bug=bug,
                runs=len(rs),
                invalid=invalid,
                valid=valid,
                unknown=unknown,
                median_first_s=statistics.median(firsts) if firsts else None,
                kinds=kinds,
                stores=[r.store for r in rs if r.store],
                status=_status(bug, invalid, valid, unknown),
                mode=mode,
            )
        )
    return rows


def zoo_exit_code(rows: Sequence[Row]) -> int:
    """1: a bug escaped or a false alarm; 2: some runs unknown, nothing else wrong; 0: all good."""
    if any(r.status in ("ESCAPED", "FALSE ALARM") for r in rows):
        return 1
    if not rows or any(r.unknown for r in rows):
        return 2
    return 0


def _fmt_s(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


def render_table(rows: Sequence[Row], *, full_paths: bool = True) -> str:
    """A plain-text table; the correct node's "found" column counts its false alarms."""
    head = ("bug", "found", "median 1st anomaly (s)", "anomaly kinds", "status", "stores")
    lines = []
    for r in rows:
        found = f"{r.invalid}/{r.runs}"
        if r.unknown:
            found += f" ({r.unknown} unknown)"
        stores = ", ".join(r.stores if full_paths else [Path(s).name for s in r.stores])
        lines.append(
            (
                r.label,
                found,
                _fmt_s(r.median_first_s),
                ", ".join(r.kinds) or "-",
                r.status,
                stores or "-",
            )
        )
    widths = [
        max(len(head[i]), *(len(x[i]) for x in lines)) if lines else len(head[i])
        for i in range(len(head) - 1)
    ]
    out = []
    for cells in (head, *lines):
        out.append(
            "  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=True))
            + "  "
            + cells[-1]
        )
        if cells is head:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * len(head[-1]))
    return "\n".join(out)


def summary_json(
    rows: Sequence[Row],
    records: Sequence[RunRecord],
    *,
    campaign: Campaign,
    base_seed: int,
    runs: int,
    exit_code: int,
    lab: str | None,
    aborted: str | None = None,
    seconds: float = 0.0,
    campaigns: Mapping[str, Campaign] | None = None,
) -> dict[str, Any]:
    """The --json document for CI: the verdict, the table and every run with its seed.

    ``campaign`` is mode dledger's (kept for older readers); ``campaigns`` has every mode run.
    """
    every = dict(campaigns or {"dledger": campaign})
    return {
        "exit_code": exit_code,
        "verdict": {0: "ok", 1: "failed", 2: "unknown"}.get(exit_code, "error"),
        "escaped": [r.bug for r in rows if r.status == "ESCAPED"],
        "false_alarms": sum(r.invalid for r in rows if r.bug is None),
        "aborted": aborted,
        "seconds": round(seconds, 1),
        "seed": base_seed,
        "runs_per_target": runs,
        "campaign": campaign.to_json(),
        "campaign_text": describe_campaign(campaign),
        "campaigns": {m: {**c.to_json(), "text": describe_campaign(c)} for m, c in every.items()},
        "command": campaign_command(campaign, lab=lab),
        "rows": [
            {
                "bug": r.bug,
                "mode": r.mode,
                "label": r.label,
                "runs": r.runs,
                "found": r.invalid,
                "valid": r.valid,
                "unknown": r.unknown,
                "status": r.status,
                "median_first_anomaly_s": r.median_first_s,
                "kinds": r.kinds,
                "stores": r.stores,
            }
            for r in rows
        ],
        "runs": [
            {
                "bug": r.bug,
                "mode": r.mode,
                "run": r.run,
                "seed": r.seed,
                "valid": r.valid,
                "kinds": r.kinds,
                "first_anomaly_s": r.first_anomaly_s,
                "store": r.store,
                "seconds": round(r.seconds, 1),
                "reason": r.reason,
            }
            for r in records
        ],
    }


def read_op_times(store_dir: str | Path, wanted: set[int] | None = None) -> dict[int, int]:
    """``index -> time`` (ns since test start) from a run's history.jsonl.

    Only the ops in ``wanted`` are kept when given; torn or foreign lines are skipped
    (a crashed harness leaves a checkable prefix, and a time is all we need).
    """
    path = Path(store_dir) / HISTORY_JSONL
    out: dict[int, int] = {}
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                obj = json.loads(line)
                i, t = obj["index"], obj["time"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(i, int) and isinstance(t, int) and (wanted is None or i in wanted):
                out[i] = t
    return out


def attach_coverage(records: Iterable[RunRecord]) -> None:
    """Fill each record's ``coverage`` from its run's results.json (None when absent)."""
    for r in records:
        if not r.store:
            continue
        try:
            doc = json.loads((Path(r.store) / RESULTS).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        cov = doc.get("coverage") if isinstance(doc, Mapping) else None
        r.coverage = cov if isinstance(cov, Mapping) else None


@dataclass
class CoverageRow:
    """One situation over a campaign's runs."""

    name: str
    title: str
    runs: int  # runs with a coverage block
    observable: int  # of those, runs that could observe it
    reached: int  # of those, runs that reached it
    count: int  # occurrences over all runs
    median_first_s: float | None
    why_not: list[str] = field(default_factory=list)  # distinct reasons it was unobservable
    by_design: list[str] = field(default_factory=list)
    """Why the DB rules it out (``by_design`` of the coverage blocks), when every run that
    could observe it says so: then not reaching it is what a correct DB does."""

    @property
    def state(self) -> str:
        if self.observable == 0:
            return "unobservable" if self.runs else "no data"
        if self.reached:
            return "reached"
        return "by design" if self.by_design else "NEVER REACHED"


def coverage_table(records: Iterable[RunRecord]) -> list[CoverageRow]:
    """Each situation over every run that has a coverage block, in the vocabulary's order.

    A run that could not observe a situation counts neither as reaching it nor as
    missing it; a situation no run could observe is ``unobservable``, not never reached.
    """
    from checker.situations import SITUATIONS

    covs = [r.coverage for r in records if isinstance(r.coverage, Mapping)]
    rows = []
    for s in SITUATIONS:
        observable = reached = count = 0
        firsts: list[float] = []
        why: list[str] = []
        design: list[str] = []
        ruled_out = True  # by every run that could observe it
        for cov in covs:
            blind = cov.get("unobservable") or {}
            entry = cov.get(s.name)
            if s.name in blind or not isinstance(entry, Mapping):
                reason = str(blind.get(s.name, "not in this run's coverage"))
                if reason not in why:
                    why.append(reason)
                continue
            observable += 1
            ruled = (cov.get("by_design") or {}).get(s.name)
            if ruled is None:
                ruled_out = False
            elif str(ruled) not in design:
                design.append(str(ruled))
            got = entry.get("count")
            n = got if isinstance(got, int) else 0
            count += n
            if n:
                reached += 1
                if isinstance(entry.get("first_s"), (int, float)):
                    firsts.append(float(entry["first_s"]))
        rows.append(
            CoverageRow(
                s.name,
                s.title,
                len(covs),
                observable,
                reached,
                count,
                statistics.median(firsts) if firsts else None,
                why,
                design if ruled_out else [],
            )
        )
    return rows


def never_reached(rows: Sequence[CoverageRow]) -> list[str]:
    """Titles of the situations some run could observe and no run reached, less those the
    DB rules out by design."""
    return [r.title for r in rows if r.state == "NEVER REACHED"]


def render_coverage(rows: Sequence[CoverageRow]) -> str:
    """A plain-text table: per situation, runs reached/observable, occurrences, first time."""
    head = ("situation", "reached", "occurrences", "median 1st (s)", "state")
    lines = [
        (
            r.title,
            f"{r.reached}/{r.observable}"
            + (f" ({r.runs - r.observable} blind)" if r.runs - r.observable else ""),
            str(r.count) if r.observable else "-",
            _fmt_s(r.median_first_s),
            r.state
            + (f": {'; '.join(r.why_not)}" if r.state == "unobservable" else "")
            + (f": {'; '.join(r.by_design)}" if r.state == "by design" else ""),
        )
        for r in rows
    ]
    widths = [max(len(head[i]), *(len(x[i]) for x in lines)) for i in range(len(head) - 1)]
    out = []
    for cells in (head, *lines):
        out.append(
            "  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=True))
            + "  "
            + cells[-1]
        )
        if cells is head:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * len(head[-1]))
    return "\n".join(out)


def coverage_json(rows: Sequence[CoverageRow]) -> dict[str, Any]:
    """The --json form: per situation its numbers, and the never-reached titles."""
    return {
        "situations": {
            r.name: {
                "title": r.title,
                "runs": r.runs,
                "observable": r.observable,
                "reached": r.reached,
                "count": r.count,
                "median_first_s": r.median_first_s,
                "state": r.state,
                **({"why_unobservable": r.why_not} if r.state == "unobservable" else {}),
                **({"by_design": r.by_design} if r.state == "by design" else {}),
            }
            for r in rows
        },
        "never_reached": never_reached(rows),
    }
