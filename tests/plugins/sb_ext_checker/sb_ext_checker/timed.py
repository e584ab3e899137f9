"""A checker that reads op times and errors, with no Spark code of its own (issue 45)."""

from __future__ import annotations

from typing import Any

from harness.api import ALL, CheckConfig, CheckerSpec, OpShape, PairedHistory

LIMIT_NS = 1_000_000_000


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    return ALL if shape.f == "write" else None


def _check(history: PairedHistory, config: CheckConfig) -> dict[str, Any]:
    """A write that took over a second is slow; every failed one's error is noted."""
    slow, errors = [], []
    for inv, done in history.pairs("write"):
        took = done.time - inv.time
        if took > LIMIT_NS:
            slow.append({"indexes": [inv.index, done.index], "took_ns": took})
        if done.error:
            errors.append({"index": done.index, "error": done.error})
    return {
        "valid": not slow,
        "anomalies": {"slow-write": slow} if slow else {},
        "notes": {"write-error": errors} if errors else {},
    }


SLOW_WRITES = CheckerSpec(
    name="slow-writes",
    claims=_claims,
    anomalies=("slow-write",),
    notes=("write-error",),
    local=_check,
)
"""Judges times the local engine passes; the Spark driver must pass the same."""
