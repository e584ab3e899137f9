"""``splitbrain bench checker``: how fast the checkers are, against fixed baselines.

Two questions, two parts. (a) Is our linearizability search in Porcupine's
league? Every corpus history is checked with the local engine and its time set
beside Porcupine's own timing of the same file on a 2-core machine (shipped
with the corpora). (b) Does the Spark engine scale? Synthetic append+sampler
histories of growing size (generated in a child process) are checked on Spark,
with wall time, throughput, the driver's peak memory (the Python process and, in
local mode, its JVM child) and the machine's load meanwhile, and the local engine
on the smallest size as a same-run baseline. Everything is printed as one JSON
document.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

__all__ = ["bench_checker", "corpora_bench", "scale_bench", "MemorySampler"]

DEFAULT_CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
ABSENT = {"jepsen/etcd_095.log", "mutex/bad/hazelcast.edn"}
_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "etcd-cas-register": ("cas-register", {}),
    "cas-register": ("knossos-cas-register", {}),
    "kv-put-get-append": ("kv", {}),
    "multi-register": ("multi-register", {"initial": {"x": 0, "y": 0}}),
    "mutex": ("mutex", {}),
}


# --------------------------------------------------------------------------- (a) corpora

def _baselines(root: Path) -> dict[tuple[str, str], float]:
    """Porcupine's median check time in seconds, by (corpus, file)."""
    out: dict[tuple[str, str], float] = {}
    p = root / "porcupine" / "porcupine_baseline_timings.csv"
    if p.exists():
        with open(p, newline="") as fh:
            for r in csv.DictReader(fh):
                # The kv files were also timed with an unpartitioned whole-map model,
                # ~2,500x slower; we partition by key, so compare with the partitioned run.
                if "NoPartition" in r["checker"]:
                    continue
                out[("porcupine", r["file"])] = float(r["check_us_median"]) / 1e6
    k = root / "knossos" / "porcupine_crosscheck.csv"
    if k.exists():
        with open(k, newline="") as fh:
            for r in csv.DictReader(fh):
                # Knossos' cas-register starts at 0; keep that row where there are two.
                if r["initial_state"] in ("0", "") or ("knossos", r["file"]) not in out:
                    out[("knossos", r["file"])] = float(r["check_us_median"]) / 1e6
    return out


def corpora_bench(root: Path, *, timeout: float = 60.0, worst: int = 5) -> dict[str, Any]:
    from checker.local import check_local
    from harness.core.history import read_history

    if not root.is_dir():
        raise click.BadParameter(f"{root}: no such corpora directory", param_hint="--corpora")
    base = _baselines(root)
    per_corpus: dict[str, Any] = {}
    files: list[dict[str, Any]] = []
    for corpus in sorted(p.name for p in root.iterdir() if (p / "manifest.csv").exists()):
        with open(root / corpus / "manifest.csv", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r["file"] not in ABSENT]
        ours_total = theirs_total = 0.0
        matched = 0
        for r in rows:
            path = root / corpus / r["file"]
            if not path.exists() or r["model"] not in _MODELS:
                continue
            name, params = _MODELS[r["model"]]
            ops = read_history(path)
            t = time.perf_counter()
            res = check_local(ops, model=name, timeout=timeout, opts={"model_params": params})
            took = time.perf_counter() - t
            expected = r["expected_verdict"] == "linearizable"
            ok = res["valid"] is expected
            matched += ok
            theirs = base.get((corpus, r["file"]))
            files.append({"corpus": corpus, "file": r["file"], "ops": len(ops), "ours_s": round(took, 6),
                          "porcupine_s": theirs, "ratio": round(took / theirs, 2) if theirs else None,
                          "verdict": res["valid"], "expected": expected, "match": ok})
            ours_total += took
            theirs_total += theirs or 0.0
        n = sum(1 for f in files if f["corpus"] == corpus)
        ratios = [f["ratio"] for f in files if f["corpus"] == corpus and f["ratio"]]
        per_corpus[corpus] = {
            "files": n, "verdicts_matched": matched, "ours_total_s": round(ours_total, 3),
            "porcupine_total_s": round(theirs_total, 3),
            "ratio_total": round(ours_total / theirs_total, 2) if theirs_total else None,
            "ratio_median": round(statistics.median(ratios), 2) if ratios else None}
    by_time = sorted(files, key=lambda f: -f["ours_s"])[:worst]
    by_ratio = sorted((f for f in files if f["ratio"]), key=lambda f: -f["ratio"])[:worst]
    return {"corpora": per_corpus, "all_verdicts_match": all(f["match"] for f in files),
            "files_checked": len(files), "slowest_files": by_time, "worst_ratio_files": by_ratio,
            "mismatches": [f for f in files if not f["match"]]}


