"""``splitbrain mutants``: the default campaign judged by the bugs nobody planted.

The zoo's seeded bugs were each found by a campaign tuned after studying them;
mutants of the node's safety-relevant code (``harness/zoo/mutants/``) are bugs
nobody tuned for. This edge lists them, runs the chosen ones through the
filters, prints each as it is judged, then the table, the score and every
survivor's diff.

Exit 0 when no mutant survived, 1 when some did, 2 when some ended unknown and
none survived, 3 on bad input. ``splitbrain zoo --mutants`` is the same command, kept
for older scripts (deprecated).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import click

from harness.cli import options
from harness.cli.coverage import echo_coverage
from harness.zoo.mutants.mutator import Mutant
from harness.zoo.mutants.plan import choose
from harness.zoo.mutants.record import SURVIVED, UNKNOWN, MutantRecord, StageResult
from harness.zoo.mutants.runner import LEDGER_FILE, MutationSettings, run_mutants
from harness.zoo.mutants.score import render_survivors, render_table, score_json
from harness.zoo.mutants.selection import SAFETY_CODE, node_mutants
from harness.zoo.summary import RunRecord
from harness.zoo.targets import DEFAULT_CAMPAIGN, describe_campaign

__all__ = ["mutants", "mutants_main", "mutant_campaign_records"]


def _list(mutants: Sequence[Mutant], total: int) -> None:
    for m in mutants:
        click.echo(f"{m.id}\t{m.describe()}")
    click.echo(
        f"{len(mutants)} of {total} mutants of {sum(len(a.functions) for a in SAFETY_CODE)} "
        f"functions in {len(SAFETY_CODE)} areas",
        err=True,
    )


def mutants_main(
    *,
    ids: Sequence[str],
    sample: int | None,
    list_only: bool,
    time_limit: float | None,
    seed: int,
    lab: str,
    store_root: str,
    out_dir: str,
    json_path: str | None,
    smoke_seconds: float,
    unit_timeout: float,
) -> int:
    from harness.dbs.dledger import NODE_IMPL_DIR
    from harness.inventory.resolve import resolve_hosts

    everything = node_mutants(NODE_IMPL_DIR)
    chosen = choose(everything, ids=ids, sample=sample, seed=seed)
    if list_only:
        _list(chosen, len(everything))
        return 0
    if json_path is not None and Path(json_path).is_dir():
        raise click.BadParameter(f"{json_path} is a directory", param_hint="--json")
    settings = MutationSettings(
        time_limit=time_limit if time_limit is not None else DEFAULT_CAMPAIGN.time_limit,
        seed=seed,
        smoke_seconds=smoke_seconds,
        unit_timeout=unit_timeout,
    )
    hosts = resolve_hosts(lab=lab, nodes_file=None, vagrant=None, docker=False, insecure=False)
    out = Path(out_dir)
    click.echo(
        f"mutants: {len(chosen)} of {len(everything)} mutants, seed {seed}; "
        f"results appended to {out / LEDGER_FILE}",
        err=True,
    )
    click.echo(
        f"mutants: campaign: {describe_campaign(DEFAULT_CAMPAIGN.with_time_limit(settings.time_limit))}",
        err=True,
    )
    t0 = time.monotonic()

    def on_stage(m: Mutant, stage: str, st: StageResult) -> None:
        click.echo(f"  {m.id}: {stage}: {st.detail} ({st.seconds:.0f}s)", err=True)

    def on_record(rec: MutantRecord, k: int, resumed: bool) -> None:
        how = " (from an earlier run)" if resumed else ""
        click.echo(f"[{k}/{len(chosen)}] {rec.id}: {rec.outcome}{how}", err=True)

    records, aborted = run_mutants(
        chosen,
        hosts,
        node_dir=NODE_IMPL_DIR,
        campaign=DEFAULT_CAMPAIGN,
        settings=settings,
        out_dir=out,
        store_root=store_root,
        on_record=on_record,
        on_stage=on_stage,
    )
    click.echo(render_table(records))
    survivors = render_survivors(records)
    if survivors:
        click.echo("")
        click.echo(survivors)
    outcomes = [r.outcome for r in records]
    rc = 1 if SURVIVED in outcomes else (2 if UNKNOWN in outcomes or aborted else 0)
    tail = f"mutants: exit {rc}; {time.monotonic() - t0:.0f}s, seed {seed}"
    if aborted:
        tail += f"; stopped early ({aborted}); run again with the same options to resume"
    click.echo(tail)
    if json_path is not None:
        doc = score_json(
            records,
            settings=settings.to_json(),
            campaign=DEFAULT_CAMPAIGN.with_time_limit(settings.time_limit).to_json(),
            lab=lab,
            total_mutants=len(everything),
            aborted=aborted,
            seconds=time.monotonic() - t0,
        )
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return rc


@click.command(name="mutants")
@options.mutant_options()
@click.option(
    "--time-limit",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Seconds of load and faults of each mutant's campaign.  "
    f"[default: {DEFAULT_CAMPAIGN.time_limit:g}]",
)
@options.lab(help="Embedded lab to run on (`splitbrain lab up --name NAME`).")
@options.store()
@options.seed(default=0, help="Seed of --sample and of the runs.")
@options.json_path(help="Write the mutation score, each mutant's outcome and its stages here.")
def mutants(
    mutant_ids: tuple[str, ...],
    sample: int | None,
    list_only: bool,
    out_dir: str,
    smoke_time: float,
    unit_timeout: float,
    time_limit: float | None,
    lab: str,
    store_root: str,
    seed: int,
    json_path: str | None,
) -> int:
    """Mutation testing: mutants of the node's safety-relevant code through the unit tests,
    a fault-free run and the default DLedger campaign; prints the mutation score and each
    survivor's diff (docs/zoo.md, Mutation testing).

    Exit 0 when no mutant survived, 1 when some did, 2 when some ended unknown.
    """
    rc = mutants_main(
        ids=mutant_ids,
        sample=sample,
        list_only=list_only,
        time_limit=time_limit,
        seed=seed,
        lab=lab,
        store_root=store_root,
        out_dir=out_dir,
        json_path=json_path,
        smoke_seconds=smoke_time,
        unit_timeout=unit_timeout,
    )
    if not list_only:
        echo_coverage(mutant_campaign_records(Path(out_dir)))
    return rc


def mutant_campaign_records(out_dir: Path) -> list[RunRecord]:
    """The campaign runs of ``splitbrain mutants`` (its ledger in ``out_dir``) as zoo run records,
    so their coverage is tabulated like the zoo's: what the mutants' campaigns reached."""
    from harness.zoo.mutants.ledger import Ledger
    from harness.zoo.mutants.runner import LEDGER_FILE

    out = []
    for k, rec in enumerate(Ledger(out_dir / LEDGER_FILE).load().values()):
        st = rec.campaign
        if st is not None and st.store:
            out.append(RunRecord(bug=rec.id, run=k, seed=0, valid=st.verdict, store=st.store))
    return out
