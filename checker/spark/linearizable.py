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

import json
import pickle
import time
from collections.abc import Iterator
from typing import Any

from checker.results import key_order, shape_linearizable
from harness.core.checker import CheckConfig

_loads = json.loads

__all__ = ["check_linearizable_spark", "check_linearizable_registered", "LIN_COLUMNS"]

LIN_COLUMNS = ("key", "index", "type", "process", "f", "value", "node")
"""What a task needs of a record: the key, the history order, and the op itself."""

_OUT = ("kind", "n", "steps", "res")
"""Rows a task sends back: ``kind`` 0 is its summary (keys checked and search steps
of the keys that were linearizable), ``kind`` 1 is one key's whole result, pickled
(a key that failed, timed out or raised)."""


def _value(text: str | None) -> Any:
    """A value column's JSON text decoded, with the texts register histories are made of
    (``null`` and non-negative integers) done without the JSON decoder, which costs a
    tenth of a record's whole search there. Anything else goes through ``json.loads``;
    integers with a sign or leading zeros too, so that what is not JSON still fails."""
    if text is None or text == "null":
        return None
    if text.isascii() and text.isdigit() and (text[0] != "0" or len(text) == 1):
        return int(text)
    return _loads(text)


def _ops_of(rows: list[Any]) -> list[Any]:
    """One key's sorted :data:`LIN_COLUMNS` rows as :class:`~harness.core.history.Op`\\ s."""
    from harness.core.history import NEMESIS, Op

    return [
        Op(
            type=typ,
            process=proc if proc == NEMESIS else int(proc),
            f=f,
            value=_value(val),
            key=key,
            index=index,
            node=node,
        )
        for key, index, typ, proc, f, val, node in rows
    ]


def _check_key(
    ops: list[Any], model: Any, params: dict[str, Any], model_name: str, deadline: float | None
) -> tuple[int, int, dict[str, Any] | None]:
    """One key: ``(parts, steps, None)`` when linearizable, else ``(0, 0, result)`` with
    :func:`checker.linearizable.check_linearizable`'s whole result for the key.

    The common case takes the short road (partition, one search per part, through the
    compiled pass straight from the ops where it applies, as the local engine does),
    with no counterexample machinery; anything else is checked again the long way, so
    failures, timeouts and errors come back exactly as the local engine words them.
    ``deadline`` is wall-clock time: executors do not share the driver's monotonic clock.
    """
    from checker.linearizable import (
        check_linearizable,
        make_entries,
        partition_ops,
        prepared_search,
        search,
    )

    left = None if deadline is None else deadline - time.time()
    try:
        if left is None or left > 0:
            mono = None if left is None else time.monotonic() + left
            parts = partition_ops(ops, model, keys=True)
            steps = 0
            for name in sorted(parts, key=key_order):
                gen = prepared_search(parts[name], model, clients_only=True)
                if gen is None:
                    gen = search(make_entries(parts[name], model), model)
                verdict, info = _drive(gen, mono)
                if verdict is not True:
                    break
                steps += info["steps"]
            else:
                return len(parts), steps, None
        timeout = None if deadline is None else max(0.001, deadline - time.time())
        return 0, 0, check_linearizable(ops, model, timeout=timeout, keys=True)
    except Exception as e:  # noqa: BLE001 - reported as the local engine's check_safe does
        return 0, 0, {"error": f"{type(e).__name__}: {e}"}


def _drive(gen: Any, deadline: float | None) -> tuple[bool | str, dict[str, Any]]:
    """A search generator run to its end, or ``"unknown"`` past ``deadline`` (monotonic), as
    :func:`checker.linearizable.check_partition` runs one."""
    try:
        while True:
            next(gen)
            if deadline is not None and time.monotonic() > deadline:
                gen.close()
                return "unknown", {"reason": "timeout"}
    except StopIteration as stop:
        return stop.value


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
        parts, s, res = _check_key(_ops_of(group), model, params, model_name, deadline)
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
    errors = [r["error"] for _, r in results if "error" in r]
    if errors:
        return {"valid": "unknown", "error": errors[0]}
    failures: list[Any] = []
    unknown: list[Any] = []
    cex = None
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


def check_linearizable_registered(
    session: Any, records: Any, config: CheckConfig
) -> dict[str, Any]:
    """The linearizable checker's Spark implementation (registered in
    :data:`checker.linearizable.LINEARIZABLE`): one part's records, by key."""
    from checker.linearizable import model_of

    name, params = model_of(config)
    return check_linearizable_spark(session, records, name, params, config.timeout, config.keys)
