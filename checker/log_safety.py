"""The local engine's log safety: every anomaly of :mod:`checker.log_anomalies` over a
history's Arrow columns (a :class:`~harness.core.parquet.ColumnarHistory`).

What each anomaly means, the order of values and examples and the result map are
:mod:`checker.log_anomalies`', shared with the Spark engine (:mod:`checker.spark.log_safety`);
this module only computes them. :func:`check_log_safety_columns` is the implementation:
the local engine hands it a Parquet or JSONL history's columns (``LOG_SAFETY.columnar``),
and :func:`check_log_safety` takes ops (a test's, or the local engine's on an in-memory
history) by writing them as the Parquet a run writes (:func:`harness.core.parquet.write_parquet`)
and reading that back as the local engine reads a file, so there is one implementation.

Examples carry ``"indexes"``, the sorted history indexes of the records that prove them,
and each kind's examples are sorted by them (ties by their other fields,
:func:`checker.log_anomalies.tie_key`), so the two engines give identical lists.
"""

from __future__ import annotations

import bisect
import json
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from checker.families import is_log
from checker.log_anomalies import (
    ANOMALIES,
    NOTES,
    LogSafetyOptions,
    by_indexes,
    canon,
    ha_of,
    is_int,
    is_system,
    judgeable,
    result,
    unsettled,
    value_key,
    volatile_of,
)
from harness.core.checker import ALL, CheckConfig, CheckerSpec, OpShape
from harness.core.errors import HistoryError
from harness.core.op import Op
from harness.core.paired import PairedHistory
from harness.core.parquet import ColumnarHistory, write_parquet

__all__ = [
    "ANOMALIES",
    "NOTES",
    "LOG_SAFETY",
    "check_log_safety",
    "check_log_safety_columns",
]


# --------------------------------------------------------------------------- samples


