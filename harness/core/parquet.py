"""The checked history format: Parquet, written at the end of a run, streaming from the
JSONL, with typed value columns so that Spark never parses JSON per record
(docs/architecture.md §3). pyarrow is imported only when a Parquet file is touched.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import HistoryError
from harness.core.jsonl import json_line, json_records_entries_apart
from harness.core.op import NEMESIS, OP_TYPES, Op
from harness.core.record import clip, json_kind, parse_op

__all__ = [
    "COLUMNAR_COLUMNS",
    "ColumnarHistory",
    "PARQUET_COLUMNS",
    "PARQUET_VALUE_COLUMNS",
    "VALUE_FIELDS",
    "entries_column",
    "iter_parquet",
    "jsonl_to_parquet",
    "jsonl_to_parquet_parts",
    "parquet_schema",
    "parquet_writer",
    "read_parquet",
    "write_parquet",
]


# Parquet. Values are stored as JSON text so that one schema holds every workload;
# process is text so that "nemesis" fits beside client ids.
#
# Beside ``value``, typed columns repeat the fields of object values that the
# log-safety checks read (docs/architecture.md §3: append, log read, sample). They are
# extracted once, here, so that the Spark engine never parses JSON per record or
# per log entry: at 10M records that parsing was most of its time. ``value`` stays
# the full record; the typed columns are derived from it and add nothing. Scalars
# are kept as compact JSON text (keys sorted), the form both engines compare
# payloads and terms in, so a string "1" and a number 1 stay different.
PARQUET_COLUMNS = ("index", "time", "type", "process", "f", "key", "value", "node", "error")
VALUE_FIELDS = (
    "payload",
    "index",
    "term",
    "committed",
    "end",
    "role",
    "incarnation",
    "final",
    "member",
    "config",
)
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
    """:func:`json_kind`, with a value JSON has no kind for (it is written as text) a string."""
    kind = json_kind(v)
    return "string" if kind == "object" and not isinstance(v, Mapping) else kind


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


def parquet_schema() -> Any:
    """The Parquet history's schema (a ``pyarrow.Schema``): :data:`PARQUET_COLUMNS`, then
    :data:`PARQUET_VALUE_COLUMNS`."""
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


def entries_column(
    offsets: Sequence[int], valid: Sequence[bool], index: Sequence[int], term: Any, payload: Any
) -> Any:
    """A ``v_entries`` column from flat entry arrays and per-row offsets into them."""
    import pyarrow as pa

    def arr(x: Any, t: Any) -> Any:
        return x if isinstance(x, pa.Array) else pa.array(x, t)

    parquet_schema()
    items = pa.StructArray.from_arrays(
        [arr(index, pa.int64()), arr(term, pa.string()), arr(payload, pa.string())],
        names=["index", "term", "payload"],
    )
    mask = None if all(valid) else pa.array([not v for v in valid], pa.bool_())
    return pa.ListArray.from_arrays(arr(offsets, pa.int32()), items, type=_ENTRY_TYPE, mask=mask)


@contextlib.contextmanager
def parquet_writer(path: str | os.PathLike[str]) -> Iterator[Any]:
    """The one way a Parquet history is written: a ``pyarrow.parquet.ParquetWriter`` on
    :func:`parquet_schema`, compressed as every history is; write ``pyarrow.Table`` batches
    of that schema to it (:func:`write_parquet` does, and so does a generator that builds
    its columns itself, as :mod:`checker.synth` does)."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(str(path), parquet_schema(), compression="zstd") as w:
        yield w


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


def _lifted_text(v: dict[str, Any], lift: _Entries) -> str:
    """:func:`_value_text` of a value whose entries Arrow parsed: their raw text is already
    the compact JSON the encoder would write (:data:`_TRIPLES`), spliced in."""
    text = _compact_json({**v, "entries": []})
    at = text.find('"entries":[]')
    if at < 0 or text.find('"entries":[]', at + 1) >= 0:
        return _compact_json({**v, "entries": lift.decoded()})
    return text[: at + 10] + lift.text.decode("ascii") + text[at + 12 :]


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
    return convert_span(src, None, path, values=True, batch=batch)


