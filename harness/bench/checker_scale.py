"""Part (b) of ``bench checker``: does the Spark engine scale?

Synthetic histories of growing size (generated in a child process) are checked on
Spark, with wall time, throughput, the driver's peak memory (the Python process and, in
local mode, its JVM child), per million records, and the machine's load meanwhile; and the
local engine on the smallest size, both as it runs now (Parquet columns) and along the
previous code's path (an Op per record), each in its own process, as same-run figures; also register histories (per key, optionally on a
standalone cluster) and JSONL conversion.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.bench.checker_memory import MemorySampler

__all__ = ["jsonl_bench", "register_bench", "scale_bench"]


def _generate(path: Path, n: int, **kw: Any) -> int:
    """Write a synthetic history in a child process, so that the generator's heap does not
    count in this process's RSS while the check is measured."""
    import subprocess
    import sys

    kw = {"workload": "append", "seed": 1, **kw}
    code = (
        "import json, sys; from checker.synth import write_history; "
        "print(write_history(sys.argv[1], int(sys.argv[2]), **json.loads(sys.argv[3])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(n), json.dumps(kw)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.split()[-1])


def scale_bench(
    sizes: list[int],
    *,
    master: str | None = None,
    local_baseline: bool = True,
    keep: Path | None = None,
) -> dict[str, Any]:
    from checker.spark import check_spark
    from checker.spark.session import get_session

    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-bench-")) if keep is None else keep
    tmp.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {
        "sizes": [],
        "master": master or "local[*]",
        "driver_memory": os.environ.get("SPLITBRAIN_SPARK_DRIVER_MEMORY", "1g"),
    }
    t = time.perf_counter()
    get_session(master)
    out["spark_startup_s"] = round(time.perf_counter() - t, 2)
    try:
        for n in sizes:
            path = tmp / f"synth-{n}.parquet"
            t = time.perf_counter()
            records = _generate(path, n)
            gen_s = time.perf_counter() - t
            with MemorySampler() as mem:
                t = time.perf_counter()
                res = check_spark(str(path), master=master)
                took = time.perf_counter() - t
            out["sizes"].append(
                {
                    "records": records,
                    "generate_s": round(gen_s, 2),
                    "parquet_mib": round(path.stat().st_size / 2**20, 1),
                    "check_s": round(took, 2),
                    "ops_per_s": round(records / took),
                    "valid": res["valid"],
                    "peak_rss_mib": mem.mib(),
                    "load_avg_1m": mem.load(),
                    "stats": res["checkers"].get("log-safety", {}).get("stats"),
                }
            )
        s = out["sizes"]
        for a, b in zip(s, s[1:], strict=False):
            b["growth_vs_previous"] = {
                "records_x": round(b["records"] / a["records"], 2),
                "time_x": round(b["check_s"] / a["check_s"], 2),
            }
        if local_baseline and sizes:
            path = tmp / f"synth-{sizes[0]}.parquet"
            out["local"] = {
                "records": s[0]["records"],
                "columnar": _local_child(path, "columnar"),
                "ops": _local_child(path, "ops"),
            }
        for row in out["sizes"]:
            row["per_million"] = _per_million(row["records"], row["check_s"], row["peak_rss_mib"])
    finally:
        if keep is None:
            for p in tmp.glob("*.parquet"):
                p.unlink()
            tmp.rmdir()
    return out


_LOCAL_CHILD = """
import json, resource, sys, time
t = time.perf_counter()
if sys.argv[2] == "columnar":
    from checker.dispatch import check_history
    res = check_history(sys.argv[1], engine="local")
else:
    from checker.local import check_local
    from harness.core.source import read_paired
    res = check_local(read_paired(sys.argv[1]))
took = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"s": took, "rss": rss, "valid": res["valid"]}))
"""


def _local_child(path: Path, how: str) -> dict[str, Any]:
    """The local engine on ``path`` in a fresh process, so that its peak RSS is its own:
    ``columnar`` is the engine as it runs now (Parquet columns, :func:`check_history`),
    ``ops`` the path the previous code took (an Op per record, then the checkers), kept
    as the same-run baseline. Load is sampled meanwhile."""
    import subprocess
    import sys

    with MemorySampler() as mem:
        run = subprocess.run(
            [sys.executable, "-c", _LOCAL_CHILD, str(path), how],
            check=True,
            capture_output=True,
            text=True,
        )
    got = json.loads(run.stdout.splitlines()[-1])
    return {
        "total_s": round(got["s"], 2),
        "valid": got["valid"],
        "peak_rss_mib": round(got["rss"], 1),
        "load_avg_1m": mem.load(),
    }


def _per_million(records: int, seconds: float, rss: dict[str, float]) -> dict[str, float]:
    """Seconds and driver MiB per million records, so sizes compare at a glance."""
    m = records / 1e6
    return {
        "s": round(seconds / m, 2),
        "driver_mib": round(rss.get("driver_total", 0.0) / m, 1),
    }


def _timed_check(
    path: Path, records: int, master: str | None, exclude: Iterable[int] = ()
) -> dict[str, Any]:
    """One Spark check of ``path`` with its wall time, records/s, driver memory and load."""
    from checker.spark import check_spark

    with MemorySampler(exclude=exclude) as mem:
        t = time.perf_counter()
        res = check_spark(str(path), master=master)
        took = time.perf_counter() - t
    lin = res["checkers"].get("linearizable", {})
    return {
        "check_s": round(took, 2),
        "ops_per_s": round(records / took),
        "valid": res["valid"],
        "keys": lin.get("keys"),
        "failures": lin.get("failures"),
        "error": lin.get("error") or res.get("error"),
        "peak_rss_mib": mem.mib(),
        "load_avg_1m": mem.load(),
    }


def _local_baseline(path: Path) -> dict[str, Any]:
    from checker.local import check_local
    from harness.core.history import read_history

    with MemorySampler() as mem:
        t = time.perf_counter()
        ops = read_history(path)
        read_s = time.perf_counter() - t
        res = check_local(ops)
        took = time.perf_counter() - t
    n = len(ops)
    del ops
    return {
        "records": n,
        "read_s": round(read_s, 2),
        "total_s": round(took, 2),
        "valid": res["valid"],
        "peak_rss_mib": mem.mib()["python_driver"],
        "load_avg_1m": mem.load(),
    }


def register_bench(
    sizes: list[int],
    *,
    keys: int,
    key_window: int | None,
    master: str | None = None,
    local_baseline: bool = True,
    cluster_workers: list[int] | None = None,
    cluster_size: int | None = None,
    cluster_only: bool = False,
    anomaly: bool = False,
    keep: Path | None = None,
) -> dict[str, Any]:
    """Linearizability at scale: register/CAS histories over ``keys`` keys checked on Spark.

    Per size: generation (in a child process), then the check on ``master``, with the
    driver's memory (Python + its JVM) and the load. ``cluster_workers`` (e.g. ``[1, 2]``)
    also checks the size ``cluster_size`` (default the largest) on throwaway standalone clusters of that many one-core
    workers and reports the speed-up of each against the first. ``anomaly`` plants one
    nonlinearizable read, to show that the verdict at scale is a real search.
    """
    from checker.spark.session import get_session, stop_session
    from checker.spark.standalone import standalone_cluster

    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-bench-")) if keep is None else keep
    tmp.mkdir(parents=True, exist_ok=True)
    gen = {
        "workload": "register",
        "keys": keys,
        "key_window": key_window,
        "anomaly": "nonlinearizable" if anomaly else None,
    }
    out: dict[str, Any] = {
        "keys": keys,
        "key_window": key_window,
        "anomaly": gen["anomaly"],
        "master": master or "local[*]",
        "sizes": [],
        "driver_memory": os.environ.get("SPLITBRAIN_SPARK_DRIVER_MEMORY", "1g"),
    }
    try:
        paths = []
        for n in sizes:
            path = tmp / f"register-{n}.parquet"
            t = time.perf_counter()
            records = path.exists() and _rows(path) or _generate(path, n, **gen)
            paths.append((path, records))
            out["sizes"].append(
                {
                    "records": records,
                    "generate_s": round(time.perf_counter() - t, 2),
                    "parquet_mib": round(path.stat().st_size / 2**20, 1),
                }
            )
        if not cluster_only:
            t = time.perf_counter()
            get_session(master)
            out["spark_startup_s"] = round(time.perf_counter() - t, 2)
            for (path, records), row in zip(paths, out["sizes"], strict=True):
                row.update(_timed_check(path, records, master))
        if local_baseline and paths and not cluster_only:
            out["local_baseline"] = _local_baseline(paths[0][0])
        if cluster_workers and paths:
            path, records = paths[-1]
            if cluster_size is not None:
                path = tmp / f"register-{cluster_size}.parquet"
                records = _rows(path) if path.exists() else _generate(path, cluster_size, **gen)
            runs = []
            for w in cluster_workers:
                stop_session()
                with standalone_cluster(w, tmp / f"cluster-{w}", memory="2g") as (url, pids):
                    t = time.perf_counter()
                    get_session(url)
                    startup = round(time.perf_counter() - t, 2)
                    run = {
                        "workers": w,
                        "cores_per_worker": 1,
                        "records": records,
                        "spark_startup_s": startup,
                        **_timed_check(path, records, url, pids),
                    }
                    stop_session()
                runs.append(run)
            for r in runs:
                r["speedup_vs_first"] = round(runs[0]["check_s"] / r["check_s"], 2)
                r["speedup_per_worker"] = round(
                    r["speedup_vs_first"] * runs[0]["workers"] / r["workers"], 2
                )
            out["standalone"] = runs
    finally:
        stop_session()
        if keep is None:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(str(path)).metadata.num_rows)


