"""``splitbrain bench soak``: does a long unpaced run keep the harness's memory flat,
and does its report stay cheap?

Issue #14 asks for hour-long campaigns of millions of ops whose harness memory
stays flat, whose history is written as it goes and converted to Parquet without
being held in memory, and whose report still renders quickly. An hour does not fit
a test session, so this runs the real runner (workers, validation, live JSONL
history, Parquet conversion) for ``--seconds`` at ``--rate 0`` and samples this
process's resident memory once a second against the history's size, so the growth
per million ops can be read off and extrapolated. ``--lab`` runs the reference node
(append workload, status samplers) on a lab; without it a null client and a DB
that does nothing make the harness run as fast as it can, the most ops per second.
The report is then rendered by ``splitbrain report`` in a child process, whose
wall time and peak memory are measured apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click

from harness.core.layout import HISTORY_JSONL
from harness.run.roles import RECHECK

__all__ = ["RssSampler", "growth_per_million", "soak_bench"]

MIB = 1 << 20


def _status_kib(field: str, pid: int | str = "self") -> int | None:
    """One ``kB`` field of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``); None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int:
    """This process's resident set size now."""
    return (_status_kib("VmRSS") or 0) * 1024


class RssSampler:
    """(seconds, RSS bytes, history bytes) once per ``interval`` while a run goes on."""

    def __init__(self, store_root: Path, *, interval: float = 1.0) -> None:
        self.store_root = store_root
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="rss", daemon=True)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _history_bytes(self) -> int:
        files = {p.resolve() for p in self.store_root.glob(f"*/*/{HISTORY_JSONL}")}  # no `latest`
        return sum(p.stat().st_size for p in files)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(
                (round(time.monotonic() - self._t0, 1), rss_bytes(), self._history_bytes())
            )


def growth_per_million(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y (MiB) over x (millions of records); None if x never moves."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def _run(
    store_root: Path, seconds: float, concurrency: int, lab: str | None
) -> tuple[Path, dict[str, Any]]:
    from harness.core.spec import TestSpec
    from harness.core.workload import Workload
    from harness.run.runner import RunOptions, run_test

    spec = TestSpec(
        name="bench-soak",
        nodes=tuple(f"n{i}" for i in range(1, 6)),
        workload="append",
        nemesis=(),
        time_limit=seconds,
        concurrency=concurrency,
        rate=0.0,
        seed=1,
    )
    opts = RunOptions(check=False, progress=False, recovery_s=0.0)
    if lab is None:
        from harness.control.memory import MemoryRemote
        from harness.core.remote import Host
        from harness.dbs.null import NullDB
        from workloads.null import CountingGenerator, NullClient

        hosts = [Host(name=n, address=f"127.0.0.{i}") for i, n in enumerate(spec.nodes, 1)]
        wl = Workload(name="null", client=NullClient(), generator=CountingGenerator())
        res = run_test(
            spec,
            hosts,
            store_root=str(store_root),
            db=NullDB(),
            workload=wl,
            options=opts,
            connect_fn=MemoryRemote,
        )
    else:
        from dataclasses import replace

        from harness.inventory.resolve import resolve_hosts

        hosts = resolve_hosts(lab=lab, nodes_file=None, vagrant=None, docker=False, insecure=False)
        spec = replace(spec, nodes=tuple(h.name for h in hosts))
        res = run_test(spec, hosts, store_root=str(store_root), options=opts)
    if res.interrupted:
        raise click.ClickException(f"soak run failed: {res.reason}")
    return res.store_dir, res.results


def _child(args: list[str], run_dir: Path) -> dict[str, Any]:
    """``splitbrain ARGS RUN`` in a child: its exit code, wall time and peak RSS.

    The peak is the child's own ``VmHWM``, read while it runs: ``ru_maxrss`` of
    children would count this process's resident set at the fork (the Parquet
    conversion's, hundreds of MiB) as the child's. A JVM the child starts (Spark)
    is not counted: it is the child's child.
    """
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: no one drains it meanwhile
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.cli", *args, str(run_dir)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
        peak_kib = 0
        while proc.poll() is None:
            peak_kib = max(peak_kib, _status_kib("VmHWM", proc.pid) or 0)
            time.sleep(0.05)
        wall = time.monotonic() - t0
        err.seek(0)
        stderr = err.read()
    return {
        "exit": proc.returncode,
        "stderr_tail": stderr.strip()[-500:] or None,
        "seconds": round(wall, 1),
        # Sampled every 50 ms: a peak in the child's last moments may be missed.
        "peak_rss_mib": round(peak_kib / 1024, 1) if peak_kib else None,
    }


