"""The three filters a mutant goes through, each one real: pytest, then the lab twice.

``unit_tests`` runs the node's own unit tests (``tests/node_impl``, not the slow
ones) in a subprocess whose ``PYTHONPATH`` and working directory put the mutant
tree before the real ``node_impl``, so the tests and every node process they
start import the mutant. ``lab_run`` runs one test on the lab through the
ordinary runner.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness.core.nemesis import NemesisPackage
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.run.campaign import user_stopped
from harness.run.options import RunOptions
from harness.run.runner import run_test
from harness.zoo.mutants.record import StageResult

__all__ = ["REPO", "Stopped", "unit_tests", "lab_run"]

REPO = Path(__file__).resolve().parents[3]
"""The checkout whose ``tests/node_impl`` are the node's unit tests."""


class Stopped(Exception):
    """The user interrupted a run: no further mutants."""


FAST_FIRST = ("test_quorum.py", "test_voting.py", "test_store.py", "test_wire.py", "test_config.py")
"""Pure test files run before the cluster ones: with ``-x`` most kills come in seconds."""


def _test_files(tests: Path) -> list[str]:
    files = sorted(p.name for p in tests.glob("test_*.py"))
    first = [f for f in FAST_FIRST if f in files]
    return [str(tests / f) for f in first + [f for f in files if f not in first]]


def _first_failure(out: str) -> str:
    for line in out.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            kind, _, test = line.split(" - ")[0].partition(" ")
            at = test.find("tests/node_impl/")  # pytest names it relative to the tree
            return f"{kind} {test[at:] if at >= 0 else test}"[:200]
    tail = [ln for ln in out.splitlines() if ln.strip()]
    return tail[-1][:200] if tail else "no output"


def unit_tests(tree_root: Path, *, timeout: float, python: str = sys.executable) -> StageResult:
    """``pytest tests/node_impl -m 'not slow' -x`` against the tree; passed = all green.

    A run past ``timeout`` is killed (its whole process group) and counts as a
    failure: a mutant that hangs the node's own tests is caught by them.
    """
    tests = REPO / "tests" / "node_impl"
    if not tests.is_dir():
        raise FileNotFoundError(f"the node's unit tests are not at {tests}")
    cmd = [
        python, "-m", "pytest", *_test_files(tests), "-x", "-q", "-m", "not slow",
        "-p", "no:cacheprovider", "--import-mode=append", "-o", "addopts=",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree_root), str(REPO)]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=tree_root,  # `python -m node_impl` in the tests resolves here first
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return StageResult(False, f"unit tests hung past {timeout:g} s", time.monotonic() - t0)
    except BaseException:
        # interrupted: the tests run in their own session, so end them here
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    secs = time.monotonic() - t0
    if proc.returncode == 0:
        return StageResult(True, "unit tests pass", secs)
    if proc.returncode == 5:
        raise RuntimeError(f"pytest collected no tests in {tests}:\n{out[-2000:]}")
    return StageResult(False, _first_failure(out), secs)


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def lab_run(
    spec: TestSpec,
    hosts: Sequence[Host],
    *,
    store_root: str | Path,
    package: NemesisPackage | None = None,
    min_ok: int = 0,
) -> StageResult:
    """One run on the lab; passed = VALID with at least ``min_ok`` ok ops.

    Raises :class:`Stopped` when the user interrupted it.
    """
    t0 = time.monotonic()
    result = run_test(
        spec,
        hosts,
        store_root=store_root,
        options=RunOptions(progress=False),
        nemesis_package=package,
    )
    secs = time.monotonic() - t0
    if user_stopped(result):
        raise Stopped(result.reason or "interrupted")
    res = result.results
    valid = res.get("valid", "unknown")
    verdict: bool | str = valid if isinstance(valid, bool) else "unknown"
    ok = int((res.get("run") or {}).get("ok") or 0)
    kinds = tuple(sorted(res.get("anomalies") or {}))
    passed = verdict is True and ok >= min_ok
    if verdict is True and not passed:
        detail = f"only {ok} ok ops (< {min_ok})"
    elif verdict is True:
        detail = f"VALID, {ok} ok ops"
    elif verdict is False:
        detail = "INVALID: " + ", ".join(kinds)
    else:
        detail = f"UNKNOWN: {res.get('reason') or res.get('error') or result.reason or '?'}"
    return StageResult(
        passed,
        detail[:300],
        secs,
        verdict=verdict,
        store=_rel(result.store_dir),
        ok_ops=ok,
        kinds=kinds,
    )
