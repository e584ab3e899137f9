"""A Spark executor killed mid-check: the verdict is the undisturbed check's, or unknown.

A real standalone cluster (a master and two one-core workers, from pyspark's own
``spark-class``) checks a history twice through ``splitbrain check --engine spark``:
once undisturbed, once with one executor JVM (``CoarseGrainedExecutorBackend``)
SIGKILLed as soon as it has finished a task of the first pass's stage (the window that
pairs ops and counts them), while the stage's other tasks still run. Spark then
reruns what the dead executor held; the two results must be the same, field for field
(timings aside), or the second must be unknown naming the lost executor. Never another
valid or invalid.

The stage is cut into four tasks (``SPLITBRAIN_SPARK_PARTITIONS=4``) so that the
kill falls between two of them: the finished task's output dies with its executor
and is recomputed, which is exactly what counting by accumulators gets wrong.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from checker.spark.standalone import standalone_cluster
from checker.synth import write_history

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


def _first_split_stage(app: Path) -> int:
    """The first stage of the undisturbed check's application ``app`` that ran in more
    than one task: the pairing window, its observed counts and the kept frame (the stage
    before it reads the small Parquet file in one task and shuffles it by process). A
    check's plan does not depend on the cluster, so the disturbed check's stage of that
    number is the same one."""
    stages = {
        int(m.group(1))
        for log in app.glob("*/stderr")
        for m in re.finditer(r"Running task [1-9]\d*\.\d+ in stage (\d+)\.0 ", log.read_text())
    }
    assert stages, f"no stage of {app} ran in several tasks"
    return min(stages)


EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
TIMINGS = ("elapsed_s",)
HUNG_S = 1800
"""A check taking longer has hung: an 8000-record mixed check took over 900 s undisturbed
on two cores under a load of 20 to 45, an append history of 4000 records far less."""


def _executor_pid(app: str, executor: str) -> int | None:
    """The pid of executor ``executor`` of application ``app``, from ``/proc``."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in args]
        if EXECUTOR_CLASS not in argv:
            continue
        pairs = dict(zip(argv, argv[1:], strict=False))
        if pairs.get("--app-id") == app and pairs.get("--executor-id") == executor:
            return int(d.name)
    return None


def _check(
    url: str, hist: Path, out: Path, apps: Path, *, kill: re.Pattern[str] | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """``splitbrain check`` of ``hist`` on the cluster in a process of its own; with
    ``kill``, the first executor of this check's application whose log matches it is
    SIGKILLed (what was killed, and when, is returned)."""
    before = set(apps.glob("app-*")) if apps.exists() else set()
    env = dict(
        os.environ,
        SPLITBRAIN_SPARK_EXECUTOR_MEMORY="512m",
        SPLITBRAIN_SPARK_PARTITIONS="4",
    )
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "check",
            str(hist),
            "--engine",
            "spark",
            "--spark-master",
            url,
            "--output",
            str(out),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed: dict[str, Any] | None = None
    try:
        while proc.poll() is None:
            if time.monotonic() - t0 > HUNG_S:
                raise AssertionError(f"the check hung (over {HUNG_S} s)")
            if kill is not None and killed is None:
                for log in sorted(apps.glob("app-*/*/stderr")):
                    app_dir = log.parent.parent
                    if app_dir in before:
                        continue
                    if not kill.search(log.read_text(errors="replace")):
                        continue
                    pid = _executor_pid(app_dir.name, log.parent.name)
                    if pid is None:
                        continue
                    os.kill(pid, signal.SIGKILL)
                    killed = {
                        "app": app_dir.name,
                        "executor": log.parent.name,
                        "pid": pid,
                        "at_s": round(time.monotonic() - t0, 1),
                    }
                    break
            time.sleep(0.05)
        stdout, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), killed


def _without_timings(res: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in res.items() if k not in TIMINGS}


def _same_or_unknown(calm: dict[str, Any], hit: dict[str, Any], killed: dict[str, Any]) -> None:
    """The disturbed check said what the undisturbed one said, or unknown naming the
    lost executor."""
    if hit["valid"] == "unknown" and calm["valid"] != "unknown":
        said = json.dumps(hit)
        assert f"executor {killed['executor']}" in said, said[:2000]
        return
    assert hit["valid"] == calm["valid"]
    assert hit.get("anomalies") == calm.get("anomalies")
    assert _without_timings(hit) == _without_timings(calm)


@pytest.mark.parametrize(
    ("anomaly", "exit_code"),
    [(None, 0), (["lost-ack", "duplicate-payload"], 1)],
    ids=["valid", "planted"],
)
def test_executor_killed_mid_check(
    tmp_path: Path, anomaly: list[str] | None, exit_code: int
) -> None:
    hist = tmp_path / "history.parquet"
    # Appends and log reads only: every stage of the log-safety check, none of the
    # linearizability search's Python workers, whose start alone takes minutes under load.
    write_history(hist, 4000, workload="append", anomaly=anomaly, seed=8)
    work = tmp_path / "cluster"
    apps = work / "work"
    with standalone_cluster(2, work, cores=1, memory="1g") as (url, _pids):
        cp, _ = _check(url, hist, tmp_path / "calm.json", apps)
        assert cp.returncode == exit_code, cp.stdout + cp.stderr
        calm = json.loads((tmp_path / "calm.json").read_text())
        if anomaly:
            assert set(calm["anomalies"]) == set(anomaly)
        (calm_app,) = apps.glob("app-*")
        stage = _first_split_stage(calm_app)
        finished = re.compile(rf"Finished task \d+\.\d+ in stage {stage}\.0 ")
        cp, killed = _check(url, hist, tmp_path / "hit.json", apps, kill=finished)
        assert killed is not None, "no executor finished a pairing task: nothing was killed"
        assert cp.returncode in (exit_code, 2), cp.stdout + cp.stderr
        hit = json.loads((tmp_path / "hit.json").read_text())
        # The executor really died mid-check, and the cluster replaced it.
        app = apps / killed["app"]
        assert _executor_pid(killed["app"], killed["executor"]) is None
        assert len([d for d in app.iterdir() if d.is_dir()]) >= 3, sorted(app.iterdir())
    _same_or_unknown(calm, hit, killed)
