"""``splitbrain bench checker``: how fast the checkers are, against fixed baselines.

Two questions, two parts, each its own module: (a) is our linearizability search in
Porcupine's league (:mod:`harness.bench.checker_corpora`)? (b) does the Spark engine
scale (:mod:`harness.bench.checker_scale`)? Everything is printed as one JSON
document.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from harness.bench.checker_corpora import corpora_bench
from harness.bench.checker_data import DEFAULT_CORPORA, DEFAULT_PEERS
from harness.bench.checker_scale import jsonl_bench, register_bench, scale_bench
from harness.bench.checker_txn import txn_bench
from harness.cli import options

__all__ = ["bench_checker"]


def _sizes(text: str) -> list[int]:
    try:
        return [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: expected sizes like 1e6,1e7", param_hint="--scale"
        ) from None


@click.command("checker")
@click.option(
    "--corpora",
    "corpora",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Corpora directory (default {DEFAULT_CORPORA}).",
)
@click.option(
    "--scale", "scale", default=None, help="Spark scale run: sizes in records, e.g. 1e6,1e7."
)
@click.option(
    "--scale-register",
    "scale_register",
    default=None,
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
    "--txn",
    "txn",
    type=float,
    default=None,
    help="The transactional checker on a list-append history of this many txns, e.g. 1e6, "
    "beside baselines timed in the same run.",
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
def bench_checker(
    corpora: Path | None,
    scale: str | None,
    scale_register: str | None,
    keys: float,
    key_window: int,
    plant_anomaly: bool,
    cluster_workers: str | None,
    cluster_size: float | None,
    cluster_only: bool,
    jsonl: float | None,
    jsonl_workload: str,
    txn: float | None,
    skip_corpora: bool,
    spark_master: str | None,
    no_local_baseline: bool,
    timeout: float,
    output: Path | None,
    porcupine: str,
    peers: Path | None,
) -> None:
    """Checker speed: corpora vs Porcupine (same run when Go is here); Spark engine at scale."""
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        }
    }
    if not skip_corpora:
        result["corpora"] = corpora_bench(
            corpora or DEFAULT_CORPORA, timeout=timeout, porcupine=porcupine, peers=peers
        )
    if scale:
        result["scale"] = scale_bench(
            _sizes(scale), master=spark_master, local_baseline=not no_local_baseline
        )
    if scale_register:
        result["register"] = register_bench(
            _sizes(scale_register),
            keys=int(keys),
            key_window=key_window or None,
            master=spark_master,
            local_baseline=not no_local_baseline,
            anomaly=plant_anomaly,
            cluster_workers=_sizes(cluster_workers) if cluster_workers else None,
            cluster_size=None if cluster_size is None else int(cluster_size),
            cluster_only=cluster_only,
        )
    if jsonl:
        wls = [w.strip() for w in jsonl_workload.split(",") if w.strip()]
        result["jsonl"] = jsonl_bench(
            int(jsonl),
            workloads=wls,
            keys=int(keys),
            key_window=key_window or None,
            master=spark_master,
        )
    if txn:
        result["txn"] = txn_bench(int(txn))
    text = json.dumps(result, indent=2, default=str)
    if output is not None:
        output.write_text(text + "\n", encoding="utf-8")
    click.echo(text)
