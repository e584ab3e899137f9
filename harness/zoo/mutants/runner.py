"""Mutants through the filters, one after another, each recorded as soon as it is judged.

For each mutant: write its tree, run the node's unit tests on it, then a
fault-free smoke run on the lab, then the default campaign; stop at the first
filter it does not pass. Each finished mutant is appended to the ledger at
once, and mutants the ledger already holds with the same settings are not run
again, so a long run can be killed and resumed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.core.layout import safe_name
from harness.core.remote import Host
from harness.zoo.mutants.ledger import Ledger
from harness.zoo.mutants.mutator import Mutant, mutant_diff
from harness.zoo.mutants.plan import mutant_spec, smoke_campaign, with_node_src
from harness.zoo.mutants.record import MutantRecord, StageResult
from harness.zoo.mutants.selection import area_of
from harness.zoo.mutants.stages import Stopped, lab_run, unit_tests
from harness.zoo.mutants.tree import write_tree
from harness.zoo.targets import Campaign

__all__ = ["MutationSettings", "run_mutants", "LEDGER_FILE"]

LEDGER_FILE = "mutants.jsonl"


@dataclass(frozen=True)
class MutationSettings:
    """What a mutant's verdict depends on besides its code; a resumed run must match."""

    time_limit: float
    seed: int
    smoke_seconds: float = 10.0
    min_ok: int = 20
    unit_timeout: float = 600.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _record(
    m: Mutant, node_dir: Path, settings: MutationSettings, **stages: StageResult
) -> MutantRecord:
    source = (node_dir / m.file).read_text(encoding="utf-8")
    return MutantRecord(
        id=m.id,
        description=m.describe(),
        operator=m.operator,
        area=area_of(m.file, m.function),
        diff=mutant_diff(source, m),
        settings=settings.to_json(),
        **stages,
    )


def _run_one(
    m: Mutant,
    hosts: Sequence[Host],
    *,
    node_dir: Path,
    campaign: Campaign,
    settings: MutationSettings,
    out_dir: Path,
    store_root: str | Path,
    stage_done: Callable[[str, StageResult], None],
) -> MutantRecord:
    pkg = write_tree(node_dir, m, out_dir / "trees" / safe_name(m.id))
    unit = unit_tests(pkg.parent, timeout=settings.unit_timeout)
    stage_done("unit", unit)
    if not unit.passed:
        return _record(m, node_dir, settings, unit=unit)
    c = with_node_src(campaign.with_time_limit(settings.time_limit), pkg)
    smoke = lab_run(
        mutant_spec(smoke_campaign(c, settings.smoke_seconds), hosts, m, settings.seed, "smoke"),
        hosts,
        store_root=store_root,
        min_ok=settings.min_ok,
    )
    stage_done("smoke", smoke)
    if not smoke.passed:
        return _record(m, node_dir, settings, unit=unit, smoke=smoke)
    result = lab_run(
        mutant_spec(c, hosts, m, settings.seed, "campaign"),
        hosts,
        store_root=store_root,
    )
    stage_done("campaign", result)
    return _record(m, node_dir, settings, unit=unit, smoke=smoke, campaign=result)


def run_mutants(
    mutants: Sequence[Mutant],
    hosts: Sequence[Host],
    *,
    node_dir: Path,
    campaign: Campaign,
    settings: MutationSettings,
    out_dir: Path,
    store_root: str | Path,
    on_record: Callable[[MutantRecord, int, bool], None] | None = None,
    on_stage: Callable[[Mutant, str, StageResult], None] | None = None,
) -> tuple[list[MutantRecord], str | None]:
    """The records of ``mutants`` in order, and why the run stopped early (None if it did not).

    ``on_record(record, k, resumed)`` follows mutant k (1-based); ``resumed`` when
    the ledger already had it.
    """
    out_dir = out_dir.resolve()  # the tree path goes into test.json and to the DB as is
    ledger = Ledger(out_dir / LEDGER_FILE)
    done = ledger.done(settings.to_json())
    records: list[MutantRecord] = []
    for k, m in enumerate(mutants, 1):
        if m.id in done:
            records.append(done[m.id])
            if on_record is not None:
                on_record(done[m.id], k, True)
            continue

        def stage_done(name: str, st: StageResult, m: Mutant = m) -> None:
            if on_stage is not None:
                on_stage(m, name, st)

        try:
            rec = _run_one(
                m,
                hosts,
                node_dir=node_dir,
                campaign=campaign,
                settings=settings,
                out_dir=out_dir,
                store_root=store_root,
                stage_done=stage_done,
            )
        except (Stopped, KeyboardInterrupt) as e:
            return records, str(e) or "interrupted"
        ledger.append(rec)
        records.append(rec)
        if on_record is not None:
            on_record(rec, k, False)
    return records, None
