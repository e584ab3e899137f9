"""What `splitbrain run` finds with no option but the bug: the table of issue 25.

Runs the literal command a user types, ``splitbrain run --lab LAB --bug BUG --seed S``
(nothing else: the DB's default workload, the default fault deck, the default time
limit), for the correct node and each seeded bug of mode dledger, over a few seeds, and
appends one JSON line per run to ``--out`` (a run already there is skipped, so an
interrupted measurement resumes). ``--table`` prints the markdown table of docs/zoo.md
from such files (a run measured again, in a later file, replaces the earlier one).

    python benchmarks/run_defaults.py --lab L --seeds 501,502,503 --out runs.jsonl
    python benchmarks/run_defaults.py --table runs.jsonl [more.jsonl ...]
    python benchmarks/run_defaults.py --recheck runs.jsonl --root DIR --out rechecked.jsonl

``--recheck`` judges the stored runs again with this tree's checkers (``splitbrain
check``, which writes ``recheck.json`` beside each run and leaves its ``results.json``
alone) and writes the rows with the new verdicts, marked ``rechecked``: a checker added
after the campaigns ran is then measured on the same histories. ``--root`` is where
the runs' relative store paths were printed from.

``skip-fsync`` is left out by default (it needs lost un-fsynced writes, which only the
deck's disk script makes; add it with ``--bugs``). Several labs can share one list:
``--bugs`` takes a subset, and the tables merge.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CORRECT = "none"


def _bugs() -> list[str]:
    from node_impl.bugs import BUGS

    return [b for b in BUGS if b != "skip-fsync"]


def _done(out: Path) -> set[tuple[str, int]]:
    if not out.exists():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["bug"], r["seed"]) for r in rows}


def _result(store_line: str) -> dict[str, Any]:
    path = Path(store_line.removeprefix("store:").strip()).resolve() / "results.json"
    try:
        res = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"valid": "unknown", "kinds": [], "store": str(path.parent)}
    run = res.get("run") or {}
    return {
        "valid": res.get("valid"),
        "kinds": sorted(res.get("anomalies") or {}),
        "store": str(path.parent),
        "played": (run.get("deck") or {}).get("played"),
        "not_played": (run.get("deck") or {}).get("not_played"),
    }


def measure(lab: str, bugs: Sequence[str], seeds: Sequence[int], out: Path) -> None:
    done = _done(out)
    cli = [sys.executable, "-m", "harness.cli"]
    # Seed by seed, every bug each time: a measurement cut short still covers every bug.
    for seed in seeds:
        for bug in bugs:
            if (bug, seed) in done:
                continue
            cmd = [*cli, "run", "--lab", lab, "--seed", str(seed), "--no-progress"]
            if bug != CORRECT:
                cmd += ["--bug", bug]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
            store = next((x for x in proc.stdout.splitlines() if x.startswith("store:")), "")
            row = {
                "bug": bug,
                "seed": seed,
                "exit": proc.returncode,
                "seconds": round(time.monotonic() - t0, 1),
                "load": round(os.getloadavg()[0], 1),
                **(_result(store) if store else {"valid": "unknown", "kinds": []}),
            }
            if not store:
                row["error"] = (proc.stderr or proc.stdout)[-400:]
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


def recheck(files: Sequence[Path], root: Path, out: Path) -> None:
    cli = [sys.executable, "-m", "harness.cli", "check"]
    for path in files:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            store = Path(row.get("store") or "")
            store = store if store.is_absolute() else root / store
            if not (store / "history.jsonl").exists() and not (store / "history.parquet").exists():
                row["recheck_error"] = f"no history at {store}"
            else:
                proc = subprocess.run([*cli, str(store)], capture_output=True, text=True)
                try:
                    res = json.loads((store / "recheck.json").read_text())
                    row.update(
                        valid=res.get("valid"),
                        kinds=sorted(res.get("anomalies") or {}),
                        rechecked=True,
                        store=str(store),
                    )
                except (OSError, ValueError):
                    row["recheck_error"] = (proc.stderr or proc.stdout)[-400:]
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


def table(files: Sequence[Path]) -> str:
    # A run measured again (a later file, or later in one) replaces the earlier one.
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                last[(r["bug"], r["seed"])] = r
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in last.values():
        rows.setdefault(r["bug"], []).append(r)
    order = [CORRECT, *_bugs()] + sorted(set(rows) - {CORRECT, *_bugs()})
    out = ["| bug | found | seeds (verdict) | anomaly kinds | load |", "|---|---|---|---|---|"]
    for bug in order:
        runs = sorted(rows.get(bug, []), key=lambda r: r["seed"])
        if not runs:
            continue
        found = sum(1 for r in runs if r["valid"] is False)
        seeds = ", ".join(
            f"{r['seed']} ({ {True: 'valid', False: 'INVALID'}.get(r['valid'], 'unknown') })"
            for r in runs
        )
        kinds = sorted({k for r in runs for k in r.get("kinds") or []})
        loads = [r["load"] for r in runs]
        label = "(correct)" if bug == CORRECT else bug
        out.append(
            f"| {label} | {found}/{len(runs)} | {seeds} | {', '.join(kinds) or '-'} | "
            f"{min(loads):g}-{max(loads):g} |"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab")
    ap.add_argument("--seeds", default="501,502,503")
    ap.add_argument("--bugs", default=None, help="comma-separated; 'none' is the correct node")
    ap.add_argument("--out", type=Path, default=Path("run-defaults.jsonl"))
    ap.add_argument("--table", nargs="+", type=Path, default=None)
    ap.add_argument("--recheck", nargs="+", type=Path, default=None)
    ap.add_argument("--root", type=Path, default=Path.cwd())
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if args.recheck:
        recheck(args.recheck, args.root, args.out)
        return 0
    if not args.lab:
        ap.error("--lab is required to measure")
    bugs = args.bugs.split(",") if args.bugs else [CORRECT, *_bugs()]
    measure(args.lab, bugs, [int(s) for s in args.seeds.split(",")], args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
