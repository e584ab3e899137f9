"""An external checker: every value is written at most once per key.

Workloads that write unique values (Jepsen's register workloads do) rely on it to tell
writes apart; a client that retries a write under the same value breaks it. The whole
checker is one registered object, :data:`UNIQUE_WRITES`: which ops it takes, its
options, its anomaly kind, its implementation and its example histories.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.core.checker import ALL, CheckConfig, CheckerSpec, Example, OpShape
from harness.core.op import Op
from harness.core.options import option
from harness.core.paired import PairedHistory

__all__ = ["UNIQUE_WRITES", "UniqueWritesOptions"]


@dataclass(frozen=True)
class UniqueWritesOptions:
    tolerated: int = option(0, "repeated writes accepted before the history is invalid", minimum=0)


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    """Keyed writes, whatever their outcome (a failed write still used its value)."""
    return ALL if shape.f == "write" and shape.keyed else None


def _check(history: PairedHistory, config: CheckConfig) -> dict[str, Any]:
    first: dict[tuple[Any, str], int] = {}
    repeated = []
    for inv, _ in history.pairs("write"):
        seen = first.setdefault((inv.key, repr(inv.value)), inv.index)
        if seen != inv.index:
            repeated.append({"key": inv.key, "value": inv.value, "indexes": [seen, inv.index]})
    bad = len(repeated) > config.options.tolerated
    return {
        "valid": not bad,
        "anomalies": {"repeated-write": repeated} if bad else {},
        "stats": {"writes": len(history.pairs("write")), "repeated": len(repeated)},
    }


def _examples() -> Mapping[str, Example]:
    ops: list[Op] = []
    for value in (1, 2, 1):
        inv = Op("invoke", len(ops), "write", value, key="k", index=len(ops))
        ops += [inv, inv.replace(type="ok", index=len(ops) + 1)]
    return {
        "repeated": (ops, {}, ("repeated-write",)),
        "tolerated": (ops, {"options": {"unique-writes": {"tolerated": 1}}}, ()),
    }


UNIQUE_WRITES = CheckerSpec(
    name="unique-writes",
    claims=_claims,
    anomalies=("repeated-write",),
    options=UniqueWritesOptions,
    local=_check,
    examples=_examples,
    doc="every value is written at most once per key",
)
