"""Part (d) of ``bench checker``: a history far larger than memory, written and checked by
both engines.

``--huge 1e8`` writes a register/CAS history of that many records (``gen-history``'s
generator, in a child process: time, file size, the writer's peak RSS), then checks it with
the local engine (``check_history(engine="local")`` in a child process: above
:data:`checker.keyed.KEYED_ROWS` it streams the file and judges a key at a time,
:mod:`checker.keyed`) and with Spark (``local[*]``, in a child process whose driver Python,
JVM, which runs the executor threads in local mode, and the executors' Python workers are
sampled apart), each with its wall time, peak memory and the load meanwhile. The same is
done first at a baseline size (default 1e7) in the same run, so the figures compare on
the same machine under the same neighbours. Files live under ``--huge-dir`` (default a
temporary directory) and are deleted at the end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.bench.checker_memory import MemorySampler

__all__ = ["huge_bench"]

_WRITE = """
import json, resource, sys, time
from checker.synth import write_history
t = time.perf_counter()
n = write_history(sys.argv[1], int(sys.argv[2]), **json.loads(sys.argv[3]))
print(json.dumps({"records": n, "s": time.perf_counter() - t,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_LOCAL = """
import json, resource, sys, time
from checker.dispatch import check_history
from checker.keyed import KEYED_ROWS
import pyarrow.parquet as pq
t = time.perf_counter()
res = check_history(sys.argv[1], engine="local")
took = time.perf_counter() - t
lin = res["checkers"].get("linearizable", {})
print(json.dumps({"s": took, "valid": res["valid"], "keys": lin.get("keys"),
                  "error": lin.get("error") or res.get("error"),
                  "streamed": pq.ParquetFile(sys.argv[1]).metadata.num_rows >= KEYED_ROWS,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_SPARK = """
import json, sys, time
from harness.bench.checker_memory import MemorySampler
from checker.spark import check_spark
from checker.spark.session import get_session
t = time.perf_counter()
get_session(None)
startup = time.perf_counter() - t
with MemorySampler() as mem:
    t = time.perf_counter()
    res = check_spark(sys.argv[1])
    took = time.perf_counter() - t
lin = res["checkers"].get("linearizable", {})
print(json.dumps({"s": took, "startup_s": startup, "valid": res["valid"], "keys": lin.get("keys"),
                  "error": lin.get("error") or res.get("error"), "rss": mem.mib()}))
"""


def _child(code: str, *args: str) -> tuple[dict[str, Any], dict[str, float]]:
    """A script in a fresh Python process (its peak RSS its own), its last output line as
    JSON, and the machine's load meanwhile."""
    with MemorySampler(every=1.0) as mem:
        run = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
        )
    if run.returncode != 0:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return {"failed": f"exit {run.returncode}: {tail[:300]}"}, mem.load()
    return json.loads(run.stdout.strip().splitlines()[-1]), mem.load()


def _one(path: Path, n: int, gen: dict[str, Any]) -> dict[str, Any]:
    """Write ``n`` records at ``path``, check them on both engines; the figures."""
    w, load = _child(_WRITE, str(path), str(n), json.dumps(gen))
    row: dict[str, Any] = {"asked": n}
    if "failed" in w:
        row["write"] = w
        return row
    row["records"] = w["records"]
    row["write"] = {
        "s": round(w["s"], 1),
        "parquet_mib": round(path.stat().st_size / 2**20, 1),
        "peak_rss_mib": round(w["rss"], 1),
        "load_avg_1m": load,
    }
    got, load = _child(_LOCAL, str(path))
    row["local"] = _figures(got, load, lambda g: {"peak_rss_mib": round(g["rss"], 1)})
    got, load = _child(_SPARK, str(path))
    row["spark"] = _figures(
        got,
        load,
        lambda g: {"startup_s": round(g["startup_s"], 1), "peak_rss_mib": g["rss"]},
    )
    path.unlink()
    return row


def _figures(got: dict[str, Any], load: dict[str, float], memory: Any) -> dict[str, Any]:
    if "failed" in got:
        return {**got, "load_avg_1m": load}
    out = {
        "check_s": round(got["s"], 1),
        "valid": got["valid"],
        "keys": got["keys"],
        **memory(got),
        "load_avg_1m": load,
    }
    if got.get("error"):
        out["error"] = got["error"]
    if "streamed" in got:
        out["streamed"] = got["streamed"]
    return out


def huge_bench(
    n: int,
    *,
    baseline: int | None,
    keys: int,
    key_window: int | None,
    where: Path | None = None,
) -> dict[str, Any]:
    """The baseline size's figures, then ``n``'s (module docstring)."""
    tmp = Path(tempfile.mkdtemp(prefix="splitbrain-huge-", dir=where))
    gen = {"workload": "register", "keys": keys, "key_window": key_window, "seed": 1}
    out: dict[str, Any] = {"workload": "register", "keys": keys, "key_window": key_window}
    started = time.perf_counter()
    try:
        sizes = ([baseline] if baseline else []) + [n]
        out["sizes"] = [_one(tmp / f"register-{m}.parquet", m, gen) for m in sizes]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["total_s"] = round(time.perf_counter() - started, 1)
    return out
