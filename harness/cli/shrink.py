"""``splitbrain shrink RUN_DIR``: the smallest failing fault schedule of a red run.

ddmin over the recorded faults with real runs (``--runs-per-candidate`` each; a candidate
fails when at least half reproduce), then the time limit and the load rate; the result in
``RUN_DIR/shrunk/schedule.json`` with its reproduction rate over ``--fresh-runs`` runs and
the one command that reproduces it. Interrupted, it resumes from
``RUN_DIR/shrunk/ledger.jsonl`` when started again with the same settings.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.cli import options
from harness.cli.inventory import inventory_options
from harness.cli.run import parse_kv

__all__ = ["shrink"]


@click.command(name="shrink")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@options.count(
    "--runs-per-candidate",
    default=1,
    help="Runs per candidate schedule; it fails when at least half reproduce.",
)
@options.non_negative(
    "--budget", "budget_min", default=60.0, help="Minutes of candidate runs (resumed runs count)."
)
@options.count(
    "--fresh-runs",
    default=5,
    help="Runs of the shrunk schedule that measure its reproduction rate.",
)
@options.non_negative(
    "--recovery",
    "recovery_s",
    default=5.0,
    help="Seconds of load kept after a candidate's last fault ends.",
)
@options.bug(help="Seeded bug over the recorded one.")
@options.db_options(help="DB option over the recorded ones (repeatable).")
@options.json_path(
    help="Write faults_before, faults_after, time_limit_after, reproduced, runs, "
    "schedule, command here."
)
@inventory_options("Embedded lab to run the candidates on (built by `splitbrain lab up`).")
def shrink(
    run_dir: str,
    runs_per_candidate: int,
    budget_min: float,
    fresh_runs: int,
    recovery_s: float,
    bug: str | None,
    db_options: tuple[str, ...],
    json_path: str | None,
    lab: str,
    nodes_file: str | None,
    vagrant: str | None,
    docker: bool,
    vm: bool,
    insecure: bool,
) -> int:
    """Shrink a red run's faults to a minimal schedule that still fails."""
    from harness.inventory.resolve import resolve_hosts
    from harness.run.shrink import ShrinkSettings
    from harness.run.shrink import shrink as run_shrink

    hosts = resolve_hosts(
        lab=lab, nodes_file=nodes_file, vagrant=vagrant, docker=docker, insecure=insecure, vm=vm
    )
    settings = ShrinkSettings(
        runs_per_candidate=runs_per_candidate,
        bug=bug,
        db_options=parse_kv(db_options, option="--db-option"),
        recovery_s=recovery_s,
    )
    result = run_shrink(
        Path(run_dir),
        hosts,
        settings=settings,
        budget_s=budget_min * 60,
        fresh_runs=fresh_runs,
        lab=None if nodes_file or vagrant else lab,
        echo=click.echo,
    )
    click.echo(
        f"shrunk: {result['faults_before']} -> {result['faults_after']} faults, time limit "
        f"{result['time_limit_before']:g} -> {result['time_limit_after']:g} s; reproduced "
        f"{result['reproduced']}/{result['runs']} fresh runs; {result['runs_spent']} runs, "
        f"{result['seconds_spent'] / 60:.1f} min spent"
    )
    click.echo(f"schedule: {result['schedule']}")
    click.echo(f"reproduce: {result['command']}")
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0
