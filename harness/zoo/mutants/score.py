"""The mutation score, its table and the survivors' diffs: pure functions of the records.

Score = mutants the campaign killed / mutants that reached a campaign verdict
(killed + survived). Mutants the unit tests kill, that break the cluster
fault-free, or whose campaign ended UNKNOWN are counted and shown, never scored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from harness.zoo.mutants.record import (
    BROKEN,
    KILLED,
    KILLED_BY_UNIT,
    OUTCOMES,
    SURVIVED,
    UNKNOWN,
    MutantRecord,
)

__all__ = ["mutation_score", "outcome_counts", "render_table", "render_survivors", "score_json"]


def outcome_counts(records: Sequence[MutantRecord]) -> dict[str, int]:
    c = Counter(r.outcome for r in records)
    return {k: c.get(k, 0) for k in OUTCOMES}


def mutation_score(records: Sequence[MutantRecord]) -> float | None:
    """killed / (killed + survived); None when no mutant reached a campaign verdict."""
    c = outcome_counts(records)
    scored = c[KILLED] + c[SURVIVED]
    return c[KILLED] / scored if scored else None


def _stage_word(r: MutantRecord) -> str:
    if r.outcome == KILLED_BY_UNIT and r.unit:
        return r.unit.detail
    if r.outcome == BROKEN and r.smoke:
        return r.smoke.detail
    if r.outcome == KILLED and r.campaign:
        first = r.campaign.kinds[:3]
        return ", ".join(first) + ("..." if len(r.campaign.kinds) > 3 else "")
    if r.outcome == UNKNOWN:
        st = r.campaign or r.smoke or r.unit
        return st.detail if st else "not run"
    return ""


def render_table(records: Sequence[MutantRecord]) -> str:
    """One row per mutant, then the counts and the score."""
    rows = [("mutant", "outcome", "why / anomalies", "s")]
    for r in records:
        secs = sum(s.seconds for s in (r.unit, r.smoke, r.campaign) if s is not None)
        rows.append((r.id, r.outcome, _stage_word(r)[:70], f"{secs:.0f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    c = outcome_counts(records)
    score = mutation_score(records)
    lines.append("")
    lines.append(
        f"{len(records)} mutants: {c[KILLED_BY_UNIT]} killed by unit tests, {c[BROKEN]} broken "
        f"fault-free, {c[KILLED]} killed by the campaign, {c[SURVIVED]} survived, "
        f"{c[UNKNOWN]} unknown"
    )
    lines.append(
        "mutation score: "
        + (
            f"{score:.0%} ({c[KILLED]}/{c[KILLED] + c[SURVIVED]})"
            if score is not None
            else "n/a (no mutant reached a campaign verdict)"
        )
    )
    return "\n".join(lines)


def render_survivors(records: Sequence[MutantRecord]) -> str:
    """Each survivor's description and diff, for a reader to judge equivalent or missed."""
    out = []
    for r in records:
        if r.outcome != SURVIVED:
            continue
        out.append(f"survivor {r.id} ({r.area}): {r.description}")
        if r.campaign and r.campaign.store:
            out.append(f"  campaign run: {r.campaign.store}")
        out.append(r.diff.rstrip())
        out.append("")
    return "\n".join(out)


def score_json(records: Sequence[MutantRecord], **meta: Any) -> dict[str, Any]:
    """The whole result for CI: meta (settings), counts, score, every record."""
    return {
        **meta,
        "counts": outcome_counts(records),
        "score": mutation_score(records),
        "survivors": [r.id for r in records if r.outcome == SURVIVED],
        "mutants": [r.to_json() for r in records],
    }
