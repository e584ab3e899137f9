"""Part of ``bench checker --jsonl N --jsonl-shape SHAPE``: does a history's shape, not
only its size, change what a check costs?

Issue 43 timed a 1M-op append history whose log reads return long prefixes of the log
(made outside the project, 377 MB of JSONL): 26.5 s locally and 71 s on Spark, against
about 10 s and 30 s for ``gen-history``'s append history of that size. Here both shapes
are generated (:data:`checker.synth.READ_SHAPES`, same seed and record count), and each
JSONL file is checked end to end as a user meets it: ``splitbrain check FILE --engine E``
in a fresh process (conversion to Parquet, a fresh Spark JVM, every check), with its wall
time, the peak RSS of its whole process tree (the converters and the JVM included),
its verdict and the load meanwhile. The ``short`` shape is the same-run baseline: on a
shared machine the ratio to it is the figure that means something.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench.checker_scale import _generate

__all__ = ["shape_bench"]

BASELINE = "short"


def _tree_rss(proc: Any) -> int:
    """RSS of a process and all its descendants, now (bytes)."""
    import psutil

    total = 0
    try:
        for p in (proc, *proc.children(recursive=True)):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return total


def _check(path: Path, engine: str, master: str | None) -> dict[str, Any]:
    """``splitbrain check PATH --engine ENGINE`` in a fresh process: wall time, tree peak
    RSS sampled every 0.1 s, verdict and the load."""
    import psutil

    out = path.with_suffix(f".{engine}.json")
    argv = [sys.executable, "-m", "harness.cli", "check", str(path), "--engine", engine]
    argv += ["--output", str(out)]
    if master and engine == "spark":
        argv += ["--spark-master", master]
    loads: list[float] = []
    peak = 0
    t = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    me = psutil.Process(child.pid)
    while child.poll() is None:
        peak = max(peak, _tree_rss(me))
        loads.append(os.getloadavg()[0])
        time.sleep(0.1)
    wall = time.perf_counter() - t
    said = child.stdout.read() if child.stdout else ""
    res: dict[str, Any] = {
        "wall_s": round(wall, 2),
        "peak_tree_mib": round(peak / 2**20, 1),
        "exit": child.returncode,
        "load": {"mean": round(statistics.fmean(loads), 2), "max": round(max(loads), 2)}
        if loads
        else {},
    }
    try:
        got = json.loads(out.read_text())
        res["valid"] = got.get("valid")
        res["anomalies"] = sorted(got.get("anomalies") or {})
    except (OSError, ValueError):
        res["output"] = said.strip().splitlines()[-3:]
    return res


def shape_bench(
    n: int,
    *,
    shape: str,
    engines: tuple[str, ...] = ("local", "spark"),
    master: str | None = None,
    seed: int = 1,
) -> dict[str, Any]:
    """The append history of ``n`` records in the read shape ``shape`` and in the baseline
    shape, both as JSONL, each checked end to end on every engine: per history its size
    and generation time, per engine its figures, and the ratio of the shape's wall time to
    the baseline's."""
    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-bench-shape-"))
    out: dict[str, Any] = {
        "records_asked": n,
        "shape": shape,
        "baseline": BASELINE,
        "master": master or "local[*]",
        "histories": {},
    }
    try:
        for reads in dict.fromkeys((BASELINE, shape)):
            path = tmp / f"append-{reads}-{n}.jsonl"
            t = time.perf_counter()
            records = _generate(path, n, workload="append", seed=seed, reads=reads)
            run: dict[str, Any] = {
                "records": records,
                "jsonl_mib": round(path.stat().st_size / 2**20, 1),
                "generate_s": round(time.perf_counter() - t, 2),
            }
            for engine in engines:
                run[engine] = _check(path, engine, master)
            out["histories"][reads] = run
            path.unlink()
        base, got = out["histories"][BASELINE], out["histories"][shape]
        out["ratio_to_baseline"] = {
            e: round(got[e]["wall_s"] / base[e]["wall_s"], 2) for e in engines if base[e]["wall_s"]
        }
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out
