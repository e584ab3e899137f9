"""``splitbrain bench report``: how long a big run's report takes to build and to open.

The page is only useful if it opens quickly on the histories people have: the target
is a 100k-op run opening in headless Chromium in at most 3 s, measured from the
navigation's start to the moment the page's script has drawn its first frame (it
sets ``window.__reportReady`` to ``performance.now()``). The history is synthetic
(:func:`checker.synth.records`, an append workload with samplers and one planted
lost ack), spread over time at ``step_ms`` per record and given nemesis periods,
then checked by the local engine, so the page shows a real anomaly from a real
checker. Also reported: the page's size and the time and peak memory of building it,
and the machine's load average (a shared machine makes the figure noisy).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["make_run", "open_in_chromium", "report_bench", "measure"]

FAULT_CYCLE = ("partition", "kill", "clock")

_CHILD = """
import sys
from harness.report.html import write_report
write_report(sys.argv[1])
with open("/proc/self/status") as fh:
    print(next(line.split()[1] for line in fh if line.startswith("VmHWM:")))
"""


def make_run(run: Path, ops: int, *, step_ms: float = 1.0, seed: int = 0) -> int:
    """A run directory with a synthetic history of about ``ops`` client ops, checked.

    Every ``fault_every`` seconds a fault (partition, kill, clock in turn) starts, and
    stops a third of the way to the next one. Returns the number of history records.
    """
    from checker.dispatch import check_history
    from checker.synth import records

    run.mkdir(parents=True, exist_ok=True)
    step = int(step_ms * 1e6)
    n_records = 2 * ops
    total_ns = n_records * step
    fault_every = max(step * 50, total_ns // 12)
    faults: list[tuple[int, str, str]] = []
    for k, t in enumerate(range(fault_every // 2, total_ns, fault_every)):
        kind = FAULT_CYCLE[k % len(FAULT_CYCLE)]
        faults.append((t, f"start-{kind}", kind))
        faults.append((t + fault_every // 3, f"stop-{kind}", kind))
    index = 0
    with open(run / "history.jsonl", "w", encoding="utf-8") as fh:

        def write(t: int, typ: str, proc: Any, f: str, key: Any, val: str, node: Any, err: Any):
            nonlocal index
            fh.write(
                f'{{"index":{index},"time":{t},"type":"{typ}","process":{json.dumps(proc)},'
                f'"f":"{f}","key":{json.dumps(key)},"value":{val},"node":{json.dumps(node)},'
                f'"error":{json.dumps(err)}}}\n'
            )
            index += 1

        fi = 0
        for i, (typ, proc, f, key, val, node, err) in enumerate(
            records(n_records, anomaly="lost-ack", seed=seed, nodes=5, concurrency=10)
        ):
            t = (i + 1) * step
            while fi < len(faults) and faults[fi][0] <= t:
                ft, ff, kind = faults[fi]
                detail = json.dumps({"target": "one", "nodes": ["n2"]})
                write(ft, "invoke", "nemesis", ff, None, detail, None, None)
                write(ft + step // 2, "info", "nemesis", ff, None, detail, None, None)
                fi += 1
            write(t, typ, proc, f, key, val, node, err)
    (run / "test.json").write_text(
        json.dumps(
            {
                "name": f"bench-report-{ops}",
                "db": "synthetic",
                "workload": "append",
                "nemesis": list(FAULT_CYCLE),
                "concurrency": 10,
                "nodes": [f"n{i}" for i in range(1, 6)],
            }
        )
    )
    results = check_history(run / "history.jsonl", engine="local")
    (run / "results.json").write_text(json.dumps(results, default=str))
    return index


def chromium_options(profile: Path, *, width: int = 1400, height: int = 1000) -> Any:
    """Headless Chromium as Debian ships it, with nothing that reaches the network."""
    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        opts.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(flag)
    return opts


def open_in_chromium(
    page: Path, *, timeout_s: float = 60.0, screenshot: Path | None = None
) -> float:
    """Open ``page`` in a fresh headless Chromium; milliseconds from navigation to first frame."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="sb-chromium-") as prof:
        driver_bin = shutil.which("chromedriver")
        service = Service(driver_bin) if driver_bin else Service()
        browser = webdriver.Chrome(service=service, options=chromium_options(Path(prof)))
        try:
            browser.set_page_load_timeout(timeout_s)
            browser.get(page.resolve().as_uri())
            deadline = time.monotonic() + timeout_s
            ready = None
            while time.monotonic() < deadline:
                ready = browser.execute_script("return window.__reportReady || null")
                if ready is not None:
                    break
                time.sleep(0.05)
            if ready is None:
                raise RuntimeError(f"{page}: the page never set window.__reportReady")
            errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
            if errors:
                raise RuntimeError(f"{page}: script errors: {errors[:3]}")
            if screenshot is not None:
                browser.save_screenshot(str(screenshot))
            return float(ready)
        finally:
            browser.quit()


def measure(ops: int, workdir: Path, *, opens: int = 3) -> dict[str, Any]:
    """Build and open the report of a ``ops``-op synthetic run; the figures as a dict."""
    run = workdir / f"run-{ops}"
    t0 = time.monotonic()
    records = make_run(run, ops)
    made = time.monotonic() - t0
    # The report is built in a child, as `splitbrain report` runs, which then reads its own
    # peak (VmHWM of its own address space: getrusage's figure would include this
    # process's size at the fork, which the checker has made large).
    t0 = time.monotonic()
    got = subprocess.run(
        [sys.executable, "-c", _CHILD, str(run)], check=True, capture_output=True, text=True
    )
    built = time.monotonic() - t0
    peak_kib = int(got.stdout.split()[-1])
    page = run / "report.html"
    times = [open_in_chromium(page) for _ in range(opens)]
    return {
        "ops": ops,
        "history_records": records,
        "history_seconds": round(made, 2),
        "report_build_seconds": round(built, 2),
        "report_peak_rss_mib": round(peak_kib / 1024),
        "page_bytes": page.stat().st_size,
        "open_to_ready_ms": [round(t) for t in times],
        "open_to_ready_ms_best": round(min(times)),
        "open_to_ready_ms_median": round(sorted(times)[len(times) // 2]),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "page": str(page),
    }


def report_bench(ops: int, opens: int, keep: Path | None, limit_ms: float) -> dict[str, Any]:
    """The figures of ``splitbrain bench report`` (:mod:`harness.cli.bench`): the report of
    a synthetic ``ops``-op run built and its opening timed in headless Chromium; ``ok``
    when the median opening is within ``limit_ms``."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        out = measure(ops, keep, opens=opens)
    else:
        with tempfile.TemporaryDirectory(prefix="sb-bench-report-") as tmp:
            out = measure(ops, Path(tmp), opens=opens)
            out["page"] = None
    out["limit_ms"] = limit_ms
    out["ok"] = out["open_to_ready_ms_median"] <= limit_ms
    return out