# --------------------------------------------------------------------------- (b) scale

class MemorySampler:
    """Peak RSS of this process and of its JVM child (and its Python workers), sampled,
    with the machine's 1-minute load average over the same time (others' jobs share it)."""

    def __init__(self, every: float = 0.2, exclude: Iterable[int] = ()) -> None:
        import psutil

        self.me = psutil.Process()
        # A standalone cluster the benchmark started is this process's child too, but is
        # not the driver: its JVMs (and their executors' Python workers) are left out.
        self.exclude = set(exclude)
        self.every = every
        self.peak = {"python_driver": 0, "jvm_driver": 0, "python_workers": 0}
        self.driver_total = 0
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = self.me.memory_info().rss
        self.peak["python_driver"] = max(self.peak["python_driver"], me)
        self.loads.append(os.getloadavg()[0])
        jvm = workers = 0
        skip: set[int] = set()
        for pid in self.exclude:
            try:
                skip.add(pid)
                skip.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                pass
        try:
            for c in self.me.children(recursive=True):
                if c.pid in skip:
                    continue
                try:
                    name = c.name()
                    rss = c.memory_info().rss
                except psutil.Error:
                    continue
                if "java" in name:
                    jvm += rss
                elif "python" in name:
                    workers += rss
        except psutil.Error:
            pass
        self.peak["jvm_driver"] = max(self.peak["jvm_driver"], jvm)
        self.peak["python_workers"] = max(self.peak["python_workers"], workers)
        self.driver_total = max(self.driver_total, me + jvm)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def __enter__(self) -> MemorySampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self._sample()

    def mib(self) -> dict[str, float]:
        """Peaks in MiB; ``driver_total`` is the peak of Python driver + JVM at one instant."""
        out = {k: round(v / 2**20, 1) for k, v in self.peak.items()}
        out["driver_total"] = round(self.driver_total / 2**20, 1)
        return out

    def load(self) -> dict[str, float]:
        if not self.loads:
            return {}
        return {"mean": round(statistics.fmean(self.loads), 2), "max": round(max(self.loads), 2)}


def _generate(path: Path, n: int, **kw: Any) -> int:
    """Write a synthetic history in a child process, so that the generator's heap does not
    count in this process's RSS while the check is measured."""
    import subprocess
    import sys

    kw = {"workload": "append", "seed": 1, **kw}
    code = ("import json, sys; from checker.synth import write_history; "
            "print(write_history(sys.argv[1], int(sys.argv[2]), **json.loads(sys.argv[3])))")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(n), json.dumps(kw)], check=True,
                         capture_output=True, text=True)
    return int(out.stdout.split()[-1])


