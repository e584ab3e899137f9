"""Part (a) of ``bench checker``: is our linearizability search in Porcupine's league?

Every corpus history is checked with the local engine and its time set beside
Porcupine's own timing of the same file: measured live when Go is here
(:mod:`harness.bench.checker_porcupine`), else the timings shipped with the corpora.
"""

from __future__ import annotations

import csv
import os
import statistics
import time
from pathlib import Path
from typing import Any

import click

from harness.bench.checker_data import ABSENT, DEFAULT_PEERS, MODELS
from harness.bench.checker_porcupine import porcupine_live

__all__ = ["baselines", "corpora_bench", "median_time"]


def baselines(root: Path) -> dict[tuple[str, str], float]:
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


def median_time(fn: Any, runs: int = 5) -> tuple[float, Any]:
    """Median wall time of ``runs`` calls (as Porcupine's timing test does) and the last result."""
    ds = []
    res = None
    for _ in range(runs):
        t = time.perf_counter()
        res = fn()
        ds.append(time.perf_counter() - t)
    return statistics.median(ds), res


def corpora_bench(
    root: Path,
    *,
    timeout: float = 60.0,
    worst: int = 5,
    porcupine: str = "auto",
    peers: Path | None = None,
) -> dict[str, Any]:
    """Every corpus file checked by our search, timed beside Porcupine's time for the same file.

    ``porcupine``: ``"live"`` builds and runs Porcupine here, now (needs Go and
    the peer source), ``"stored"`` uses the timings shipped with the corpora,
    ``"auto"`` is live when ``go`` is on PATH. Our time is measured as
    Porcupine's timing test measures its own: median of 5, parsing excluded, the
    whole check of the file (partitioning, pairing, search) with no
    counterexample (Porcupine's ``CheckEvents`` builds none either).
    """
    import shutil

    from checker.linearizable import FAST, check_linearizable
    from checker.models import get_model
    from harness.core.history import read_history

    if not root.is_dir():
        raise click.BadParameter(f"{root}: no such corpora directory", param_hint="--corpora")
    live: dict[str, Any] | None = None
    live_error = None
    if porcupine == "live" or (porcupine == "auto" and shutil.which("go")):
        try:
            live = porcupine_live(root, peers or DEFAULT_PEERS)
        except (RuntimeError, OSError, ValueError) as e:
            if porcupine == "live":
                raise click.ClickException(f"cannot run Porcupine here: {e}") from None
            live_error = str(e)
    base = live["times"] if live else baselines(root)
    load_ours = os.getloadavg()[0]
    per_corpus: dict[str, Any] = {}
    files: list[dict[str, Any]] = []
    for corpus in sorted(p.name for p in root.iterdir() if (p / "manifest.csv").exists()):
        with open(root / corpus / "manifest.csv", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r["file"] not in ABSENT]
        ours_total = theirs_total = ours_paired = 0.0
        matched = agree = compared = 0
        for r in rows:
            path = root / corpus / r["file"]
            if not path.exists() or r["model"] not in MODELS:
                continue
            name, params = MODELS[r["model"]]
            model = get_model(name, **params)
            ops = read_history(path)
            took, res = median_time(
                lambda ops=ops, model=model: check_linearizable(
                    ops, model, timeout=timeout, counterexample=False
                )
            )
            expected = r["expected_verdict"] == "linearizable"
            ok = res["valid"] is expected
            matched += ok
            theirs = base.get((corpus, r["file"]))
            theirs_verdict = live["verdicts"].get((corpus, r["file"])) if live else None
            if theirs_verdict is not None:
                compared += 1
                agree += theirs_verdict is res["valid"]
            files.append(
                {
                    "corpus": corpus,
                    "file": r["file"],
                    "ops": len(ops),
                    "ours_s": round(took, 6),
                    "porcupine_s": theirs,
                    "ratio": round(took / theirs, 2) if theirs else None,
                    "verdict": res["valid"],
                    "porcupine_verdict": theirs_verdict,
                    "expected": expected,
                    "match": ok,
                }
            )
            ours_total += took
            if theirs is not None:
                theirs_total += theirs
                ours_paired += took
        n = sum(1 for f in files if f["corpus"] == corpus)
        ratios = [f["ratio"] for f in files if f["corpus"] == corpus and f["ratio"]]
        per_corpus[corpus] = {
            "files": n,
            "verdicts_matched": matched,
            "porcupine_verdicts_agree": f"{agree}/{compared}" if live else None,
            "ours_total_s": round(ours_total, 3),
            "porcupine_total_s": round(theirs_total, 3),
            "files_with_baseline": len(ratios),
            "ratio_total": round(ours_paired / theirs_total, 2) if theirs_total else None,
            "ratio_median": round(statistics.median(ratios), 2) if ratios else None,
        }
    by_time = sorted(files, key=lambda f: -f["ours_s"])[:worst]
    by_ratio = sorted((f for f in files if f["ratio"]), key=lambda f: -f["ratio"])[:worst]
    baseline: dict[str, Any] = {
        "kind": "live" if live else "stored",
        "compiled_loop": FAST,
        "load_1m_ours": round(load_ours, 2),
    }
    if live:
        baseline.update(
            {k: live[k] for k in ("go", "build_s", "run_s", "load_before", "load_after")}
        )
    elif live_error:
        baseline["live_error"] = live_error
    return {
        "baseline": baseline,
        "corpora": per_corpus,
        "all_verdicts_match": all(f["match"] for f in files),
        "porcupine_verdicts_differ": [
            f
            for f in files
            if f["porcupine_verdict"] is not None and f["porcupine_verdict"] is not f["verdict"]
        ],
        "files_checked": len(files),
        "slowest_files": by_time,
        "worst_ratio_files": by_ratio,
        "mismatches": [f for f in files if not f["match"]],
    }
