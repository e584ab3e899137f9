"""Choosing an engine: the one entry point that turns a history into results.json.

``local`` runs in this process (:mod:`checker.local`); ``spark`` hands the
history to :func:`checker.spark.check_spark`; ``auto`` picks Spark only
above :data:`AUTO_SPARK_OPS` op records, where a single process would run out
of memory or patience. Both engines return the same shape and verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core.errors import CheckerError
from harness.core.source import HistorySource, history_path, read_ops

__all__ = ["ENGINES", "AUTO_SPARK_OPS", "check_history", "estimate_ops", "choose_engine"]

ENGINES = ("local", "spark", "auto")
AUTO_SPARK_OPS = 2_000_000
_JSONL_BYTES_PER_OP = 120  # a typical record, to estimate size without reading the file


def estimate_ops(source: HistorySource) -> int:
    """Number of op records, exact for ops in memory and Parquet, estimated for text files."""
    path = history_path(source)
    if path is None:
        return len(source)  # type: ignore[arg-type]
    if not path.exists():
        return 0
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(str(path)).metadata.num_rows)
    return path.stat().st_size // _JSONL_BYTES_PER_OP


def choose_engine(engine: str, source: HistorySource) -> str:
    if engine not in ENGINES:
        raise CheckerError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    if engine != "auto":
        return engine
    return "spark" if estimate_ops(source) > AUTO_SPARK_OPS else "local"


def check_history(
    source: HistorySource,
    *,
    model: str | None = None,
    engine: str = "local",
    timeout: float | None = None,
    opts: Mapping[str, Any] | None = None,
    master: str | None = None,
) -> dict[str, Any]:
    """Check a history (ops, or a path to a history file or store directory).

    ``opts`` is the checker-options mapping (``checks``, ``model``, ``model_params``,
    ``keys``, ``cap``, ``options``; :mod:`harness.core.checker`); ``model`` here wins
    over ``opts["model"]``. Returns ``{"valid": True | False | "unknown", "checkers":
    {name: {...}}, "anomalies": {kind: [examples]}, "engine", ...}``. Raises
    :class:`~harness.core.errors.HistoryError` for an unreadable or malformed history,
    :class:`~harness.core.errors.CheckerError` for an unknown model or engine and
    :class:`~harness.core.errors.ConfigError` for an unknown check or checker option.
    """
    chosen = choose_engine(engine, source)
    if chosen == "spark":
        try:
            from checker.spark import check_spark
        except ImportError as e:
            raise CheckerError(f"the Spark engine is not available: {e}") from None
        res = check_spark(
            source, model=model, master=master, timeout=timeout, opts=dict(opts or {})
        )
    else:
        from checker.keyed import check_local_keyed
        from checker.local import check_local, check_local_columns

        path = history_path(source)
        fast = None
        if path is not None and path.suffix.lower() in (".parquet", ".jsonl") and path.exists():
            # A big Parquet history judged key by key is streamed, never held; else typed
            # columns (the Parquet's, or made from the JSONL), with no Op per record, when
            # every checker that applies can read them (log histories); else ops, as always.
            fast = check_local_keyed(path, model=model, timeout=timeout, opts=opts)
            fast = fast or check_local_columns(path, model=model, timeout=timeout, opts=opts)
        res = fast or check_local(read_ops(source), model=model, timeout=timeout, opts=opts)
    if engine == "auto":
        res["engine_requested"] = "auto"
    return res
