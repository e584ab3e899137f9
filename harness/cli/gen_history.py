"""``splitbrain gen-history``: a synthetic history to check (``checker.synth``)."""

from __future__ import annotations

import click

from checker.synth import ANOMALIES, READ_SHAPES, WORKLOADS, check_args, write_history
from harness.cli import options

__all__ = ["gen_history"]


@click.command("gen-history")
@click.option(
    "--ops", "n_ops", type=float, required=True, help="About how many records (1e6 works)."
)
@click.option("--workload", type=click.Choice(WORKLOADS), default="append", show_default=True)
@click.option(
    "--anomaly",
    type=click.Choice(ANOMALIES),
    default=None,
    help="Plant one anomaly of this kind (default: a valid history).",
)
@options.seed(default=0)
@click.option("--nodes", type=int, default=5, show_default=True)
@options.concurrency()
@click.option(
    "--keys",
    type=float,
    default=None,
    help="Register keys (default one per 400 records), e.g. 1e5.",
)
@click.option(
    "--key-window",
    type=int,
    default=None,
    help="Register ops pick among this many neighbouring keys of a sliding window, so "
    "that concurrent clients share keys (default: any key, uniformly).",
)
@click.option(
    "--reads",
    type=click.Choice(READ_SHAPES),
    default="short",
    show_default=True,
    help="What a client's log read returns: short (16 entries below the commit point) or "
    "long-prefix (the whole committed log from index 0, a few hundred times a history; "
    "about 370 bytes of JSONL per record).",
)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    required=True,
    help="Output file: .parquet or .jsonl.",
)
def gen_history(
    n_ops: float,
    workload: str,
    anomaly: str | None,
    seed: int,
    nodes: int,
    concurrency: int,
    keys: float | None,
    key_window: int | None,
    reads: str,
    out: str,
) -> None:
    """Write a synthetic history, valid unless --anomaly plants one."""
    if n_ops < 1:
        raise click.BadParameter("--ops must be at least 1")
    if (keys is not None and keys < 1) or (key_window is not None and key_window < 1):
        raise click.BadParameter("--keys and --key-window must be at least 1")
    check_args(workload, anomaly, nodes, concurrency, reads)
    n = write_history(
        out,
        int(n_ops),
        workload=workload,
        anomaly=anomaly,
        seed=seed,
        nodes=nodes,
        concurrency=concurrency,
        keys=None if keys is None else int(keys),
        key_window=key_window,
        reads=reads,
    )
    click.echo(f"wrote {n} records to {out}")
