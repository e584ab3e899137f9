"""The set workload: adds that were acknowledged must survive, nothing else may appear.

One pure function per anomaly, each returning examples that carry sorted history
``indexes``.

* An add is a pair with ``f == "add"``; its element is the invocation's value.
* A read is an ``ok`` completion with ``f == "read"``, ``key`` null and a list
  value. The **final read** is the last such read in history order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from checker.families import is_set
from checker.models import freeze
from harness.core.checker import ALL, CheckConfig, CheckerSpec, OpShape
from harness.core.op import Op
from harness.core.paired import PairedHistory

__all__ = ["SET", "set_lost", "set_unexpected", "check_set"]


def _sorted(ops: Sequence[Op]) -> PairedHistory:
    return PairedHistory.of(ops)


def _adds(ops: Sequence[Op]) -> list[tuple[Op, Op | None]]:
    return PairedHistory.of(ops).pairs("add")


def _reads(ops: Sequence[Op]) -> list[Op]:
    return [
        op
        for op in ops
        if op.f == "read" and op.type == "ok" and op.key is None and isinstance(op.value, list)
    ]


def set_lost(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Acknowledged adds missing from the final read.

    One example per ok add whose element is not in the final read:
    ``{"element", "indexes": [add completion index, final read index]}``.
    Returns ``[]`` when there is no read (see :func:`check_set`: "unknown").
    """
    s = _sorted(ops)
    reads = _reads(s)
    if not reads:
        return []
    final = reads[-1]
    have = {freeze(x) for x in final.value}
    out = []
    for inv, comp in _adds(s):
        if comp is not None and comp.type == "ok" and freeze(inv.value) not in have:
            out.append({"element": inv.value, "indexes": sorted([comp.index, final.index])})
    return sorted(out, key=lambda e: e["indexes"])


def set_unexpected(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Elements read that no add ever tried to add.

    One example per such element, at the first read showing it:
    ``{"element", "indexes": [read index]}``.
    """
    s = _sorted(ops)
    attempted = {freeze(inv.value) for inv, _ in _adds(s)}
    first: dict[Any, tuple[Any, int]] = {}
    for r in _reads(s):
        for x in r.value:
            k = freeze(x)
            if k not in attempted and k not in first:
                first[k] = (x, r.index)
    out = [{"element": x, "indexes": [i]} for x, i in first.values()]
    return sorted(out, key=lambda e: e["indexes"])


_CHECKS = (("set-lost", set_lost), ("set-unexpected", set_unexpected))


def check_set(ops: Sequence[Op]) -> dict[str, Any]:
    """Both set anomalies as one result map.

    ``valid`` is False on any anomaly; ``"unknown"`` when ok adds exist but no
    read does (nothing to judge them by).
    """
    s = _sorted(ops)
    anomalies = {}
    for kind, fn in _CHECKS:
        ex = fn(s)
        if ex:
            anomalies[kind] = ex
    adds = _adds(s)
    reads = _reads(s)
    ok_adds = [inv for inv, c in adds if c is not None and c.type == "ok"]
    unknown = ["set-lost"] if ok_adds and not reads else []
    final = {freeze(x) for x in reads[-1].value} if reads else set()
    stats = {
        "adds": {
            t: sum(1 for _, c in adds if (c.type if c else "info") == t)
            for t in ("ok", "fail", "info")
        },
        "reads": len(reads),
        "final_size": len(final),
        "recovered": sum(
            1 for inv, c in adds if (c is None or c.type == "info") and freeze(inv.value) in final
        ),
    }
    valid: bool | str = False if anomalies else ("unknown" if unknown else True)
    return {"valid": valid, "anomalies": anomalies, "unknown": unknown, "stats": stats}


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    # A set model checks these ops for linearizability instead (checker.linearizable).
    return ALL if is_set(shape) and config.model != "set" else None


SET = CheckerSpec(
    name="set",
    claims=_claims,
    anomalies=tuple(kind for kind, _ in _CHECKS),
    local=lambda history, config: check_set(history),
    doc="acked adds survive to the final read, nothing else appears (add/read)",
    examples="checker.planted:sets",
)
