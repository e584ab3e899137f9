"""Interrupt soak: campaigns killed at random moments, and what the next run finds.

For each of N interrupts: start ``splitbrain run`` (faults on, the correct
reference node) on a lab, wait a random time (setup included), send SIGINT,
SIGTERM or SIGKILL (a third each, in turn), wait for the harness to exit, and
scan the hosts for leftovers (harness/run/cleanup.py). Then run a short campaign
with no faults under *another* test name (the case of issue #15, where the old
cluster on the same ports answered instead), record its verdict, and scan again.

The figures that must hold: 0 leftovers after every following run, and every
following run VALID (an INVALID one is a false alarm). Leftovers right after a
SIGKILL are expected (nothing can heal in a killed process); after INT or TERM
they must be 0 too.

Usage (needs root and a lab; not part of the test suite)::

    splitbrain lab up --name crash --subnet 127.79.0 --nodes 5
    PYTHONPATH=. python benchmarks/interrupts.py --lab crash -n 50 --output soak.json
    splitbrain lab down --name crash

It prints one JSON line per interrupt and a JSON summary at the end; ``--output``
writes the whole document after every interrupt, so a cut-short soak keeps its data.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from soak_campaigns import NEMESES, SIGNALS, WORKLOADS, harness_env, run_argv, scan, start_run


def _verdict(store: Path, name: str) -> str:
    try:
        res = json.loads((store / name / "latest" / "results.json").read_text())
    except (OSError, ValueError):
        return "NO-RESULT"
    return {True: "VALID", False: "INVALID"}.get(res.get("valid"), "UNKNOWN")


def one(
    i: int,
    *,
    lab: str,
    store: Path,
    rng: random.Random,
    time_limit: float,
    follow_s: float,
    min_wait: float,
    max_wait: float,
    signals: tuple[str, ...] = SIGNALS,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> dict[str, Any]:
    sig = signals[i % len(signals)]
    nemesis = NEMESES[(i // len(SIGNALS)) % len(NEMESES)]
    workload = WORKLOADS[i % len(WORKLOADS)]
    name = f"soak-{workload}-{i}"
    wait = rng.uniform(min_wait, max_wait)
    proc = start_run(
        store / f"{name}.log",
        run_argv(
            lab=lab,
            workload=workload,
            nemesis=nemesis,
            time_limit=time_limit,
            store=store,
            name=name,
        ),
        env=env,
        cwd=cwd,
    )
    started = time.monotonic()
    try:
        proc.wait(timeout=wait)
        exited_early = True
    except subprocess.TimeoutExpired:
        exited_early = False
        os.kill(proc.pid, getattr(signal, f"SIG{sig}"))
    try:
        rc = proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    exit_s = time.monotonic() - started - (wait if not exited_early else 0.0)
    after_signal = scan(lab)
    follow = f"soak-follow-{i}"
    t0 = time.monotonic()
    fr = subprocess.run(
        run_argv(
            lab=lab,
            workload="register",
            nemesis="none",
            time_limit=follow_s,
            store=store,
            name=follow,
            interval=None,
        ),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )
    clean_start = {}
    try:
        cs = json.loads((store / follow / "latest" / "clean-start.json").read_text())
        clean_start = {"healed": sum(len(v) for v in cs["before"].values()), "clean": cs["clean"]}
    except (OSError, ValueError, KeyError):
        pass
    after_follow = scan(lab)
    return {
        "i": i,
        "signal": sig,
        "nemesis": nemesis,
        "workload": workload,
        "wait_s": round(wait, 2),
        "exited_before_signal": exited_early,
        "rc": rc,
        "exit_after_signal_s": round(exit_s, 1),
        "leftovers_after_signal": len(after_signal),
        "leftover_kinds_after_signal": dict(Counter(x.split(": ")[1] for x in after_signal)),
        "follow_rc": fr.returncode,
        "follow_verdict": _verdict(store, follow),
        "follow_clean_start": clean_start,
        "follow_s": round(time.monotonic() - t0, 1),
        "leftovers_after_follow": len(after_follow),
        "after_follow": after_follow[:10],
        "follow_error": fr.stderr.strip().splitlines()[-1:] if fr.returncode else [],
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_sig = {s: [r for r in rows if r["signal"] == s] for s in SIGNALS}
    return {
        "interrupts": len(rows),
        "by_signal": {s: len(v) for s, v in by_sig.items()},
        "leftovers_after_signal": {
            s: sum(r["leftovers_after_signal"] for r in v) for s, v in by_sig.items()
        },
        "runs_with_leftovers_after_signal": {
            s: sum(1 for r in v if r["leftovers_after_signal"]) for s, v in by_sig.items()
        },
        "leftovers_after_following_run": sum(r["leftovers_after_follow"] for r in rows),
        "following_verdicts": dict(Counter(r["follow_verdict"] for r in rows)),
        "false_alarms": sum(1 for r in rows if r["follow_verdict"] == "INVALID"),
        "healed_by_clean_start": sum(r["follow_clean_start"].get("healed", 0) for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lab", default="crash")
    ap.add_argument("-n", "--interrupts", type=int, default=50)
    ap.add_argument("--time-limit", type=float, default=20.0, help="load seconds per campaign")
    ap.add_argument("--follow-s", type=float, default=4.0, help="load seconds of the following run")
    ap.add_argument("--min-wait", type=float, default=1.0)
    ap.add_argument("--max-wait", type=float, default=22.0)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--store", default=None, help="results store (default: a temporary dir)")
    ap.add_argument("--output", default=None, help="write the JSON document here")
    ap.add_argument(
        "--signals",
        default=",".join(SIGNALS),
        help="signals to send, in turn (e.g. KILL for a SIGKILL-only soak)",
    )
    ap.add_argument(
        "--harness-path",
        default=None,
        help="checkout the runs use, as PYTHONPATH and working directory "
        "(e.g. an older commit, for a baseline)",
    )
    ap.add_argument(
        "--deadline", default=None, help="stop starting interrupts after this UTC time (HH:MM)"
    )
    args = ap.parse_args(argv)
    store = Path(args.store or tempfile.mkdtemp(prefix="sb-soak-"))
    store.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    started = time.time()
    signals = tuple(x.strip().upper() for x in args.signals.split(",") if x.strip())
    env = harness_env(args.harness_path)
    for i in range(args.interrupts):
        if args.deadline and time.strftime("%H:%M", time.gmtime()) >= args.deadline:
            break
        row = one(
            i,
            lab=args.lab,
            store=store,
            rng=rng,
            time_limit=args.time_limit,
            follow_s=args.follow_s,
            min_wait=args.min_wait,
            max_wait=args.max_wait,
            signals=signals,
            env=env,
            cwd=args.harness_path,
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
        doc = {
            "command": " ".join([sys.executable, *sys.argv]),
            "store": str(store),
            "seconds": round(time.time() - started),
            "summary": summarize(rows),
            "runs": rows,
        }
        if args.output:
            Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    summary = summarize(rows)
    print(json.dumps({"summary": summary}, indent=1))
    bad = summary["false_alarms"] or summary["leftovers_after_following_run"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
