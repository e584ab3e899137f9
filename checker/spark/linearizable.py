"""Linearizability on Spark: each key's ops go to one task, searched there by
:mod:`checker.linearizable` (the local engine's search, unchanged).

Linearizability is compositional, so keys are independent: the cluster spreads
them over its cores, and only per-key verdicts and at most one counterexample
come back. The driver merges them as :func:`checker.linearizable.check_linearizable`
would have listed them, then shapes the result as the local engine does
(:func:`checker.results.shape_linearizable`).

How the ops reach the search matters more than the search at scale (10M records
over 100k keys): the records are hash-partitioned by key and sorted by
``(key, index)`` in the JVM (its shuffle and sort, not Python's), and reach each
Python worker once, as rows of seven narrow columns. A worker walks the
sorted stream and searches each key as soon as its last record has passed, so it
holds one key's ops at a time. Only keys that are not plainly linearizable send a
row back (the rest are counted in one summary row per task), so the driver
collects a few rows, whatever the history's size. The former path (an RDD of
pickled rows through ``groupByKey``) spent most of its time in pickling and
holding every key's rows as Python tuples. (``mapInArrow`` would hand the rows
over as Arrow batches, but pyspark demands pandas for it, which this project does
not otherwise need.)
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import Any

from checker.linearizable import KEY_COLUMNS, check_key, merge_keys, ops_of_rows
from harness.core.checker import CheckConfig

__all__ = ["check_linearizable_spark", "check_linearizable_registered", "LIN_COLUMNS"]

LIN_COLUMNS = KEY_COLUMNS
"""What a task needs of a record: the key, the history order, and the op itself."""

_OUT = ("kind", "n", "steps", "res")
"""Rows a task sends back: ``kind`` 0 is its summary (keys checked and search steps
of the keys that were linearizable), ``kind`` 1 is one key's whole result, pickled
(a key that failed, timed out or raised)."""


def _task(
    rows: Iterator[Any], model_name: str, params: dict[str, Any], deadline: float | None
) -> Iterator[tuple[int, int, int, bytes | None]]:
    """Runs on an executor over one partition's rows, sorted by ``(key, index)``: each key
    is searched as soon as the next key's first row shows that it is complete."""
    from checker.models import get_model

    model = get_model(model_name, **params)
    n = steps = 0
    found: list[bytes] = []
    group: list[Any] = []

    def flush() -> None:
        nonlocal n, steps
        key = group[0][0]
        res: dict[str, Any] | None
        try:
            ops = ops_of_rows(group)
        except Exception as e:  # noqa: BLE001 - a value that is not JSON: unknown, as before
            parts, s, res = 0, 0, {"error": f"{type(e).__name__}: {e}"}
        else:
            parts, s, res = check_key(ops, model, deadline)
        n += parts
        steps += s
        if res is not None:
            found.append(pickle.dumps((key, res)))

    for row in rows:
        if group and row[0] != group[0][0]:
            flush()
            group = []
        group.append(row)
    if group:
        flush()
    yield 0, n, steps, None
    for res in found:
        yield 1, 0, 0, res


def _whole(
    recs: Any, model_name: str, params: dict[str, Any], deadline: float | None
) -> list[tuple[Any, dict[str, Any]]]:
    """``keys=False``: the whole history is one object, searched in one task as before."""
    from pyspark.sql import functions as F

    from checker.linearizable import check_linearizable
    from checker.models import get_model
    from checker.spark.input import op_columns, op_of

    def part(rows: Iterator[Any]) -> Iterator[tuple[Any, dict[str, Any]]]:
        ops = sorted((op_of(tuple(r)) for r in rows), key=lambda o: o.index)
        timeout = None if deadline is None else max(0.001, deadline - time.time())
        try:
            yield (
                None,
                check_linearizable(
                    ops, get_model(model_name, **params), timeout=timeout, keys=False
                ),
            )
        except Exception as e:  # noqa: BLE001 - reported as the local engine's check_safe does
            yield None, {"error": f"{type(e).__name__}: {e}"}

    return recs.select(*op_columns(F, recs)).coalesce(1).rdd.mapPartitions(part).collect()


def check_linearizable_spark(
    spark: Any,
    recs: Any,
    model_name: str,
    params: dict[str, Any],
    timeout: float | None,
    keys: bool,
) -> dict[str, Any]:
    """One linearizability checker's result (uncapped), parts spread over the cluster by key.

    ``recs`` holds the checker's op records (:data:`LIN_COLUMNS` at least). The whole
    check shares one ``timeout``, as the local engine's does.
    """
    from checker.models import get_model

    m = get_model(model_name, **params)
    deadline = None if timeout is None else time.time() + timeout
    if not keys:
        results = _whole(recs, model_name, params, deadline)
        n_parts = steps = 0
    else:
        n_part = max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
        sorted_recs = (
            recs.select(*LIN_COLUMNS)
            .repartition(n_part, "key")
            .sortWithinPartitions("key", "index")
        )
        rows = sorted_recs.rdd.mapPartitions(
            lambda it: _task(it, model_name, params, deadline)
        ).collect()
        n_parts = sum(r[1] for r in rows if r[0] == 0)
        steps = sum(r[2] for r in rows if r[0] == 0)
        results = [pickle.loads(r[3]) for r in rows if r[0] == 1]
    return merge_keys(n_parts, steps, results, m)


def check_linearizable_registered(
    session: Any, records: Any, config: CheckConfig
) -> dict[str, Any]:
    """The linearizable checker's Spark implementation (registered in
    :data:`checker.linearizable.LINEARIZABLE`): one part's records, by key."""
    from checker.linearizable import model_of

    name, params = model_of(config)
    return check_linearizable_spark(session, records, name, params, config.timeout, config.keys)
