"""The driver JVM's compiler follows the size of the check that starts it."""

from __future__ import annotations

import pytest

from checker.spark import class_archive
from checker.spark.session import driver_java_options
from checker.spark.tuning import SHORT_CHECK_ROWS, jit_options

C1 = "-XX:TieredStopAtLevel=1"


def test_short_local_checks_compile_with_c1_only() -> None:
    assert jit_options(3_000, "local[*]") == [C1]
    assert jit_options(SHORT_CHECK_ROWS, "local[2]") == [C1]
    # big histories, an unknown size, or a cluster (whose executors do the work): defaults
    assert jit_options(SHORT_CHECK_ROWS + 1, "local[*]") == []
    assert jit_options(None, "local[*]") == []
    assert jit_options(3_000, "spark://127.0.0.1:7077") == []


def test_the_users_options_come_last_and_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.ENV, "off")
    monkeypatch.setenv("SPLITBRAIN_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=4")
    opts = driver_java_options(1_000, "local[*]")
    assert opts == ["-XX:+UseParallelGC", C1, "-XX:TieredStopAtLevel=4"]
    assert driver_java_options(None) == ["-XX:+UseParallelGC", "-XX:TieredStopAtLevel=4"]
