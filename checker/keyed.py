"""The local engine on a history too big to hold: streamed, split by key on disk, judged a key
at a time.

Reading a history into ops costs about 0.9 KB per record (4.2 GB at 5M records), so
100M records cannot be held, and the columnar path (:class:`~harness.core.parquet.
ColumnarHistory`) keeps a dozen columns of every record too. A checker whose verdict is each
key's alone (``CheckerSpec.keyed``: linearizability, per key) needs none of that. For a
Parquet history of at least :data:`KEYED_ROWS` records whose every claimed part has such a
checker, :func:`check_local_keyed`

1. reads four narrow columns a batch at a time and pairs the records as
   :func:`~harness.core.paired.pair_positions` does (one open op per process carried from
   batch to batch; a malformed history raises the same error, found again record by record
   in the batch that holds it), keeping one byte per record: its pair's op shape;
2. asks every checker's ``claims`` about those shapes (:func:`checker.local._assign`, as
   both other local paths do);
3. per claimed part, reads the op columns again a batch at a time and appends the part's
   records to one of N Arrow files by a hash of the key (N such that a file holds about
   :data:`BUCKET_ROWS` records), then sorts each file by ``(key, index)`` and hands the
   checker each key's ops in turn (the Spark engine's tasks do the same over their sorted
   partitions, :mod:`checker.spark.linearizable`).

Memory is then a batch, a bucket's columns and one key's ops, plus the byte per record; the
disk holds the claimed records once (compressed), removed as each bucket is judged.
Anything this path does not handle (an older file without ``v_kind``, a null or non-integer
field, records out of index order, a checker without ``keyed``, one reading fault records)
returns None, and the caller takes the path that holds the history, which words every
error exactly.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.base import crash_result
from checker.linearizable import KEY_COLUMNS, ops_of_rows
from checker.registry import checkers, parse_settings
from checker.results import compose_results
from harness.core.checker import JSON_KINDS, OpShape
from harness.core.errors import HistoryError
from harness.core.op import NEMESIS, OP_TYPES, Op
from harness.core.paired import pair_positions

__all__ = ["KEYED_ROWS", "BUCKET_ROWS", "check_local_keyed"]

log = logging.getLogger(__name__)

KEYED_ROWS = 2_000_000
"""Records from which the local engine streams a history rather than holding it (the size
from which ``auto`` picks Spark, :data:`checker.dispatch.AUTO_SPARK_OPS`); below it the
whole paths are as fast and give the same verdicts."""

BUCKET_ROWS = 1_000_000
"""Records per key bucket: its columns and sort are what a bucket holds in memory."""

BATCH = 262_144
"""Records per Parquet batch read."""

_SCAN = ("index", "type", "process", "f", "key", "v_kind")
_TYPES = ("invoke", "ok", "fail", "info", None)  # code 4: never completed
_KINDS = (*JSON_KINDS, None)
_NO_SHAPE = 255  # a nemesis record's code: no pair, no checker


@dataclass
class _Carry:
    """What pairing carries from one batch to the next: each process's open invocation
    (as parallel lists), and the processes whose op ended ``info``."""

    proc: Any
    pos: Any
    f: Any
    keyed: Any
    kind: Any
    index: Any
    crashed: set[int]


@dataclass
class _Scan:
    """Pass 1's findings: per client record its pair's shape code, the shapes, the f names."""

    codes: Any
    shapes: list[tuple[str, bool, str, str | None, str | None]]
    fault_fs: frozenset[str]
    has_adds: bool


class _Decline(Exception):
    """This history is not for the streamed path (the caller holds it instead)."""


def check_local_keyed(
    path: str | os.PathLike[str],
    *,
    model: str | None = None,
    timeout: float | None = None,
    opts: Mapping[str, Any] | None = None,
    min_rows: int = KEYED_ROWS,
    bucket_rows: int = BUCKET_ROWS,
    batch: int = BATCH,
) -> dict[str, Any] | None:
    """:func:`checker.local.check_local` of the Parquet history at ``path`` in bounded
    memory, or None when the history is smaller than ``min_rows`` or not one this path
    handles (module docstring). HistoryError on a malformed history, as the op path."""
    import pyarrow.parquet as pq

    from checker.local import _assign

    if Path(path).suffix.lower() != ".parquet":
        return None
    t0 = time.monotonic()
    try:
        pf = pq.ParquetFile(str(path))
        if pf.metadata.num_rows < min_rows or not set(_SCAN) <= set(pf.schema_arrow.names):
            return None
    except Exception:  # unreadable: the op reader names the problem
        return None
    specs = checkers()
    settings = parse_settings(opts, model=model, timeout=timeout, specs=specs)
    try:
        scan = _scan(pf, batch)
    except _Decline:
        return None
    shapes = [OpShape(*s, scan.has_adds) for s in scan.shapes]
    runs = _assign(shapes, settings, specs, scan.fault_fs)
    if not runs or any(spec.keyed is None or spec.faults & scan.fault_fs for _, spec, _, _ in runs):
        return None
    results = {}
    buckets = 0
    for name, spec, part, shape_ns in runs:
        assert spec.keyed is not None
        config = settings.config(spec.name, part)
        keys = _KeyGroups(pf, scan.codes, shape_ns, bucket_rows, batch)
        try:
            res = spec.keyed(keys, config)
        except HistoryError:
            raise
        except Exception as e:  # as check_spec_safe: one checker's bug hides no verdict
            log.warning("checker %s crashed", spec.name, exc_info=True)
            res = crash_result(spec.name, e)
        finally:
            keys.close()
        buckets += keys.buckets_made
        if res is None:
            return None
        results[name] = res
    n_client = int((scan.codes != _NO_SHAPE).sum())
    log.info("streamed %s: %d client records, %d key buckets", path, n_client, buckets)
    return compose_results(
        results,
        engine="local",
        started=t0,
        cap=settings.cap,
        client_records=lambda: n_client,
    )


# --------------------------------------------------------------------------- pass 1: pairing


def _codes(arr: Any, table: dict[Any, int], convert: Any = None) -> Any:
    """An Arrow column as integer codes of a table that grows across batches (its values,
    converted, as keys); :class:`_Decline` on a null or a value ``convert`` rejects."""
    import numpy as np
    import pyarrow.compute as pc

    if arr.null_count:
        raise _Decline
    enc = _one(pc.dictionary_encode(arr))
    lut = []
    for v in enc.dictionary.to_pylist():
        k = v if convert is None else convert(v)
        lut.append(table.setdefault(k, len(table)))
    return np.asarray(lut, np.int64)[enc.indices.to_numpy(zero_copy_only=False)]


def _one(arr: Any) -> Any:
    """An Arrow array in one chunk (a batch's column is one already)."""
    return arr.combine_chunks() if hasattr(arr, "combine_chunks") else arr


def _as_process(v: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise _Decline from None


def _scan(pf: Any, batch: int) -> _Scan:
    """Pass 1 over narrow columns: validate and pair, one shape code per client record."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n_rows = pf.metadata.num_rows
    codes = np.full(n_rows, _NO_SHAPE, np.uint8)
    procs: dict[Any, int] = {}
    fs: dict[Any, int] = {}
    types = {t: i for i, t in enumerate(_TYPES[:4])}
    kinds = {k: i for i, k in enumerate(_KINDS[:-1])}
    shape_of: dict[int, int] = {}
    empty = np.zeros(0, np.int64)
    carry = _Carry(empty, empty, empty, empty, empty, empty, set())
    fault_fs: set[str] = set()
    seen = 0  # client records before this batch
    last_index: int | None = None
    for b in pf.iter_batches(batch_size=batch, columns=list(_SCAN), use_threads=False):
        if any(b.column(c).null_count for c in ("index", "type", "process", "f")):
            raise _Decline
        nem = pc.equal(b.column("process"), NEMESIS).to_numpy(zero_copy_only=False)
        if nem.any():
            fault_fs.update(pc.unique(b.column("f").filter(pa.array(nem))).to_pylist())
            b = b.filter(pa.array(~nem))
        m = b.num_rows
        if not m:
            continue
        index = b.column("index").to_numpy()
        if (last_index is not None and index[0] <= last_index) or np.any(index[1:] <= index[:-1]):
            raise _Decline  # out of index order: the op path sorts the whole history
        last_index = int(index[-1])
        typ = _codes(b.column("type"), types, lambda t: t if t in OP_TYPES else _reject())
        if len(types) > 4:
            raise _Decline
        proc = _codes(b.column("process"), procs, _as_process)
        f = _codes(b.column("f"), fs, lambda v: v if v else _reject())
        kind = _codes(b.column("v_kind"), kinds, lambda k: k if k in kinds else _reject())
        keyed = pc.is_valid(b.column("key")).to_numpy(zero_copy_only=False).astype(np.int64)
        pos = np.arange(seen, seen + m, dtype=np.int64)
        carry = _pair(b, carry, proc, typ, f, keyed, kind, pos, index, codes, shape_of, fs, procs)
        seen += m
    never = np.full(len(carry.pos), _TYPES.index(None), np.int64)  # no completion, no kind
    none = np.full(len(carry.pos), _KINDS.index(None), np.int64)
    _mark(codes, shape_of, carry.pos, carry.pos, carry.f, carry.keyed, carry.kind, never, none)
    names = {v: k for k, v in fs.items()}
    shapes = []
    for key in sorted(shape_of, key=shape_of.__getitem__):
        key, ck = divmod(key, 8)
        key, ct = divmod(key, 8)
        key, ik = divmod(key, 8)
        fc, kd = divmod(key, 2)
        shapes.append((names[fc], bool(kd), _KINDS[ik] or "null", _TYPES[ct], _KINDS[ck]))
    return _Scan(codes[:seen], shapes, frozenset(fault_fs), "add" in fs)


def _reject() -> Any:
    raise _Decline


def _mark(
    codes: Any,
    shape_of: dict[int, int],
    inv_pos: Any,
    comp_pos: Any,
    f: Any,
    keyed: Any,
    ik: Any,
    ct: Any,
    ck: Any,
) -> None:
    """Both records of each pair get its shape's code (a small integer per distinct shape)."""
    import numpy as np

    if not len(inv_pos):
        return
    key = ((f * 2 + keyed) * 8 + ik) * 8 * 8 + ct * 8 + ck
    uniq, inverse = np.unique(key, return_inverse=True)
    lut = np.asarray([shape_of.setdefault(int(k), len(shape_of)) for k in uniq], np.int64)
    if len(shape_of) >= _NO_SHAPE:
        raise _Decline
    sid = lut[inverse].astype(np.uint8)
    codes[inv_pos] = sid
    codes[comp_pos] = sid


def _pair(
    b: Any,
    carry: _Carry,
    proc: Any,
    typ: Any,
    f: Any,
    keyed: Any,
    kind: Any,
    pos: Any,
    index: Any,
    codes: Any,
    shape_of: dict[int, int],
    fs: dict[Any, int],
    procs: dict[Any, int],
) -> _Carry:
    """One batch paired after the open invocations carried in (which precede it): the rules
    of :func:`~harness.core.paired.pair_arrays`, each a comparison of neighbours once the
    records are sorted by process; the new carry is what is still open."""
    import numpy as np

    n_c = len(carry.pos)
    cp = np.concatenate((carry.proc, proc))
    iv = np.concatenate((np.ones(n_c, bool), typ == 0))
    order = np.argsort(cp, kind="stable")
    p, v = cp[order], iv[order]
    n = len(p)
    same_next = np.zeros(n, bool)
    same_next[:-1] = p[1:] == p[:-1]
    same_prev = np.zeros(n, bool)
    same_prev[1:] = same_next[:-1]
    prev_inv = np.zeros(n, bool)
    prev_inv[1:] = v[:-1]
    cf = np.concatenate((carry.f, f))[order]
    ks = np.flatnonzero(v)
    nxt = np.minimum(ks + 1, n - 1)
    done = same_next[ks] & ~v[nxt]
    ctyp = np.concatenate((np.zeros(n_c, np.int64), typ))[order]
    info = ctyp == 3
    upto = np.cumsum(info) - info
    start = np.maximum.accumulate(np.where(same_prev, 0, np.arange(n)))
    crashed = np.zeros(len(procs) + 1, bool)
    crashed[list(carry.crashed)] = True
    bad = (
        np.any(v[:-1] & same_next[:-1] & v[1:])  # a double invoke
        or np.any(~v & ~(same_prev & prev_inv))  # an orphan completion
        or np.any(cf[ks[done]] != cf[nxt[done]])  # a completion of another f
        or np.any(v & (upto - upto[start] > 0))  # a process reused after info, in the batch
        or np.any(v & crashed[p])  # ... or after an info in an earlier batch
    )
    if bad:
        _raise_exact(b, carry, fs, procs)
        raise _Decline  # not reached: the exact walk found the same fault
    cpos = np.concatenate((carry.pos, pos))[order]
    ckeyed = np.concatenate((carry.keyed, keyed))[order]
    ckind = np.concatenate((carry.kind, kind))[order]
    inv, comp = ks[done], nxt[done]
    _mark(
        codes,
        shape_of,
        cpos[inv],
        cpos[comp],
        cf[inv],
        ckeyed[inv],
        ckind[inv],
        ctyp[comp],
        ckind[comp],
    )
    still = ks[~done]
    cidx = np.concatenate((carry.index, index))[order]
    return _Carry(
        p[still],
        cpos[still],
        cf[still],
        ckeyed[still],
        ckind[still],
        cidx[still],
        carry.crashed | {int(x) for x in np.unique(p[info])},
    )


def _raise_exact(b: Any, carry: _Carry, fs: dict[Any, int], procs: dict[Any, int]) -> None:
    """The batch paired by :func:`~harness.core.paired.pair_positions` itself (strict), after
    ops standing for the carried state: an ``info`` pair for each process gone before this
    batch, then each still-open invocation with its own index and ``f``. So it raises the
    whole path's HistoryError, word for word, for the first fault."""
    f_name = {v: k for k, v in fs.items()}
    p_name = {v: k for k, v in procs.items()}
    ops: list[Op] = []
    for c in carry.crashed:
        ops += [Op("invoke", p_name[c], "gone"), Op("info", p_name[c], "gone")]
    for p, i, fc in zip(carry.proc, carry.index, carry.f, strict=True):
        ops.append(Op("invoke", p_name[int(p)], f_name[int(fc)], index=int(i)))
    cols = [b.column(c).to_pylist() for c in ("index", "type", "process", "f")]
    ops += [Op(t, int(p), f, index=i) for i, t, p, f in zip(*cols, strict=True)]
    pair_positions(ops, strict=True)


# --------------------------------------------------------------------------- passes 2 and 3


class _KeyGroups:
    """One claimed part's records as ``(key, ops)``, a key at a time: bucketed to disk on the
    first iteration, then each bucket sorted and walked (the iterable a ``keyed`` checker
    gets; one that declines never iterates it, and nothing is written)."""

    def __init__(
        self, pf: Any, codes: Any, shape_ns: list[int], bucket_rows: int, batch: int
    ) -> None:
        import numpy as np

        lut = np.zeros(256, bool)
        lut[list(shape_ns)] = True
        self.pf, self.mine, self.batch = pf, lut[codes], batch
        claimed = int(self.mine.sum())
        self.n_buckets = max(1, -(-claimed // max(1, bucket_rows)))
        self.buckets_made = 0
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __iter__(self) -> Iterator[tuple[Any, list[Op]]]:
        self._tmp = tempfile.TemporaryDirectory(prefix="splitbrain-keyed-")
        files = self._spill(Path(self._tmp.name))
        try:
            for name in files:
                yield from self._walk(name)
                os.unlink(name)
        finally:
            self.close()

    def _spill(self, where: Path) -> list[str]:
        """Pass 2: the part's records appended to their key's bucket file."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        names = [str(where / f"bucket-{b}.arrow") for b in range(self.n_buckets)]
        opts = pa.ipc.IpcWriteOptions(compression="lz4")
        writers: list[Any] = [None] * self.n_buckets
        seen = 0
        hashes: dict[str, int] = {}
        try:
            for b in self.pf.iter_batches(
                batch_size=self.batch, columns=list(KEY_COLUMNS), use_threads=False
            ):
                client = pc.not_equal(b.column("process"), NEMESIS)
                b = b.filter(client)
                m = b.num_rows
                keep = self.mine[seen : seen + m]
                seen += m
                if not keep.any():
                    continue
                b = b.filter(pa.array(keep))
                bucket = self._bucket_of(b.column("key"), hashes)
                order = np.argsort(bucket, kind="stable")
                b = b.take(pa.array(order))
                bucket = bucket[order]
                cuts = np.searchsorted(bucket, np.arange(self.n_buckets + 1))
                for k in range(self.n_buckets):
                    lo, hi = int(cuts[k]), int(cuts[k + 1])
                    if hi > lo:
                        if writers[k] is None:
                            writers[k] = pa.ipc.new_file(names[k], b.schema, options=opts)
                        writers[k].write_batch(b.slice(lo, hi - lo))
        finally:
            for w in writers:
                if w is not None:
                    w.close()
        made = [n for n, w in zip(names, writers, strict=True) if w is not None]
        self.buckets_made = len(made)
        return made

    def _bucket_of(self, keys: Any, hashes: dict[str, int]) -> Any:
        """Each record's bucket, from a CRC of its key (a null key: bucket 0), computed once
        per distinct key of the history."""
        import numpy as np
        import pyarrow.compute as pc

        if self.n_buckets == 1:
            return np.zeros(len(keys), np.int64)
        enc = _one(pc.dictionary_encode(keys))
        n = self.n_buckets
        lut = [
            hashes.get(k) if k in hashes else hashes.setdefault(k, zlib.crc32(k.encode()) % n)
            for k in enc.dictionary.to_pylist()
        ]
        idx = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False)
        out = np.asarray([*lut, 0], np.int64)[idx]  # -1 (a null key) takes the appended 0
        return out

    def _walk(self, name: str, slice_rows: int = 65_536) -> Iterator[tuple[Any, list[Op]]]:
        """Pass 3: one bucket sorted by ``(key, index)``, its keys' ops in turn, converted to
        Python a slice at a time (a key may straddle slices)."""
        import pyarrow as pa

        with pa.memory_map(name) as src:
            t = pa.ipc.open_file(src).read_all()
        t = t.sort_by([("key", "ascending"), ("index", "ascending")])
        group: list[tuple[Any, ...]] = []
        for lo in range(0, t.num_rows, slice_rows):
            part = t.slice(lo, slice_rows)
            rows = zip(*(part.column(c).to_pylist() for c in KEY_COLUMNS), strict=True)
            for row in rows:
                if group and row[0] != group[0][0]:
                    yield group[0][0], ops_of_rows(group)
                    group = []
                group.append(row)
        del t
        if group:
            yield group[0][0], ops_of_rows(group)