def _freeze(x: Any) -> Any:
    """A hashable twin of a JSON value, so incarnations can be dict keys."""
    if isinstance(x, list):
        return tuple(_freeze(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    return x


@dataclass(frozen=True, slots=True)
class _Sample:
    """An ok sample's fields the checks read; the integers are None when not integers."""

    index: int
    node: Any
    incarnation: Any  # hashable (frozen), for grouping
    inc: Any  # as recorded, for examples
    committed: int | None
    end: int | None
    term: int | None
    leader: bool
    # The member that answered (its ``member`` id, else the host) and the configuration
    # in force on it: voters and learners by member id, the config entry's log index
    # (-1: the startup list); None when the sample carries none.
    member: Any = None
    voters: frozenset[str] | None = None
    learners: frozenset[str] = frozenset()
    config_index: int | None = None
    unsettled: bool = False
    """It answered in a role other than leader or follower (a candidate, a node stopped by
    an error): its term may not be saved yet."""


_NO_LEARNERS: frozenset[str] = frozenset()
"""Shared: an empty frozenset is a new 200-byte object per call, once per sample."""

_Ack = tuple[int, int, Any, Any, Any]
"""An ok append: (invocation index, completion index, answering host, acked term, acked
log index), the last two as recorded."""


def _member_config(
    node: Any, member: Any, config: Any
) -> tuple[Any, frozenset[str] | None, frozenset[str], int | None]:
    """A sample's member key (its ``member`` id when it is a string, else the host) and
    its configuration, as :class:`_Sample` keeps them (None: no usable configuration)."""
    key = member if isinstance(member, str) else node
    if not isinstance(config, dict) or not isinstance(config.get("voters"), list):
        return key, None, _NO_LEARNERS, None
    learners = config.get("learners")
    return (
        key,
        frozenset(map(str, config["voters"])),
        frozenset(map(str, learners)) if isinstance(learners, list) else _NO_LEARNERS,
        config.get("index") if is_int(config.get("index")) else None,
    )


# The sample checks, one per kind (checker.log_anomalies.KINDS says what each means), over
# the samples in history order.


def _committed_regress(samples: Sequence[_Sample]) -> list[dict[str, Any]]:
    best: dict[tuple[Any, Any], tuple[int, int]] = {}  # (member, inc) -> (max, sample index)
    reported: set[tuple[Any, Any]] = set()
    out = []
    for s in samples:
        c = s.committed
        if c is None:
            continue
        k = (s.member, s.incarnation)
        prev = best.get(k)
        if prev is None or c > prev[0]:
            best[k] = (c, s.index)
        elif c < prev[0] and k not in reported:
            reported.add(k)
            out.append(
                {
                    "node": s.member,
                    "incarnation": s.inc,
                    "from": prev[0],
                    "to": c,
                    "indexes": [prev[1], s.index],
                }
            )
    return by_indexes(out)


def _committed_regress_restart(samples: Sequence[_Sample]) -> list[dict[str, Any]]:
    last: dict[Any, _Sample] = {}
    out = []
    for s in samples:
        c = s.committed
        if c is None:
            continue
        prev = last.get(s.member)
        last[s.member] = s
        if prev is None or prev.incarnation == s.incarnation:
            continue
        pc = prev.committed
        if pc is not None and c < pc:
            out.append(
                {
                    "node": s.member,
                    "incarnation": s.inc,
                    "previous_incarnation": prev.inc,
                    "from": pc,
                    "to": c,
                    "indexes": [prev.index, s.index],
                }
            )
    return by_indexes(out)


def _committed_beyond_end(samples: Sequence[_Sample]) -> list[dict[str, Any]]:
    out = []
    for s in samples:
        c, e = s.committed, s.end
        if c is not None and e is not None and c > e:
            out.append(
                {
                    "node": s.member,
                    "incarnation": s.inc,
                    "committed": c,
                    "end": e,
                    "indexes": [s.index],
                }
            )
    return by_indexes(out)


def _two_leaders_in_term(samples: Sequence[_Sample]) -> list[dict[str, Any]]:
    first: dict[int, dict[Any, int]] = {}
    for s in samples:
        t = s.term
        if s.leader and t is not None:
            first.setdefault(t, {}).setdefault(s.member, s.index)
    out = []
    for t, nodes in first.items():
        if len(nodes) > 1:
            out.append(
                {"term": t, "nodes": sorted(nodes, key=str), "indexes": sorted(nodes.values())}
            )
    return by_indexes(out)


def _term_regress(
    samples: Sequence[_Sample], *, settled_terms_only: bool = False
) -> list[dict[str, Any]]:
    best: dict[Any, tuple[int, int]] = {}
    out = []
    for s in samples:
        t = s.term
        if t is None:
            continue
        prev = best.get(s.member)
        if prev is not None and t < prev[0]:
            out.append(
                {
                    "node": s.member,
                    "incarnation": s.inc,
                    "from": prev[0],
                    "to": t,
                    "indexes": [prev[1], s.index],
                }
            )
        elif (prev is None or t > prev[0]) and not (settled_terms_only and s.unsettled):
            best[s.member] = (t, s.index)
    return by_indexes(out)


# --------------------------------------------------------------------------- membership


def _removals(samples: Sequence[_Sample]) -> dict[Any, tuple[int, int, int]]:
    """Each removed member: (the lowest term of a sample showing its removal committed,
    that sample's history index, the removing configuration's log index); ties in term
    go to the earliest sample (leader-after-removal's definition of a removal)."""
    first_in: dict[str, int] = {}
    last_in: dict[str, int] = {}
    seen: dict[tuple[int, frozenset[str], frozenset[str]], tuple[int, int]] = {}
    for s in samples:
        ci = s.config_index
        if s.voters is None or ci is None:
            continue
        for m in s.voters if ci < 0 else s.voters | s.learners:
            if first_in.get(m, ci + 1) > ci:
                first_in[m] = ci
            if last_in.get(m, ci - 1) < ci:
                last_in[m] = ci
        if ci >= 0 and s.committed is not None and ci <= s.committed and s.term is not None:
            k = (ci, s.voters, s.learners)
            if k not in seen or (s.term, s.index) < seen[k]:
                seen[k] = (s.term, s.index)
    out: dict[Any, tuple[int, int, int]] = {}
    for (ci, voters, learners), (term, index) in seen.items():
        for m, lo in first_in.items():
            if lo < ci and last_in[m] < ci and m not in voters and m not in learners:
                cur = out.get(m)
                if cur is None or (term, index) < cur[:2]:
                    out[m] = (term, index, ci)
    return out


def _leader_after_removal(
    samples: Sequence[_Sample], gone: dict[Any, tuple[int, int, int]]
) -> list[dict[str, Any]]:
    out = []
    done: set[Any] = set()
    for s in samples:
        r = gone.get(s.member)
        if r is None or not s.leader or s.term is None or s.term <= r[0] or s.member in done:
            continue
        done.add(s.member)
        out.append(
            {
                "node": s.member,
                "term": s.term,
                "removed_term": r[0],
                "config_index": r[2],
                "indexes": sorted([r[1], s.index]),
            }
        )
    return by_indexes(out)


def _ack_after_removal(
    samples: Sequence[_Sample], acks: Sequence[_Ack], gone: dict[Any, tuple[int, int, int]]
) -> list[dict[str, Any]]:
    if not gone:
        return []
    hosts: dict[Any, tuple[list[int], list[Any]]] = {}
    for s in samples:
        at, who = hosts.setdefault(s.node, ([], []))
        at.append(s.index)
        who.append(s.member)
    out = []
    for inv, comp, node, term, li in acks:
        h = hosts.get(node)
        if h is None or not is_int(term):
            continue
        at, who = h
        k = bisect.bisect_left(at, inv)
        j = bisect.bisect_right(at, comp)
        if k == 0 or j == len(at) or who[k - 1] != who[j]:
            continue
        r = gone.get(who[j])
        if r is not None and term > r[0]:
            out.append(
                {
                    "node": who[j],
                    "term": term,
                    "index": li,
                    "removed_term": r[0],
                    "indexes": sorted([r[1], comp]),
                }
            )
    return by_indexes(out)


# --------------------------------------------------------------------------- ops


_LOG_FS = ("append", "read", "sample")
"""The ``f`` of every op a log-safety check reads."""


def check_log_safety(
    ops: Sequence[Op], ha: dict[str, Any] | None = None, *, settled_terms_only: bool = False
) -> dict[str, Any]:
    """Every log-safety anomaly over a history given as ops: the result map of
    :func:`checker.log_anomalies.result` (``valid``, ``anomalies``, ``notes``,
    ``unknown``, ``stats``).

    The ops are paired (:class:`~harness.core.errors.HistoryError` on a malformed
    history), their appends, reads and samples written to a temporary Parquet file as a
    run writes its history, and that file checked by :func:`check_log_safety_columns`, as
    the local engine checks a stored history: one implementation for both.
    """
    paired = PairedHistory.of(ops)
    keep = [n for n, (inv, _) in enumerate(paired.pairs()) if inv.f in _LOG_FS]
    share = paired.subset(keep)
    with tempfile.TemporaryDirectory(prefix="splitbrain-log-safety-") as tmp:
        path = Path(tmp) / "history.parquet"
        write_parquet(share, path)
        cols = ColumnarHistory.read(path, strict=False)
        if cols is None:  # pairing passed: two records share an index
            indexes = sorted(op.index for op in share)
            dup = next((a for a, b in pairwise(indexes) if a == b), None)
            why = "two records share this history index" if dup is not None else "unreadable"
            raise HistoryError(f"log safety: {why}", index=dup)
        return check_log_safety_columns(cols, ha, settled_terms_only=settled_terms_only)


# --------------------------------------------------------------------------- columnar path
#
# Over a Parquet history's columns (ColumnarHistory): profiled on a 1M-record history,
# reading an Op per record (JSON-decoding every value, a thousand entries per final read)
# and per-observation Python loops were nearly all of the time and memory. Here no Op is
# built; log entries are streamed a Parquet batch at a time and reduced at once, by
# Arrow's hash aggregation, to one row per distinct (log index, term, payload), so memory
# follows the log's length, not the number of observations. Terms and payloads are
# compared as the columns' canonical JSON text (checker.log_anomalies: Equality) and
# decoded only for examples. The sample checks are the functions above, fed from columns.

_SENTINEL_NONE = -1  # committed-observation mode of a read: none (committed not an integer)
_SENTINEL_ALL = 1  # all entries (committed absent or null)
_INT64 = (-(2**63), 2**63 - 1)


def _ints(arr: Any) -> list[int | None]:
    """JSON texts to ints, None where a text is not an integer (``true``, ``1.5``, ``"1"``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    m = pc.fill_null(pc.match_substring_regex(arr, r"^-?[0-9]+$"), False)
    txt = pc.if_else(m, arr, pa.scalar(None, pa.string()))
    try:
        ints: list[int | None] = pc.cast(txt, pa.int64()).to_pylist()
        return ints
    except (pa.ArrowInvalid, OverflowError):  # beyond int64: Python ints
        return [None if x is None else int(x) for x in txt.to_pylist()]


_JSON_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")


def _loads(x: str | None) -> Any:
    """A JSON text decoded; an integer's (every acked log index, once per ack) without
    the decoder's Python entry, which cost ten times the match."""
    if x is None:
        return None
    if _JSON_INT.fullmatch(x):
        return int(x)
    return json.loads(x)


def _decoded(h: Any, name: str, take: Any) -> list[Any]:
    """A typed column's JSON texts at ``take``, decoded (a sample's member and
    configuration take a handful of values); None where absent, and for a history
    written before the column existed."""
    if name not in h.table.column_names:
        return [None] * len(take)
    return _per_distinct(h.column(name).take(take), _loads)


def _per_distinct(
    arr: Any, fn: Callable[[str], Any] | None = None, missing: Any = None
) -> list[Any]:
    """A string column as Python values, ``fn`` applied once per distinct text and one
    object shared by every row holding it (node names, terms and incarnations repeat on
    every sample and ack); ``missing`` where the column is null."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(arr)
    texts = enc.dictionary.to_pylist()
    known = texts if fn is None else [fn(t) for t in texts]
    return [missing if i is None else known[i] for i in enc.indices.to_pylist()]


def _incarnations(arr: Any) -> list[tuple[Any, Any]]:
    """Each sample's incarnation as recorded and frozen (a node has a handful)."""

    def both(text: str) -> tuple[Any, Any]:
        v = _loads(text)
        return v, _freeze(v)

    return _per_distinct(arr, both, missing=(None, None))


class _ReadCols:
    """The log reads of a columnar history: per read (ok completion, keyless, in history
    order) its table position, history index, finality, committed mode and limit, end;
    filled in by the first pass over the entries: whether it is a log read at all (has
    ``entries``), its entry count and highest entry index."""

    def __init__(self, h: Any, pos: Any, inv: Any) -> None:
        import numpy as np
        import pyarrow as pa

        order = np.argsort(pos, kind="stable")
        self.pos, inv = pos[order], inv[order]
        take = pa.array(self.pos)
        n = len(self.pos)
        self.index = h.column("index").take(take).to_numpy()
        fin = h.column("v_final").take(pa.array(inv))
        self.final = np.array([x == "true" for x in fin.to_pylist()], dtype=bool)
        ctext = h.column("v_committed").take(take).to_pylist()
        cint = _ints(h.column("v_committed").take(take))
        self.mode = np.zeros(n, np.int8)
        self.limit = np.zeros(n, np.int64)
        for i, (t, c) in enumerate(zip(ctext, cint, strict=True)):
            if t is None or t == "null":
                self.mode[i] = _SENTINEL_ALL
            elif c is None or not -(2**63) <= c < 2**63:
                self.mode[i] = _SENTINEL_NONE
            else:
                self.limit[i] = c
        self.end = _ints(h.column("v_end").take(take))
        self.is_read = np.zeros(n, bool)
        self.n_entries = np.zeros(n, np.int64)
        self.max_li = np.full(n, np.iinfo(np.int64).min, np.int64)

    def observations(self, h: Any, *, first: bool) -> Iterator[Any]:
        """Per Parquet batch, a table of committed observations ``(li, term, payload, r,
        fin)``; on the ``first`` pass also fills ``is_read``/``n_entries``/``max_li``."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        for pos, ents in _bounded(h.entries(self.pos)):
            k = np.searchsorted(self.pos, pos)
            if first:
                self.is_read[k] = ents.is_valid().to_numpy(zero_copy_only=False)
                self.n_entries[k] = pc.fill_null(pc.list_value_length(ents), 0).to_numpy()
            parent = pc.list_parent_indices(ents).to_numpy()
            flat = pc.list_flatten(ents)
            li = pc.fill_null(flat.field("index"), 0).to_numpy()
            rid = k[parent]
            if first and len(li):
                np.maximum.at(self.max_li, rid, li)
            mode = self.mode[rid]
            keep = (mode == _SENTINEL_ALL) | ((mode == 0) & (li <= self.limit[rid]))
            idx = np.flatnonzero(keep)
            rk = rid[idx]
            yield pa.table(
                {
                    "li": li[idx],
                    "term": flat.field("term").take(pa.array(idx)),
                    "payload": flat.field("payload").take(pa.array(idx)),
                    "r": self.index[rk],
                    "fin": self.final[rk].astype(np.int8),
                }
            )


OBSERVATIONS_PER_SLICE = 1 << 17
"""Entries flattened at once: a batch of final reads holds a thousand each, and the
flattened columns, their copies and the hash table of one slice are the check's peak."""


def _bounded(batches: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """Each ``(positions, entries)`` batch cut into slices of whole reads holding about
    :data:`OBSERVATIONS_PER_SLICE` entries (a read longer than that is a slice alone)."""
    import numpy as np
    import pyarrow.compute as pc

    for pos, ents in batches:
        sizes = pc.fill_null(pc.list_value_length(ents), 0).to_numpy()
        total = int(sizes.sum())
        if total <= OBSERVATIONS_PER_SLICE:
            yield pos, ents
            continue
        ends = np.cumsum(sizes)
        lo = 0
        while lo < len(pos):
            base = ends[lo - 1] if lo else 0
            hi = int(np.searchsorted(ends, base + OBSERVATIONS_PER_SLICE, side="right"))
            hi = max(hi, lo + 1)
            yield pos[lo:hi], ents.slice(lo, hi - lo)
            lo = hi


def _distinct(parts: list[Any]) -> Any:
    """One row per distinct (li, term, payload): first reader and whether a final read
    showed it."""
    import pyarrow as pa

    t = pa.concat_tables(parts)
    g = t.group_by(["li", "term", "payload"], use_threads=False).aggregate(
        [("r", "min"), ("fin", "max")]
    )
    return g.select(["li", "term", "payload", "r_min", "fin_max"]).rename_columns(
        ["li", "term", "payload", "r", "fin"]
    )


_OBS_SCHEMA_FIELDS = (
    ("li", "int64"),
    ("term", "string"),
    ("payload", "string"),
    ("r", "int64"),
    ("fin", "int8"),
)
"""The columns of a committed-observation table and of :func:`_distinct`'s result."""


def _obs_schema() -> Any:
    import pyarrow as pa

    return pa.schema([(n, pa.type_for_alias(t)) for n, t in _OBS_SCHEMA_FIELDS])


def _flat(col: Any) -> Any:
    """A table column as one Arrow array."""
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


class _Agreed:
    """Committed observations reduced as they stream in, without hashing each one.

    The first (term, payload) seen at each log index of a dense run ``base..base+n-1`` is
    that index's *agreed* value; an observation equal to it (compared by two array gathers
    and string equality kernels) only lowers the index's first reader and raises its
    final flag. Whatever disagrees, has a null, or falls outside the run is kept as it
    came, for :func:`_distinct`, as every observation was before. :meth:`distinct` gives
    exactly what :func:`_distinct` over all the observations gives (its rows in another
    order, which no check reads).

    Why: reads of long log prefixes (a tool reading the whole log back, again and again)
    repeat each entry hundreds of times, and hashing every repeat (Arrow's group-by on an
    integer and two strings, 11M observations in a 1M-record history) was most of the
    check; a correct log's repeats all agree, so only disagreements are hashed.
    """

    def __init__(self) -> None:
        import numpy as np

        self.base = -1  # the run's first log index, set by the first observation batch
        self.n = 0
        self.terms: list[Any] = []  # the agreed terms and payloads, in pieces (combined lazily)
        self.payloads: list[Any] = []
        self.r = np.empty(0, np.int64)
        self.fin = np.empty(0, np.int8)
        self.rest: list[Any] = []
        self.rows = self.merged = 0

    def _agreed(self, pieces: list[Any]) -> Any:
        import pyarrow as pa

        if len(pieces) > 1:
            pieces[:] = [pa.concat_arrays(pieces)]
        return pieces[0]

    def add(self, t: Any) -> None:
        """One batch of committed observations (the columns of :data:`_OBS_SCHEMA_FIELDS`)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if not t.num_rows:
            return
        li = _flat(t["li"]).to_numpy()
        term, pay = _flat(t["term"]), _flat(t["payload"])
        if self.base < 0:
            nonneg = li[li >= 0]
            self.base = int(nonneg.min()) if len(nonneg) else 0
        # li - base cannot overflow: base >= 0 and it is taken only where li >= base
        above = li >= self.base
        off = np.where(above, li - self.base, -1)
        whole = pc.and_(pc.is_valid(term), pc.is_valid(pay)).to_numpy(zero_copy_only=False)
        new = np.flatnonzero((off >= self.n) & whole)
        if len(new):  # extend the run with the first value seen at each next index
            u, first = np.unique(off[new], return_index=True)
            run = (u - np.arange(len(u))) == self.n
            k = len(u) if run.all() else int(np.argmin(run))
            if k:
                sel = pa.array(new[first[:k]])
                self.terms.append(term.take(sel))
                self.payloads.append(pay.take(sel))
                self.r = np.concatenate([self.r, np.full(k, np.iinfo(np.int64).max, np.int64)])
                self.fin = np.concatenate([self.fin, np.zeros(k, np.int8)])
                self.n += k
        inside = (off >= 0) & (off < self.n)
        idx = np.flatnonzero(inside)
        agree = np.zeros(len(li), bool)
        if len(idx):
            o = off[idx]
            every = len(idx) == len(li)
            at = pa.array(idx)
            ti = term if every else term.take(at)
            pi = pay if every else pay.take(at)
            oa = pa.array(o)
            same = pc.and_(
                pc.equal(ti, self._agreed(self.terms).take(oa)),
                pc.equal(pi, self._agreed(self.payloads).take(oa)),
            )
            eq = pc.fill_null(same, False).to_numpy(zero_copy_only=False)
            a, oa_ = idx[eq], o[eq]
            agree[a] = True
            r = _flat(t["r"]).to_numpy()[a]
            lower = r < self.r[oa_]
            if lower.any():
                np.minimum.at(self.r, oa_[lower], r[lower])
            fin = _flat(t["fin"]).to_numpy()[a]
            up = fin > self.fin[oa_]
            if up.any():
                np.maximum.at(self.fin, oa_[up], fin[up])
        if not agree.all():
            self._keep(t.filter(pa.array(~agree)))

    def _keep(self, t: Any) -> None:
        import pyarrow as pa

        self.rest.append(_distinct([t]))
        self.rows += self.rest[-1].num_rows
        # merge once the parts outgrow twice what the last merge kept: the rows held stay
        # within a small multiple of the distinct entries, whatever the reads repeat
        if len(self.rest) > 1 and self.rows > 2 * self.merged + OBSERVATIONS_PER_SLICE:
            self.rest = [_distinct(self.rest)]
            self.rows = self.merged = self.rest[0].num_rows
            pa.default_memory_pool().release_unused()

    def distinct(self) -> Any:
        """One row per distinct (li, term, payload) observed, with its first reader and
        whether a final read showed it: :func:`_distinct` of every observation added."""
        import numpy as np
        import pyarrow as pa

        schema = _obs_schema()
        parts = list(self.rest)
        if self.n:
            parts.insert(
                0,
                pa.table(
                    [
                        pa.array(self.base + np.arange(self.n, dtype=np.int64)),
                        self._agreed(self.terms),
                        self._agreed(self.payloads),
                        pa.array(self.r),
                        pa.array(self.fin),
                    ],
                    schema=schema,
                ),
            )
        if not parts:
            return schema.empty_table()
        return parts[0] if len(parts) == 1 and not self.rest else _distinct(parts)


def check_log_safety_columns(
    h: Any, ha: dict[str, Any] | None = None, *, settled_terms_only: bool = False
) -> dict[str, Any]:
    """Every log-safety anomaly over a :class:`~harness.core.parquet.ColumnarHistory`'s
    pairs (the local engine's implementation; :func:`check_log_safety` for ops), with no
    Op per record and memory bounded by the log's distinct (index, term, payload) triples
    rather than by its observations.

    The columns hold log indexes as 64-bit integers (``v_entries`` leaves out entries
    beyond), so an ok append acked at an index beyond int64 cannot be looked up: it is
    counted as not judged (``stats.lost_ack_unjudged``), never called lost."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    inv, comp = h.inv, h.comp
    has = comp >= 0
    cpos = np.where(has, comp, 0)

    def eq(name: str, pos: Any, value: str) -> Any:
        col = h.column(name).take(pa.array(pos))
        return pc.fill_null(pc.equal(col, value), False).to_numpy(zero_copy_only=False)

    f_inv = h.column("f").take(pa.array(inv))
    ok = has & eq("type", cpos, "ok")

    def is_f(name: str) -> Any:
        return pc.fill_null(pc.equal(f_inv, name), False).to_numpy(zero_copy_only=False)

    # appends
    am = is_f("append")
    ai, ahas = inv[am], has[am]
    acp = cpos[am]
    a_ok, a_info = ok[am], ~ahas | eq("type", acp, "info")
    a_fail = ahas & ~a_ok & ~a_info
    idx_col = h.column("index")
    a_inv_idx = idx_col.take(pa.array(ai)).to_numpy()
    a_comp_idx = idx_col.take(pa.array(acp)).to_numpy()
    p_inv = h.column("v_payload").take(pa.array(ai))
    p_comp = h.column("v_payload").take(pa.array(acp))
    oks = np.flatnonzero(a_ok)
    acked = _ints(h.column("v_index").take(pa.array(acp[oks])))
    li_ok = np.array([x is not None and _INT64[0] <= x <= _INT64[1] for x in acked], dtype=bool)
    n_big = sum(1 for x in acked if x is not None) - int(li_ok.sum())
    ack = oks[li_ok]
    ack_li = np.array([x for x, k in zip(acked, li_ok, strict=True) if k], dtype=np.int64)
    n_ok = len(oks)

    # log reads: keyless ok reads; which of them hold entries, the first pass tells
    rm = (
        is_f("read")
        & ok
        & ~pc.is_valid(h.column("key").take(pa.array(inv))).to_numpy(zero_copy_only=False)
    )
    reads = _ReadCols(h, comp[rm], inv[rm])
    agreed = _Agreed()
    n_obs = 0
    final_reach = -1
    for t in reads.observations(h, first=True):
        n_obs += t.num_rows
        fl = t["fin"].to_numpy() == 1
        if fl.any():
            final_reach = max(final_reach, int(t["li"].to_numpy()[fl].max()))
        agreed.add(t)
    d = agreed.distinct()
    is_read = reads.is_read
    final = reads.final & is_read
    # the final reach (checker.log_anomalies): the node's end reached, covered by committed
    complete = final & np.array(
        [
            e is None or ((md == _SENTINEL_ALL or (md == 0 and lim >= e)) and (n == 0 or m >= e))
            for e, n, m, md, lim in zip(
                reads.end, reads.n_entries, reads.max_li, reads.mode, reads.limit, strict=True
            )
        ],
        dtype=bool,
    )
    n_final = int(final.sum())
    reach = None if complete.any() else final_reach

    # The samples are built only now, once the pass above has let go of its memory: the
    # two peaks do not stack.
    pa.default_memory_pool().release_unused()
    # Samples: the functions above, over _Sample rows made from the typed columns
    sp = np.sort(comp[is_f("sample") & ok & eq("v_kind", cpos, "object")])
    take = pa.array(sp)
    incs = _incarnations(h.column("v_incarnation").take(take))
    leader = eq("v_role", sp, '"leader"').tolist()
    unsettled_role = _per_distinct(
        h.column("v_role").take(take),
        lambda r: unsettled(json.loads(r)) if r else False,
        missing=False,
    )
    nodes = _per_distinct(h.column("node").take(take))
    samples = [
        _Sample(i, n, inc[1], inc[0], c, e, t, ld, *_member_config(n, mem, cfg), unsettled=cd)
        for i, n, inc, c, e, t, ld, mem, cfg, cd in zip(
            h.column("index").take(take).to_pylist(),
            nodes,
            incs,
            _ints(h.column("v_committed").take(take)),
            _ints(h.column("v_end").take(take)),
            _ints(h.column("v_term").take(take)),
            leader,
            _decoded(h, "v_member", take),
            _decoded(h, "v_config", take),
            unsettled_role,
            strict=True,
        )
    ]

    found: dict[str, list[dict[str, Any]]] = {}
    found["committed-regress"] = _committed_regress(samples)
    found["committed-beyond-end"] = _committed_beyond_end(samples)
    found["two-leaders-in-term"] = _two_leaders_in_term(samples)
    found["term-regress"] = _term_regress(samples, settled_terms_only=settled_terms_only)
    a_ok_pos = acp[oks]
    acks: list[_Ack] = list(
        zip(
            a_inv_idx[oks].tolist(),
            a_comp_idx[oks].tolist(),
            _per_distinct(h.column("node").take(pa.array(a_ok_pos))),
            _decoded(h, "v_term", pa.array(a_ok_pos)),
            _decoded(h, "v_index", pa.array(a_ok_pos)),
            strict=True,
        )
    )
    gone = _removals(samples)
    found["leader-after-removal"] = _leader_after_removal(samples, gone)
    found["ack-after-removal"] = _ack_after_removal(samples, acks, gone)
    restart = _committed_regress_restart(samples)
    n_samples = len(samples)
    del samples, acks  # done with: the joins below need the room

    # divergent-committed and duplicate-payload: candidates from d, readers by a second pass
    lis = d.group_by("li").aggregate([("term", "count")])
    cand_li = lis.filter(pc.greater(lis["term_count"], 1))["li"]
    nonnull = d.filter(pc.not_equal(d["payload"], "null"))
    pays = nonnull.group_by("payload").aggregate([("li", "count_distinct")])
    cand_pay = pays.filter(pc.greater(pays["li_count_distinct"], 1))["payload"]
    # unproposed-committed: candidates from d too (few: most entries are acked payloads)
    proposed = pc.unique(pa.concat_arrays([p_inv, p_comp.filter(pa.array(a_ok))]).drop_null())
    unprop = _unproposed(nonnull, proposed, int(ack_li.min()) if len(ack_li) else None)
    readers_li: dict[int, set[int]] = {}
    readers_pay: dict[str, set[int]] = {}
    readers_un: dict[int, set[int]] = {}
    if len(cand_li) or len(cand_pay) or unprop.num_rows:
        for t in reads.observations(h, first=False):
            hit = pc.or_(pc.is_in(t["li"], cand_li), pc.is_in(t["payload"], cand_pay))
            for row in t.filter(hit).select(["li", "payload", "r"]).to_pylist():
                readers_li.setdefault(row["li"], set()).add(row["r"])
                readers_pay.setdefault(row["payload"], set()).add(row["r"])
            if unprop.num_rows:
                un = t.select(["li", "payload", "r"]).join(
                    unprop, keys=["li", "payload"], join_type="left semi"
                )
                for li, r in zip(un["li"].to_pylist(), un["r"].to_pylist(), strict=True):
                    readers_un.setdefault(li, set()).add(r)
    div = []
    for row_li in cand_li.to_pylist():
        at = d.filter(pc.equal(d["li"], row_li)).select(["term", "payload"]).to_pylist()
        vals = [[_loads(v["term"]), _loads(v["payload"])] for v in at]
        div.append(
            {
                "index": row_li,
                "values": sorted(vals, key=value_key),
                "indexes": sorted(readers_li[row_li]),
            }
        )
    found["divergent-committed"] = by_indexes(div)

    # lost-ack: acked triples that no final read shows, within the final reads' reach
    lost: list[dict[str, Any]] = []
    if n_final:
        judged = np.ones(len(ack), bool) if reach is None else ack_li <= reach
        j = ack[judged]
        pay = pc.coalesce(p_comp.take(pa.array(j)), p_inv.take(pa.array(j)), pa.scalar("null"))
        term = pc.coalesce(
            h.column("v_term").take(pa.array(acp[j])), pa.scalar("null", pa.string())
        )
        acked_t = pa.table(
            {
                "li": pa.array(ack_li[judged]),
                "term": term,
                "payload": pay,
                "comp": pa.array(a_comp_idx[j]),
            }
        )
        fin = d.filter(pc.equal(d["fin"], 1)).select(["li", "term", "payload"])
        missing = acked_t.join(fin, keys=["li", "term", "payload"], join_type="left anti")
        if missing.num_rows:
            at_li = fin.filter(pc.is_in(fin["li"], missing["li"])).to_pylist()
            there: dict[int, list[list[Any]]] = {}
            for v in at_li:
                there.setdefault(v["li"], []).append([_loads(v["term"]), _loads(v["payload"])])
            for m in missing.to_pylist():
                at_m = there.get(m["li"])
                lost.append(
                    {
                        "payload": _loads(m["payload"]),
                        "index": m["li"],
                        "term": _loads(m["term"]),
                        "found": min(at_m, key=value_key) if at_m else None,
                        "indexes": [m["comp"]],
                    }
                )
    found["lost-ack"] = by_indexes(lost)

    # failed-append-present: each failed payload's first committed reader, and where
    fails = np.flatnonzero(a_fail)
    fail_pay = p_inv.take(pa.array(fails))
    fpm = pc.fill_null(pc.not_equal(fail_pay, "null"), False).to_numpy(zero_copy_only=False)
    fails, fail_pay = fails[fpm], fail_pay.filter(pa.array(fpm))
    first: dict[str, tuple[int, int]] = {}
    for v in nonnull.filter(pc.is_in(nonnull["payload"], fail_pay)).to_pylist():
        cur = first.get(v["payload"])
        if cur is None or (v["r"], v["li"]) < cur:
            first[v["payload"]] = (v["r"], v["li"])
    failed = []
    for n, p in zip(fails, fail_pay.to_pylist(), strict=True):
        hit = first.get(p)
        if hit is not None:
            failed.append(
                {
                    "payload": _loads(p),
                    "index": hit[1],
                    "indexes": sorted([int(a_comp_idx[n]), hit[0]]),
                }
            )
    found["failed-append-present"] = by_indexes(failed)

    dup = []
    for p in cand_pay.to_pylist():
        at_p = nonnull.filter(pc.equal(nonnull["payload"], p))["li"].to_pylist()
        dup.append(
            {
                "payload": _loads(p),
                "log_indexes": sorted(set(at_p)),
                "indexes": sorted(readers_pay[p]),
            }
        )
    found["duplicate-payload"] = by_indexes(dup)
    at_un: dict[int, list[str]] = {}
    for li, p in zip(unprop["li"].to_pylist(), unprop["payload"].to_pylist(), strict=True):
        at_un.setdefault(li, []).append(p)
    found["unproposed-committed"] = by_indexes(
        [
            {
                "index": li,
                "payload": min(map(_loads, ps), key=canon),
                "indexes": sorted(readers_un[li]),
            }
            for li, ps in at_un.items()
        ]
    )
    found["append-order"] = _append_order_columns(a_inv_idx[ack], a_comp_idx[ack], ack_li)

    unjudged = 0
    if n_final:
        unjudged = n_big + (0 if reach is None else int((ack_li > reach).sum()))
    stats = {
        "samples": n_samples,
        "appends": {"ok": n_ok, "fail": int(a_fail.sum()), "info": int(a_info.sum())},
        "reads": int(is_read.sum()),
        "final_reads": n_final,
        "committed_observations": n_obs,
        "lost_ack_unjudged": unjudged,
    }
    notes = {"committed-regress-restart": restart}
    return result(found, notes, stats, judgeable=judgeable(n_final, n_ok, unjudged), ha=ha)


_SURELY_SYSTEM = r'^\{(?:"(?:[^"\\]|\\.)*":(?:[^"{}\[\],]*|"(?:[^"\\]|\\.)*"),)*"kind":'
"""JSON object text whose keys before ``"kind"`` all hold scalars: ``"kind"`` is then a key
of the object itself, not of one nested in it (a kv entry's ``{"at":5,"kind":...}``)."""


def _unproposed(obs: Any, proposed: Any, lo: int | None) -> Any:
    """unproposed-committed's committed (log index, payload) pairs, from distinct
    non-null observations ``obs`` and the proposed payloads' texts (``li``, ``payload``
    columns; empty when no ok append was acked at an integer index).

    System entries are told apart by their text: not an object, or no ``"kind":`` in it,
    is none; an object whose keys before ``"kind"`` hold scalars is one; only what is left
    (a nested ``"kind"``) is decoded."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    empty = pa.table({"li": pa.array([], pa.int64()), "payload": pa.array([], pa.string())})
    if lo is None:
        return empty
    x = obs.filter(pc.greater_equal(obs["li"], lo)).select(["li", "payload"])
    x = x.filter(pc.invert(pc.is_in(x["payload"], proposed)))
    if not x.num_rows:
        return empty
    p = x["payload"]
    maybe = pc.and_(pc.starts_with(p, "{"), pc.match_substring(p, '"kind":'))
    sure = pc.match_substring_regex(p, _SURELY_SYSTEM)
    system = np.array(sure.to_numpy(), dtype=bool)  # a writable copy
    unsure = np.flatnonzero(pc.and_(maybe, pc.invert(sure)).to_numpy())
    if len(unsure):
        texts = p.take(pa.array(unsure)).to_pylist()
        system[unsure] = [is_system(_loads(t)) for t in texts]
    x = x.filter(pa.array(~system))
    return x.group_by(["li", "payload"]).aggregate([]) if x.num_rows else empty


def _append_order_columns(inv_idx: Any, comp_idx: Any, li: Any) -> list[dict[str, Any]]:
    """append-order as array passes: completions in history order with a running
    maximum of their acked index (and where it was first reached); each append looks up
    the maximum over the completions before its invocation."""
    import numpy as np

    if len(li) == 0:
        return []
    o = np.argsort(comp_idx, kind="stable")
    cs, ls = comp_idx[o], li[o]
    run = np.maximum.accumulate(ls)
    new = np.ones(len(run), bool)
    new[1:] = run[1:] > run[:-1]
    first = np.maximum.accumulate(np.where(new, np.arange(len(run)), 0))
    k = np.searchsorted(cs, inv_idx)
    out = []
    for b in np.flatnonzero(k > 0):
        j = k[b] - 1
        if li[b] <= run[j]:
            out.append(
                {
                    "a_index": int(run[j]),
                    "b_index": int(li[b]),
                    "indexes": [int(cs[first[j]]), int(comp_idx[b])],
                }
            )
    return by_indexes(out)


# --------------------------------------------------------------------------- registration


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    return ALL if is_log(shape) else None


def _local(history: PairedHistory, config: CheckConfig) -> dict[str, Any]:
    return check_log_safety(history, ha=ha_of(config), settled_terms_only=volatile_of(config))


def _columnar(history: Any, config: CheckConfig) -> dict[str, Any]:
    return check_log_safety_columns(
        history, ha=ha_of(config), settled_terms_only=volatile_of(config)
    )


LOG_SAFETY = CheckerSpec(
    name="log-safety",
    claims=_claims,
    anomalies=ANOMALIES,
    notes=NOTES,
    options=LogSafetyOptions,
    local=_local,
    columnar=_columnar,
    spark="checker.spark.log_safety:check_log_safety_spark",
    doc="DLedger log invariants over appends, log reads and samples",
    examples="checker.planted:log_safety",
)
