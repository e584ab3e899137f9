"""Checkers the registry must refuse, each for one reason."""

from __future__ import annotations

from harness.core.checker import ALL, CheckerSpec

NO_LOCAL = CheckerSpec(
    name="no-local", claims=lambda shape, config: ALL, anomalies=("nothing",), local=None
)
"""No local implementation: the engines would have nothing to run on the driver."""

STEALS_A_KIND = CheckerSpec(
    name="steals-a-kind",
    claims=lambda shape, config: None,
    anomalies=("lost-ack",),
    local=lambda history, config: {"valid": True},
)
"""Claims an anomaly kind log safety already reports."""


def _spark_fails(session: object, records: object, config: object) -> dict[str, object]:
    raise RuntimeError("no executors left\nat some.jvm.Frame")


SPARK_FAILS = CheckerSpec(
    name="spark-fails",
    claims=lambda shape, config: ALL if shape.f == "write" else None,
    anomalies=("never",),
    local=lambda history, config: {"valid": True},
    spark=_spark_fails,
)
"""Runs locally, fails on Spark: the result names it, the other checkers still count."""
