"""The history: the one contract every package shares (ARCHITECTURE §2).

A history is the ordered list of operation records a test produced. Clients and
nemeses write it through :class:`HistoryWriter` while the test runs: one JSON
object per line, flushed at once, so a harness that dies mid-run still leaves a
checkable prefix. Checkers read it back with :func:`read_history`, which knows
JSONL, Parquet, and (through :mod:`harness.core.foreign`) Jepsen EDN and
Porcupine logs.

This module imports neither paramiko nor pyspark: the checker depends on it and
must stay light. Parquet support imports pyarrow lazily.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time as _time
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from harness.core import foreign
from harness.core.errors import HistoryError
from harness.core.layout import history_file
from harness.core.op import NEMESIS, OP_TYPES, Op

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
    "read_parquet",
    "pair_ops",
    "validate_history",
    "PARQUET_COLUMNS",
    "PARQUET_VALUE_COLUMNS",
    "VALUE_FIELDS",
]

log = logging.getLogger(__name__)


def parse_op(
    obj: Any, *, path: object | None = None, line: int | None = None, record: int | None = None
) -> Op:
    """Validate one decoded record; errors name file, line (or ``record``, for Parquet) and field."""
    rec = f"record {record}: " if record is not None else ""
    if not isinstance(obj, Mapping):
        raise HistoryError(f"{rec}record is not a JSON object", path=path, line=line)
    index = obj.get("index", -1)

    def bad(field: str, why: str) -> HistoryError:
        return HistoryError(
            rec + why,
            path=path,
            line=line,
            index=index if isinstance(index, int) else None,
            field=field,
        )

    if not isinstance(index, int) or isinstance(index, bool):
        raise bad("index", f"must be an integer, got {index!r}")
    t = obj.get("time", 0)
    if not isinstance(t, int) or isinstance(t, bool):
        raise bad("time", f"must be integer nanoseconds, got {t!r}")
    typ = obj.get("type")
    if typ not in OP_TYPES:
        raise bad("type", f"must be one of {', '.join(OP_TYPES)}, got {typ!r}")
    if "process" not in obj:
        raise bad("process", "is missing")
    proc = obj["process"]
    if not ((isinstance(proc, int) and not isinstance(proc, bool)) or proc == NEMESIS):
        raise bad("process", f"must be an integer or 'nemesis', got {proc!r}")
    f = obj.get("f")
    if not isinstance(f, str) or not f:
        raise bad("f", f"must be a non-empty string, got {f!r}")
    key = obj.get("key")
    if key is not None and not isinstance(key, str):
        raise bad("key", f"must be a string or null, got {key!r}")
    node = obj.get("node")
    if node is not None and not isinstance(node, str):
        raise bad("node", f"must be a string or null, got {node!r}")
    err = obj.get("error")
    if err is not None and not isinstance(err, str):
        err = json.dumps(err)
    return Op(
        type=typ,
        process=proc,
        f=f,
        value=obj.get("value"),
        key=key,
        time=t,
        index=index,
        node=node,
        error=err,
    )


class HistoryWriter:
    """Appends ops to ``history.jsonl`` as they happen.

    Thread-safe: clients and the nemesis run in threads and share one writer.
    It assigns ``index`` (and ``time``, from a monotonic clock started with the
    writer, unless the op carries one) and flushes every line, so a crash of the
    harness loses at most the line being written. Reopening an existing file
    continues its numbering: nothing already recorded is overwritten.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync_every: int = 0, start_ns: int | None = None
    ) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._start = _time.monotonic_ns() if start_ns is None else start_ns
        self._fsync_every = fsync_every
        self._next = 0
        if self.path.exists() and self.path.stat().st_size:
            self._next = sum(1 for _ in iter_jsonl(self.path))
            _drop_torn_tail(self.path)
        self._fh: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def now(self) -> int:
        """Nanoseconds since the test started, on the harness's monotonic clock."""
        return _time.monotonic_ns() - self._start

    def append(self, op: Op) -> Op:
        with self._lock:
            if self._fh is None:
                raise HistoryError("history writer is closed", path=self.path)
            op = op.replace(index=self._next, time=op.time or self.now())
            self._fh.write(json.dumps(op.to_dict(), separators=(",", ":"), default=str) + "\n")
            self._fh.flush()
            self._next += 1
            if self._fsync_every and self._next % self._fsync_every == 0:
                os.fsync(self._fh.fileno())
            return op

    def __len__(self) -> int:
        return self._next

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
                self._fh = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line without newline so that appends start on a clean line."""
    with open(path, "rb+") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        data_end = size
        chunk = 4096
        pos = size
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            fh.seek(pos)
            buf = fh.read(step)
            nl = buf.rfind(b"\n")
            if nl >= 0:
                data_end = pos + nl + 1
                break
        else:
            data_end = 0
        log.warning("%s: dropping a torn last line (%d bytes)", path, size - data_end)
        fh.truncate(data_end)


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Op]:
    """Yield ops from a JSONL history.

    A last line that does not parse and has no newline is a torn write from a
    killed harness: it is skipped with a warning. Any other bad line is an error
    naming the file, line and field.
    """
    path = Path(path)
    for lineno, obj in _json_records(path):
        yield parse_op(obj, path=path, line=lineno)


def _json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Each decoded line of a JSONL file with its line number; the torn-tail rule applied."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the with below; open errors caught here
    except OSError as e:
        raise HistoryError(f"cannot read: {e.strerror or e}", path=path) from None
    with fh:
        lineno = 0
        for raw in fh:
            lineno += 1
            if not raw.strip():
                continue
            try:
                obj = _json_line(raw)
            except ValueError as e:
                if not raw.endswith(b"\n") and not fh.read(1):
                    log.warning("%s:%d: skipping a torn last line", path, lineno)
                    return
                raise HistoryError(str(e), path=path, line=lineno) from None
            yield lineno, obj


def _json_line(raw: bytes) -> Any:
    """Decode one JSONL line; every failure is a ValueError with a one-line reason.

    The bytes are decoded as UTF-8 here rather than by ``json.loads(bytes)``,
    which guesses UTF-16/32 from NUL bytes and raises ``UnicodeDecodeError``
    (no ``.msg``). Deep nesting raises ``RecursionError`` and an over-long
    integer a plain ``ValueError``: both become the same one-line reason.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise ValueError(f"not valid JSON ({str(e).splitlines()[0][:200]})") from None


