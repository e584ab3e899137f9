"""Per-history Spark settings: what a check of this size needs, decided before it starts.

One SparkSession serves every check in a process (:mod:`checker.spark.session`),
from a few thousand records to tens of millions, and the settings that make one
end fast make the other slow; every number here was measured (benchmarks/README.md).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

__all__ = [
    "partitions",
    "Footer",
    "footer",
    "history_bytes",
    "parquet_files",
    "tune",
    "jit_options",
    "SHORT_CHECK_ROWS",
    "JSONL_BYTES_PER_RECORD",
]

SHORT_CHECK_ROWS = 3_000_000
"""Records up to which a local check's JVM compiles with C1 alone (see :func:`jit_options`)."""

JSONL_BYTES_PER_RECORD = 200
"""What a JSONL record takes on average (203 bytes in the 1.86M-record history), to size
a check before its file is converted."""


def jit_options(rows: int | None, master: str) -> list[str]:
    """The driver JVM's compiler, chosen by the size of the check that starts it.

    A check of a few million records is over before C2's work pays: on the 1.86M-record
    history the JIT compilers took 30 of the 74 s of CPU on two cores, and with C1 alone
    the check took 31-32 s against 35-40 s; at 3.2M the two were even; at 20M C1 alone
    ran the executors' loops a third slower (238 against 148 s; benchmarks/README.md).
    Only a local master's driver runs the tasks; the size is unknown (None) when a
    session is started before any history, and then the JVM keeps its defaults.
    """
    if rows is None or rows > SHORT_CHECK_ROWS or not master.startswith("local"):
        return []
    return ["-XX:TieredStopAtLevel=1"]


def partitions(rows: int) -> int:
    """Shuffle partitions for a history of ``rows`` records.

    Small histories drown in per-task overhead (a 3k-record history took 100-230 s
    with 8 partitions and adaptive execution, 20 s with 2); big ones want tasks of
    a few hundred thousand rows so that sorts and aggregations stay in memory.
    """
    env = os.environ.get("SPLITBRAIN_SPARK_PARTITIONS")
    if env:
        return max(1, int(env))
    return 1 if rows < 100_000 else max(2, min(64, rows // 400_000))


def parquet_files(path: str) -> list[str]:
    """The files of a Parquet history: ``path`` itself, or a directory's part files."""
    if os.path.isdir(path):
        return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet"))
    return [path]


def history_bytes(path: str) -> int:
    """Size of a Parquet history on disk (all its part files)."""
    return sum(os.path.getsize(p) for p in parquet_files(path))


class Footer(NamedTuple):
    """What a Parquet history's footers say before any job reads it."""

    rows: int
    """Records (1,000,000 when no footer could be read)."""
    max_index: int | None
    """The largest ``index`` (None: unknown)."""
    schema: Any
    """The first part file's Arrow schema (None: unreadable); Spark reads the parts with
    one schema as well, taken from one file."""


def footer(path: str) -> Footer:
    """The footers of a Parquet history: a file, or a directory of part files."""
    found = [_footer(part) for part in parquet_files(path)]
    if not found:
        return Footer(1_000_000, None, None)
    tops = [f.max_index for f in found]
    known = [t for t in tops if t is not None]
    return Footer(
        sum(f.rows for f in found),
        max(known) if len(known) == len(tops) else None,
        found[0].schema,
    )


def _footer(path: str) -> Footer:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        meta, schema = pf.metadata, pf.schema_arrow
    except Exception:
        return Footer(1_000_000, None, None)
    try:
        col = meta.schema.names.index("index")
        stats = [meta.row_group(i).column(col).statistics for i in range(meta.num_row_groups)]
        top = max(s.max for s in stats if s is not None and s.has_min_max) if stats else -1
        if any(s is None or not s.has_min_max for s in stats):
            top = None
    except (ValueError, TypeError):
        top = None
    return Footer(int(meta.num_rows), top, schema)


def tune(spark: Any, rows: int, size: int) -> int:
    """Per-history settings; returns the shuffle partitions.

    Input splits are cut to about a quarter of the file per core: with Spark's
    128 MB splits a 10M-record file made three scan tasks for two cores, one of
    them holding most final reads (they come last in a history). Parquet batches
    are cut to 512 records: a batch's nested entries are decoded at once, and 4096
    final reads of a thousand entries each filled most of a 1 GiB heap.
    """
    parts = partitions(rows)
    cores = max(1, spark.sparkContext.defaultParallelism)
    split = max(4 << 20, min(128 << 20, size // (4 * cores) + 1))
    spark.conf.set("spark.sql.shuffle.partitions", str(parts))
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split))
    spark.conf.set("spark.sql.parquet.columnarReaderBatchSize", "512")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    # A runtime bloom filter scanned every append's payload a second time to shrink a
    # join side of a few thousand rows (unproposed-committed): the checks know which
    # side of their joins is small, and say so.
    spark.conf.set("spark.sql.optimizer.runtime.bloomFilter.enabled", "false")
    spark.conf.set("spark.sql.codegen.wholeStage", "true" if rows > 200_000 else "false")
    # Below this, compiling generated code costs more than it saves (a 3k-record check:
    # 6.5 s with code generation, 4.5 s interpreted).
    spark.conf.set("spark.sql.codegen.factoryMode", "FALLBACK" if rows > 100_000 else "NO_CODEGEN")
    return parts
