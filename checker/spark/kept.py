"""Frames a check computes once and reads again: how they are held, and let go.

A check reads its first pass's pairs, the log's observations (``D``) and the samples
several times each. On a local master they are *local checkpoints*: computed once into
the block manager, and read back as frames whose plan is one leaf, so that building
each check over them does not analyse the pairing window and the explode beneath again
(building the log-safety checks took 3.8 s instead of 8.9 s that way on the
1.86M-record history; benchmarks/README.md). On a cluster they are persisted, which an
executor's loss does not break (:func:`keep`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from checker.spark.tuning import SHORT_CHECK_ROWS

__all__ = ["kept_level", "keep", "release"]


def kept_level(rows: int) -> Any:
    """The storage level of a check's kept frames, by the history's ``rows``.

    A local checkpoint holds rows, not column batches. At PySpark's ``MEMORY_AND_DISK``
    (the *serialized* level) every row is written through Java serialization on the
    way in and read back through it by every check: 9% of the executors' samples on
    the 1.86M-record history. Up to :data:`~checker.spark.tuning.SHORT_CHECK_ROWS` the
    rows are held as objects; the pairs, ``D`` and the samples of that history take a
    few hundred MiB that way, and the check took 26-28 s instead of 29-31 s. A bigger
    history keeps the serialized level: its rows would not fit the driver's heap as
    objects (20M records: 7M pairs, 6M rows of ``D``), and a level that does not fit
    spills to disk anyway.
    """
    from pyspark import StorageLevel

    if rows <= SHORT_CHECK_ROWS:
        return StorageLevel.MEMORY_AND_DISK_DESER
    return StorageLevel.MEMORY_AND_DISK


def keep(df: Any, level: Any, *, eager: bool = False) -> Any:
    """``df``, kept at ``level``: computed by the first job that reads it (at once when
    ``eager``).

    On a local master it is a local checkpoint, read back as a leaf. A local checkpoint
    lives only in the block manager of the executor that computed it and cannot be
    recomputed. On a local master that executor is the driver, whose loss ends the
    check anyway. On a cluster an executor may be lost mid-check, so there the frame is
    persisted instead: a lost block is recomputed from its plan, and the checks built
    over it pay for analysing the whole lineage.
    """
    if _on_local_master(df):
        return df.localCheckpoint(eager=eager, storageLevel=level)
    kept = df.persist(level)
    if eager:
        kept.count()
    return kept


def release(df: Any) -> None:
    """Drop the blocks of a kept frame now, not when the JVM's cleaner notices (a process
    checking many histories would hold them all until then)."""
    if df.is_cached:
        df.unpersist()
        return
    with contextlib.suppress(Exception):  # an older Spark: the cleaner still frees them
        df._jdf.queryExecution().logical().rdd().unpersist(False)


def _on_local_master(df: Any) -> bool:
    return str(df.sparkSession.sparkContext.master).startswith("local")