def read_jsonl(path: str | os.PathLike[str]) -> list[Op]:
    return list(iter_jsonl(path))


def write_jsonl(ops: Iterable[Op], path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for op in ops:
            fh.write(json.dumps(op.to_dict(), separators=(",", ":"), default=str) + "\n")


# Parquet. Values are stored as JSON text so that one schema holds every workload;
# process is text so that "nemesis" fits beside client ids.
#
# Beside ``value``, typed columns repeat the fields of object values that the
# log-safety checks read (ARCHITECTURE §2: append, log read, sample). They are
# extracted once, here, so that the Spark engine never parses JSON per record or
# per log entry: at 10M records that parsing was most of its time. ``value`` stays
# the full record; the typed columns are derived from it and add nothing. Scalars
# are kept as compact JSON text (keys sorted), the form both engines compare
# payloads and terms in, so a string "1" and a number 1 stay different.
PARQUET_COLUMNS = ("index", "time", "type", "process", "f", "key", "value", "node", "error")
VALUE_FIELDS = ("payload", "index", "term", "committed", "end", "role", "incarnation", "final")
"""Object fields with a typed column ``v_<field>``: ``value[field]`` as compact JSON text
(null when ``value`` is not an object or lacks the field; a JSON null is the text ``null``)."""
PARQUET_VALUE_COLUMNS = ("v_kind", *(f"v_{f}" for f in VALUE_FIELDS), "v_entries")
"""The typed columns. ``v_kind``: the JSON type of ``value`` (``null``, ``boolean``,
``number``, ``string``, ``array``, ``object``). ``v_entries``: when ``value`` is an object
whose ``entries`` is a list, its ``[index, term, payload]`` items with an integer index,
as ``list<struct<index: int64, term: string, payload: string>>`` (term and payload as
JSON text); other items are left out, since no check reads them. Files written before
these columns existed have ``value`` only; readers must accept both."""

_ENTRY_TYPE = None  # pyarrow type of v_entries, made on first use (pyarrow is imported lazily)
_INT64 = (-(2**63), 2**63 - 1)
_sorted_json = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


def _json_text(x: Any) -> str:
    """Compact JSON with sorted keys, so equal objects give equal text whatever their key order.

    Ints and strings (every term and payload of a log read's entries, thousands per final
    read) are encoded directly: the same text, without the encoder's Python entry."""
    t = x.__class__
    if t is int:
        return int.__repr__(x)
    if t is str:
        return _ascii_str(x)
    try:
        return _sorted_json(x)
    except TypeError:  # keys of mixed types cannot be sorted
        return json.dumps(x, separators=(",", ":"))


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "array"
    return "object" if isinstance(v, Mapping) else "string"


def _entries(items: Any) -> list[tuple[int, str, str]] | None:
    if not isinstance(items, (list, tuple)):
        return None
    out = []
    lo, hi = _INT64
    for e in items:
        if e.__class__ is list and len(e) == 3:  # what JSON gives: checked in fewer steps
            i = e[0]
            if i.__class__ is int and lo <= i <= hi:
                out.append((i, _json_text(e[1]), _json_text(e[2])))
                continue
        if (
            isinstance(e, (list, tuple))
            and len(e) == 3
            and isinstance(e[0], int)
            and not isinstance(e[0], bool)
            and _INT64[0] <= e[0] <= _INT64[1]
        ):
            out.append((e[0], _json_text(e[1]), _json_text(e[2])))
    return out


def _parquet_schema() -> Any:
    import pyarrow as pa

    global _ENTRY_TYPE
    if _ENTRY_TYPE is None:
        _ENTRY_TYPE = pa.list_(
            pa.struct([("index", pa.int64()), ("term", pa.string()), ("payload", pa.string())])
        )
    return pa.schema(
        [
            ("index", pa.int64()),
            ("time", pa.int64()),
            ("type", pa.string()),
            ("process", pa.string()),
            ("f", pa.string()),
            ("key", pa.string()),
            ("value", pa.string()),
            ("node", pa.string()),
            ("error", pa.string()),
            ("v_kind", pa.string()),
            *((f"v_{f}", pa.string()) for f in VALUE_FIELDS),
            ("v_entries", _ENTRY_TYPE),
        ]
    )


def _entries_array(
    offsets: Sequence[int], valid: Sequence[bool], index: Sequence[int], term: Any, payload: Any
) -> Any:
    """A ``v_entries`` column from flat entry arrays and per-row offsets into them."""
    import pyarrow as pa

    def arr(x: Any, t: Any) -> Any:
        return x if isinstance(x, pa.Array) else pa.array(x, t)

    _parquet_schema()
    items = pa.StructArray.from_arrays(
        [arr(index, pa.int64()), arr(term, pa.string()), arr(payload, pa.string())],
        names=["index", "term", "payload"],
    )
    mask = None if all(valid) else pa.array([not v for v in valid], pa.bool_())
    return pa.ListArray.from_arrays(arr(offsets, pa.int32()), items, type=_ENTRY_TYPE, mask=mask)


_compact_json = json.JSONEncoder(separators=(",", ":")).encode
_ascii_str = json.encoder.encode_basestring_ascii


def _value_text(v: Any) -> str:
    """``json.dumps(v, separators=(",", ":"))``, with the common scalars done directly (the
    encoder's Python entry costs more than the encoding of a small value)."""
    t = v.__class__
    if t is int:
        return int.__repr__(v)
    if v is None:
        return "null"
    if t is str:
        return _ascii_str(v)
    return _compact_json(v)


Row = tuple[int, int, str, str, str, "str | None", Any, "str | None", "str | None"]
"""A record as the Parquet writer takes it: index, time, type, process (as text), f, key,
value (decoded), node, error."""


def write_parquet(ops: Iterable[Op], path: str | os.PathLike[str], *, batch: int = 200_000) -> int:
    """Write ops to Parquet in batches, so memory stays flat for huge histories.

    A batch is also cut when its log entries pass a million, since a final read
    can carry thousands of them.
    """
    return _write_rows(
        (
            (op.index, op.time, op.type, str(op.process), op.f, op.key, op.value, op.node, op.error)
            for op in ops
        ),
        path,
        batch=batch,
    )


def jsonl_to_parquet(
    src: str | os.PathLike[str], path: str | os.PathLike[str], *, batch: int = 200_000
) -> int:
    """``write_parquet(iter_jsonl(src), path)``, the same file and the same errors, about
    twice as fast: a well-formed record goes from its decoded dict straight into the
    columns, without an :class:`Op` in between; anything unusual goes through
    :func:`parse_op`, which words the error (or accepts the record) as it always has.
    A user's 1M-record history spent most of its conversion in that detour."""
    return _write_rows(_jsonl_rows(Path(src)), path, batch=batch)


def _jsonl_rows(path: Path) -> Iterator[Row]:
    """:func:`iter_jsonl`'s records as :data:`Row` tuples, with its errors word for word."""
    types = frozenset(OP_TYPES)
    for lineno, obj in _json_records(path):
        if obj.__class__ is dict:
            index, t, typ = obj.get("index", -1), obj.get("time", 0), obj.get("type")
            proc, f, key = obj.get("process"), obj.get("f"), obj.get("key")
            node, err = obj.get("node"), obj.get("error")
            if (
                index.__class__ is int
                and t.__class__ is int
                and typ in types
                and (proc.__class__ is int or proc == NEMESIS)
                and f.__class__ is str
                and f
                and (key is None or key.__class__ is str)
                and (node is None or node.__class__ is str)
                and (err is None or err.__class__ is str)
            ):
                yield (index, t, typ, str(proc), f, key, obj.get("value"), node, err)
                continue
        op = parse_op(obj, path=path, line=lineno)
        yield (
            op.index,
            op.time,
            op.type,
            str(op.process),
            op.f,
            op.key,
            op.value,
            op.node,
            op.error,
        )


def _write_rows(rows: Iterable[Row], path: str | os.PathLike[str], *, batch: int) -> int:
    """The Parquet writer behind :func:`write_parquet` and :func:`jsonl_to_parquet`.

    Per record it does as little as it can: the typed field columns are filled only
    for object values (their rows are remembered and the columns made at flush), since
    most records of most histories are scalars and nulls.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _parquet_schema()
    n = 0
    plain = (*PARQUET_COLUMNS, "v_kind")
    cols: dict[str, list[Any]] = {c: [] for c in plain}
    obj_rows: list[int] = []
    obj_fields: list[list[Any]] = [[] for _ in VALUE_FIELDS]
    offsets: list[int] = [0]
    valid: list[bool] = []
    e_index: list[int] = []
    e_term: list[str] = []
    e_payload: list[str] = []
    c_index, c_time, c_type, c_proc, c_f, c_key, c_value, c_node, c_error, c_kind = (
        cols[c].append for c in plain
    )
    with pq.ParquetWriter(str(path), schema, compression="zstd") as w:

        def flush() -> None:
            m = len(cols["index"])
            if not m:
                return
            arrays = {c: pa.array(cols[c], schema.field(c).type) for c in plain}
            for name, vals in zip(VALUE_FIELDS, obj_fields, strict=True):
                if not obj_rows:
                    arrays[f"v_{name}"] = pa.nulls(m, pa.string())
                    continue
                full: list[Any] = [None] * m
                for i, x in zip(obj_rows, vals, strict=True):
                    full[i] = x
                arrays[f"v_{name}"] = pa.array(full, pa.string())
            arrays["v_entries"] = _entries_array(offsets, valid, e_index, e_term, e_payload)
            w.write_table(pa.Table.from_arrays([arrays[c] for c in schema.names], schema=schema))
            for v in (*cols.values(), *obj_fields, obj_rows, valid, e_index, e_term, e_payload):
                v.clear()
            del offsets[1:]

        pos = 0
        for index, t, typ, proc, f, key, v, node, err in rows:
            c_index(index)
            c_time(t)
            c_type(typ)
            c_proc(proc)
            c_f(f)
            c_key(key)
            c_value(_value_text(v))
            c_node(node)
            c_error(err)
            kind = _kind(v)
            c_kind(kind)
            ents = None
            if kind == "object":
                obj_rows.append(pos)
                for fld, col in zip(VALUE_FIELDS, obj_fields, strict=True):
                    col.append(_json_text(v[fld]) if fld in v else None)
                ents = _entries(v.get("entries"))
            valid.append(ents is not None)
            if ents:
                for i, tm, pl in ents:
                    e_index.append(i)
                    e_term.append(tm)
                    e_payload.append(pl)
            offsets.append(len(e_index))
            n += 1
            pos += 1
            if pos >= batch or len(e_index) >= 1_000_000:
                flush()
                pos = 0
        flush()
    return n


def read_parquet(path: str | os.PathLike[str]) -> list[Op]:
    """Read a Parquet history; errors name the file and the 0-based record (row)."""
    return list(iter_parquet(path))


def iter_parquet(
    path: str | os.PathLike[str],
    *,
    time_range: tuple[int, int] | None = None,
    batch: int = 16_384,
    values_for: Container[str] | None = None,
) -> Iterator[Op]:
    """Yield the ops of a Parquet history a batch of rows at a time, so memory is bounded by
    ``batch`` rather than by the file; errors name the file and the 0-based record (row).

    With ``time_range=(lo, hi)`` only ops with ``lo <= time <= hi`` are yielded, and row
    groups whose ``time`` statistics lie outside the range are not read at all: the
    report's second pass reads just the window around the ops a checker names.

    With ``values_for``, only the nemesis's ops and ops whose ``f`` is in it have their
    ``value`` decoded; the others carry ``None`` (and a damaged value there goes
    unnoticed). Decoding is most of the cost of a row: the report's first pass needs
    the samples' values and none of the log reads' thousand entries.

    pyarrow raises many types for a damaged file (ArrowInvalid, OSError,
    KeyError for a missing column, ...), and the text columns can hold anything
    a foreign writer put there, so both the file and each cell are checked here.
    """
    import pyarrow.parquet as pq

    def unreadable(e: Exception) -> HistoryError:
        msg = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        return HistoryError(f"not a readable Parquet history ({msg})", path=path)

    try:
        pf = pq.ParquetFile(str(path))
        meta = pf.metadata
        time_col = pf.schema_arrow.get_field_index("time")
    except Exception as e:  # pyarrow has no single error type for "not a history"
        raise unreadable(e) from None
    first = 0
    for group in range(meta.num_row_groups):
        rows_in_group = meta.row_group(group).num_rows
        if time_range is not None and not _group_may_hold(meta, group, time_col, time_range):
            first += rows_in_group
            continue
        try:
            batches = pf.iter_batches(
                batch_size=batch,
                row_groups=[group],
                columns=list(PARQUET_COLUMNS),
                use_threads=False,  # no read-ahead: memory is one batch, however slow the consumer
            )
            for b in batches:
                recs = b.to_pylist()
                for pos, rec in enumerate(recs):
                    if time_range is not None:
                        t = rec["time"]
                        if isinstance(t, int) and not time_range[0] <= t <= time_range[1]:
                            continue
                    if (
                        values_for is not None
                        and rec["process"] != NEMESIS
                        and rec["f"] not in values_for
                    ):
                        rec["value"] = None
                    yield _parquet_op(rec, path, first + pos)
                first += len(recs)
        except HistoryError:
            raise
        except Exception as e:  # as above: damage found while reading a row group
            raise unreadable(e) from None


def _group_may_hold(meta: Any, group: int, col: int, time_range: tuple[int, int]) -> bool:
    """Whether a row group's ``time`` statistics overlap the range (True when unknown)."""
    if col < 0:
        return True
    stats = meta.row_group(group).column(col).statistics
    if stats is None or not stats.has_min_max:
        return True
    return bool(stats.min <= time_range[1] and stats.max >= time_range[0])


def _parquet_op(rec: dict[str, Any], path: str | os.PathLike[str], row: int) -> Op:
    """One Parquet row as an op: ``process`` back to an int, ``value`` decoded from JSON text."""
    proc = rec["process"]
    if proc != NEMESIS:
        try:
            rec["process"] = int(proc)
        except (TypeError, ValueError):
            raise HistoryError(
                f"record {row}: must be an integer or 'nemesis', got {_clip(proc)}",
                path=path,
                field="process",
            ) from None
    v = rec["value"]
    if v is not None:
        try:
            rec["value"] = _json_line(v.encode("utf-8") if isinstance(v, str) else v)
        except (ValueError, TypeError, AttributeError) as e:
            why = str(e) if isinstance(e, ValueError) else f"must be JSON text, got {_clip(v)}"
            raise HistoryError(f"record {row}: {why}", path=path, field="value") from None
    return parse_op(rec, path=path, record=row)


def _clip(x: Any, n: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= n else r[:n] + "..."


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


def pair_ops(ops: Sequence[Op]) -> dict[int, int | None]:
    """Map each client invocation's position to its completion's position (None if open).

    Positions are offsets into ``ops``. Raises on a double invoke or an orphan
    completion, as Jepsen's history does, because a checker fed such a history
    would judge something that never happened.
    """
    open_by_proc: dict[int | str, int] = {}
    pairs: dict[int, int | None] = {}
    for pos, op in enumerate(ops):
        if not op.is_client:
            continue
        if op.type == "invoke":
            if op.process in open_by_proc:
                prev = open_by_proc[op.process]
                raise HistoryError(
                    f"process {op.process} invoked again while op {ops[prev].index} was open",
                    index=op.index,
                    field="process",
                )
            open_by_proc[op.process] = pos
            pairs[pos] = None
        else:
            inv = open_by_proc.pop(op.process, None)
            if inv is None:
                raise HistoryError(
                    f"{op.type} completion of process {op.process} has no invocation",
                    index=op.index,
                    field="process",
                )
            if ops[inv].f != op.f:
                raise HistoryError(
                    f"completion f {op.f!r} differs from its invocation's {ops[inv].f!r}",
                    index=op.index,
                    field="f",
                )
            pairs[inv] = pos
    return pairs


def validate_history(ops: Sequence[Op]) -> None:
    """Raise HistoryError unless ops are well formed: pairing, and no reuse after info."""
    pairs = pair_ops(ops)
    crashed: set[int | str] = set()
    for inv, comp in pairs.items():
        op = ops[inv]
        if op.process in crashed:
            raise HistoryError(
                f"process {op.process} invoked again after an info completion",
                index=op.index,
                field="process",
            )
        if comp is not None and ops[comp].type == "info":
            crashed.add(op.process)
