"""``splitbrain bench ...``: the benchmark commands, their options and their JSON output.

Each command is a thin wrapper: it parses its options, imports the measuring code only
when run (``harness/bench/``, and the reference node's own benchmarks in ``node_impl/``,
which imports nothing of the harness because it ships alone to hosts), prints the
figures as one JSON document and, where the figures say a check failed, exits 1.

"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from harness.bench.checker_data import DEFAULT_CORPORA, DEFAULT_PEERS
from harness.cli import options

__all__ = ["bench_checker", "bench_campaign", "bench_soak", "bench_report", "bench_harness"]
__all__ += ["bench_node", "bench_crash", "bench_fuzz_frames"]


def _emit(doc: dict[str, Any], output: Path | str | None = None, **dumps: Any) -> None:
    """The figures on stdout, and in ``output`` too when one is given."""
    text = json.dumps(doc, indent=2, **dumps)
    if output:
        Path(output).write_text(text + "\n", encoding="utf-8")
    click.echo(text)


def _sizes(ctx: click.Context, param: click.Parameter, text: str | None) -> list[int] | None:
    """``1e6,1e7`` as record counts (a click callback: a bad list is a usage error)."""
    if not text:
        return None
    try:
        return [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected sizes like 1e6,1e7") from None


def _bounded(
    flag: str, lo: float, hi: float, default: float, help: str | None = None
) -> Callable[[Any], Any]:
    """``flag`` taking a number from ``lo`` to ``hi``, its default shown: whole when the
    default is an int (counts, sizes), else seconds or rates."""
    if isinstance(default, int):
        span: click.ParamType = click.IntRange(int(lo), int(hi))
    else:
        span = click.FloatRange(lo, hi)
    return click.option(flag, type=span, default=default, show_default=True, help=help)


def _node_dirs(*, help: str = "Where node data dirs go (default: a temp dir).") -> Any:
    """``--base-dir DIR`` and ``--keep``: where the local cluster's nodes keep their data,
    and whether it stays afterwards (the node benchmarks)."""
    return options.stack(
        click.option(
            "--base-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help=help
        ),
        click.option("--keep", is_flag=True, help="Keep the data dirs and node logs."),
    )


# ---------------------------------------------------------------------- checker


@click.command("checker")
@click.option(
    "--corpora",
    "corpora",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Corpora directory (default {DEFAULT_CORPORA}).",
)
@click.option(
    "--scale",
    "scale",
    default=None,
    callback=_sizes,
    help="Spark scale run: sizes in records, e.g. 1e6,1e7.",
)
@click.option(
    "--scale-register",
    "scale_register",
    default=None,
    callback=_sizes,
    help="Linearizability at scale: register/CAS history sizes in records, e.g. 1e6,1e7.",
)
@click.option(
    "--keys", type=float, default=1e5, show_default=True, help="Keys of the register histories."
)
@click.option(
    "--key-window",
    type=int,
    default=8,
    show_default=True,
    help="Neighbouring keys concurrent register ops share (see gen-history).",
)
@click.option(
    "--plant-anomaly",
    is_flag=True,
    help="Plant one nonlinearizable read in the register histories.",
)
@click.option(
    "--cluster-workers",
    default=None,
    callback=_sizes,
    help="Also check the largest register size on standalone clusters of these many "
    "one-core workers, e.g. 1,2, and report the speed-up per worker.",
)
@click.option(
    "--cluster-size",
    type=float,
    default=None,
    help="Register history size of the cluster runs (default: the largest --scale-register).",
)
@click.option(
    "--cluster-only",
    is_flag=True,
    help="With --cluster-workers: skip the --spark-master runs and the local baseline.",
)
@click.option(
    "--jsonl",
    "jsonl",
    type=float,
    default=None,
    help="End to end from JSONL (conversion included): records, e.g. 1e6.",
)
@click.option(
    "--jsonl-workload",
    default="register,append",
    show_default=True,
    help="Workloads of the JSONL run.",
)
@click.option(
    "--jsonl-shape",
    type=click.Choice(["long-prefix"]),
    default=None,
    help="With --jsonl: an append history whose log reads have this shape (gen-history "
    "--reads), beside gen-history's of the same size as the baseline, each checked end to "
    "end by `splitbrain check` on both engines (time, peak memory of the process tree).",
)
@click.option(
    "--txn",
    "txn",
    type=float,
    default=None,
    help="The transactional checker on a list-append history of this many txns, e.g. 1e6, "
    "beside baselines timed in the same run.",
)
@click.option(
    "--huge",
    "huge",
    type=float,
    default=None,
    help="A register history of this many records, e.g. 1e8, written and checked on both "
    "engines (write and check time, peak memory, load), beside --huge-baseline's.",
)
@click.option("--huge-baseline", type=float, default=1e7, show_default=True, help="0: no baseline.")
@click.option(
    "--huge-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where --huge writes its files (default: temp; deleted after).",
)
@click.option("--skip-corpora", is_flag=True, help="Only the scale run.")
@options.spark_master()
@click.option(
    "--no-local-baseline", is_flag=True, help="Skip timing the local engine at the smallest size."
)
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Per-file timeout of the corpora checks.",
)
@options.output()
@click.option(
    "--porcupine",
    "porcupine",
    type=click.Choice(["auto", "live", "stored"]),
    default="auto",
    show_default=True,
    help="Porcupine baseline: built and timed in this run (live; auto when go is on PATH) "
    "or the timings stored with the corpora.",
)
@click.option(
    "--peers",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Porcupine's source for the live baseline (default {DEFAULT_PEERS}).",
)
def bench_checker(output: Path | None, **opts: Any) -> None:
    """Checker speed: corpora vs Porcupine (same run when Go is here); Spark engine at scale."""
    from harness.bench.checker import checker_bench

    _emit(checker_bench(**opts), output, default=str)


# ---------------------------------------------------------------------- campaign


@click.command(name="harness")
@options.seconds(default=10.0, help="Load phase per run.")
@options.concurrency(default=10)
@options.lab(help="Lab for the real-node run.")
@click.option("--skip-node", is_flag=True, help="Only the null-client run (no lab needed).")
@options.store(default=None, help="Keep the runs here (default: temp).")
def bench_harness(
    seconds: float, concurrency: int, lab: str, skip_node: bool, store_root: str | None
) -> None:
    """Ops/s the harness records with a null client and against the reference node."""
    from harness.bench.recording import harness_bench

    _emit(harness_bench(seconds, concurrency, lab, skip_node, store_root))


@click.command(name="campaign")
@options.lab(help="Lab to run on.")
@options.seconds(default=20.0, help="Load phase per campaign.")
@options.concurrency()
@click.option(
    "--workload",
    "-w",
    "workloads",
    multiple=True,
    default=("register", "append"),
    show_default=True,
    help="Our workloads (repeatable); each is compared with --etcd-workload.",
)
@click.option("--etcd-workload", default="etcd-register", show_default=True)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Repeat etcd and ours this many times, alternating the order; report medians.",
)
@click.option("--skip-etcd", is_flag=True, help="Only our node (no baseline, no ratios).")
@click.option(
    "--lazy-fs",
    is_flag=True,
    help="Also run each of our workloads with node data on a lazy fs (docs/disk-faults.md), "
    "alternating with the plain runs; reports lazy / plain ok ops/s.",
)
@click.option("--no-check", is_flag=True, help="Skip the checker (faster; no verdicts).")
@click.option(
    "--db",
    "other_dbs",
    multiple=True,
    metavar="NAME[:WORKLOAD]",
    help="Another DB to measure in the same rounds (repeatable), with its default workload "
    "and options unless one is named: e.g. --db dledger-java --db jraft.",
)
@options.db_options(help="Option for our DB (repeatable), e.g. read_mode=log.")
@options.store(default=None, help="Keep the runs here (default: a temporary directory).")
@options.output()
def bench_campaign(
    no_check: bool, db_options: tuple[str, ...], output: Path | None, **opts: Any
) -> None:
    """Our node vs etcd: ok ops/s, latency and CPU per op, same lab, same run."""
    from harness.bench.campaign import campaign_bench

    ours: dict[str, Any] = {}
    for kv in db_options:
        k, sep, v = kv.partition("=")
        if not sep:
            raise click.BadParameter(f"expected KEY=VALUE, got {kv!r}", param_hint="--db-option")
        ours[k] = v
    _emit(campaign_bench(check=not no_check, db_options=ours, **opts), output)


# ---------------------------------------------------------------------- soak


@click.command(name="soak")
@options.seconds(default=300.0, help="Load phase of the run.")
@options.concurrency()
@options.lab(default=None, help="Run the reference node on this lab (default: a null client).")
@click.option("--no-report", is_flag=True, help="Skip rendering the report.")
@click.option(
    "--check-engine",
    type=click.Choice(["local", "spark", "auto"]),
    default=None,
    help="Also check the stored run (`splitbrain check --engine E`) and time it.",
)
@options.store(default=None, help="Keep the run here (default: temp).")
@options.output()
def bench_soak(no_report: bool, output: Path | None, **opts: Any) -> None:
    """A long unpaced run: harness RSS against ops recorded, Parquet, report cost."""
    from harness.bench.soak import soak_bench

    _emit(soak_bench(report=not no_report, **opts), output)


# ---------------------------------------------------------------------- report


@click.command(name="report")
@click.option("--ops", default=100_000, show_default=True, type=int, help="Client ops (about).")
@click.option("--opens", default=3, show_default=True, type=int, help="Page loads to time.")
@click.option(
    "--keep",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the run and its report in this directory.",
)
@click.option("--limit-ms", default=3000.0, show_default=True, help="Fail above this (median).")
def bench_report(ops: int, opens: int, keep: Path | None, limit_ms: float) -> int:
    """Build the report of a synthetic OPS-op run and time its opening in headless Chromium."""
    from harness.bench.report import report_bench

    out = report_bench(ops, opens, keep, limit_ms)
    _emit(out)
    if not out["ok"]:
        raise SystemExit(1)
    return 0


# ---------------------------------------------------------------------- the reference node


@click.command("node")
@click.option(
    "--mode",
    type=click.Choice(["throughput", "latency", "both"]),
    default="both",
    show_default=True,
)
@_bounded("--entry-size", 0, 1 << 20, 100, "Payload bytes per appended entry.")
@_bounded(
    "--clients",
    1,
    1000,
    16,
    "Concurrent connections in throughput mode (each one request in flight).",
)
@_bounded("--batch", 1, 10000, 256, "Entries per append request in throughput mode.")
@_bounded("--duration", 0.5, 3600, 10.0, "Measured seconds per mode.")
@_bounded("--warmup", 0, 60, 1.0)
@_bounded(
    "--rate",
    0,
    1e7,
    0.0,
    "Throughput mode: entries/s on a fixed schedule (0 = as fast as acks come).",
)
@_bounded(
    "--latency-rate", 1, 1e6, 1000.0, "Latency mode: single appends per second on a fixed schedule."
)
@_bounded("--nodes", 1, 9, 3)
@_node_dirs()
def bench_node(**opts: Any) -> None:
    """Acked appends/s and latency of a loopback cluster of reference nodes."""
    from node_impl.bench import run_node_bench

    _emit(run_node_bench(**opts))


@click.command("crash")
@_bounded("--cycles", 1, 100000, 20)
@click.option("--nodes", type=click.Choice(["3", "5"]), default="3", show_default=True)
@_bounded("--workers", 1, 64, 3, "Client threads appending (each retries on redirect or failure).")
@_bounded("--down", 0, 60, 0.3, "Mean seconds a killed node stays down.")
@_bounded("--interval", 0, 60, 0.5, "Seconds of load between kills.")
@options.seed(default=1)
@options.bug(help="Run the nodes with a seeded bug (expect losses).")
@_node_dirs(help="Where node data dirs go (default: a temp dir).")
def bench_crash(cycles: int, nodes: str, **opts: Any) -> None:
    """SIGKILL nodes under append load; verify every acked append survives on every node."""
    from node_impl.bench import run_crash

    def progress(cyc: int, acked: int) -> None:
        if cyc % 10 == 0:
            click.echo(f"cycle {cyc}/{cycles}: {acked} acked", err=True)

    out = run_crash(cycles=cycles, nodes=int(nodes), progress=progress, **opts)
    _emit(out)
    if out["lost"] or out["divergent"]:
        raise SystemExit(1)


@click.command("fuzz-frames")
@click.option(
    "--frames",
    type=click.IntRange(1),
    default=100_000,
    show_default=True,
    help="How many fuzzed frames to send in all.",
)
@click.option("--nodes", type=click.IntRange(1, 5), default=1, show_default=True)
@options.seed(default=1)
@click.option(
    "--mode",
    type=click.Choice(["dledger", "ha"]),
    default="dledger",
    show_default=True,
    help="Node mode; ha runs n1 as the master of a master/slave group.",
)
@_node_dirs()
def bench_fuzz_frames(frames: int, **opts: Any) -> int:
    """Fuzz a live node's ports with hostile frames; exit 1 on a crash or a damaged store."""
    from node_impl.fuzz import FuzzResult, fuzz_frames_bench

    def progress(r: FuzzResult) -> None:
        click.echo(f"{r.frames} frames, {r.seconds:.0f} s", err=True)

    out, ok = fuzz_frames_bench(frames, progress=progress, **opts)
    _emit(out)
    return 0 if ok else 1