def _report(run_dir: Path) -> dict[str, Any]:
    """``splitbrain report`` on the run: what it cost and how big the output is."""
    got = _child(["report"], run_dir)
    files = [p for p in run_dir.iterdir() if p.name == "report.html" or p.suffix == ".png"]
    return {
        "ok": got["exit"] == 0,
        "error": None if got["exit"] == 0 else got["stderr_tail"],
        "seconds": got["seconds"],
        "peak_rss_mib": got["peak_rss_mib"],
        "bytes": sum(p.stat().st_size for p in files),
    }


def _check(run_dir: Path, engine: str) -> dict[str, Any]:
    """``splitbrain check --engine E`` on the stored run: verdict, time, driver memory."""
    got = _child(["check", "--engine", engine], run_dir)
    results = run_dir / RECHECK  # check never rewrites the run's own results.json
    written = json.loads(results.read_text()) if results.exists() else {}
    verdict = {0: "valid", 1: "invalid", 2: "unknown"}.get(got["exit"], "error")
    return {
        "engine": engine,
        "engine_used": written.get("engine"),
        "verdict": verdict,
        "checker_seconds": written.get("elapsed_s"),
        "error": got["stderr_tail"] if verdict == "error" else None,
        "seconds": got["seconds"],
        "driver_peak_rss_mib": got["peak_rss_mib"],
    }


def soak_bench(
    *,
    seconds: float,
    concurrency: int,
    lab: str | None,
    report: bool,
    check_engine: str | None,
    store_root: str | None,
) -> dict[str, Any]:
    """The figures of ``splitbrain bench soak`` (:mod:`harness.cli.bench`): a long
    unpaced run, harness RSS against ops recorded, Parquet, report cost."""
    with tempfile.TemporaryDirectory(prefix="sb-soak-") as tmp:
        root = Path(store_root or tmp)
        load_before = os.getloadavg()
        rss0 = rss_bytes()
        sampler = RssSampler(root).start()
        t0 = time.monotonic()
        try:
            run_dir, _ = _run(root, seconds, concurrency, lab)
        finally:
            sampler.stop()
        wall = time.monotonic() - t0
        hist = run_dir / HISTORY_JSONL
        with open(hist, "rb") as fh:
            records = sum(1 for _ in fh)
        size = hist.stat().st_size
        per_record = size / records if records else 0
        # The load phase: samples while the history still grows (conversion comes after).
        last = max((b for _, _, b in sampler.samples), default=0)
        load = [x for x in sampler.samples if 0 < x[2] < last]
        after = [x for x in sampler.samples if x[2] >= last]
        pts = [(b / per_record / 1e6, r / MIB) for _, r, b in load if per_record]
        half = [p for p in pts if p[0] >= pts[-1][0] / 2] if pts else []
        slope = growth_per_million(half)
        timeline = [
            {
                "s": s,
                "rss_mib": round(r / MIB, 1),
                "records": round(b / per_record) if per_record else 0,
            }
            for s, r, b in sampler.samples[:: max(1, len(sampler.samples) // 20)]
        ]
        out: dict[str, Any] = {
            "benchmark": "soak",
            "target": f"lab {lab} (reference node, append)" if lab else "null client",
            "seconds": seconds,
            "concurrency": concurrency,
            "records": records,
            "history_mib": round(size / MIB, 1),
            "records_per_s": round(records / seconds, 1),
            "wall_seconds": round(wall, 1),
            "rss_mib_at_start": round(rss0 / MIB, 1),
            "rss_mib_peak_load": round(max((r for _, r, _ in load), default=0) / MIB, 1),
            "rss_mib_peak_after_load": round(max((r for _, r, _ in after), default=0) / MIB, 1),
            "rss_mib_per_million_records_second_half": None if slope is None else round(slope, 2),
            "rss_timeline": timeline,
            "parquet_mib": round((run_dir / "history.parquet").stat().st_size / MIB, 1)
            if (run_dir / "history.parquet").exists()
            else None,
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }
        if check_engine is not None:
            out["check"] = _check(run_dir, check_engine)
        if report:
            out["report"] = _report(run_dir)
    return out
