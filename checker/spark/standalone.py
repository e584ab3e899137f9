"""A throwaway standalone Spark cluster on 127.0.0.1, for benchmarks that compare worker counts.

The pyspark wheel carries everything a standalone cluster needs (``bin/spark-class``
with the master and worker classes), so no Spark install is required: a master and
``workers`` worker JVMs are spawned in their own sessions, and stopped by process
group when the block ends, whatever happens inside it. Everything binds to the
loopback address.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["standalone_cluster"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _registered(log: Path, workers: int) -> bool:
    try:
        return log.read_text(errors="replace").count("Registering worker") >= workers
    except OSError:
        return False


@contextlib.contextmanager
def standalone_cluster(
    workers: int, work: Path, *, cores: int = 1, memory: str = "1g", limit: float = 180.0
) -> Iterator[tuple[str, list[int]]]:
    """``(master URL, pids of the cluster's JVMs)`` while a master and ``workers`` workers of
    ``cores`` cores each run; the pids let a memory sampler leave the cluster out of the
    driver's figures."""
    import pyspark

    home = Path(pyspark.__file__).parent
    work.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(work),
        SPARK_WORKER_DIR=str(work / "work"),
        PYSPARK_PYTHON=sys.executable,
        SPARK_NO_DAEMONIZE="1",
    )
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            p = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        procs.append(p)
        return p

    port = _free_port()
    mlog = work / "master.log"
    try:
        spawn(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(_free_port()),
            ],
            mlog,
        )
        for i in range(workers):
            spawn(
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(_free_port()),
                    "--cores",
                    str(cores),
                    "--memory",
                    memory,
                    f"spark://127.0.0.1:{port}",
                ],
                work / f"worker{i}.log",
            )
        end = time.monotonic() + limit
        while not _registered(mlog, workers):
            if time.monotonic() > end or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"standalone cluster did not come up; see {work}")
            time.sleep(0.5)
        yield f"spark://127.0.0.1:{port}", [p.pid for p in procs]
    finally:
        for p in reversed(procs):
            _stop(p)
