"""Linearizability on Spark: each key's ops go to one task, searched there by
:mod:`checker.linearizable` (the local engine's search, unchanged).

Linearizability is compositional, so keys are independent: the cluster spreads
them over its cores, and only per-key verdicts and at most one counterexample
come back. The driver merges them as :func:`checker.linearizable.check_linearizable`
would have listed them, then shapes the result as the local engine does
(:func:`checker.results.shape_linearizable`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from checker.results import key_order, shape_linearizable
from checker.spark.input import OP_COLUMNS, op_of

__all__ = ["check_linearizable_spark"]


def _check_part(
    item: tuple[Any, Iterable[Sequence[Any]]],
    model_name: str,
    params: dict[str, Any],
    deadline: float | None,
    keys: bool,
) -> tuple[Any, dict[str, Any]]:
    """Runs on an executor: one key's ops through the local engine's search.

    The deadline is wall-clock time (executors do not share the driver's
    monotonic clock); a crash comes back as an error, as the local engine's
    :func:`checker.base.check_safe` reports it, rather than failing the job.
    """
    from checker.linearizable import check_linearizable
    from checker.models import get_model

    key, rows = item
    ops = sorted((op_of(r) for r in rows), key=lambda o: o.index)
    m = get_model(model_name, **params)
    timeout = None if deadline is None else max(0.001, deadline - time.time())
    try:
        res = check_linearizable(ops, m, timeout=timeout, keys=keys)
    except Exception as e:  # noqa: BLE001 - reported as the local engine's check_safe does
        return key, {"error": f"{type(e).__name__}: {e}"}
    return key, res


def check_linearizable_spark(
    spark: Any,
    recs: Any,
    model_name: str,
    params: dict[str, Any],
    timeout: float | None,
    keys: bool,
) -> dict[str, Any]:
    """One linearizability checker's result (uncapped), parts spread over the cluster by key.

    ``recs`` holds the checker's op records (:data:`checker.spark.input.OP_COLUMNS`
    at least). The whole check shares one ``timeout``, as the local engine's does.
    """
    from checker.models import get_model

    m = get_model(model_name, **params)
    deadline = None if timeout is None else time.time() + timeout
    n_part = max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
    rdd = recs.select(*OP_COLUMNS).rdd.map(lambda r: ((r[4] if keys else None), tuple(r)))
    results = (
        rdd.groupByKey(numPartitions=n_part)
        .map(lambda kv: _check_part(kv, model_name, params, deadline, keys))
        .collect()
    )
    errors = [r["error"] for _, r in results if "error" in r]
    if errors:
        return {"valid": "unknown", "error": errors[0]}
    failures: list[Any] = []
    unknown: list[Any] = []
    cex = None
    n_parts = steps = 0
    for _key, r in sorted(results, key=lambda kr: key_order(kr[0])):
        n_parts += r["keys"]
        steps += r["steps"]
        failures.extend(r["failures"])
        unknown.extend(r["unknown_keys"])
        if r["counterexample"] is not None and cex is None:
            cex = r["counterexample"]
    failures.sort(key=key_order)
    if failures:
        unknown = []
    valid: bool | str = False if failures else ("unknown" if unknown else True)
    res: dict[str, Any] = {
        "valid": valid,
        "model": m.name,
        "keys": n_parts,
        "failures": failures,
        "unknown_keys": sorted(unknown, key=key_order),
        "unchecked_keys": [],
        "counterexample": cex,
        "steps": steps,
    }
    return shape_linearizable(res, m)
