"""The history: the one contract every package shares (docs/architecture.md §3).

A history is the ordered list of operation records a test produced. Clients and
nemeses write it through :class:`HistoryWriter` while the test runs: one JSON
object per line, flushed at once, so a harness that dies mid-run still leaves a
checkable prefix. Checkers read it back with :func:`read_history`, which knows
JSONL, Parquet, and (through :mod:`harness.core.foreign`) Jepsen EDN and
Porcupine logs.

The formats live in their own modules (:mod:`harness.core.jsonl`,
:mod:`harness.core.parquet`, :mod:`harness.core.foreign`, over the record rules of
:mod:`harness.core.record`); this one picks a reader by file and re-exports their
public names, so ``from harness.core.history import ...`` keeps working everywhere.

This module imports neither paramiko nor pyspark: the checker depends on it and
must stay light. Parquet support imports pyarrow lazily.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable, Iterator, Sequence

from harness.core import foreign
from harness.core.errors import HistoryError
from harness.core.jsonl import HistoryWriter, iter_jsonl, read_jsonl, write_jsonl
from harness.core.layout import history_file
from harness.core.op import NEMESIS, OP_TYPES, Op
from harness.core.paired import pair_positions
from harness.core.parquet import (
    PARQUET_COLUMNS,
    PARQUET_VALUE_COLUMNS,
    VALUE_FIELDS,
    entries_column,
    iter_parquet,
    jsonl_to_parquet,
    jsonl_to_parquet_parts,
    parquet_schema,
    parquet_writer,
    read_parquet,
    write_parquet,
)
from harness.core.record import parse_op

__all__ = [
    "OP_TYPES",
    "NEMESIS",
    "Op",
    "HistoryWriter",
    "parse_op",
    "iter_jsonl",
    "read_jsonl",
    "read_history",
    "iter_history",
    "iter_parquet",
    "write_jsonl",
    "write_parquet",
    "jsonl_to_parquet",
    "jsonl_to_parquet_parts",
    "read_parquet",
    "pair_ops",
    "validate_history",
    "parquet_schema",
    "parquet_writer",
    "entries_column",
    "PARQUET_COLUMNS",
    "PARQUET_VALUE_COLUMNS",
    "VALUE_FIELDS",
]


def read_history(path: str | os.PathLike[str]) -> list[Op]:
    """Read any supported history file, or the history of a store directory."""
    return list(iter_history(path))


def iter_history(
    path: str | os.PathLike[str],
    *,
    time_range: tuple[int, int] | None = None,
    values_for: Container[str] | None = None,
) -> Iterator[Op]:
    """Stream any supported history file, or the history of a store directory.

    JSONL and Parquet are read a line or a batch at a time, so a caller that keeps only
    a summary holds memory independent of the history's length; the foreign formats
    (import only, small) are read whole. ``time_range=(lo, hi)`` keeps only ops with
    ``lo <= time <= hi`` (Parquet skips whole row groups outside it). ``values_for``: see
    :func:`iter_parquet` (Parquet only; other formats decode every value).
    """
    path = history_file(path)
    if not path.exists():
        raise HistoryError("no such file", path=path)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from iter_parquet(path, time_range=time_range, values_for=values_for)
        return
    if suffix == ".jsonl" or suffix == ".json":
        ops: Iterable[Op] = iter_jsonl(path)
    elif suffix == ".edn":
        ops = foreign.read_edn(path)
    elif suffix in (".log", ".txt"):
        ops = foreign.read_porcupine(path)
    else:
        raise HistoryError(
            "unknown history format (expected .jsonl, .parquet, .edn, or a Porcupine .log/.txt)",
            path=path,
        )
    if time_range is None:
        yield from ops
        return
    lo, hi = time_range
    yield from (op for op in ops if lo <= op.time <= hi)


pair_ops = pair_positions
"""Each client invocation's position -> its completion's position (None if open); see
:func:`harness.core.paired.pair_positions`, which checkers use through
:class:`~harness.core.paired.PairedHistory`."""


def validate_history(ops: Sequence[Op]) -> None:
    """Raise HistoryError unless ops are well formed: pairing, and no reuse after info."""
    pair_positions(ops, strict=True)
