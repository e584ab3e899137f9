"""``splitbrain zoo``: evidence that the harness finds real bugs, and cries wolf never.

A checker that says "valid" proves little unless the same campaign says
"invalid" when the database really is broken. The zoo runs ONE default campaign
per node mode, the same for everyone in that mode (workload, fault mix, targets,
rates, interval, time limit), against the correct reference node and against
every seeded bug the node lists at run time (``node_impl.bugs``; the ``ha-*``
bugs meet the mode-``ha`` campaign beside a correct mode-``ha`` node), N times
each with recorded seeds, and tabulates how often each bug was caught and how
soon.

There is deliberately no per-bug configuration: a bug that only a tailored
campaign catches says more about the tailor than about the harness.

The verdict: exit 1 if some bug was never found (in runs that finished) or if
the correct node was ever reported invalid (a false alarm); 2 if some runs
ended unknown and nothing else failed; 0 otherwise.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import click

from harness.cli import options
from harness.cli.coverage import echo_coverage
from harness.zoo.campaign import progress_line, run_zoo
from harness.zoo.mutants.plan import with_node_src
from harness.zoo.summary import (
    RunRecord,
    render_table,
    summarize,
    summary_json,
    zoo_exit_code,
)
from harness.zoo.targets import (
    CAMPAIGNS,
    DEFAULT_CAMPAIGN,
    QUICK_TIME_LIMIT,
    SCRIPTS,
    describe_campaign,
    run_seeds,
    select_targets,
    split_vm_targets,
    zoo_bugs,
)

__all__ = ["zoo"]


@click.command(name="zoo")
@click.option(
    "--quick", is_flag=True, help=f"One run per target with a {QUICK_TIME_LIMIT:g} s time limit."
)
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help="Runs per target.  [default: 3, or 1 with --quick]",
)
@click.option(
    "--bugs",
    default=None,
    metavar="A,B,...",
    help="Only these seeded bugs (with the correct node of each campaign they meet).  "
    "[default: all]",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=1.0),
    default=None,
    help=f"Seconds of load and faults per run.  [default: {DEFAULT_CAMPAIGN.time_limit:g}, "
    f"{QUICK_TIME_LIMIT:g} with --quick]",
)
@click.option(
    "--profiles",
    default=None,
    metavar="P,Q,...",
    help=f"Only these fault scripts (profiles and motifs) of the DLedger and broker "
    f"campaigns, played in this order (known: {', '.join(SCRIPTS)}).  "
    "[default: all, drawn as a seeded deck]",
)
@options.lab(help="Embedded lab to run on (`splitbrain lab up --name NAME`).")
@click.option(
    "--vm",
    is_flag=True,
    help="--lab names a VM lab (`splitbrain lab up --driver vm`): real clocks, netem, power.",
)
@options.store()
@options.seed(
    default=None,
    help="Base seed; run i uses seed+i.  [default: random, and printed; 0 with --mutants]",
)
@options.json_path()
@click.option(
    "--node-src",
    type=click.Path(exists=True, file_okay=False, resolve_path=True),
    default=None,
    help="Ship this node package (a copy of node_impl, e.g. with a hand-made bug) to the "
    "DLedger-mode runs instead of node_impl: its `node_src` db option.",
)
@click.option(
    "--mutants",
    is_flag=True,
    help="Deprecated: `splitbrain mutants` (mutation testing), which takes the same options.",
)
@options.mutant_options(hidden=True)
def zoo(
    quick: bool,
    runs: int | None,
    bugs: str | None,
    time_limit: float | None,
    profiles: str | None,
    lab: str,
    vm: bool,
    store_root: str,
    seed: int | None,
    json_path: str | None,
    node_src: str | None = None,
    mutants: bool = False,
    mutant_ids: tuple[str, ...] = (),
    sample: int | None = None,
    list_only: bool = False,
    out_dir: str = "store/mutants",
    smoke_time: float = 10.0,
    unit_timeout: float = 600.0,
) -> int:
    """Run the default campaigns on the correct node and on every seeded bug; tabulate catches.

    Mode dledger's bugs meet one campaign, mode ha's another (with its own correct node).

    Exit 1 if a bug is never found or the correct node is ever reported invalid,
    2 if runs ended unknown and nothing else failed, 0 otherwise.
    """
    from harness.inventory.resolve import resolve_hosts

    if mutants:
        wrong = [n for n, v in (("--quick", quick), ("--runs", runs), ("--bugs", bugs),
                                ("--profiles", profiles)) if v]  # fmt: skip
        if node_src:
            wrong.append("--node-src")
        if wrong:
            raise click.UsageError(f"{', '.join(wrong)} do not apply to --mutants")
        from harness.cli.mutants import mutants as mutants_command

        if vm:
            raise click.UsageError("--mutants runs on the namespace lab, not with --vm")
        click.echo("zoo: --mutants is deprecated; run `splitbrain mutants` instead", err=True)
        rc: int = click.get_current_context().invoke(
            mutants_command,
            mutant_ids=mutant_ids,
            sample=sample,
            list_only=list_only,
            out_dir=out_dir,
            smoke_time=smoke_time,
            unit_timeout=unit_timeout,
            time_limit=time_limit,
            lab=lab,
            store_root=store_root,
            seed=seed if seed is not None else 0,
            json_path=json_path,
        )
        return rc
    only_mutants = [n for n, v in (("--mutant", mutant_ids), ("--sample", sample),
                                   ("--list", list_only)) if v]  # fmt: skip
    if only_mutants:
        raise click.UsageError(f"{', '.join(only_mutants)} only apply with --mutants")
    targets, need_vm = split_vm_targets(select_targets(zoo_bugs(), bugs), vm)
    if need_vm:
        click.echo(
            f"zoo: not run on this lab: {', '.join(need_vm)} (only a power cut exposes "
            "it: `splitbrain zoo --vm` on a VM lab)",
            err=True,
        )
    if not targets:
        raise click.UsageError("nothing to run on this lab (see above)")
    n = runs if runs is not None else (1 if quick else 3)
    limit = time_limit if time_limit is not None else (QUICK_TIME_LIMIT if quick else None)
    campaigns = {
        m: c if limit is None else c.with_time_limit(limit)
        for m, c in CAMPAIGNS.items()
        if any(tm == m for tm, _ in targets)
    }
    if profiles is not None:
        names = [p.strip() for p in profiles.split(",") if p.strip()]
        campaigns = {m: c.with_profiles(names) for m, c in campaigns.items()}
    if node_src is not None:
        campaigns = {
            m: with_node_src(c, Path(node_src)) if m == "dledger" else c
            for m, c in campaigns.items()
        }
    # The summary's single "campaign" (kept for older readers) is the first one run.
    campaign = next(iter(campaigns.values()))
    if json_path is not None and Path(json_path).is_dir():
        raise click.BadParameter(f"{json_path} is a directory", param_hint="--json")
    hosts = resolve_hosts(
        lab=lab, nodes_file=None, vagrant=None, docker=False, vm=vm, insecure=False
    )
    base = seed if seed is not None else random.SystemRandom().randrange(2**31)
    seeds = run_seeds(base, n)
    total = len(targets) * n
    n_bugs = sum(1 for _, b in targets if b)
    click.echo(
        f"zoo: {n_bugs} bugs + the correct node of {len(campaigns)} mode(s), {n} run(s) "
        f"each ({total} runs), base seed {base}",
        err=True,
    )
    for m, c in campaigns.items():
        click.echo(f"zoo: campaign, mode {m}: {describe_campaign(c)}", err=True)
    t0 = time.monotonic()

    def echo_progress(rec: RunRecord, k: int) -> None:
        click.echo(progress_line(rec, k, total, n), err=True)

    records, aborted = run_zoo(
        targets, seeds, campaigns, hosts, store_root=store_root, on_record=echo_progress
    )
    rows = summarize(records)
    rc = zoo_exit_code(rows)
    if aborted and rc == 0:
        rc = 2
    click.echo(render_table(rows))
    coverage = echo_coverage(records)
    escaped = [r.label for r in rows if r.status == "ESCAPED"]
    alarms = sum(r.invalid for r in rows if r.bug is None)
    verdict = [f"zoo: exit {rc}"]
    if escaped:
        verdict.append(f"escaped: {', '.join(escaped)}")
    if alarms:
        verdict.append(f"false alarms on the correct node: {alarms}")
    if aborted:
        verdict.append(f"stopped early ({aborted})")
    verdict.append(f"{time.monotonic() - t0:.0f}s, base seed {base}")
    click.echo("; ".join(verdict))
    if json_path is not None:
        doc = summary_json(
            rows,
            records,
            campaign=campaign,
            base_seed=base,
            runs=n,
            exit_code=rc,
            lab=lab,
            aborted=aborted,
            seconds=time.monotonic() - t0,
            campaigns=campaigns,
        )
        doc["coverage"] = coverage
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    sys.stdout.flush()
    return rc
