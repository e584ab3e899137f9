"""The Spark engine: the local engine's checks, as DataFrame jobs, for histories too big
for one process.

The seams follow the passes a check makes:

- :mod:`checker.spark.input`: the history as Parquet with typed value columns;
- :mod:`checker.spark.pairing`: one window over every client record pairs
  completions with invocations, groups the ops and rejects malformed histories;
- :mod:`checker.spark.log_safety`: the log-safety checks over the paired frame;
- :mod:`checker.spark.linearizable`: per-key linearizability, a key per task;
- :mod:`checker.spark.tuning`: per-history session settings;
- :mod:`checker.spark.session`: the one quiet SparkSession of the process.

Results go through :mod:`checker.results`, as the local engine's do, so the two
engines' results.json files have the same shape, caps and verdicts. Nothing here
imports pyspark at module level: the package must load (and report Spark as
unavailable) where pyspark is not installed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any, TypeAlias

from checker.results import CAP, auto_linearizable, compose_results, unknown_result
from checker.spark.input import BASE_COLUMNS, OP_COLUMNS, op_of, to_parquet, with_typed
from checker.spark.linearizable import check_linearizable_spark
from checker.spark.log_safety import LogSafety
from checker.spark.pairing import Pairing, groups_of, labeled
from checker.spark.tuning import footer, tune
from harness.core.errors import CheckerError, HistoryError
from harness.core.history import NEMESIS, Op

__all__ = ["check_spark"]


def check_spark(
    source: str | os.PathLike[str] | Iterable[Op],
    *,
    model: Any = None,
    master: str | None = None,
    timeout: float | None = None,
    opts: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Check a history on Spark; same result shape and verdicts as the local engine.

    ``source`` is a Parquet or JSONL path (or a store directory), or ops in
    memory (written to a temporary Parquet file first).
    """
    from checker.spark.session import get_session, work_dir

    opts = dict(opts or {})
    cap = int(opts.get("cap", CAP))
    t0 = time.monotonic()
    work = work_dir()
    path = to_parquet(source, work)
    spark = get_session(master)
    rows, max_index = footer(path)
    parts = tune(spark, rows, os.path.getsize(path))
    try:
        hist = spark.read.parquet(path)
    except Exception as e:
        raise HistoryError(
            f"Spark cannot read this Parquet file: {str(e).splitlines()[0]}", path=path
        ) from None
    missing = [c for c in BASE_COLUMNS if c not in hist.columns]
    if missing:
        raise HistoryError(f"Parquet history lacks columns {', '.join(missing)}", path=path)
    try:
        return _check_df(
            spark,
            hist,
            model=model,
            timeout=timeout,
            cap=cap,
            opts=opts,
            t0=t0,
            parts=parts,
            max_index=max_index,
        )
    except HistoryError:
        raise
    except Exception as e:  # a dead JVM or failed job: one line, the details are in its log
        if type(e).__module__.startswith(("py4j", "pyspark")):
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise CheckerError(
                f"the Spark job failed ({first[:300]}); rerun with "
                "SPLITBRAIN_SPARK_VERBOSE=1 or a larger "
                "SPLITBRAIN_SPARK_DRIVER_MEMORY"
            ) from None
        raise


