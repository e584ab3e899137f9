"""What the two soaks of the harness (``interrupts.py``, ``harness_faults.py``) share: the
campaigns they start, the lab scan for leftovers after each, and the checkout they run.

Both run from the repository root as scripts (``PYTHONPATH=. python benchmarks/...``), so
this module is imported by its bare name, from the scripts' own directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SIGNALS = ("INT", "TERM", "KILL")
NEMESES = ("partition,clock,pause,kill", "partition,clock,freeze,loss")
WORKLOADS = ("register", "append")

__all__ = ["SIGNALS", "NEMESES", "WORKLOADS", "cli", "run_argv", "start_run", "scan", "harness_env"]


def cli(*args: str) -> list[str]:
    """``splitbrain ARGS`` with this interpreter (the checkout of ``$PYTHONPATH``)."""
    return [sys.executable, "-m", "harness.cli", *args]


def run_argv(
    *,
    lab: str,
    workload: str,
    nemesis: str,
    time_limit: float,
    store: Path,
    name: str,
    interval: str | None = "1",
) -> list[str]:
    """One ``splitbrain run`` of a soak: no progress bar, faults every ``interval`` s
    (None: the run's default)."""
    argv = ["run", "--lab", lab, "-w", workload, "--nemesis", nemesis]
    argv += ["--time-limit", str(time_limit)]
    if interval is not None:
        argv += ["--nemesis-interval", interval]
    argv += ["--store", str(store), "--name", name, "--no-progress"]
    return cli(*argv)


def start_run(
    log: Path, argv: list[str], *, env: dict[str, str] | None, cwd: str | None
) -> subprocess.Popen[bytes]:
    """Starts ``argv`` (a :func:`run_argv`) in its own session (a signal to its group
    reaches every child), its output to ``log``."""
    with open(log, "wb") as fh:
        return subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=cwd,
        )


def scan(lab: str) -> list[str]:
    """The leftovers the lab's hosts hold now, one line each (harness/run/cleanup.py)."""
    from harness.inventory.resolve import lab_hosts
    from harness.run.cleanup import format_leftovers, scan_hosts

    return format_leftovers(scan_hosts(lab_hosts(lab)))


def harness_env(path: str | None) -> dict[str, str] | None:
    """The environment of runs from another checkout (``--harness-path``); None: ours."""
    return {**os.environ, "PYTHONPATH": path} if path else None
