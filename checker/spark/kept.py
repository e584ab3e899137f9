"""Frames a check computes once and reads again: how they are held, and let go.

A check reads its first pass's pairs, the log's observations (``D``) and the samples
several times each. They are *local checkpoints*: computed once into the block
manager, and read back as frames whose plan is one leaf, so that building each check
over them does not analyse the pairing window and the explode beneath again
(building the log-safety checks took 3.8 s instead of 8.9 s that way on the
1.86M-record history; benchmarks/README.md).
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
    """``df``, checkpointed locally at ``level``: computed by the first job that reads it
    (at once when ``eager``), then read as a leaf."""
    return df.localCheckpoint(eager=eager, storageLevel=level)


def release(df: Any) -> None:
    """Drop the blocks of a kept frame now, not when the JVM's cleaner notices (a process
    checking many histories would hold them all until then)."""
    with contextlib.suppress(Exception):  # an older Spark: the cleaner still frees them
        df._jdf.queryExecution().logical().rdd().unpersist(False)