PARALLEL_BYTES = 64 << 20
"""JSONL smaller than this is converted by one process: starting another costs about
half a second, as long as converting 16 MB."""


def jsonl_to_parquet_parts(
    src: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    workers: int,
    values: bool = True,
) -> list[Path]:
    """:func:`jsonl_to_parquet` by up to ``workers`` processes at once, each converting a
    span of lines into its own file (``part-<k>.parquet`` in ``out_dir``, in line order).

    Converting is one core's work in Python: the issue-size history (377 MB) took 24 s
    of a Spark check that then ran for 35. Its spans give the same records, line numbers
    and errors as the whole file; when several spans fail, the error is the first
    span's, as reading from the start would have found it first. Without ``values`` the
    ``value`` column is left null (:meth:`ColumnarHistory.from_jsonl` never reads it).
    """
    from harness.core.jsonl import line_spans

    src, out = Path(src), Path(out_dir)
    try:
        size = src.stat().st_size
    except OSError as e:
        raise HistoryError(f"cannot read: {e.strerror or e}", path=src) from None
    parts = max(1, min(workers, size // (PARALLEL_BYTES // 2)))
    spans = line_spans(src, parts) if parts > 1 else [(0, size)]
    spans[-1] = (spans[-1][0], -1)  # the last to the end: a live file may have grown since
    names = [out / f"part-{k}.parquet" for k in range(len(spans))]
    if len(spans) == 1:
        convert_span(src, None, names[0], values=values)
        return names
    _run_span_workers(src, spans, names, values)
    return names


def _run_span_workers(
    src: Path, spans: Sequence[tuple[int, int]], names: Sequence[Path], values: bool
) -> None:
    """One ``python -m harness.core.span_worker`` per span, all at once.

    Separate interpreters, not :mod:`multiprocessing`: its spawn re-runs the caller's
    main script, which breaks a user's script that calls a check without a main guard,
    and fork would copy the threads of a Spark JVM being started. A worker leaves its
    exception pickled beside its part; the first failing span's is raised, as reading
    the file from the start would have met it first.
    """
    import pickle
    import site
    import subprocess
    import sys

    import harness

    # The workers import this package from where the caller did: a checkout a script put
    # on sys.path is passed on; site-packages is not (ahead of the stdlib it could shadow).
    root = os.path.realpath(Path(harness.__file__).parent.parent)
    installed = {os.path.realpath(p) for p in (*site.getsitepackages(), site.getusersitepackages())}
    env = dict(os.environ)
    if root not in installed:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    procs = []
    try:
        for (a, b), name in zip(spans, names, strict=True):
            argv = [sys.executable, "-m", "harness.core.span_worker", str(src), str(a), str(b)]
            argv += [str(name), "values" if values else "no-values"]
            procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env))
        for proc in procs:
            proc.wait()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, (a, b), name in zip(procs, spans, names, strict=True):
        if proc.returncode:
            failed = Path(f"{name}.error")
            if failed.exists():
                with open(failed, "rb") as fh:
                    raise pickle.load(fh)
            raise HistoryError(
                f"converting bytes {a} to {b if b >= 0 else 'the end'} failed: the worker "
                f"exited with status {proc.returncode}",
                path=src,
            )


def convert_span(
    src: str | os.PathLike[str],
    span: tuple[int, int] | None,
    out: str | os.PathLike[str],
    *,
    values: bool,
    batch: int = 200_000,
) -> int:
    """Lines ``span`` of the JSONL ``src`` (None: all) into the Parquet file ``out``: what
    :func:`jsonl_to_parquet` does, and each worker of :func:`jsonl_to_parquet_parts`."""
    return _write_rows(_jsonl_rows(Path(src), span), out, batch=batch, values=values)


