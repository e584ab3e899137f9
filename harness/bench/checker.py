"""``splitbrain bench checker``: how fast the checkers are, against fixed baselines.

The command and its options are :mod:`harness.cli.bench`; here, what it measures. Two questions, two parts, each its own module: (a) is our linearizability search in
Porcupine's league (:mod:`harness.bench.checker_corpora`)? (b) does the Spark engine
scale (:mod:`harness.bench.checker_scale`)? Everything is printed as one JSON
document.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.bench.checker_corpora import corpora_bench
from harness.bench.checker_data import DEFAULT_CORPORA
from harness.bench.checker_scale import jsonl_bench, register_bench, scale_bench
from harness.bench.checker_txn import txn_bench

__all__ = ["checker_bench"]


def checker_bench(
    *,
    corpora: Path | None,
    scale: list[int] | None,
    scale_register: list[int] | None,
    keys: float,
    key_window: int,
    plant_anomaly: bool,
    cluster_workers: list[int] | None,
    cluster_size: float | None,
    cluster_only: bool,
    jsonl: float | None,
    jsonl_workload: str,
    jsonl_shape: str | None,
    txn: float | None,
    huge: float | None,
    huge_baseline: float,
    huge_dir: Path | None,
    skip_corpora: bool,
    spark_master: str | None,
    no_local_baseline: bool,
    timeout: float,
    porcupine: str,
    peers: Path | None,
) -> dict[str, Any]:
    """The figures of ``splitbrain bench checker`` (its options, sizes parsed), in the
    order asked: corpora vs Porcupine, then each scale run."""
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
            scale, master=spark_master, local_baseline=not no_local_baseline
        )
    if scale_register:
        result["register"] = register_bench(
            scale_register,
            keys=int(keys),
            key_window=key_window or None,
            master=spark_master,
            local_baseline=not no_local_baseline,
            anomaly=plant_anomaly,
            cluster_workers=cluster_workers or None,
            cluster_size=None if cluster_size is None else int(cluster_size),
            cluster_only=cluster_only,
        )
    if jsonl and jsonl_shape:
        from harness.bench.checker_shape import shape_bench

        result["jsonl_shape"] = shape_bench(int(jsonl), shape=jsonl_shape, master=spark_master)
    elif jsonl:
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
    if huge:
        from harness.bench.checker_huge import huge_bench

        result["huge"] = huge_bench(
            int(huge),
            baseline=int(huge_baseline) or None,
            keys=int(keys),
            key_window=key_window or None,
            where=huge_dir,
        )
    return result