def scale_bench(sizes: list[int], *, master: str | None = None, local_baseline: bool = True,
                keep: Path | None = None) -> dict[str, Any]:
    from checker.spark import check_spark
    from checker.spark.session import get_session

    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-bench-")) if keep is None else keep
    tmp.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"sizes": [], "master": master or "local[*]", "driver_memory": os.environ.get(
        "SPLITBRAIN_SPARK_DRIVER_MEMORY", "1g")}
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
            out["sizes"].append({
                "records": records, "generate_s": round(gen_s, 2), "parquet_mib": round(
                    path.stat().st_size / 2**20, 1),
                "check_s": round(took, 2), "ops_per_s": round(records / took),
                "valid": res["valid"], "peak_rss_mib": mem.mib(), "load_avg_1m": mem.load(),
                "stats": res["checkers"].get("log-safety", {}).get("stats")})
        s = out["sizes"]
        for a, b in zip(s, s[1:], strict=False):
            b["growth_vs_previous"] = {"records_x": round(b["records"] / a["records"], 2),
                                       "time_x": round(b["check_s"] / a["check_s"], 2)}
        if local_baseline and sizes:
            from checker.local import check_local
            from harness.core.history import read_history

            path = tmp / f"synth-{sizes[0]}.parquet"
            with MemorySampler() as mem:
                t = time.perf_counter()
                ops = read_history(path)
                read_s = time.perf_counter() - t
                res = check_local(ops)
                took = time.perf_counter() - t
            del ops
            out["local_baseline"] = {"records": s[0]["records"], "read_s": round(read_s, 2),
                                     "total_s": round(took, 2), "valid": res["valid"],
                                     "peak_rss_mib": mem.mib()["python_driver"],
                                     "load_avg_1m": mem.load()}
    finally:
        if keep is None:
            for p in tmp.glob("*.parquet"):
                p.unlink()
            tmp.rmdir()
    return out


def _timed_check(path: Path, records: int, master: str | None,
                 exclude: Iterable[int] = ()) -> dict[str, Any]:
    """One Spark check of ``path`` with its wall time, records/s, driver memory and load."""
    from checker.spark import check_spark

    with MemorySampler(exclude=exclude) as mem:
        t = time.perf_counter()
        res = check_spark(str(path), master=master)
        took = time.perf_counter() - t
    lin = res["checkers"].get("linearizable", {})
    return {"check_s": round(took, 2), "ops_per_s": round(records / took), "valid": res["valid"],
            "keys": lin.get("keys"), "failures": lin.get("failures"),
            "error": lin.get("error") or res.get("error"), "peak_rss_mib": mem.mib(),
            "load_avg_1m": mem.load()}


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
    return {"records": n, "read_s": round(read_s, 2), "total_s": round(took, 2),
            "valid": res["valid"], "peak_rss_mib": mem.mib()["python_driver"],
            "load_avg_1m": mem.load()}


def register_bench(sizes: list[int], *, keys: int, key_window: int | None, master: str | None = None,
                   local_baseline: bool = True, cluster_workers: list[int] | None = None,
                   cluster_size: int | None = None, cluster_only: bool = False,
                   anomaly: bool = False, keep: Path | None = None) -> dict[str, Any]:
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
    gen = {"workload": "register", "keys": keys, "key_window": key_window,
           "anomaly": "nonlinearizable" if anomaly else None}
    out: dict[str, Any] = {"keys": keys, "key_window": key_window, "anomaly": gen["anomaly"],
                           "master": master or "local[*]", "sizes": [],
                           "driver_memory": os.environ.get("SPLITBRAIN_SPARK_DRIVER_MEMORY", "1g")}
    try:
        paths = []
        for n in sizes:
            path = tmp / f"register-{n}.parquet"
            t = time.perf_counter()
            records = path.exists() and _rows(path) or _generate(path, n, **gen)
            paths.append((path, records))
            out["sizes"].append({"records": records, "generate_s": round(time.perf_counter() - t, 2),
                                 "parquet_mib": round(path.stat().st_size / 2**20, 1)})
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
                    run = {"workers": w, "cores_per_worker": 1, "records": records,
                           "spark_startup_s": startup, **_timed_check(path, records, url, pids)}
                    stop_session()
                runs.append(run)
            for r in runs:
                r["speedup_vs_first"] = round(runs[0]["check_s"] / r["check_s"], 2)
                r["speedup_per_worker"] = round(r["speedup_vs_first"] * runs[0]["workers"]
                                                / r["workers"], 2)
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


