"""The zoo's runs: every target meets its mode's campaign, run by run, through the one campaign loop.

Run i of every target has seed ``base + i``, so every bug meets the same fault
schedules as the correct node; :func:`run_zoo` turns each finished run into a
:class:`~harness.zoo.summary.RunRecord` for the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from harness.core.remote import Host
from harness.core.verdict import word as verdict_word
from harness.run.campaign import CampaignRun, PlannedRun, run_campaign, user_stopped
from harness.run.options import RunOptions
from harness.zoo.summary import RunRecord, anomaly_indexes, first_anomaly_seconds, read_op_times
from harness.zoo.targets import Campaign, Target, zoo_spec

__all__ = ["zoo_plan", "record_of", "run_zoo", "progress_line"]


def zoo_plan(
    targets: Sequence[Target],
    seeds: Sequence[int],
    campaigns: Mapping[str, Campaign],
    hosts: Sequence[Host],
) -> Iterator[PlannedRun]:
    """Every target's runs in turn; the tag is ``(mode, bug, run index)``."""
    for mode, bug in targets:
        c = campaigns[mode]
        for i, seed in enumerate(seeds):
            yield PlannedRun(zoo_spec(c, hosts, mode, bug, seed), tag=(mode, bug, i))


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def record_of(done: CampaignRun) -> RunRecord:
    """The table's view of one run: verdict, anomaly kinds, and when the first anomaly happened."""
    mode, bug, i = done.planned.tag
    result = done.result
    res = result.results
    anomalies = res.get("anomalies") or {}
    valid = res.get("valid", "unknown")
    first = None
    if valid is False:
        first = first_anomaly_seconds(
            anomalies, read_op_times(result.store_dir, anomaly_indexes(anomalies))
        )
    reason = res.get("reason") or res.get("error") or result.reason
    return RunRecord(
        bug=bug,
        run=i,
        seed=done.spec.seed,
        valid=valid,
        kinds=sorted(anomalies),
        first_anomaly_s=first,
        store=_rel(result.store_dir),
        seconds=done.seconds,
        reason=reason,
        mode=mode,
    )


def run_zoo(
    targets: Sequence[Target],
    seeds: Sequence[int],
    campaigns: Mapping[str, Campaign],
    hosts: Sequence[Host],
    *,
    store_root: str,
    on_record: Callable[[RunRecord, int], None] | None = None,
) -> tuple[list[RunRecord], str | None]:
    """The records of every run, and why the zoo stopped early (None if it did not).

    ``on_record(record, k)`` is called after run k (1-based) finishes.
    """
    records: list[RunRecord] = []

    def collect(done: CampaignRun) -> None:
        rec = record_of(done)
        records.append(rec)
        if on_record is not None:
            on_record(rec, done.number)

    # No HTML report per run: it costs seconds, and `splitbrain report PATH` makes one later.
    runs = run_campaign(
        zoo_plan(targets, seeds, campaigns, hosts),
        hosts,
        store_root=store_root,
        options=RunOptions(progress=False),
        on_result=collect,
    )
    aborted = None
    if runs and user_stopped(runs[-1].result):
        aborted = records[-1].reason or "interrupted"
    return records, aborted


def progress_line(rec: RunRecord, k: int, total: int, runs: int) -> str:
    word = verdict_word(rec.valid, loud=False)
    bits = [f"[{k}/{total}] {rec.label} run {rec.run + 1}/{runs} seed {rec.seed}: {word}"]
    if rec.kinds:
        bits.append(", ".join(rec.kinds))
    if rec.first_anomaly_s is not None:
        bits.append(f"first anomaly at {rec.first_anomaly_s:.1f}s")
    if rec.valid not in (True, False) and rec.reason:
        bits.append(f"reason: {rec.reason}")
    bits.append(f"{rec.seconds:.0f}s")
    bits.append(str(rec.store))
    return "; ".join(bits)
