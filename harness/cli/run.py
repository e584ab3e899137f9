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

from harness.cli import options
from harness.cli.inventory import inventory_options
from harness.cli.plugins import ListsPlugins
from harness.core.verdict import word as verdict_word
from harness.inventory.resolve import resolve_hosts
from harness.report.junit import junit_xml
from harness.run.summary import verdict_line
from nemesis.deck import DECK, DEFAULT_TIME_LIMIT

__all__ = ["run", "parse_kv", "parse_nemesis"]


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
    "--workload",
    "-w",
    default=None,
    help="Workload name (listed below) [default: the DB's strongest (the reference node: "
    "mixed, with its clients), or append].",
)
@click.option(
    "--nemesis",
    default=DECK,
    show_default=True,
    help="'deck': the default campaign's fault scripts (docs/zoo.md) that this DB and these "
    "hosts can take, drawn as a seeded deck; or comma-separated faults played one at a "
    "time (e.g. partition,kill,clock,pause); 'none' for none. 'upgrade' (with --db-option "
    "mode=broker) starts the cluster in mode ha and switches it to mode broker one node at "
    "a time (docs/broker-mode.md B5b).",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Seconds of load and faults per test [default: with the deck, until every script "
    f"has played once (at most {DEFAULT_TIME_LIMIT:g} s; with this option the deck cycles "
    "until the time is up); else 30].",
)
@options.concurrency(
    default=None, help="Client worker threads [default: the DB's default workload's, else 5]."
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0),
    default=None,
    help="Total client ops/s, 0 as fast as possible [default: the DB's default workload's, "
    "else 50].",
)
@options.count(
    "--test-count", default=1, help="Run the test N times; the exit code is the worst verdict."
)
@click.option(
    "--versions",
    default=None,
    help="Comma-separated releases of the DB (its --db-option version): the same seeds run "
    "on each in turn, and a table of verdicts by version ends the output, to find the "
    "release a behaviour appeared in.",
)
@click.option(
    "--client-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a client op may take before it is recorded info "
    "[default: 5; every workload's clients use it, the watchdog allows twice that].",
)
@options.non_negative(
    "--converge-timeout",
    default=60.0,
    help="Seconds to wait after the heal for a DB that declares Converges to say its replicas "
    "agree (0: a fixed short sleep instead); not converged makes a valid verdict unknown.",
)
@options.bug()
@options.seed(default=None, help="RNG seed (random and recorded if omitted).")
@click.option(
    "--nemesis-interval",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Mean seconds between fault changes [default: 5]; with the deck, the scripts' "
    "basic hold [default: 2.5].",
)
@click.option("--name", default=None, help="Test name (store/<name>/...).")
@options.store()
@click.option("--leave-db-running", is_flag=True, help="Do not stop and wipe the nodes at the end.")
@options.engine()
@options.db_options(help="DB option, e.g. remote_python=/usr/bin/python3 (repeatable).")
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
    workload: str | None,
    nemesis: str,
    time_limit: float | None,
    concurrency: int | None,
    rate: float | None,
    test_count: int,
    versions: str | None,
    client_timeout: float | None,
    converge_timeout: float,
    bug: str | None,
    seed: int | None,
    nemesis_interval: float | None,
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
    use_deck = DECK in faults
    if use_deck and len(faults) > 1:
        raise click.BadParameter(
            f"'{DECK}' is the whole default campaign; it takes no other fault names",
            param_hint="--nemesis",
        )
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
    from nemesis.registry import fault as registered

    rolling = not use_deck and any(registered(n).rolling for n in faults)
    db_opts = upgrade_options(db, rolling, db_opts)
    if bug and db == "dledger":
        from harness.dbs.dledger import check_bug

        check_bug(bug)
    from harness.run.roles import default_workload, prepare, workload_defaults

    choice = default_workload(db, db_opts) if workload is None else None
    if choice is not None:
        workload = choice.name
        wl_opts = {**choice.options, **wl_opts}
        concurrency = concurrency or choice.concurrency
        rate = choice.rate if rate is None else rate
        client_timeout = client_timeout or choice.client_timeout
    assert workload is not None
    wl_opts = {**workload_defaults(db, db_opts, workload), **wl_opts}
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
        nemesis=() if use_deck else faults,
        time_limit=time_limit or (DEFAULT_TIME_LIMIT if use_deck else 30.0),
        concurrency=concurrency or 5,
        rate=50.0 if rate is None else rate,
        seed=base_seed,
        bug=bug,
        nemesis_interval=nemesis_interval or 5.0,
        options={**wl_opts, **run_opts},
    )
    releases = parse_versions(versions, db_opts)
    variants = [_with_version(spec, db_opts, v, suffix=name is None) for v in releases] or [spec]
    # every --db-option and --workload-option checked before any host, for every release
    prepared = [(s, prepare(s)) for s in variants]
    hosts = resolve_hosts(
        lab=lab, nodes_file=nodes_file, vagrant=vagrant, docker=docker, insecure=insecure, vm=vm
    )
    if node_count is not None:
        if node_count > len(hosts):
            raise click.BadParameter(
                f"the inventory has only {len(hosts)} hosts", param_hint="--nodes"
            )
        hosts = hosts[:node_count]
    if use_deck:  # each release's own deck: what a DB can take may change with its version
        variants = [
            _with_deck(s, roles.db, hosts, nemesis_interval, one_pass=time_limit is None)
            for s, roles in prepared
        ]
    from nemesis.package import check_faults

    # a fault the hosts or the DB cannot take (power with no hypervisor, a fault the DB
    # declines): exit 3 before anything runs, naming the fault and why
    for s, (_, roles) in zip(variants, prepared, strict=True):
        check_faults(s.nemesis, roles.db, hosts)
    from harness.report.html import write_report

    opts = RunOptions(
        leave_db_running=leave_db_running,
        engine=engine,
        progress=not no_progress,
        reporter=write_report,
        converge_timeout_s=converge_timeout,
    )
    variants = [dataclasses.replace(s, nodes=tuple(h.name for h in hosts)) for s in variants]
    summary: list[dict[str, Any]] = []
    total = test_count * len(variants)

    def report(done: CampaignRun) -> None:
        result = done.result
        summary.append(
            {
                "name": f"{done.spec.name} seed={done.spec.seed}",
                "path": _rel(result.store_dir),
                "seconds": done.seconds,
                "results": result.results,
                "version": done.planned.tag,
            }
        )
        prefix = f"[{done.number}/{total}] " if total > 1 else ""
        click.echo(f"{prefix}{verdict_line(result.results)}")
        click.echo(f"{prefix}store: {_rel(result.store_dir)}")

    tags: list[str | None] = [*releases] or [None]
    plan = [
        dataclasses.replace(p, tag=v)
        for s, v in zip(variants, tags, strict=True)
        for p in seeded(s, test_count, base_seed)
    ]
    runs = run_campaign(
        plan,
        hosts,
        store_root=store_root,
        options=opts,
        on_result=report,
    )
    rc = campaign_exit_code(runs, fail_on_unknown=fail_on == "unknown")
    if releases:
        for line in version_table(summary):
            click.echo(line)
    if total > 1:
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