def _jsonl_rows(path: Path, span: tuple[int, int] | None = None) -> Iterator[Row]:
    """:func:`iter_jsonl`'s records as :data:`Row` tuples, with its errors word for word."""
    types = frozenset(OP_TYPES)
    for lineno, obj in json_records_entries_apart(path, _parse_entries, span=span):
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
            v = obj.get("value")
            if v.__class__ is dict and v.get("entries").__class__ is _Entries:
                v["entries"] = v["entries"].decoded()
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


_I = r"(?:0|-?[1-9][0-9]{0,17})"
_E = r"(?:null|true|false|" + _I + r'|"[ !#-+\--Z^-~]*")'
_TRIPLE = r"\[" + _I + "," + _E + "," + _E + r"\]"
_TRIPLES = r"^\[" + _TRIPLE + "(?:," + _TRIPLE + r")*\]$"
"""An entries array whose raw text is already what the columns hold: items of exactly
three, an integer index within int64, terms and payloads that are null, booleans,
integers or plain strings (printable ASCII without quote, backslash, comma or
bracket), all in the compact form ``json.dumps`` writes. The text of such an item is
its column text, and it splits on ``],[`` and ``,`` into exactly its items and fields."""


class _Entries:
    """A log read's entries parsed by Arrow (:func:`_parse_entries`): the three columns of
    :data:`PARQUET_VALUE_COLUMNS`' ``v_entries`` items, term and payload as JSON text."""

    __slots__ = ("index", "term", "payload", "text")

    def __init__(self, index: Any, term: Any, payload: Any, text: bytes) -> None:
        self.index, self.term, self.payload, self.text = index, term, payload, text

    def __len__(self) -> int:
        return len(self.index)

    def decoded(self) -> list[list[Any]]:
        """The entries as ``json.loads`` gives them (for the rare record that goes through
        :func:`parse_op`)."""
        out: list[list[Any]] = json.loads(self.text)
        return out


