"""``splitbrain run``: a campaign of one or more tests against an inventory.

The command is an edge: it turns options into a :class:`TestSpec` and a host
list, calls :func:`harness.run.runner.run_test`, prints the verdict and the store
path, and returns the exit code of docs/architecture.md §8 (the worst of all runs when
``--test-count`` asks for several).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from harness.cli.inventory import inventory_options
from harness.cli.plugins import ListsPlugins
from harness.core.verdict import word as verdict_word
from harness.inventory.resolve import resolve_hosts
from harness.report.junit import junit_xml
from harness.run.summary import verdict_line

__all__ = ["run", "parse_kv", "parse_nemesis"]

DEFAULT_NEMESIS = "partition,kill,clock"


def parse_kv(pairs: Sequence[str], *, option: str) -> dict[str, Any]:
    """``k=v`` strings to a dict; values parsed as int, float, bool or kept as text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint=option)
        out[key] = _parse_scalar(raw.strip())
    return out


def _parse_scalar(raw: str) -> Any:
    low = raw.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


def parse_nemesis(text: str) -> tuple[str, ...]:
    """``a,b,c`` to a tuple; ``none`` or empty means no faults."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    if parts in ((), ("none",)):
        return ()
    return parts


@click.command(name="run", cls=ListsPlugins)
@click.option(
    "--db", default="dledger", show_default=True, help="Database under test (names listed below)."
)
@click.option(
    "--workload", "-w", default="append", show_default=True, help="Workload name (listed below)."
)
@click.option(
    "--nemesis",
    default=DEFAULT_NEMESIS,
    show_default=True,
    help="Comma-separated faults (e.g. partition,kill,clock,pause); 'none' for none. "
    "'upgrade' (with --db-option mode=broker) starts the cluster in mode ha and switches "
    "it to mode broker one node at a time (docs/broker-mode.md B5b).",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds of load and faults per test.",
)
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Client worker threads.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0),
    default=50.0,
    show_default=True,
    help="Total client ops/s (0: as fast as possible).",
)
@click.option(
    "--test-count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run the test N times; the exit code is the worst verdict.",
)
@click.option(
    "--client-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a client op may take before it is recorded info "
    "[default: 5; every workload's clients use it, the watchdog allows twice that].",
)
@click.option("--bug", default=None, help="Seeded bug for the reference node (--bug NAME).")
@click.option("--seed", type=int, default=None, help="RNG seed (random and recorded if omitted).")
@click.option(
    "--nemesis-interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Mean seconds between fault changes.",
)
@click.option("--name", default=None, help="Test name (store/<name>/...).")
@click.option(
    "--store",
    "store_root",
    default="store",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Results store directory.",
)
@click.option("--leave-db-running", is_flag=True, help="Do not stop and wipe the nodes at the end.")
@click.option(
    "--engine",
    type=click.Choice(["local", "spark", "auto"]),
    default="local",
    show_default=True,
    help="Checker engine.",
)
@click.option(
    "--db-option",
    "db_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="DB option, e.g. remote_python=/usr/bin/python3 (repeatable).",
)
@click.option(
    "--workload-option",
    "workload_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Workload option (repeatable).",
)
@click.option(
    "--nemesis-option",
    "nemesis_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Nemesis package option, e.g. targets=leader (repeatable).",
)
@click.option(
    "--nodes",
    "node_count",
    type=click.IntRange(min=1),
    default=None,
    help="Use only the first N hosts of the inventory.",
)
@inventory_options("Embedded lab to use (built by `splitbrain lab up`).")
@click.option("--no-progress", is_flag=True, help="No live status line.")
@click.option(
    "--check",
    "checks",
    multiple=True,
    metavar="NAME",
    help="Also run this registered check (repeatable; `splitbrain plugins` lists them), "
    "beside the workload's own.",
)
@click.option(
    "--junit-xml",
    "junit_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a JUnit XML file with one test case per run (for CI).",
)
@click.option(
    "--fail-on",
    type=click.Choice(["invalid", "unknown"]),
    default="invalid",
    show_default=True,
    help="'unknown': an undecided run fails the exit code (1) and the JUnit case too.",
)
def run(
    db: str,
    workload: str,
    nemesis: str,
    time_limit: float,
    concurrency: int,
    rate: float,
    test_count: int,
    client_timeout: float | None,
    bug: str | None,
    seed: int | None,
    nemesis_interval: float,
    name: str | None,
    store_root: str,
    leave_db_running: bool,
    engine: str,
    db_options: tuple[str, ...],
    workload_options: tuple[str, ...],
    nemesis_options: tuple[str, ...],
    node_count: int | None,
    lab: str,
    nodes_file: str | None,
    vagrant: str | None,
    docker: bool,
    vm: bool,
    insecure: bool,
    no_progress: bool,
    checks: tuple[str, ...],
    junit_path: str | None,
    fail_on: str,
) -> int:
    """Run a campaign: load, faults, heal, final reads, check. Exit 0 valid, 1 invalid, 2 unknown."""
    from harness.core.spec import TestSpec
    from harness.run.campaign import CampaignRun, campaign_exit_code, run_campaign, seeded
    from harness.run.runner import RunOptions

    faults = parse_nemesis(nemesis)
    db_opts = parse_kv(db_options, option="--db-option")
    wl_opts = parse_kv(workload_options, option="--workload-option")
    nem_opts = parse_kv(nemesis_options, option="--nemesis-option")
    for reserved in ("db", "nemesis", "client_timeout", "checks"):
        if reserved in wl_opts:
            hint = " (use --client-timeout)" if reserved == "client_timeout" else ""
            raise click.BadParameter(
                f"{reserved!r} is reserved{hint}", param_hint="--workload-option"
            )
    if leave_db_running:
        db_opts["leave_running"] = True
    from harness.dbs.rolling import upgrade_options

    db_opts = upgrade_options(db, faults, db_opts)
    if bug and db == "dledger":
        from harness.dbs.dledger import check_bug

        check_bug(bug)
    test_name = name or "-".join([db, workload] + ([bug] if bug else []))
    base_seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    run_opts: dict[str, Any] = {"db": db_opts, "nemesis": nem_opts}
    if client_timeout is not None:
        run_opts["client_timeout"] = client_timeout
    if checks:
        run_opts["checks"] = list(checks)
    spec = TestSpec(
        name=test_name,
        nodes=(),
        db=db,
        workload=workload,
        nemesis=faults,
        time_limit=time_limit,
        concurrency=concurrency,
        rate=rate,
        seed=base_seed,
        bug=bug,
        nemesis_interval=nemesis_interval,
        options={**wl_opts, **run_opts},
    )
    from harness.run.roles import prepare

    prepare(spec)  # every --db-option and --workload-option checked before any host is asked
    hosts = resolve_hosts(
        lab=lab, nodes_file=nodes_file, vagrant=vagrant, docker=docker, insecure=insecure, vm=vm
    )
    if node_count is not None:
        if node_count > len(hosts):
            raise click.BadParameter(
                f"the inventory has only {len(hosts)} hosts", param_hint="--nodes"
            )
        hosts = hosts[:node_count]
    from nemesis.package import check_hosts

    check_hosts(faults, hosts)  # power on hosts with no hypervisor: exit 3 before anything runs
    from harness.report.html import write_report

    opts = RunOptions(
        leave_db_running=leave_db_running,
        engine=engine,
        progress=not no_progress,
        reporter=write_report,
    )
    spec = dataclasses.replace(spec, nodes=tuple(h.name for h in hosts))
    summary: list[dict[str, Any]] = []

    def report(done: CampaignRun) -> None:
        result = done.result
        summary.append(
            {
                "name": f"{test_name} seed={done.spec.seed}",
                "path": _rel(result.store_dir),
                "seconds": done.seconds,
                "results": result.results,
            }
        )
        prefix = f"[{done.number}/{test_count}] " if test_count > 1 else ""
        click.echo(f"{prefix}{verdict_line(result.results)}")
        click.echo(f"{prefix}store: {_rel(result.store_dir)}")

    runs = run_campaign(
        seeded(spec, test_count, base_seed),
        hosts,
        store_root=store_root,
        options=opts,
        on_result=report,
    )
    rc = campaign_exit_code(runs, fail_on_unknown=fail_on == "unknown")
    if test_count > 1:
        counts = {
            w: sum(1 for r in summary if verdict_word(r["results"].get("valid")) == w)
            for w in ("VALID", "INVALID", "UNKNOWN")
        }
        click.echo(
            f"campaign: {len(summary)} runs: {counts['VALID']} valid, "
            f"{counts['INVALID']} invalid, {counts['UNKNOWN']} unknown; exit {rc}"
        )
    if junit_path:
        Path(junit_path).parent.mkdir(parents=True, exist_ok=True)
        Path(junit_path).write_text(
            junit_xml(summary, suite=test_name, fail_on_unknown=fail_on == "unknown")
        )
        click.echo(f"junit: {junit_path}")
    return rc


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)