def _check_df(
    spark: Any,
    hist: Any,
    *,
    model: Any,
    timeout: float | None,
    cap: int,
    opts: dict[str, Any],
    t0: float,
    parts: int,
    max_index: int | None = None,
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    client = with_typed(F, hist).where(F.col("process") != NEMESIS)
    # First job: one window over narrow columns gives the groups, well-formedness and
    # the paired appends and reads, which are kept for the log-safety job.
    pairing = Pairing(client, max_index=max_index)
    try:
        return _check_paired(
            spark,
            client,
            pairing,
            model=model,
            timeout=timeout,
            cap=cap,
            opts=opts,
            t0=t0,
            parts=parts,
        )
    finally:
        pairing.close()


_Plan: TypeAlias = tuple[str, str, dict[str, Any], tuple[str, ...], tuple[str, ...] | None]
"""A linearizability checker to run: (checker name, model, model params, labels of its ops,
the fs it takes, or None for all)."""


def _check_paired(
    spark: Any,
    client: Any,
    pairing: Pairing,
    *,
    model: Any,
    timeout: float | None,
    cap: int,
    opts: dict[str, Any],
    t0: float,
    parts: int,
) -> dict[str, Any]:
    """The checks, once the first pass has run."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from checker.models import get_model

    summary = pairing.summary()
    grouped = groups_of(summary)
    groups, set_groups, reg_groups = grouped.counts, grouped.set_groups, grouped.register_groups

    keys = bool(opts.get("keys", True))
    params = dict(opts.get("model_params") or {})
    checkers: dict[str, dict[str, Any]] = {}
    plans: list[_Plan] = []
    if model is not None:
        name = model if isinstance(model, str) else model.name
        m = get_model(name, **params)
        want = {"append-log": ("log",), "set": set_groups}.get(
            m.name, (*reg_groups, "kv", "txn", "mutex", "other")
        )
        plans.append(("linearizable", name, params, want, tuple(sorted(m.fs))))
    else:
        for nm, g, model_name in auto_linearizable(groups):
            plans.append((nm, model_name, {}, reg_groups if g == "register" else (g,), None))
    want_set = bool(groups.get("set")) and (model is None or model != "set")
    lab = None
    # A history whose every op feeds the one linearizability checker (a register
    # history) needs no labels: the labelling window (a sort of every record by
    # process) would only mark all of them alike.
    unlabeled = (
        len(plans) == 1
        and not want_set
        and set(groups) <= set(plans[0][3])
        and not set(groups) & {"set", "maybe-set"}
    )
    if (plans or want_set) and not unlabeled:  # the op-level checkers need values
        lab = labeled(client.select(*OP_COLUMNS, "v_kind"))
        if len(plans) + want_set > 1:
            lab = lab.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        for nm, mname, mparams, gs, fs in plans:
            recs = client if unlabeled else lab.where(F.col("group").isin(*gs))  # type: ignore[union-attr]
            if fs is not None:
                recs = recs.where(F.col("f").isin(*fs))
            try:
                checkers[nm] = check_linearizable_spark(spark, recs, mname, mparams, timeout, keys)
            except Exception as e:  # a failed job must not hide the other checkers' verdicts
                checkers[nm] = unknown_result(e)
        if groups.get("log"):
            job = LogSafety(
                client, pairing.paired, cap, opts.get("ha"), parts, summary["append_invokes"]
            )
            try:
                checkers["log-safety"] = job.run()
            except HistoryError:
                raise
            except Exception as e:
                checkers["log-safety"] = unknown_result(e)
            finally:
                job.close()
        if want_set:
            from checker.sets import check_set

            assert lab is not None
            set_ops = [
                op_of(tuple(r))
                for r in lab.where(F.col("group").isin(*set_groups))
                .select(*OP_COLUMNS)
                .orderBy("index")
                .toLocalIterator()
            ]
            checkers["set"] = check_set(set_ops)
        if groups.get("other"):  # queue ops (send/pull/commit-offset): checked on the driver
            from checker.queue import QUEUE_FS, check_queue

            queue_ops = [
                op_of(tuple(r))
                for r in client.where(F.col("f").isin(*QUEUE_FS))
                .select(*OP_COLUMNS)
                .orderBy("index")
                .toLocalIterator()
            ]
            if queue_ops:
                checkers["queue"] = check_queue(queue_ops)
    finally:
        if lab is not None:
            lab.unpersist()
    return compose_results(
        checkers, engine="spark", started=t0, cap=cap, client_records=lambda: sum(groups.values())
    )