def jsonl_bench(
    n: int,
    *,
    workloads: list[str],
    keys: int | None,
    key_window: int | None,
    master: str | None = None,
) -> dict[str, Any]:
    """A JSONL history as a user's tool would hand it over (no Parquet given), checked end to
    end on Spark: conversion included, with the conversion also timed on its own."""
    from checker.spark.session import get_session
    from harness.core.history import jsonl_to_parquet

    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-bench-"))
    out: dict[str, Any] = {"master": master or "local[*]", "runs": []}
    t = time.perf_counter()
    get_session(master)
    out["spark_startup_s"] = round(time.perf_counter() - t, 2)
    try:
        for wl in workloads:
            path = tmp / f"{wl}-{n}.jsonl"
            kw: dict[str, Any] = {"workload": wl}
            if wl == "register":
                kw.update(keys=keys, key_window=key_window)
            t = time.perf_counter()
            records = _generate(path, n, **kw)
            gen_s = time.perf_counter() - t
            run = {
                "workload": wl,
                "records": records,
                "generate_s": round(gen_s, 2),
                "jsonl_mib": round(path.stat().st_size / 2**20, 1),
            }
            run.update(_timed_check(path, records, master))
            run["end_to_end_s"] = run.pop("check_s")
            t = time.perf_counter()
            jsonl_to_parquet(path, tmp / "convert.parquet")
            run["convert_alone_s"] = round(time.perf_counter() - t, 2)
            out["runs"].append(run)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out