def _parse_entries(texts: list[bytes]) -> list[_Entries | None]:
    """Entries arrays' raw texts parsed all at once by Arrow's kernels (None for a text
    outside :data:`_TRIPLES`, which the reader then decodes with ``json``): one kernel
    call per batch instead of a decoded list and two JSON encodings per entry."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    out: list[_Entries | None] = [None] * len(texts)
    try:
        arr = pa.array(texts, pa.binary()).cast(pa.string())
    except (pa.ArrowInvalid, UnicodeDecodeError):  # not UTF-8: the JSON decoder words it
        return out
    ok = pc.match_substring_regex(arr, _TRIPLES).to_numpy(zero_copy_only=False)
    good = np.flatnonzero(ok)
    if not len(good):
        return out
    items = pc.split_pattern(pc.utf8_slice_codeunits(arr.take(pa.array(good)), 2, -2), "],[")
    counts = pc.list_value_length(items).to_numpy()
    fields = pc.list_flatten(pc.split_pattern(pc.list_flatten(items), ","))
    n = len(fields) // 3
    index = pc.cast(fields.take(pa.array(np.arange(0, 3 * n, 3))), pa.int64())
    term = fields.take(pa.array(np.arange(1, 3 * n, 3)))
    payload = fields.take(pa.array(np.arange(2, 3 * n, 3)))
    lo = 0
    for g, c in zip(good.tolist(), counts.tolist(), strict=True):
        out[g] = _Entries(index.slice(lo, c), term.slice(lo, c), payload.slice(lo, c), texts[g])
        lo += c
    return out


def _write_rows(
    rows: Iterable[Row], path: str | os.PathLike[str], *, batch: int, values: bool = True
) -> int:
    """The Parquet writer behind :func:`write_parquet` and :func:`jsonl_to_parquet`."""
    n = 0
    with parquet_writer(path) as w:
        for t in _row_tables(rows, batch=batch, values=values):
            w.write_table(t)
            n += t.num_rows
    return n


def _row_tables(rows: Iterable[Row], *, batch: int, values: bool = True) -> Iterator[Any]:
    """Rows as Arrow tables of the Parquet schema, ``batch`` rows (or a million log
    entries) at a time; without ``values`` the ``value`` column is left null (the columnar
    reader of a JSONL history never reads it, and re-encoding it was a third of the cost).

    Per record it does as little as it can: the typed field columns are filled only
    for object values (their rows are remembered and the columns made at flush), since
    most records of most histories are scalars and nulls.
    """
    import pyarrow as pa

    schema = parquet_schema()
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

    pieces: list[tuple[Any, Any, Any]] = []  # entries made by Arrow, and Python's before them
    lifted = 0  # entries in pieces

    def piece() -> None:
        """The Python entry lists so far as one piece (so that entries stay in row order)."""
        nonlocal lifted
        if e_index:
            lifted += len(e_index)
            pieces.append(
                (
                    pa.array(e_index, pa.int64()),
                    pa.array(e_term, pa.string()),
                    pa.array(e_payload, pa.string()),
                )
            )
            e_index.clear()
            e_term.clear()
            e_payload.clear()

    def flush() -> Any:
        nonlocal lifted
        m = len(cols["index"])
        if not m:
            return None
        if pieces:
            piece()
            ents_cols = [pa.concat_arrays([p[k] for p in pieces]) for k in range(3)]
            pieces.clear()
            lifted = 0
        else:
            ents_cols = [e_index, e_term, e_payload]
        arrays = {c: pa.array(cols[c], schema.field(c).type) for c in plain}
        for name, vals in zip(VALUE_FIELDS, obj_fields, strict=True):
            if not obj_rows:
                arrays[f"v_{name}"] = pa.nulls(m, pa.string())
                continue
            full: list[Any] = [None] * m
            for i, x in zip(obj_rows, vals, strict=True):
                full[i] = x
            arrays[f"v_{name}"] = pa.array(full, pa.string())
        arrays["v_entries"] = entries_column(offsets, valid, *ents_cols)
        t = pa.Table.from_arrays([arrays[c] for c in schema.names], schema=schema)
        for v in (*cols.values(), *obj_fields, obj_rows, valid, e_index, e_term, e_payload):
            v.clear()
        del offsets[1:]
        return t

    pos = 0
    for index, t, typ, proc, f, key, v, node, err in rows:
        c_index(index)
        c_time(t)
        c_type(typ)
        c_proc(proc)
        c_f(f)
        c_key(key)
        lift = v.get("entries") if v.__class__ is dict else None
        if lift.__class__ is not _Entries:
            lift = None
        c_value(None if not values else _value_text(v) if lift is None else _lifted_text(v, lift))
        c_node(node)
        c_error(err)
        kind = _kind(v)
        c_kind(kind)
        ents = None
        if kind == "object":
            obj_rows.append(pos)
            for fld, col in zip(VALUE_FIELDS, obj_fields, strict=True):
                col.append(_json_text(v[fld]) if fld in v else None)
            ents = [] if lift is not None else _entries(v.get("entries"))
        valid.append(ents is not None)
        if lift is not None:
            piece()
            pieces.append((lift.index, lift.term, lift.payload))
            lifted += len(lift)
        elif ents:
            for i, tm, pl in ents:
                e_index.append(i)
                e_term.append(tm)
                e_payload.append(pl)
        offsets.append(lifted + len(e_index))
        pos += 1
        if pos >= batch or lifted + len(e_index) >= 1_000_000:
            yield flush()
            pos = 0
    last = flush()
    if last is not None:
        yield last


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
                f"record {row}: must be an integer or 'nemesis', got {clip(proc)}",
                path=path,
                field="process",
            ) from None
    v = rec["value"]
    if v is not None:
        try:
            rec["value"] = json_line(v.encode("utf-8") if isinstance(v, str) else v)
        except (ValueError, TypeError, AttributeError) as e:
            why = str(e) if isinstance(e, ValueError) else f"must be JSON text, got {clip(v)}"
            raise HistoryError(f"record {row}: {why}", path=path, field="value") from None
    return parse_op(rec, path=path, record=row)


class _Parts:
    """The Parquet part files a JSONL history was converted into, in a temporary directory
    removed with this object (a :class:`ColumnarHistory` streams log entries from them)."""

    def __init__(self, tmp: Any, files: Sequence[Path]) -> None:
        self.tmp, self.files = tmp, [str(f) for f in files]


COLUMNAR_COLUMNS = (
    "index",
    "type",
    "process",
    "f",
    "key",
    "node",
    "v_kind",
    *(f"v_{f}" for f in VALUE_FIELDS),
)
"""What :class:`ColumnarHistory` keeps in memory: every column but ``time``, ``error``,
``value`` and ``v_entries`` (the last streamed on demand, the others never read)."""


@dataclass(frozen=True)
class ColumnarHistory:
    """A history's client records as Arrow columns (a Parquet file's, or made from a JSONL
    file by :meth:`from_jsonl`), paired once, with no :class:`Op` per record: the local
    engine's input for checkers that read columns (``CheckerSpec.columnar``).

    Building an ``Op`` per record (decoding every ``value``, a thousand entries per
    final read) was most of a local check's time and memory; the typed ``v_*`` columns
    already hold what the log checks read. ``table`` holds :data:`COLUMNAR_COLUMNS` of
    the client records in history order, ``rows`` each one's row in the file, and
    ``inv``/``comp`` the pairs (positions in ``table``, -1 for an op that never
    completed) a checker was given, in invocation order. ``v_entries`` is read by
    :meth:`entries`, a Parquet batch at a time, so memory holds one batch's entries (a
    JSONL history's from the Parquet parts it was converted into, ``parts``).
    """

    path: str
    table: Any
    rows: Any
    inv: Any
    comp: Any
    parts: _Parts | None = None
    """For a history read from JSONL, the temporary Parquet files it was converted into, in
    file order, by one process per core (:func:`jsonl_to_parquet_parts`): the JSONL cannot
    be streamed again cheaply, and its entries held in memory were a fifth of the check's
    peak."""
    fault_fs: frozenset[str] = frozenset()
    """The ``f`` of the history's fault records (which are not in ``table``): a checker
    that judges some of them (``CheckerSpec.faults``) runs on ops instead."""

    @classmethod
    def read(cls, path: str | os.PathLike[str], *, strict: bool = True) -> ColumnarHistory | None:
        """The history at ``path``, paired; None when the file lacks the typed columns
        (written before them) or is malformed in any way pairing rejects: the caller then
        reads ops, which gives the exact error."""
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(str(path))
            names = set(pf.schema_arrow.names)
            if not set(COLUMNAR_COLUMNS) | {"v_entries"} <= names:
                return None
            t = pf.read(columns=list(COLUMNAR_COLUMNS), use_threads=True)
        except Exception:  # unreadable: the op reader names the problem
            return None
        return cls._of(str(path), t, strict=strict)

    @classmethod
    def from_jsonl(
        cls, path: str | os.PathLike[str], *, strict: bool = True
    ) -> ColumnarHistory | None:
        """A JSONL history read into the same columns: converted to Parquet parts on every
        core (:func:`jsonl_to_parquet_parts`, ``value`` left null: it is never read), then
        read back as :meth:`read` reads a file, entries streamed from the parts. Errors of
        an unreadable file are :func:`iter_jsonl`'s, word for word; None for a malformed
        history, as :meth:`read`."""
        import tempfile

        import pyarrow as pa
        import pyarrow.parquet as pq

        # lives as long as the history (removed when it is collected)
        tmp = tempfile.TemporaryDirectory(prefix="splitbrain-jsonl-")
        try:
            files = jsonl_to_parquet_parts(
                path, tmp.name, workers=os.cpu_count() or 1, values=False
            )
            tables = [pq.read_table(f, columns=list(COLUMNAR_COLUMNS)) for f in files]
        except BaseException:
            tmp.cleanup()
            raise
        t = pa.concat_tables(tables)
        del tables
        if not t.num_rows:
            tmp.cleanup()
            return None
        return cls._of(str(path), t, strict=strict, parts=_Parts(tmp, files))

    @classmethod
    def _of(
        cls, path: str, t: Any, *, strict: bool, parts: _Parts | None = None
    ) -> ColumnarHistory | None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from harness.core.paired import pair_arrays

        if any(t[c].null_count for c in ("index", "type", "process", "f")):
            return None
        t = t.select(list(COLUMNAR_COLUMNS))
        client = pc.fill_null(pc.not_equal(t["process"], NEMESIS), True)
        rows = np.flatnonzero(client.to_numpy(zero_copy_only=False))
        fault_fs: frozenset[str] = frozenset()
        if len(rows) < t.num_rows:  # nemesis records: dropped, as pairing drops them
            fault_fs = frozenset(pc.unique(t.filter(pc.invert(client))["f"]).to_pylist())
        index = t["index"].to_numpy()[rows]
        if len(index) > 1 and not np.all(index[1:] > index[:-1]):
            by = np.argsort(index, kind="stable")
            rows, index = rows[by], index[by]
            if np.any(index[1:] == index[:-1]):
                return None
        # One copy of the columns, in one chunk each: taken when records were dropped or
        # reordered, combined otherwise (filter, sort and combine would copy three times).
        moved = len(rows) < t.num_rows or not np.array_equal(rows, np.arange(len(rows)))
        t = t.take(pa.array(rows)).combine_chunks() if moved else t.combine_chunks()
        proc = pc.dictionary_encode(t["process"]).combine_chunks().indices
        fcode = pc.dictionary_encode(t["f"]).combine_chunks().indices
        typ = t["type"]
        paired = pair_arrays(
            proc.to_numpy(zero_copy_only=False),
            pc.equal(typ, "invoke").to_numpy(zero_copy_only=False),
            pc.equal(typ, "info").to_numpy(zero_copy_only=False),
            fcode.to_numpy(zero_copy_only=False),
            strict=strict,
        )
        if paired is None:
            return None
        pa.default_memory_pool().release_unused()  # the reader's buffers, before a check
        return cls(path, t, rows, paired[0], paired[1], parts, fault_fs)

    def __len__(self) -> int:
        """Client records in the history (not only the pairs given)."""
        return int(self.table.num_rows)

    def subset(self, keep: Any) -> ColumnarHistory:
        """The pairs numbered ``keep`` (positions in ``inv``/``comp``), same table."""
        return ColumnarHistory(
            self.path,
            self.table,
            self.rows,
            self.inv[keep],
            self.comp[keep],
            self.parts,
            self.fault_fs,
        )

    def column(self, name: str) -> Any:
        """One column of ``table`` as a single Arrow array."""
        col = self.table[name]
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()

    def entries(self, positions: Any, *, batch: int = 4_096) -> Iterator[tuple[Any, Any]]:
        """``(positions, v_entries)`` of the table rows at ``positions`` (a numpy array),
        in file order, one Parquet batch at a time."""
        import numpy as np
        import pyarrow as pa

        if len(positions) == 0:
            return
        file_rows = self.rows[positions]
        order = np.argsort(file_rows, kind="stable")
        file_rows, positions = file_rows[order], positions[order]
        start = 0
        for col in self._entry_batches(batch):
            end = start + len(col)
            lo, hi = np.searchsorted(file_rows, [start, end])
            if hi > lo:
                yield positions[lo:hi], col.take(pa.array(file_rows[lo:hi] - start))
            start = end

    def _entry_batches(self, batch: int) -> Iterator[Any]:
        """The ``v_entries`` of every record of the file, in file order, a batch at a time:
        from the Parquet file, or from the parts of a JSONL history."""
        import pyarrow.parquet as pq

        for name in self.parts.files if self.parts is not None else [self.path]:
            pf = pq.ParquetFile(name)
            for b in pf.iter_batches(batch_size=batch, columns=["v_entries"], use_threads=False):
                yield b.column(0)
