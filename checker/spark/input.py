"""What the Spark engine reads: a Parquet history, with its values as typed JSON text.

Payloads, terms and incarnations are compared as *raw compact JSON text*
(``"p1"`` with its quotes, ``7``, ``{"a":1}``), so a string ``"1"`` and a
number ``1`` stay different, as they are for the local engine. Parquet
histories carry that text in typed columns
(:data:`harness.core.history.PARQUET_VALUE_COLUMNS`), written once with the
file, so no record or log entry is parsed in a job. Files from before those
columns existed are still checked: the columns are then derived from ``value``
with Spark's JSON functions (the old, slow path; object keys keep their order
there). Whatever reaches the driver is decoded back into Python values here too.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.core.errors import HistoryError
from harness.core.history import NEMESIS, PARQUET_VALUE_COLUMNS, VALUE_FIELDS, Op
from harness.core.layout import HISTORY_PARQUET, history_file

__all__ = [
    "BASE_COLUMNS",
    "OP_COLUMNS",
    "to_parquet",
    "with_typed",
    "as_int",
    "loads",
    "op_of",
    "op_columns",
    "faults_and_fs",
    "spark_schema",
]

BASE_COLUMNS = ("index", "type", "process", "f", "key", "value", "node")
"""Columns every Parquet history has (older files have nothing else)."""

OP_COLUMNS = ("index", "time", "type", "process", "f", "key", "value", "node", "error")
"""Columns :func:`op_of` turns back into an :class:`~harness.core.history.Op`, in its order:
every field, as the local engine's ops have them (``time`` and ``error`` included; a file
without them gives 0 and None, see :func:`op_columns`)."""

_ENTRY = r"^\[(-?[0-9]+),([^,]*),(.*)\]$"


def to_parquet(source: str | os.PathLike[str] | Iterable[Op], work: Path) -> str:
    """A Parquet file holding the history, converting (streamed) when needed: Spark reads
    Parquet column by column, and JSON lines would be parsed in every job.

    A JSONL history becomes a directory of part files, one per span of lines, converted
    by one process per core at once (Spark reads a directory as one frame).
    """
    from harness.core.history import jsonl_to_parquet_parts, read_history, write_parquet

    if isinstance(source, (str, os.PathLike)):
        path = history_file(source)
        if not path.exists():
            raise HistoryError("no such file", path=path)
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            return str(path)
        if suffix in (".jsonl", ".json"):
            parts = Path(tempfile.mkdtemp(dir=work))
            jsonl_to_parquet_parts(path, parts, workers=os.cpu_count() or 1)
            return str(parts)
        out = Path(tempfile.mkdtemp(dir=work)) / HISTORY_PARQUET
        write_parquet(read_history(path), out)
        return str(out)
    out = Path(tempfile.mkdtemp(dir=work)) / HISTORY_PARQUET
    write_parquet(source, out)
    return str(out)


def spark_schema(arrow: Any) -> Any:
    """The Spark schema of a Parquet history, from its Arrow schema, or None to let Spark
    infer it.

    Inferring is a Spark job of its own (0.4 s of a cold JVM), and the driver has read
    the footer already. Only the types the history writers use are converted: where
    Spark's reading of another type may differ from the Arrow one (unsigned integers,
    timestamps, dictionaries), Spark infers, as it always did.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    def plain(t: Any) -> bool:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return plain(t.value_type)
        if pa.types.is_struct(t):
            return all(plain(t.field(i).type) for i in range(t.num_fields))
        return bool(
            pa.types.is_int64(t)
            or pa.types.is_int32(t)
            or pa.types.is_boolean(t)
            or pa.types.is_float64(t)
            or pa.types.is_string(t)
            or pa.types.is_large_string(t)
        )

    if arrow is None or not all(plain(f.type) for f in arrow):
        return None
    try:
        return from_arrow_schema(arrow)
    except (TypeError, ValueError):
        return None


_FAULT_BATCH = 65_536
"""Records per batch when a row group holding fault records is read whole."""


