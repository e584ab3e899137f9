"""The Spark engine: the registered checkers, as DataFrame jobs, for histories too big
for one process.

The seams follow the passes a check makes:

- :mod:`checker.spark.input`: the history as Parquet with typed value columns;
- :mod:`checker.spark.claims`: every selected checker's ``claims`` asked about every op
  shape the history can hold, as lookup columns (the local engine asks the same
  functions, so the engines cannot disagree on who takes which op);
- :mod:`checker.spark.pairing`: one window over every client record pairs
  completions with invocations, labels the ops and rejects malformed histories;
- :mod:`checker.spark.completions`: each op's completion beside its invocation, for the
  queue and subscription checks that read both;
- each checker's Spark implementation (``CheckerSpec.spark``: log safety over the
  paired frame, :mod:`checker.spark.log_safety`; linearizability a key per task,
  :mod:`checker.spark.linearizable`); a checker without one gets its records collected
  to the driver and runs its local implementation there;
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
from collections.abc import Iterable, Sequence
from typing import Any

from checker.base import check_spec_safe
from checker.local import run_name
from checker.registry import Settings, checkers, parse_settings, spark_impl
from checker.results import CAP, compose_results, unknown_result
from checker.spark.claims import Labels, build_labels
from checker.spark.input import (
    BASE_COLUMNS,
    faults_and_fs,
    op_columns,
    op_of,
    spark_schema,
    to_parquet,
    with_typed,
)
from checker.spark.kept import kept_level
from checker.spark.pairing import Pairing, check_malformed, label_columns, labeled, part_counts
from checker.spark.tuning import JSONL_BYTES_PER_RECORD, Footer, footer, history_bytes, tune
from harness.core.checker import ALL, CheckConfig, CheckerSpec
from harness.core.errors import CheckerError, HistoryError
from harness.core.layout import history_file
from harness.core.op import NEMESIS, Op
from harness.core.paired import PairedHistory

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
    from checker.spark.session import work_dir

    opts = dict(opts or {})
    cap = int(opts.get("cap", CAP))
    t0 = time.monotonic()
    work = work_dir()
    path, spark, found = _input_and_session(source, work, master)
    rows, max_index = found.rows, found.max_index
    parts = tune(spark, rows, history_bytes(path))
    schema = spark_schema(found.schema)
    try:
        hist = (spark.read if schema is None else spark.read.schema(schema)).parquet(path)
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
            path=path,
            model=model,
            timeout=timeout,
            cap=cap,
            opts=opts,
            t0=t0,
            parts=parts,
            max_index=max_index,
            level=kept_level(rows),
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


def _input_and_session(
    source: str | os.PathLike[str] | Iterable[Op], work: Any, master: str | None
) -> tuple[str, Any, Footer]:
    """The history as Parquet, the session, made at the same time, and what the Parquet
    footers say (:func:`~checker.spark.tuning.footer`).

    Converting a JSONL history is one Python thread's work and starting the JVM mostly
    another process's, so on two cores they overlap: the JVM's start (5-10 s here) no
    longer adds to a JSONL check's time. (Started off the main thread, pyspark installs
    no SIGINT handler of its own; Ctrl-C still stops the check.)
    """
    import threading

    from checker.spark.session import get_session

    if not isinstance(source, (str, os.PathLike)) or _is_parquet(source):
        path = to_parquet(source, work)  # nothing to convert, or a path error: no JVM yet
        found = footer(path)
        return path, get_session(master, rows=found.rows), found
    got: dict[str, Any] = {}
    rows = history_file(source).stat().st_size // JSONL_BYTES_PER_RECORD

    def start() -> None:
        try:
            got["spark"] = get_session(master, rows=rows)
        except BaseException as e:  # re-raised below, on the caller's thread
            got["error"] = e

    starter = threading.Thread(target=start, name="splitbrain-spark-start", daemon=True)
    starter.start()
    try:
        path = to_parquet(source, work)
    finally:
        starter.join()
    if "error" in got:
        raise got["error"]
    return path, got["spark"], footer(path)


def _is_parquet(source: str | os.PathLike[str]) -> bool:
    """Whether the history at ``source`` needs no conversion (or is missing: that error
    comes first)."""
    path = history_file(source)
    return not path.exists() or path.suffix.lower() == ".parquet"


def _check_df(
    spark: Any,
    hist: Any,
    *,
    path: str,
    model: Any,
    timeout: float | None,
    cap: int,
    opts: dict[str, Any],
    t0: float,
    parts: int,
    max_index: int | None,
    level: Any,
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    specs = checkers()
    name = model if model is None or isinstance(model, str) else model.name
    settings = parse_settings(opts, model=name, timeout=timeout, specs=specs)
    chosen = settings.selected(specs)
    # A checker with no Spark code takes whole ops on the driver: times and errors too.
    whole = any(spark_impl(s) is None for s in chosen)
    client = with_typed(F, hist, whole=whole).where(F.col("process") != NEMESIS)
    faults, fs = faults_and_fs(path, any(s.faults for s in chosen))
    labels = build_labels(
        chosen, {s.name: settings.config(s.name) for s in chosen}, fs, "add" in fs
    )
    # First job: one window over narrow columns gives the labels, well-formedness and
    # the paired appends and reads, which are kept for the log-safety job.
    pairing = Pairing(client, labels, fs, level, max_index=max_index)
    try:
        return _check_paired(
            spark, client, pairing, labels, fs, settings, t0=t0, parts=parts, faults=faults
        )
    finally:
        pairing.close()


def _check_paired(
    spark: Any,
    client: Any,
    pairing: Pairing,
    labels: Labels,
    fs: list[str],
    settings: Settings,
    *,
    t0: float,
    parts: int,
    faults: Sequence[Op] = (),
) -> dict[str, Any]:
    """The checks, once the first pass has run.

    A checker judging fault records the history holds (``CheckerSpec.faults``) gets them
    in its config, and runs even when it claims no client record (on the driver).
    """
    from pyspark.sql import functions as F

    summary = pairing.summary()
    check_malformed(summary)
    counts = part_counts(summary, labels)
    runs = [
        (
            c,
            p,
            run_name(
                spec.name, labels.parts[c][p], [labels.parts[d][q] for d, q in counts if d == c]
            ),
        )
        for c, spec in enumerate(labels.checkers)
        for p in range(len(labels.parts[c]))
        if (c, p) in counts
    ]
    shared = {
        "client": client,
        "paired": pairing.paired,
        "parts": parts,
        "level": pairing.level,
        "append_invokes": summary["append_invokes"],
    }
    # A history whose every op feeds one checker part (a register history) needs no
    # labels: the labelling window (a sort of every record by process) would only mark
    # all of them alike.
    unlabeled = len(runs) == 1 and counts[runs[0][:2]] == summary["records"]
    lab = None
    if not unlabeled and runs:
        lab = labeled(client.select(*client.columns), labels, fs)
        if len(runs) > 1:
            lab = lab.persist(pairing.level)
    fault_fs = frozenset(op.f for op in faults)
    results: dict[str, dict[str, Any]] = {}
    try:
        for c, p, name in runs:
            spec = labels.checkers[c]
            mine = faults if spec.faults else ()
            config = settings.config(spec.name, labels.parts[c][p], shared, mine)
            if unlabeled or lab is None:
                recs = client
            else:
                recs = lab.where(F.col(label_columns(labels)[c]) == p).select(*client.columns)
            results[name] = _run(spark, spec, recs, config)
        ran = {labels.checkers[c].name for c, _, _ in runs}
        for spec in labels.checkers:
            if spec.name not in ran and spec.on_faults_alone and spec.faults & fault_fs:
                config = settings.config(spec.name, ALL, shared, faults)
                results[spec.name] = _run(spark, spec, client.limit(0), config)
    finally:
        if lab is not None:
            lab.unpersist()
    return compose_results(
        results,
        engine="spark",
        started=t0,
        cap=settings.cap,
        client_records=lambda: int(summary["records"] or 0),
    )


def _run(spark: Any, spec: CheckerSpec, recs: Any, config: CheckConfig) -> dict[str, Any]:
    """One checker part: its Spark implementation, or its local one on the driver."""
    impl = spark_impl(spec)
    if impl is None:  # no Spark implementation: the claimed records, on the driver
        from pyspark.sql import functions as F

        rows = recs.select(*op_columns(F, recs)).orderBy("index").toLocalIterator()
        ops = [op_of(tuple(r)) for r in rows]
        return check_spec_safe(spec, PairedHistory.of(ops), config)
    try:
        return impl(spark, recs, config)
    except HistoryError:
        raise
    except Exception as e:  # a failed job must not hide the other checkers' verdicts
        res = unknown_result(e)
        res["error"] = f"checker {spec.name} failed on Spark: {res['error']}"
        return res