def jsonl_bench(n: int, *, workloads: list[str], keys: int | None, key_window: int | None,
                master: str | None = None) -> dict[str, Any]:
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
            run = {"workload": wl, "records": records, "generate_s": round(gen_s, 2),
                   "jsonl_mib": round(path.stat().st_size / 2**20, 1)}
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


def _sizes(text: str) -> list[int]:
    try:
        return [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected sizes like 1e6,1e7", param_hint="--scale") from None


@click.command("checker")
@click.option("--corpora", "corpora", type=click.Path(path_type=Path), default=None,
              help=f"Corpora directory (default {DEFAULT_CORPORA}).")
@click.option("--scale", "scale", default=None, help="Spark scale run: sizes in records, e.g. 1e6,1e7.")
@click.option("--scale-register", "scale_register", default=None,
              help="Linearizability at scale: register/CAS history sizes in records, e.g. 1e6,1e7.")
@click.option("--keys", type=float, default=1e5, show_default=True,
              help="Keys of the register histories.")
@click.option("--key-window", type=int, default=8, show_default=True,
              help="Neighbouring keys concurrent register ops share (see gen-history).")
@click.option("--plant-anomaly", is_flag=True,
              help="Plant one nonlinearizable read in the register histories.")
@click.option("--cluster-workers", default=None,
              help="Also check the largest register size on standalone clusters of these many "
                   "one-core workers, e.g. 1,2, and report the speed-up per worker.")
@click.option("--cluster-size", type=float, default=None,
              help="Register history size of the cluster runs (default: the largest --scale-register).")
@click.option("--cluster-only", is_flag=True,
              help="With --cluster-workers: skip the --spark-master runs and the local baseline.")
@click.option("--jsonl", "jsonl", type=float, default=None,
              help="End to end from JSONL (conversion included): records, e.g. 1e6.")
@click.option("--jsonl-workload", default="register,append", show_default=True,
              help="Workloads of the JSONL run.")
@click.option("--skip-corpora", is_flag=True, help="Only the scale run.")
@click.option("--spark-master", default=None, help="Spark master URL (default local[*]).")
@click.option("--no-local-baseline", is_flag=True, help="Skip timing the local engine at the smallest size.")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Per-file timeout of the corpora checks.")
@click.option("--output", type=click.Path(path_type=Path), default=None, help="Also write the JSON here.")
def bench_checker(corpora: Path | None, scale: str | None, scale_register: str | None, keys: float,
                  key_window: int, plant_anomaly: bool, cluster_workers: str | None,
                  cluster_size: float | None, cluster_only: bool,
                  jsonl: float | None, jsonl_workload: str, skip_corpora: bool,
                  spark_master: str | None, no_local_baseline: bool, timeout: float,
                  output: Path | None) -> None:
    """Checker speed: corpora vs Porcupine's timings; Spark engine at scale."""
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_avg_at_start": [
        round(x, 2) for x in os.getloadavg()]}}
    if not skip_corpora:
        result["corpora"] = corpora_bench(corpora or DEFAULT_CORPORA, timeout=timeout)
    if scale:
        result["scale"] = scale_bench(_sizes(scale), master=spark_master,
                                      local_baseline=not no_local_baseline)
    if scale_register:
        result["register"] = register_bench(
            _sizes(scale_register), keys=int(keys), key_window=key_window or None,
            master=spark_master, local_baseline=not no_local_baseline, anomaly=plant_anomaly,
            cluster_workers=_sizes(cluster_workers) if cluster_workers else None,
            cluster_size=None if cluster_size is None else int(cluster_size),
            cluster_only=cluster_only)
    if jsonl:
        wls = [w.strip() for w in jsonl_workload.split(",") if w.strip()]
        result["jsonl"] = jsonl_bench(int(jsonl), workloads=wls, keys=int(keys),
                                      key_window=key_window or None, master=spark_master)
    text = json.dumps(result, indent=2, default=str)
    if output is not None:
        output.write_text(text + "\n", encoding="utf-8")
    click.echo(text)