def faults_and_fs(path: str, want_faults: bool) -> tuple[list[Op], list[str]]:
    """The fault records (when ``want_faults``), and the f names of the client records,
    read on the driver.

    The fault records are a few dozen, for the checkers that judge them. The f names
    bound the op shapes the history can hold: every checker's claims is asked about
    each, and its answers become a lookup column. Both come from two narrow columns,
    and a row group's other columns are read only when it holds a fault record: on
    the 1.86M-record history that takes 0.1 s, where a Spark job took 1.4 s of a
    cold JVM. The driver already reads the file's footer, so it can reach the file.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from checker.spark.tuning import parquet_files

    fs: set[str] = set()
    faults: list[tuple[Any, ...]] = []
    for part in parquet_files(path):
        try:
            pf = pq.ParquetFile(part)
            for g in range(pf.num_row_groups):
                t = pf.read_row_group(g, columns=["process", "f"])
                proc = pc.cast(t["process"], pa.string())
                # Spark's comparisons: a record whose process is null is in neither set
                fs.update(pc.unique(t["f"].filter(pc.not_equal(proc, NEMESIS))).to_pylist())
                if not (want_faults and pc.any(pc.equal(proc, NEMESIS)).as_py()):
                    continue
                present = [c for c in OP_COLUMNS if c in pf.schema_arrow.names]
                for b in pf.iter_batches(_FAULT_BATCH, row_groups=[g], columns=present):
                    b = b.filter(pc.equal(pc.cast(b["process"], pa.string()), NEMESIS))
                    none = [None] * b.num_rows
                    cols = [b[c].to_pylist() if c in present else none for c in OP_COLUMNS]
                    faults += [r for r in zip(*cols, strict=True) if r[0] is not None]
        except (OSError, pa.ArrowException) as e:
            raise HistoryError(f"cannot read this Parquet file: {e}", path=part) from None
    fs.discard(None)
    return [op_of(r) for r in sorted(faults, key=lambda r: r[0])], sorted(fs)


def _raw_field(F: Any, js: Any, name: str) -> Any:
    """Raw compact JSON text of top-level field ``name`` of the JSON object text ``js``.

    ``get_json_object`` gives a string's content without quotes; re-quote it with
    Jackson (``to_json``) so that it matches raw entry text. A missing or null
    field gives ``'null'``.
    """
    txt = F.get_json_object(js, f"$.{name}")
    is_str = js.rlike(r'"' + name + r'"\s*:\s*"')
    quoted = F.regexp_replace(F.to_json(F.array(txt)), r"^\[|\]$", "")
    return F.when(txt.isNull(), F.lit("null")).when(is_str, quoted).otherwise(txt)


def with_typed(F: Any, hist: Any, *, whole: bool = False) -> Any:
    """The history with the typed value columns, derived from ``value`` when the file lacks them.

    The derivation is the engine's former per-row JSON parsing, kept for Parquet
    files written before the typed columns existed; it gives the same texts
    except that object keys keep their order. ``whole`` keeps ``time`` and ``error``
    too (those the file has), for checkers that take whole ops (:func:`op_of`); the
    engine's own jobs do not read them, and a persisted frame would carry them.
    """
    base = [
        *BASE_COLUMNS,
        *(c for c in OP_COLUMNS if whole and c in set(hist.columns) - set(BASE_COLUMNS)),
    ]
    if all(c in hist.columns for c in PARQUET_VALUE_COLUMNS):
        return hist.select(*base, *PARQUET_VALUE_COLUMNS)
    v = F.col("value")
    kind = (
        F.when(v.isNull() | (v == "null"), "null")
        .when(v.startswith("{"), "object")
        .when(v.startswith("["), "array")
        .when(v.startswith('"'), "string")
        .when(v.isin("true", "false"), "boolean")
        .otherwise("number")
    )
    obj = kind == "object"
    cols = {"v_kind": kind}
    for name in VALUE_FIELDS:
        present = v.rlike(r'"' + name + r'"\s*:') if name == "payload" else F.lit(True)
        cols[f"v_{name}"] = F.when(obj & present, _raw_field(F, v, name))
    ents = F.from_json(v, "entries array<string>").getField("entries")
    cols["v_entries"] = F.when(
        obj,
        F.transform(
            F.filter(ents, lambda e: e.rlike(_ENTRY)),
            lambda e: F.struct(
                F.regexp_extract(e, _ENTRY, 1).cast("long").alias("index"),
                F.regexp_extract(e, _ENTRY, 2).alias("term"),
                F.regexp_extract(e, _ENTRY, 3).alias("payload"),
            ),
        ),
    )
    return hist.select(*base, *[cols[c].alias(c) for c in PARQUET_VALUE_COLUMNS])


def as_int(c: Any) -> Any:
    """A JSON text column as a long where it is a JSON integer, else null.

    Casting alone would accept ``7.5`` (as 7); the round trip keeps exactly the
    texts an integer prints as.
    """
    from pyspark.sql import functions as F

    n = c.cast("long")
    return F.when(n.cast("string") == c, n)


def loads(raw: str | None) -> Any:
    """A raw JSON text column's value on the driver (text that is not JSON stays text)."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def op_columns(F: Any, frame: Any) -> list[Any]:
    """:data:`OP_COLUMNS` of ``frame``, a column an older file lacks as null."""
    return [F.col(c) if c in frame.columns else F.lit(None).alias(c) for c in OP_COLUMNS]


def op_of(row: Sequence[Any]) -> Op:
    """A row of :data:`OP_COLUMNS` as the op the local engine's checkers take."""
    index, time, typ, proc, f, key, value, node, error = row
    return Op(
        type=typ,
        process=proc if proc == NEMESIS else int(proc),
        f=f,
        value=None if value is None else json.loads(value),
        key=key,
        time=0 if time is None else int(time),
        index=index,
        node=node,
        error=error,
    )
