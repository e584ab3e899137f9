"""A real standalone Spark cluster (master + worker JVMs on 127.0.0.1) checks a history.

The check runs in a subprocess through the CLI: one Python process holds one
SparkContext, and the module-wide local session of the other Spark tests must
not be swapped under them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

from checker.local import check_local
from checker.synth import generate, write_history

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, log: Path, limit: float = 120) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"JVM exited early: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"port {port} never opened: {log.read_text()[-2000:]}")


def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [str(SPARK_HOME / "bin" / "spark-class"), *args],
        env=env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,  # noqa: SIM115
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _check_on(
    mport: int, hist: Path, out: Path, env: dict[str, str], before: str = ""
) -> subprocess.CompletedProcess[str]:
    """``splitbrain check`` of ``hist`` on the cluster, in a process of its own (``before``:
    Python run first in that process)."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            f"{before}\nfrom harness.cli import main; main()",
            "check",
            str(hist),
            "--engine",
            "spark",
            "--spark-master",
            f"spark://127.0.0.1:{mport}",
            "--output",
            str(out),
        ],
        env=dict(env, SPLITBRAIN_SPARK_EXECUTOR_MEMORY="512m"),
        capture_output=True,
        text=True,
        timeout=400,
    )


def test_check_on_a_standalone_cluster(tmp_path: Path) -> None:
    hist = tmp_path / "history.parquet"
    write_history(hist, 1200, workload="mixed", anomaly=["lost-ack", "nonlinearizable"], seed=8)
    local = check_local(
        list(generate(1200, workload="mixed", anomaly=["lost-ack", "nonlinearizable"], seed=8))
    )
    assert local["valid"] is False
    env = dict(
        os.environ,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp_path),
        SPARK_WORKER_DIR=str(tmp_path / "work"),
        PYSPARK_PYTHON=sys.executable,
    )
    mport, mweb, wweb = _free_port(), _free_port(), _free_port()
    master = worker = None
    try:
        master = _spawn(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(mport),
                "--webui-port",
                str(mweb),
            ],
            tmp_path / "master.log",
            env,
        )
        _wait_port(mport, master, tmp_path / "master.log")
        worker = _spawn(
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--webui-port",
                str(wweb),
                "--cores",
                "1",
                "--memory",
                "1g",
                f"spark://127.0.0.1:{mport}",
            ],
            tmp_path / "worker.log",
            env,
        )
        out = tmp_path / "results.json"
        cp = _check_on(mport, hist, out, env)
        assert cp.returncode == 1, cp.stdout + cp.stderr
        res = json.loads(out.read_text())
        assert res["engine"] == "spark"
        assert res["valid"] == local["valid"]
        assert set(res["anomalies"]) == set(local["anomalies"]) == {"lost-ack", "nonlinearizable"}
        assert res["anomalies"]["lost-ack"] == local["anomalies"]["lost-ack"]
        # Quiet: no log4j or Spark progress noise reaches the user's terminal.
        assert "WARN" not in cp.stderr and "INFO" not in cp.stderr and "Stage" not in cp.stderr
        assert "verdict: INVALID" in cp.stdout
        # The work really went to the cluster's worker: it launched an executor.
        assert any((tmp_path / "work").glob("app-*/*/stderr"))
        # The same history as JSONL, converted in two parts (a directory) on the way in.
        twin = tmp_path / "history.jsonl"
        write_history(twin, 1200, workload="mixed", anomaly=["lost-ack", "nonlinearizable"], seed=8)
        out2 = tmp_path / "results-jsonl.json"
        cp = _check_on(
            mport,
            twin,
            out2,
            env,
            before="from harness.core import parquet; parquet.PARALLEL_BYTES = 2",
        )
        assert cp.returncode == 1, cp.stdout + cp.stderr
        assert json.loads(out2.read_text())["anomalies"] == res["anomalies"]
    finally:
        for p in (worker, master):
            if p is not None:
                _stop(p)
    assert all(p is None or p.poll() is not None for p in (worker, master))
