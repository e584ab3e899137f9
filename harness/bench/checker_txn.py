"""``splitbrain bench checker --txn N``: the transactional checker's speed on an N-txn
list-append history, beside baselines timed in the same run.

Why these baselines: Elle is on Clojars, which this machine cannot reach, so it cannot be
run here; its published figure (100-160k txn/s) is quoted, not measured. What is measured
in the same process, on the same history and graph:

* ``networkx``: the same inference, then the whole graph handed to networkx's strongly
  connected components (what a direct implementation of the cycle step does) instead of
  peeling it first (:func:`checker.txn_cycles.cyclic_core`);
* ``machine``: a fixed pure-Python loop (a million tuple-keyed dict inserts), so a figure
  taken on a loaded machine can be scaled to a quiet one: the checker's work is of the
  same kind.

Both CPU seconds (``process_time``) and wall seconds are given: on a shared machine the
wall clock measures the neighbours too.
"""

from __future__ import annotations

import gc
import os
import resource
import time
from typing import Any

__all__ = ["txn_bench"]

ELLE_PUBLISHED = "100-160k txn/s (Elle's paper and README; not run here: Clojars is unreachable)"


def _timed(fn: Any) -> tuple[Any, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def _machine_loop() -> float:
    """CPU seconds of a million tuple-keyed dict inserts (the calibration loop)."""
    c = time.process_time()
    d: dict[tuple[int, int], int] = {}
    for i in range(1_000_000):
        d[(i, i)] = i
    return time.process_time() - c


def txn_bench(n: int, *, kind: str = "list-append", seed: int = 1) -> dict[str, Any]:
    """Generate, check, and time the baselines (module docstring); JSON-ready."""
    from checker.txn import TxnCheckOptions, judge
    from checker.txn_cycles import cyclic_core
    from checker.txn_infer import infer, txns_of
    from checker.txn_planted import simulate, stale_read
    from harness.core.paired import PairedHistory

    out: dict[str, Any] = {
        "txns": n,
        "workload": kind,
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "elle_published": ELLE_PUBLISHED,
    }
    calib = _machine_loop()
    out["machine"] = {
        "dict_inserts_cpu_s": round(calib, 3),
        "note": "a quiet modern core does this loop in about 0.1-0.15 s",
    }
    ops, wall, cpu = _timed(lambda: simulate(n, kind, seed=seed, concurrency=10))
    out["generate"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "records": len(ops)}
    pairs, wall, cpu = _timed(lambda: PairedHistory.of(ops).pairs("txn"))
    out["pair"] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}

    def ours(level: str) -> dict[str, Any]:
        res, wall, cpu = _timed(lambda: judge(pairs, TxnCheckOptions(isolation=level)))  # type: ignore[arg-type]
        return {
            "valid": res["valid"],
            "edges": res["stats"]["edges"],
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "txn_per_s_cpu": round(n / cpu),
            "txn_per_s_wall": round(n / wall),
        }

    judge(pairs[:1000], TxnCheckOptions())  # imports (numpy, networkx) out of the timing
    out["ours"] = {"serializable": ours("serializable")}
    out["ours"]["strict-serializable"] = ours("strict-serializable")

    def with_networkx() -> bool:
        import networkx as nx

        gc.disable()  # as judge does: the baseline pays no collector either
        try:
            return _nx_cyclic(nx)
        finally:
            gc.enable()

    def _nx_cyclic(nx: Any) -> bool:
        t = txns_of(pairs, kind)
        g, _ = infer(t, kind)
        dg = nx.DiGraph()
        dg.add_nodes_from(range(len(t)))
        src, dst, _ = g.arrays()
        dg.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
        return any(len(c) > 1 for c in nx.strongly_connected_components(dg))

    cyclic, wall, cpu = _timed(with_networkx)
    out["baseline_networkx"] = {
        "cyclic": cyclic,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "txn_per_s_cpu": round(n / cpu),
    }

    def peel_only() -> int:
        gc.disable()
        try:
            t = txns_of(pairs, kind)
            g, _ = infer(t, kind)
            src, dst, _ = g.arrays()
            return len(cyclic_core(len(t), src, dst, hint=t.inv))
        finally:
            gc.enable()

    _, wall, cpu = _timed(peel_only)
    out["ours_parts"] = {"infer_and_peel_cpu_s": round(cpu, 2)}
    bad, index = stale_read(ops, seed=seed)
    bad_pairs = PairedHistory.of(bad).pairs("txn")
    res, wall, cpu = _timed(
        lambda: judge(bad_pairs, TxnCheckOptions(isolation="strict-serializable"))
    )
    out["planted_stale_read"] = {
        "op": index,
        "valid": res["valid"],
        "anomalies": res["stats"]["anomaly_counts"],
        "found_the_op": any(
            index in e["indexes"] for exs in res["anomalies"].values() for e in exs
        ),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
    }
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out
