"""``splitbrain replay RUN_DIR|schedule.json``: does the red run fail again?

Runs the recorded DB, workload, options and faults (``schedule.json``, derived from the
history when a run directory has none) N times on a lab, each fault at its recorded offset
and aimed at the same role, and counts the runs that fail with an anomaly kind of the
original (or, with ``--kind``, with one of the kinds named: a red run shows several, and
the one a user chases, say its lost writes, may be the rarest). ``--bug none`` or ``--db-option node_src=DIR`` replays against a fixed node:
how a user confirms a fix. Exit 1 when any run reproduced, 0 when none did.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from harness.cli import options
from harness.cli.inventory import inventory_options
from harness.cli.run import parse_kv

__all__ = ["replay"]


@click.command(name="replay")
@click.argument("source", type=click.Path(exists=True))
@options.count("--times", default=1, help="How many runs of the schedule.")
@options.bug(help="Seeded bug for the replay ('none': the fixed node); default: the recorded one.")
@options.db_options(help="DB option over the recorded ones, e.g. node_src=DIR (repeatable).")
@options.store(help="Results store for the replay runs.")
@options.json_path(help='Write {"reproduced", "runs", "verdicts", "kinds", ...} here.')
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    metavar="ANOMALY",
    help="Count a run as reproduced only if INVALID with this anomaly kind (repeatable; "
    "default: any kind the original run showed).",
)
@inventory_options("Embedded lab to replay on (built by `splitbrain lab up`).")
def replay(
    source: str,
    times: int,
    bug: str | None,
    db_options: tuple[str, ...],
    store_root: str,
    json_path: str | None,
    kinds: tuple[str, ...],
    lab: str,
    nodes_file: str | None,
    vagrant: str | None,
    docker: bool,
    vm: bool,
    insecure: bool,
) -> int:
    """Replay a run's recorded faults N times; report how many runs fail the same way."""
    from harness.inventory.resolve import resolve_hosts
    from harness.run.replay import Overrides, replay_spec, summarize
    from harness.run.replay import replay as run_replay
    from harness.run.roles import prepare
    from harness.run.schedule_file import load_schedule

    doc = load_schedule(Path(source))
    over = Overrides(bug=bug, db_options=parse_kv(db_options, option="--db-option"))
    spec = replay_spec(doc, over, seed=0, name="replay")
    prepare(spec)  # a bad --db-option exits 3 before any host is contacted
    hosts = resolve_hosts(
        lab=lab, nodes_file=nodes_file, vagrant=vagrant, docker=docker, insecure=insecure, vm=vm
    )
    expected = list(kinds) or list((doc.get("expect") or {}).get("anomaly_kinds") or ())
    click.echo(
        f"replay: {len(doc['faults'])} faults, {spec.db}/{spec.workload}, bug "
        f"{spec.bug or 'none'}, time limit {spec.time_limit:g} s, {times} run(s); "
        "reproduced means INVALID with "
        + (f"at least one of: {', '.join(expected)}" if expected else "any anomaly")
    )

    def each(i: int, o: object) -> None:
        from harness.run.replay import Outcome

        assert isinstance(o, Outcome)
        click.echo(
            f"[{i}/{times}] {o.verdict} {', '.join(o.kinds) or '-'} ({o.seconds:.0f} s) "
            f"{o.store_dir}"
        )

    outs = run_replay(doc, hosts, times=times, over=over, store_root=store_root, on_run=each)
    summary = {"source": str(source), "bug": spec.bug, **summarize(outs, expected)}
    click.echo(
        f"replay: reproduced {summary['reproduced']}/{summary['runs']}; verdicts "
        f"{' '.join(summary['verdicts'])}; kinds {summary['kinds'] or '-'}"
    )
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 1 if summary["reproduced"] else 0
