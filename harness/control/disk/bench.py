"""The lazy fs's cost to the reference node: ``splitbrain bench node`` on a plain
directory and on a lazy fs, side by side in one run.

    python -m harness.control.disk.bench [--rounds 3] [--duration 10]

Rounds alternate plain / lazy so that the load of a shared machine falls on both
alike; the figure is the ratio of the medians. One daemon, mounted before the bench
starts, serves the whole bench directory: all three nodes and the in-process store
baseline (the worst case; on a lab each host has its own daemon).
The bench runs in a child process (``python -m harness.cli bench node``): this
module stays at its layer and imports no node code.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.control.disk import fsd

__all__ = ["main", "one_round"]


def _mount(d: Path, sync_backing: bool) -> subprocess.Popen[bytes]:
    flag = [] if sync_backing else ["--no-sync-backing"]
    p = subprocess.Popen(
        [sys.executable, fsd.__file__, "mount", str(d), *flag],
        stdout=subprocess.DEVNULL,
        stderr=open(str(d) + ".fsd.log", "ab"),  # noqa: SIM115 - the child owns it
    )
    deadline = time.monotonic() + 15
    while str(d) not in fsd.find_mounts():
        if time.monotonic() > deadline or p.poll() is not None:
            raise RuntimeError(f"lazy fs at {d} did not come up")
        time.sleep(0.05)
    return p


def one_round(lazy: bool, duration: float, sync_backing: bool = True) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="sb-lazybench-", dir="/var/tmp"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if lazy:
            procs.append(_mount(base, sync_backing))
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness.cli",
                "bench",
                "node",
                "--mode",
                "throughput",
                "--duration",
                str(duration),
                "--base-dir",
                str(base),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        res = json.loads(out)
        return {
            "lazy": lazy,
            "appends_per_s": res["results"][0]["acked_appends_per_s"],
            "p50_ms": res["results"][0]["latency_ms"]["p50"],
            "store_baseline": res["baseline"],
        }
    finally:
        for m in fsd.find_mounts():
            if m.startswith(str(base)):
                fsd.unmount(m)
        for p in procs:
            p.wait(timeout=30)
        subprocess.run(["rm", "-rf", str(base), str(base) + ".fsd.log"], check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument(
        "--no-sync-backing",
        action="store_true",
        help="the lazy fs records fsyncs without passing them to the disk below",
    )
    a = ap.parse_args(argv)
    rows = []
    for _ in range(a.rounds):
        for lazy in (False, True):
            rows.append(one_round(lazy, a.duration, not a.no_sync_backing))
            print(json.dumps(rows[-1]), file=sys.stderr)
    plain = statistics.median(r["appends_per_s"] for r in rows if not r["lazy"])
    lazy_ = statistics.median(r["appends_per_s"] for r in rows if r["lazy"])
    print(
        json.dumps(
            {
                "plain_appends_per_s": plain,
                "lazy_appends_per_s": lazy_,
                "ratio": round(lazy_ / plain, 3) if plain else None,
                "sync_backing": not a.no_sync_backing,
                "loadavg": os.getloadavg(),
                "rounds": rows,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
