"""One quiet SparkSession per process.

Starting a JVM costs about ten seconds here, so the session is made once and
reused by every check in the process. Spark is loud: log4j lines, progress bars,
warnings about the host name. A user running ``splitbrain check`` should see
the verdict, not that, so the JVM is started with its stdout and stderr pointing
at a log file in a private work directory (the JVM inherits those descriptors
when pyspark spawns it), unless ``SPLITBRAIN_SPARK_VERBOSE=1``.

Everything binds to 127.0.0.1: the driver must never listen on, or advertise,
another address of this machine.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.core.errors import CheckerError

__all__ = [
    "get_session",
    "stop_session",
    "work_dir",
    "driver_jvm_pid",
    "driver_java_options",
    "DEFAULT_MASTER",
]

DEFAULT_MASTER = "local[*]"

_lock = threading.Lock()
_session: Any = None
_master: str | None = None
_work: Path | None = None


def _verbose() -> bool:
    return os.environ.get("SPLITBRAIN_SPARK_VERBOSE", "") not in ("", "0", "false", "no")


def work_dir() -> Path:
    """A private directory for Spark's scratch files, temp histories and its log; removed at exit."""
    global _work
    if _work is None:
        _work = Path(tempfile.mkdtemp(prefix="splitbrain-spark-"))
        atexit.register(shutil.rmtree, _work, True)
    return _work


@contextlib.contextmanager
def _jvm_output_to(path: Path) -> Iterator[None]:
    """Point fds 1 and 2 at ``path`` while the JVM is spawned, so it inherits the file."""
    if _verbose():
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


def driver_java_options(rows: int | None = None, master: str = DEFAULT_MASTER) -> list[str]:
    """The driver JVM's options: ours (some by the ``rows`` of the check starting it), then
    the user's (``SPLITBRAIN_SPARK_JAVA_OPTIONS``), which win where they collide."""
    from checker.spark.class_archive import java_options
    from checker.spark.tuning import jit_options

    try:
        user = shlex.split(os.environ.get("SPLITBRAIN_SPARK_JAVA_OPTIONS", ""))
    except ValueError as e:
        raise CheckerError(f"SPLITBRAIN_SPARK_JAVA_OPTIONS: {e}") from None
    # Throughput over pauses: G1's GC threads took 6-8% of a check's CPU here, ParallelGC half that.
    return ["-XX:+UseParallelGC", *java_options(user), *jit_options(rows, master), *user]


def _builder(master: str, work: Path, rows: int | None = None) -> Any:
    from pyspark.sql import SparkSession

    mem = os.environ.get("SPLITBRAIN_SPARK_DRIVER_MEMORY", "1g")
    b = (
        SparkSession.builder.master(master)
        .appName("splitbrain-check")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", mem)
        .config("spark.driver.extraJavaOptions", " ".join(driver_java_options(rows, master)))
        .config("spark.local.dir", str(work / "scratch"))
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("SPLITBRAIN_SPARK_PARTITIONS", "4"))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.python.worker.reuse", "true")
        # Pools share the cores fairly: a check's background job (a pool of its own) does
        # not hold back the small jobs its driver thread submits meanwhile.
        .config("spark.scheduler.mode", "FAIR")
    )
    if not master.startswith("local"):
        b = b.config(
            "spark.executor.memory", os.environ.get("SPLITBRAIN_SPARK_EXECUTOR_MEMORY", "1g")
        )
    return b


def get_session(master: str | None = None, *, rows: int | None = None) -> Any:
    """The process's SparkSession on ``master`` (``local[*]`` by default).

    Asking for another master than the running session's stops that one first:
    pyspark keeps one SparkContext per process. ``rows``, the size of the check
    asking, shapes a JVM started now (:func:`checker.spark.tuning.jit_options`); a
    running session is reused whatever its first check's size was.
    """
    global _session, _master
    master = master or DEFAULT_MASTER
    with _lock:
        if _session is not None and _master == master:
            return _session
        if _session is not None:
            _stop_locked()
        try:
            import pyspark  # noqa: F401
        except ImportError as e:
            raise CheckerError(f"the spark engine needs pyspark: {e}") from None
        work = work_dir()
        (work / "scratch").mkdir(exist_ok=True)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        log = work / "spark.log"
        try:
            with _jvm_output_to(log):
                spark = _builder(master, work, rows).getOrCreate()
                spark.sparkContext.setLogLevel("WARN" if _verbose() else "ERROR")
        except Exception as e:  # the JVM's own reason is in its log
            tail = ""
            with contextlib.suppress(OSError):
                tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            raise CheckerError(
                f"could not start Spark on {master}: {e.__class__.__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''} {tail}".strip()
            ) from None
        _session, _master = spark, master
        atexit.register(_stop_at_exit)
        return spark


def _stop_locked() -> None:
    global _session, _master
    if _session is not None:
        with contextlib.suppress(Exception):
            _session.stop()
    _session, _master = None, None


def stop_session() -> None:
    with _lock:
        _stop_locked()


def _stop_at_exit() -> None:
    """The session's end as the process ends: stopped as :func:`stop_session` does,
    except that pyspark's accumulator server is closed instead of shut down.

    Shutting it down waits for the server's poll loop to notice, half a second after
    every ``splitbrain check --engine spark``; the loop runs on a daemon thread, which
    ends with the process anyway.
    """
    with _lock:
        if _session is None:
            return
        sc = _session.sparkContext
        server, sc._accumulatorServer = getattr(sc, "_accumulatorServer", None), None
        _stop_locked()
    if server is not None:
        with contextlib.suppress(OSError):
            server.server_close()
            if isinstance(server.server_address, str):  # a Unix socket's path
                os.unlink(server.server_address)


def driver_jvm_pid() -> int | None:
    """The pid of the driver JVM when this process spawned it (local mode and client mode)."""
    if _session is None:
        return None
    try:
        return int(_session.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:
        return None
