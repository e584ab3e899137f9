"""The driver JVM's class-data archive: made by ``splitbrain spark-archive``, mapped by
later sessions, and harmless when stale or damaged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checker.spark import class_archive
from checker.spark.session import driver_java_options
from harness.core.errors import CheckerError

_PROBE = """
import json, sys
from checker.spark import check_spark
from checker.spark.session import get_session
from checker.synth import write_history
write_history(sys.argv[1], 3000, workload="append")
r = check_spark(sys.argv[1])
mx = get_session().sparkContext._jvm.java.lang.management.ManagementFactory
print(json.dumps({"valid": r["valid"], "args": list(mx.getRuntimeMXBean().getInputArguments())}))
"""


def _probe(tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A fresh process (so a fresh JVM) checking a small history with ``env`` set."""
    return subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp / "h.parquet")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_archive_option_follows_the_file_and_the_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jsa = tmp_path / "a.jsa"
    monkeypatch.setenv(class_archive.ENV, str(jsa))
    assert class_archive.java_options() == []
    jsa.write_bytes(b"x")
    assert class_archive.java_options() == [f"-XX:SharedArchiveFile={jsa}"]
    monkeypatch.setenv("SPLITBRAIN_SPARK_JAVA_OPTIONS", "-Xlog:cds -Dx='a b'")
    assert driver_java_options() == [
        "-XX:+UseParallelGC",
        f"-XX:SharedArchiveFile={jsa}",
        "-Xlog:cds",
        "-Dx=a b",
    ]
    # a flight recording or an agent hooks class loading: no archive then (HotSpot 17 crashed)
    monkeypatch.setenv("SPLITBRAIN_SPARK_JAVA_OPTIONS", "-XX:StartFlightRecording=settings=profile")
    assert driver_java_options() == [
        "-XX:+UseParallelGC",
        "-XX:StartFlightRecording=settings=profile",
    ]
    monkeypatch.setenv("SPLITBRAIN_SPARK_JAVA_OPTIONS", "-Dx='unclosed")
    with pytest.raises(CheckerError, match="SPLITBRAIN_SPARK_JAVA_OPTIONS"):
        driver_java_options()
    monkeypatch.setenv(class_archive.ENV, "off")
    assert class_archive.archive_path() is None
    assert class_archive.java_options() == []


def test_the_default_path_is_per_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(class_archive.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    p = class_archive.archive_path()
    assert p is not None and p.parent == tmp_path / "splitbrain" and p.suffix == ".jsa"


@pytest.mark.slow  # three Spark JVMs and an archive build: minutes
@pytest.mark.spark
def test_a_built_archive_is_mapped_and_a_damaged_one_ignored(tmp_path: Path) -> None:
    """``-Xshare:on`` makes the JVM refuse to start unless it maps the archive: the
    archive made here fits the JVM and class path a session uses. A damaged archive under
    HotSpot's default (``auto``) costs nothing but the speed."""
    jsa = tmp_path / "spark.jsa"
    made = class_archive.build(jsa, histories=[(5000, "mixed")])  # the CLI's are larger
    assert jsa.is_file() and made["bytes"] == jsa.stat().st_size > 10 << 20
    assert made["classes_listed"] > 5000
    assert not list(tmp_path.glob("*.partial"))

    used = _probe(
        tmp_path, **{class_archive.ENV: str(jsa), "SPLITBRAIN_SPARK_JAVA_OPTIONS": "-Xshare:on"}
    )
    assert used.returncode == 0, used.stderr[-2000:]
    out = json.loads(used.stdout.strip().splitlines()[-1])
    assert out["valid"] is True
    assert f"-XX:SharedArchiveFile={jsa}" in out["args"] and "-Xshare:on" in out["args"]
    # the check started the JVM, and its size chose the compiler (checker.spark.tuning)
    assert "-XX:TieredStopAtLevel=1" in out["args"]

    bad = tmp_path / "bad.jsa"
    bad.write_bytes(os.urandom(1 << 16))
    ignored = _probe(tmp_path, **{class_archive.ENV: str(bad)})
    assert ignored.returncode == 0, ignored.stderr[-2000:]
    assert json.loads(ignored.stdout.strip().splitlines()[-1])["valid"] is True