def parse_versions(text: str | None, db_opts: dict[str, Any]) -> list[str]:
    """``--versions A,B`` as a list (empty without it); it and ``--db-option version`` exclude
    each other, since each run's version comes from the list."""
    if text is None:
        return []
    releases = [v.strip() for v in text.split(",") if v.strip()]
    if not releases:
        raise click.BadParameter("name at least one release", param_hint="--versions")
    if "version" in db_opts:
        raise click.BadParameter(
            "--versions sets each run's version; drop --db-option version",
            param_hint="--versions",
        )
    if len(set(releases)) != len(releases):
        raise click.BadParameter(f"a release is named twice: {text}", param_hint="--versions")
    return releases


def _with_version(spec: Any, db_opts: dict[str, Any], version: str, *, suffix: bool) -> Any:
    """``spec`` on release ``version`` (its store name says the version unless --name set it)."""
    options = {**spec.options, "db": {**db_opts, "version": version}}
    name = f"{spec.name}-{version}" if suffix else spec.name
    return dataclasses.replace(spec, name=name, options=options)


def version_table(summary: Sequence[dict[str, Any]]) -> list[str]:
    """One line per run, by version then seed: the verdict, the op counts, the anomalies."""
    lines = ["versions: version  seed  verdict  ok/fail/info  anomalies"]
    for r in summary:
        res = r["results"]
        run = res.get("run") or {}
        counts = "/".join(str(run.get(k, "?")) for k in ("ok", "fail", "info"))
        kinds = ",".join(sorted(res.get("anomalies") or {})) or "-"
        seed = r["name"].rsplit("seed=", 1)[-1]
        word = verdict_word(res.get("valid"))
        lines.append(f"versions: {r['version']}  {seed}  {word}  {counts}  {kinds}")
    return lines


def _with_deck(
    spec: Any, db: object, hosts: Sequence[Any], hold: float | None, *, one_pass: bool
) -> Any:
    """``spec`` drawing its faults from the deck this DB and these hosts can take (printed,
    with what was left out and why, before anything runs); ``one_pass`` ends the load once
    every script has played, else the deck cycles until the time limit."""
    from nemesis.deck import HOLD, deck_for

    deck = dataclasses.replace(
        deck_for(db, hosts), hold=hold or HOLD, passes=1 if one_pass else None
    )
    click.echo(f"faults: {deck.describe()}")
    for note in deck.notes:
        click.echo(f"faults: {note}")
    return dataclasses.replace(
        spec,
        nemesis=deck.faults,
        nemesis_interval=deck.hold,
        options={**spec.options, "deck": deck.to_json()},
    )


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)
