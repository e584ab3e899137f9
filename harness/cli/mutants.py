"""``splitbrain zoo --mutants``: the default campaign judged by the bugs nobody planted.

The zoo's seeded bugs were each found by a campaign tuned after studying them;
mutants of the node's safety-relevant code (``harness/zoo/mutants/``) are bugs
nobody tuned for. This edge lists them, runs the chosen ones through the
filters, prints each as it is judged, then the table, the score and every
survivor's diff.

Exit 0 when no mutant survived, 1 when some did, 2 when some ended unknown and
none survived, 3 on bad input.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import click

from harness.zoo.mutants.mutator import Mutant
from harness.zoo.mutants.plan import choose
from harness.zoo.mutants.record import SURVIVED, UNKNOWN, MutantRecord, StageResult
from harness.zoo.mutants.runner import LEDGER_FILE, MutationSettings, run_mutants
from harness.zoo.mutants.score import render_survivors, render_table, score_json
from harness.zoo.mutants.selection import SAFETY_CODE, node_mutants
from harness.zoo.targets import DEFAULT_CAMPAIGN, describe_campaign

__all__ = ["mutants_main"]


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
        f"zoo --mutants: {len(chosen)} of {len(everything)} mutants, seed {seed}; "
        f"results appended to {out / LEDGER_FILE}",
        err=True,
    )
    click.echo(
        f"zoo --mutants: campaign: {describe_campaign(DEFAULT_CAMPAIGN.with_time_limit(settings.time_limit))}",
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
    tail = f"zoo --mutants: exit {rc}; {time.monotonic() - t0:.0f}s, seed {seed}"
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
