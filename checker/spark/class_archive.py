"""The driver JVM's class-data archive: Spark's classes mapped at start, not parsed.

A Spark driver loads about 17,000 classes from three hundred jars, at its start and
then during the first check. On this machine that was half of the session's start
(5-6 s) and a sixth of the driver's planning time on the 1.86M-record history
(benchmarks/README.md). HotSpot can map classes from an archive made once for one
JVM and one class path (AppCDS). ``splitbrain spark-archive`` makes it, from the
classes a real check loads; every later session whose JVM and class path match maps
it.

The JVM itself validates the archive: its own build, and every jar of the class path
by size and time. A stale archive (pyspark reinstalled, another JDK) or a damaged one
is ignored with ``-Xshare:auto``, HotSpot's default: the session then starts as fast
as it did without one, never differently. Making the archive takes a minute on two
cores, so it is never made behind a user's back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.core.errors import CheckerError

__all__ = ["archive_path", "java_options", "build", "ENV"]

ENV = "SPLITBRAIN_SPARK_CLASS_ARCHIVE"
"""A path to use instead of the per-install default, or ``off``."""

_HISTORIES = ((20_000, "mixed"), (250_000, "append"))
"""What the class list is recorded from: a small history (checked interpreted, without
code generation) and one above tuning's code-generation threshold, so that both paths'
classes are listed."""


def archive_path() -> Path | None:
    """Where this install's archive lives (None: switched off by :data:`ENV`).

    Keyed by pyspark's location and version and the ``java`` on PATH, so that two
    installs never overwrite each other's archive; which JVM an archive fits is the
    JVM's own check, not this name's.
    """
    env = os.environ.get(ENV, "")
    if env.lower() == "off":
        return None
    if env:
        return Path(env)
    import shutil

    try:
        import pyspark
    except ImportError as e:
        raise CheckerError(f"the spark engine needs pyspark: {e}") from None

    java = os.environ.get("JAVA_HOME") or shutil.which("java") or ""
    key = f"{Path(pyspark.__file__).resolve().parent}|{os.path.realpath(java)}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "splitbrain" / f"spark-{pyspark.__version__}-{digest}.jsa"


_HOOKS = ("-javaagent", "-agentlib", "-agentpath", "-XX:StartFlightRecording")
"""Options that install a class-file load hook: HotSpot 17 crashed (SIGSEGV in
``KlassFactory::check_shared_class_file_load_hook``) loading archived Spark classes
with a flight recording on, so a JVM given one of these maps no archive."""


def java_options(others: Sequence[str] = ()) -> list[str]:
    """The driver JVM's options for the archive, given its ``others``: none when there
    is no archive, or when ``others`` install a class-file load hook (:data:`_HOOKS`)."""
    p = archive_path()
    if p is None or not p.is_file() or any(o.startswith(_HOOKS) for o in others):
        return []
    return [f"-XX:SharedArchiveFile={p}"]


def build(
    out: Path | None = None,
    *,
    histories: Sequence[tuple[int, str]] = _HISTORIES,
    timeout: float = 900.0,
) -> dict[str, Any]:
    """Record the classes a real check loads, then dump them into an archive at ``out``.

    The class list is written by a JVM of its own, in a child process, as the JVM
    exits; the dump runs that JVM's ``java`` over that JVM's class path, so the two
    match by construction. The archive replaces ``out`` only once complete.
    ``histories`` are (records, workload) of the synthetic histories checked.
    """
    out = out or archive_path()
    if out is None:
        raise CheckerError(f"the class archive is switched off ({ENV}=off)")
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="splitbrain-cds-") as tmp:
        listing = Path(tmp) / "classes.lst"
        env = dict(os.environ)
        env[ENV] = "off"  # list what a JVM without an archive loads
        extra = env.get("SPLITBRAIN_SPARK_JAVA_OPTIONS", "")
        env["SPLITBRAIN_SPARK_JAVA_OPTIONS"] = f"{extra} -XX:DumpLoadedClassList={listing}".strip()
        child = subprocess.run(
            [sys.executable, "-m", "checker.spark.class_archive", tmp, json.dumps(histories)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if child.returncode != 0:
            raise CheckerError(f"recording the classes a check loads failed: {_tail(child)}")
        jvm = json.loads(child.stdout.strip().splitlines()[-1])
        _wait_gone(int(jvm["pid"]), 60.0)
        if not listing.is_file() or listing.stat().st_size == 0:
            raise CheckerError(f"the driver JVM wrote no class list ({listing})")
        lines = listing.read_text().splitlines()
        classes = sum(1 for line in lines if line.strip() and not line.startswith("#"))
        # Per process: two builds at once must not write into one file.
        partial = out.with_name(f"{out.name}.{os.getpid()}.partial")
        dump = subprocess.run(
            [
                jvm["java"],
                "-Xshare:dump",
                f"-XX:SharedClassListFile={listing}",
                f"-XX:SharedArchiveFile={partial}",
                "-XX:+UseParallelGC",
                *jvm["modules"],
                "-cp",
                jvm["classpath"],
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if dump.returncode != 0 or not partial.is_file():
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
            raise CheckerError(f"java -Xshare:dump failed ({dump.returncode}): {_tail(dump)}")
        os.replace(partial, out)
    return {
        "archive": str(out),
        "bytes": out.stat().st_size,
        "classes_listed": classes,
        "java": jvm["java"],
        "seconds": round(time.monotonic() - t0, 1),
    }


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    """A failed child's last words, on one line."""
    return " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])


def _wait_gone(pid: int, limit: float) -> None:
    """Wait for the listing JVM to exit: it writes its list on the way out."""
    end = time.monotonic() + limit
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > end:
            raise CheckerError(f"the listing JVM (pid {pid}) did not exit within {limit:.0f} s")
        time.sleep(0.1)


def _record(tmp: str, histories: Sequence[tuple[int, str]]) -> None:
    """The child's part: check a small and a larger synthetic history, report the JVM.

    The JVM writes its class list as it exits, after this process has (pyspark's
    gateway ends with its Python); the parent waits for that pid to be gone.
    """
    from pyspark.sql import SparkSession

    from checker.spark import check_spark
    from checker.synth import write_history

    for n, workload in histories:
        path = Path(tmp) / f"{workload}-{n}.parquet"
        write_history(path, n, workload=workload)
        check_spark(str(path))
    spark = SparkSession.getActiveSession()
    if spark is None:
        raise CheckerError("no active Spark session after the checks")
    jvm: Any = spark.sparkContext._jvm
    system = jvm.java.lang.System
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    info = {
        "pid": int(jvm.java.lang.ProcessHandle.current().pid()),
        "java": str(Path(system.getProperty("java.home")) / "bin" / "java"),
        "classpath": system.getProperty("java.class.path"),
        "modules": [a for a in args if a.startswith("--add-modules")],
    }
    print(json.dumps(info))


if __name__ == "__main__":
    _record(sys.argv[1], [(int(n), str(w)) for n, w in json.loads(sys.argv[2])])
