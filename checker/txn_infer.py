"""From a transactional history to a dependency graph: version orders, ww/wr/rw edges, and
the anomalies that need no cycle.

Why its own module: inference is where the checker trusts nothing the database says about
order. Everything here follows from the history alone (docs/transactions.md):

* **list-append**: every read of a key returns the whole list, and appends are unique per
  key, so each read is a prefix of the key's version order. The longest read *is* the
  order; a read that is not a prefix of it is ``incompatible-order``, an element twice in
  one read ``duplicate-elements``. ``ww``: the writers of consecutive elements. ``wr``:
  the writer of a read's last element to the reader. ``rw``: the reader to the writer of
  the element right after what it read (Adya's anti-dependency on the next version).
* **rw-register**: writes are unique per key, so a read names its writer (``wr``). The
  order of versions is inferred only where the history fixes it: the initial (null)
  version precedes every write, and a transaction that read ``v`` and then wrote ``w``
  installed ``w`` after ``v`` (option ``wfr``, on by default: a transaction's writes take
  effect after the reads that precede them, true of every isolation level here). ``ww``:
  the writer of ``v`` to that transaction; ``rw``: every other reader of ``v`` to it (and
  every reader of the initial version to every writer). An inferred successor need not be
  the *next* version, but the edge then stands for a path of one rw and some ww edges in
  Adya's graph, so a cycle's class is the same.

Only external reads (a transaction's first read of a key, before it wrote that key) make
edges; later reads are checked against what the transaction itself did (``internal``).
Committed (``ok``) transactions are the graph's nodes, and so are ``info`` ones (their
writes may have been seen; their reads are unknown). A ``fail``ed transaction is no node:
a read of its writes is ``G1a``. ``G1b`` is a read of a value its writer later overwrote
in the same transaction. ``lost-update``: two committed transactions read the same version
of a key and both wrote the key.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from harness.core.errors import HistoryError
from harness.core.op import Op

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "OK",
    "INFO",
    "FAIL",
    "WW",
    "WR",
    "RW",
    "RT",
    "PR",
    "EDGE_NAMES",
    "Txns",
    "Graph",
    "txns_of",
    "infer",
    "workload_of",
]

OK, INFO, FAIL = 0, 1, 2
WW, WR, RW, RT, PR = 1, 2, 4, 8, 16
EDGE_NAMES = {WW: "ww", WR: "wr", RW: "rw", RT: "realtime", PR: "process"}
_READ = "r"
_WRITE = {"list-append": "append", "rw-register": "w"}


@dataclass
class Txns:
    """The transactions of a history, by invocation order (ids 0..n-1)."""

    inv: list[int] = field(default_factory=list)
    """The invocation's history index."""
    comp: list[int] = field(default_factory=list)
    """The completion's history index (-1: never completed)."""
    process: list[Any] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    mops: list[list[Any]] = field(default_factory=list)
    """The completion's micro-ops for ok transactions, the invocation's otherwise."""

    def __len__(self) -> int:
        return len(self.inv)

    def indexes(self, t: int) -> list[int]:
        return [self.inv[t]] if self.comp[t] < 0 else [self.inv[t], self.comp[t]]


Ints = Any
"""A sequence of txn ids: an ``array('q')`` as inference appends to it, or an int64 numpy
array (the real-time edges, made whole)."""


@dataclass
class Graph:
    """Edges in blocks of one type each, plus what explains them."""

    blocks: list[tuple[int, Ints, Ints]] = field(default_factory=list)
    """(type bit, sources, destinations), in the order the edges were found: the order the
    cycle search walks a transaction's successors in, so both engines explain alike."""
    orders: dict[Any, list[Any]] = field(default_factory=dict)
    """list-append: each consistent key's version order (its longest read)."""
    order_from: dict[Any, int] = field(default_factory=dict)
    """list-append: the transaction whose read gave a key's order."""
    writer: dict[tuple[Any, Any], int] = field(default_factory=dict)
    """rw-register: (key, value) -> the txn that wrote it."""
    by_key: dict[Any, dict[Any, int]] = field(default_factory=dict)
    """list-append: key -> value -> the txn that appended it (no tuple per append)."""
    reads: dict[int, list[tuple[Any, Any]]] = field(default_factory=dict)
    """Per transaction, its reads of what others wrote (key, value), in order: a list
    without the transaction's own appends at its end; a register read before the
    transaction wrote the key."""
    writes: dict[int, dict[Any, Any]] = field(default_factory=dict)
    """rw-register: per transaction, its final write of each key."""
    last_read: dict[Any, tuple[int, Any]] = field(default_factory=dict)
    """list-append: per key, the committed read of it invoked last: (txn, the list). The
    evidence :mod:`checker.txn_lost` judges an acknowledged append's survival by."""
    follows: dict[tuple[Any, Any], list[int]] = field(default_factory=dict)
    """rw-register: (key, value) -> the txns that wrote the key after reading it as that
    value (a state built upon)."""
    writers_of: dict[Any, list[int]] = field(default_factory=dict)
    """rw-register: key -> the txns that wrote it (not failed), in invocation order."""
    readers: dict[tuple[Any, Any], list[int]] = field(default_factory=dict)
    """rw-register: (key, value) -> the committed txns that read it before writing the key."""

    def writer_of(self, k: Any, v: Any) -> int:
        """The txn that wrote ``v`` to ``k`` (-1: none)."""
        if self.by_key:
            return self.by_key.get(k, {}).get(v, -1)
        return self.writer.get((k, v), -1)

    def keys(self) -> int:
        return len(self.by_key) if self.by_key else len({k for k, _ in self.writer})

    def add(self, typ: int, src: Ints, dst: Ints) -> None:
        """One block of edges of type ``typ`` (an empty one is dropped)."""
        if len(src):
            self.blocks.append((typ, src, dst))

    def count(self, typ: int) -> int:
        """How many edges of type ``typ`` (parallel edges of one pair counted each)."""
        return sum(len(s) for ty, s, _ in self.blocks if ty == typ)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every edge as three int64 arrays (sources, destinations, type bits), in order."""
        import numpy as np

        def arr(x: Ints) -> np.ndarray:
            return np.frombuffer(x, dtype=np.int64) if isinstance(x, array) else np.asarray(x)

        if not self.blocks:
            e = np.zeros(0, dtype=np.int64)
            return e, e, e
        src = np.concatenate([arr(s) for _, s, _ in self.blocks])
        dst = np.concatenate([arr(d) for _, _, d in self.blocks])
        typ = np.repeat(
            np.array([ty for ty, _, _ in self.blocks], dtype=np.int64),
            [len(s) for _, s, _ in self.blocks],
        )
        return src, dst, typ


def _bad(op_index: int, why: str, fld: str = "value") -> HistoryError:
    return HistoryError(why, index=op_index, field=fld)


def workload_of(ops: Iterable[Op], declared: str | None) -> str:
    """``list-append`` or ``rw-register``: as declared, else from the first write seen."""
    if declared and declared != "auto":
        if declared not in _WRITE:
            from harness.core.errors import ConfigError

            raise ConfigError(
                f"checker txn: workload must be list-append, rw-register or auto, got {declared!r}",
                field="workload",
            )
        return declared
    for op in ops:
        if isinstance(op.value, list):
            for m in op.value:
                if isinstance(m, list) and m:
                    if m[0] == "append":
                        return "list-append"
                    if m[0] == "w":
                        return "rw-register"
    return "list-append"


def txns_of(pairs: Sequence[tuple[Op, Op | None]], kind: str) -> Txns:
    """The transactions; an ok one's micro-ops are its completion's (reads filled).

    Shapes are checked by :func:`check_shapes` when inference trips over one, so a good
    history pays nothing for the check and a bad one gets the same error. One loop over
    the pairs, not one per field: on a million-txn history, reading each op once is what
    costs (0.47 s against 0.8 s for five comprehensions)."""
    inv: list[int] = []
    comp: list[int] = []
    process: list[Any] = []
    status: list[int] = []
    mops: list[list[Any]] = []
    ia, ca, pa, sa, ma = inv.append, comp.append, process.append, status.append, mops.append
    for i, c in pairs:
        ia(i.index)
        pa(i.process)
        if c is None:
            ca(-1)
            sa(INFO)
            ma(i.value)
            continue
        ca(c.index)
        ty = c.type
        if ty != "ok":
            sa(FAIL if ty == "fail" else INFO if ty == "info" else _CODES[ty])
            ma(i.value)
            continue
        sa(OK)
        done = c.value
        if done.__class__ is not list or i.value.__class__ is not list or len(done) != len(i.value):
            check_shapes(kind, [(i, c)])
            raise _bad(c.index, "an ok txn's value must list its micro-ops with reads filled")
        ma(done)
    return Txns(inv=inv, comp=comp, process=process, status=status, mops=mops)


_CODES = {"ok": OK, "info": INFO, "fail": FAIL}


def check_shapes(kind: str, pairs: Sequence[tuple[Op, Op | None]]) -> None:
    """Raise a HistoryError naming the first op whose micro-ops are malformed."""
    wf = _WRITE[kind]
    for inv, comp in pairs:
        mops = inv.value
        if not isinstance(mops, list):
            raise _bad(inv.index, "a txn's value must be a list of micro-ops [f, k, v]")
        for m in mops:
            if m.__class__ is not list or len(m) != 3 or (m[0] != _READ and m[0] != wf):
                raise _bad(inv.index, f"micro-op {m!r}: must be [{wf!r}, k, v] or ['r', k, null]")
            if m[1].__class__ not in (int, str):
                raise _bad(inv.index, f"key {m[1]!r} must be an integer or a string")
        if comp is None or comp.type != "ok":
            continue
        done = comp.value
        if done.__class__ is not list or len(done) != len(mops):
            raise _bad(comp.index, "an ok txn's value must list its micro-ops with reads filled")
        for x, y in zip(mops, done, strict=True):
            if y.__class__ is not list or len(y) != 3 or y[0] != x[0] or y[1] != x[1]:
                raise _bad(comp.index, f"micro-op {y!r} does not match the invocation's {x!r}")
            if x[0] == wf and y[2] != x[2]:
                raise _bad(comp.index, f"micro-op {y!r} wrote another value than {x!r}")
            if x[0] == _READ and kind == "list-append" and y[2].__class__ is not list:
                raise _bad(comp.index, f"read of key {y[1]!r} must give a list, got {y[2]!r}")


def _pairs_of(t: Txns, i: int) -> list[tuple[Op, Op | None]]:
    """Stand-in ops for txn ``i`` (for :func:`check_shapes` after inference tripped)."""
    inv = Op("invoke", t.process[i], "txn", t.mops[i], index=t.inv[i])
    if t.status[i] != OK:
        return [(inv, None)]
    return [(inv, inv.replace(type="ok", index=t.comp[i]))]


Found = dict[str, list[dict[str, Any]]]
"""Anomalies without cycles: kind -> examples."""


def infer(t: Txns, kind: str, *, wfr: bool = True) -> tuple[Graph, Found]:
    """The dependency graph and the non-cycle anomalies of the transactions."""
    if kind == "list-append":
        return _list_append(t)
    return _rw_register(t, wfr)


def _hashable(k: Any, index: int) -> None:
    if k.__class__ not in (int, str):
        raise _bad(index, f"key {k!r} must be an integer or a string")


def foreign_reads(t: Txns, i: int) -> list[tuple[Any, list[Any]]]:
    """A list-append txn's reads, each without the txn's own appends at its end (what the
    edges were made from), in order; for explanations, so inference keeps no copy."""
    own: set[tuple[Any, Any]] = set()
    out = []
    for f, k, v in t.mops[i] if t.status[i] == OK else ():
        if f == "append":
            own.add((k, v))
        else:
            j = len(v)
            while j and (k, v[j - 1]) in own:
                j -= 1
            out.append((k, v[:j]))
    return out


def _list_append(t: Txns) -> tuple[Graph, Found]:
    try:
        return _list_append_fast(t)
    except (TypeError, ValueError, AttributeError) as e:
        for i in range(len(t)):
            check_shapes("list-append", _pairs_of(t, i))
        raise HistoryError(f"malformed list-append history: {e}") from e


def _dup_append(t: Txns, first: int, i: int, k: Any, v: Any) -> None:
    raise _bad(
        t.inv[i],
        f"value {v!r} appended to key {k!r} again (first by the txn invoked at "
        f"{t.inv[first]}): values must be unique per key",
    )


def _list_append_fast(t: Txns) -> tuple[Graph, Found]:
    g = Graph()
    found: Found = {}
    by_key = g.by_key
    failed: dict[tuple[Any, Any], int] = {}
    final: dict[Any, dict[int, Any]] = {}  # key -> txn -> its last append to the key
    reads: dict[Any, list[tuple[int, list[Any], int, bool, int]]] = {}
    """key -> its reads: (txn, the list, how much of it others wrote, external, its length)"""
    status, mops_l = t.status, t.mops
    APPEND, READ = "append", _READ

    def add(kind_: str, ex: dict[str, Any]) -> None:
        found.setdefault(kind_, []).append(ex)

    for i in range(len(t)):
        st = status[i]
        mops = mops_l[i]
        if st != OK:
            for f, k, v in mops:
                if f == APPEND:
                    if st == FAIL:
                        failed[(k, v)] = i
                        continue
                    wk = by_key.get(k)
                    if wk is None:
                        by_key[k] = {v: i}
                        final[k] = {i: v}
                        continue
                    if v in wk:
                        _dup_append(t, wk[v], i, k, v)
                    wk[v] = i
                    final[k][i] = v
                elif f != READ:
                    raise ValueError(f"micro-op {f!r}")
            continue
        state: dict[Any, list[Any]] | None = None  # key -> own appends since its last read
        for f, k, v in mops:
            if f == APPEND:
                wk = by_key.get(k)
                if wk is None:
                    by_key[k] = {v: i}
                    final[k] = {i: v}
                else:
                    if v in wk:
                        _dup_append(t, wk[v], i, k, v)
                    wk[v] = i
                    final[k][i] = v
                if state is None:
                    state = {k: [v]}
                else:
                    s = state.get(k)
                    if s is None:
                        state[k] = [v]
                    else:
                        s.append(v)
                continue
            if f != READ or v.__class__ is not list:
                raise ValueError(f"micro-op {[f, k, v]!r}")
            rl = reads.get(k)
            if rl is None:
                rl = reads[k] = []
            if state is None:
                nv = len(v)
                rl.append((i, v, nv, True, nv))
                state = {k: []}
                continue
            s = state.get(k)
            if s is None:
                nv = len(v)
                rl.append((i, v, nv, True, nv))
                state[k] = []
                continue
            n = len(s)
            if n and (len(v) < n or v[-n:] != s):
                add(
                    "internal",
                    {
                        "indexes": t.indexes(i),
                        "key": k,
                        "read": v,
                        "expected": ["...", *s],
                        "why": f"the txn read key {k!r} as {_tail(v)}, which does not end "
                        f"with its own appends {s!r}",
                    },
                )
            # what others wrote: the read without the txn's own appends at its end
            j = len(v)
            wk = by_key.get(k, {})
            while j and wk.get(v[j - 1]) == i:
                j -= 1
            rl.append((i, v, j, False, len(v)))
            state[k] = []
    edges = _per_key(t, g, found, reads, by_key, final, failed)
    for typ, j in ((WW, 0), (WR, 2), (RW, 4)):
        g.add(typ, edges[j], edges[j + 1])
    return g, found


def _per_key(
    t: Txns,
    g: Graph,
    found: Found,
    reads: dict[Any, list[Any]],
    by_key: dict[Any, dict[Any, int]],
    final: dict[Any, dict[int, Any]],
    failed: dict[tuple[Any, Any], int],
) -> tuple[array[int], ...]:
    """The second pass, over each key's reads: its version
    order, its edges (returned: ww, wr and rw sources and destinations) and its anomalies (into ``found``), its order and last read
    (into ``g``)."""

    def add(kind_: str, ex: dict[str, Any]) -> None:
        found.setdefault(kind_, []).append(ex)

    ww_s, ww_d, wr_s, wr_d, rw_s, rw_d = (array("q") for _ in range(6))
    orders, order_from = g.orders, g.order_from
    ww_a, ww_b, wr_a, wr_b = ww_s.append, ww_d.append, wr_s.append, wr_d.append
    rw_a, rw_b = rw_s.append, rw_d.append
    last_read = g.last_read
    no_writes: dict[Any, Any] = {}
    for k, rl in reads.items():
        last_read[k] = (rl[-1][0], rl[-1][1])
        longest = max(rl, key=_LENGTH)  # the first of the longest
        order = longest[1]
        # the plain case first: the reads are prefixes of the longest, whose elements were
        # each appended once, and no read ends in an intermediate append; anything else
        # undoes what this key added and takes the general way below
        wk = by_key.get(k, no_writes)
        fk = final.get(k, no_writes)
        norder = len(order)
        wp: list[Any] = list(map(wk.get, order))  # None: no txn appended it
        marks = len(ww_s), len(wr_s), len(rw_s)
        plain = None not in wp and len(set(order)) == norder
        if plain:
            prev = wp[0] if wp else -1
            for w in wp[1:]:
                if w != prev:
                    ww_a(prev)
                    ww_b(w)
                prev = w
            lost_p: dict[int, list[int]] | None = None
            for i, v, n, ext, nv in rl:
                if nv and order[:nv] != v:
                    plain = False
                    break
                if n:
                    w = wp[n - 1]
                    if w != i:
                        if fk[w] != v[n - 1]:
                            plain = False
                            break
                        wr_a(w)
                        wr_b(i)
                if n < norder:
                    w = wp[n]
                    if w != i:
                        rw_a(i)
                        rw_b(w)
                if ext and i in fk:
                    if lost_p is None:
                        lost_p = {}
                    lost_p.setdefault(n, []).append(i)
            if plain:
                orders[k] = order
                order_from[k] = longest[0]
                if lost_p:
                    for n, ts in lost_p.items():
                        if len(ts) > 1:
                            add("lost-update", _lost(t, k, order[:n], ts))
                continue
            del ww_s[marks[0] :], ww_d[marks[0] :], wr_s[marks[1] :], wr_d[marks[1] :]
            del rw_s[marks[2] :], rw_d[marks[2] :]
        consistent = True
        if len(set(order)) != len(order):
            seen: set[Any] = set()
            dups = sorted({x for x in order if x in seen or seen.add(x)}, key=repr)  # type: ignore[func-returns-value]
            add(
                "duplicate-elements",
                {
                    "indexes": t.indexes(longest[0]),
                    "key": k,
                    "read": order,
                    "duplicates": dups,
                    "why": f"the read of key {k!r} holds {dups!r} more than once, though every "
                    "value was appended once",
                },
            )
            consistent = False
        for r in rl:
            v = r[1]
            n = len(v)
            if n and order[:n] != v:
                add(
                    "incompatible-order",
                    {
                        "indexes": sorted(t.indexes(r[0]) + t.indexes(longest[0])),
                        "key": k,
                        "reads": [v, order],
                        "why": f"two reads of key {k!r} disagree on the order of its "
                        f"appends: {v!r} is not a prefix of {order!r}",
                    },
                )
                consistent = False
                break
        ws = [wk.get(x, -1) for x in order]
        bad_elems = [j for j, w in enumerate(ws) if w < 0] if -1 in ws else ()
        for j in bad_elems:
            x = order[j]
            f_t = failed.get((k, x))
            if f_t is not None:
                for r in rl:
                    if len(r[1]) > j and r[1][j] == x:
                        add(
                            "G1a",
                            {
                                "indexes": sorted(t.indexes(r[0]) + t.indexes(f_t)),
                                "key": k,
                                "value": x,
                                "why": f"the txn read key {k!r} = {r[1]!r}, holding {x!r}, "
                                f"which only a failed (aborted) txn appended",
                            },
                        )
            else:
                add(
                    "garbage-read",
                    {
                        "indexes": t.indexes(longest[0]),
                        "key": k,
                        "value": x,
                        "why": f"the read of key {k!r} holds {x!r}, which no txn appended",
                    },
                )
        if consistent:
            orders[k] = order
            order_from[k] = longest[0]
            prev = ws[0] if ws else -1
            for w in ws[1:]:
                if w != prev and w >= 0 and prev >= 0:
                    ww_a(prev)
                    ww_b(w)
                prev = w
        lost: dict[int, list[int]] | None = None
        for i, v, n, ext, _ in rl:
            if n:
                x = v[n - 1]
                w = ws[n - 1] if consistent else wk.get(x, -1)
                if w >= 0 and w != i:
                    wr_a(w)
                    wr_b(i)
                    if fk[w] != x:
                        add(
                            "G1b",
                            {
                                "indexes": sorted(t.indexes(i) + t.indexes(w)),
                                "key": k,
                                "value": x,
                                "why": f"the txn read key {k!r} = {_tail(v)}, where {x!r} is an "
                                f"intermediate state: its writer went on to append "
                                f"{fk[w]!r}",
                            },
                        )
            if consistent and n < norder:
                w = ws[n]
                if w >= 0 and w != i:
                    rw_a(i)
                    rw_b(w)
            if ext and i in fk:
                if lost is None:
                    lost = {}
                lost.setdefault(n, []).append(i)
        if lost:
            for n, ts in lost.items():
                if len(ts) > 1:
                    add("lost-update", _lost(t, k, order[:n] if consistent else n, ts))
    return ww_s, ww_d, wr_s, wr_d, rw_s, rw_d


_LENGTH = itemgetter(4)
"""A read's length, in :func:`_list_append_fast`'s tuples."""


def _tail(v: list[Any], n: int = 8) -> str:
    return repr(v) if len(v) <= n else "[..., " + ", ".join(map(repr, v[-n:])) + "]"


def _lost(t: Txns, k: Any, version: Any, ts: list[int]) -> dict[str, Any]:
    return {
        "indexes": sorted(x for i in ts for x in t.indexes(i)),
        "key": k,
        "read": version,
        "txns": [t.inv[i] for i in ts],
        "why": f"{len(ts)} committed txns read the same version of key {k!r} ({version!r}) and "
        "each wrote the key: all but one update was made without seeing the others",
    }


def _edges(g: Graph, s: list[int] | array[int], d: list[int] | array[int], typ: int) -> None:
    g.add(
        typ,
        s if isinstance(s, array) else array("q", s),
        d if isinstance(d, array) else array("q", d),
    )


def _rw_register(t: Txns, wfr: bool) -> tuple[Graph, Found]:
    try:
        return _rw_register_fast(t, wfr)
    except (TypeError, ValueError, AttributeError) as e:
        for i in range(len(t)):
            check_shapes("rw-register", _pairs_of(t, i))
        raise HistoryError(f"malformed rw-register history: {e}") from e


def _rw_register_fast(t: Txns, wfr: bool) -> tuple[Graph, Found]:
    g = Graph()
    found: Found = {}
    writer = g.writer
    failed: dict[tuple[Any, Any], int] = {}
    final = g.writes
    g_reads = g.reads
    readers = g.readers
    """(key, value) -> the txns that read it before writing the key themselves."""
    first: dict[tuple[Any, Any], list[int]] = {}
    """(key, value) -> the ok txns whose first read of the key it was and that wrote the key."""
    follows = g.follows
    """(key, value) -> the txns that wrote the key after reading it last as that value."""
    writers_of = g.writers_of
    status, mops_l, inv = t.status, t.mops, t.inv

    def add(kind_: str, ex: dict[str, Any]) -> None:
        found.setdefault(kind_, []).append(ex)

    for i in range(len(t)):
        st = status[i]
        mops = mops_l[i]
        if st == FAIL:
            for f, k, v in mops:
                if f == "w":
                    failed[(k, v)] = i
            continue
        fw: dict[Any, Any] = {}  # key -> the txn's last write of it
        last: dict[Any, Any] = {}  # key -> the last value read before the txn wrote it
        firsts: dict[Any, Any] = {}
        rs: list[tuple[Any, Any]] = []
        for f, k, v in mops:
            if f == "w":
                kv = (k, v)
                if kv in writer:
                    _hashable(k, inv[i])
                    raise _bad(
                        inv[i],
                        f"value {v!r} written to key {k!r} again (first by the txn invoked at "
                        f"{inv[writer[kv]]}): values must be unique per key",
                    )
                if v is None:
                    raise _bad(inv[i], f"write of null to key {k!r}: null is the initial value")
                writer[kv] = i
                if k not in fw:
                    writers_of.setdefault(k, []).append(i)
                    if k in last:
                        follows.setdefault((k, last[k]), []).append(i)
                        if st == OK and k in firsts:
                            first.setdefault((k, firsts[k]), []).append(i)
                fw[k] = v
            elif f != "r":
                raise ValueError(f"micro-op {f!r}")
            elif st == OK:
                if k in fw:
                    if fw[k] != v:
                        add(
                            "internal",
                            {
                                "indexes": t.indexes(i),
                                "key": k,
                                "read": v,
                                "expected": fw[k],
                                "why": f"the txn read key {k!r} = {v!r} after it had itself "
                                f"written {fw[k]!r}",
                            },
                        )
                    continue
                if k not in firsts:
                    firsts[k] = v
                last[k] = v
                rs.append((k, v))
                readers.setdefault((k, v), []).append(i)
        if fw:
            final[i] = fw
        if rs:
            g_reads[i] = rs
    ww_s, ww_d, wr_s, wr_d, rw_s, rw_d = [], [], [], [], [], []
    for (k, v), rd in readers.items():
        if v is None:
            continue
        w = writer.get((k, v), -1)
        if w < 0:
            f_t = failed.get((k, v))
            for r in rd:
                if f_t is not None:
                    add(
                        "G1a",
                        {
                            "indexes": sorted(t.indexes(r) + t.indexes(f_t)),
                            "key": k,
                            "value": v,
                            "why": f"the txn read key {k!r} = {v!r}, which only a failed "
                            "(aborted) txn wrote",
                        },
                    )
                else:
                    add(
                        "garbage-read",
                        {
                            "indexes": t.indexes(r),
                            "key": k,
                            "value": v,
                            "why": f"the txn read key {k!r} = {v!r}, which no txn wrote",
                        },
                    )
            continue
        fin = final[w][k]
        for r in rd:
            if r == w:
                continue
            wr_s.append(w)
            wr_d.append(r)
            if fin != v:
                add(
                    "G1b",
                    {
                        "indexes": sorted(t.indexes(r) + t.indexes(w)),
                        "key": k,
                        "value": v,
                        "why": f"the txn read key {k!r} = {v!r}, an intermediate state: its "
                        f"writer went on to write {fin!r}",
                    },
                )
    # version order: the initial null precedes every write; with wfr, what a txn read last
    # precedes what it then wrote
    for k, ws in writers_of.items():
        init = readers.get((k, None))
        if init:
            for r in init:
                for w in ws:
                    if w != r:
                        rw_s.append(r)
                        rw_d.append(w)
    for (k, v), ups in first.items():
        if len(ups) > 1:
            add("lost-update", _lost(t, k, v, ups))
    if wfr:
        for (k, v), ups in follows.items():
            if v is None:
                continue
            w = writer.get((k, v), -1)
            rd = readers.get((k, v), [])
            for u in ups:
                if w >= 0 and w != u:
                    ww_s.append(w)
                    ww_d.append(u)
                for r in rd:
                    if r != u:
                        rw_s.append(r)
                        rw_d.append(u)
    _edges(g, ww_s, ww_d, WW)
    _edges(g, wr_s, wr_d, WR)
    _edges(g, rw_s, rw_d, RW)
    return g, found


def order_edges(t: Txns, g: Graph, *, realtime: bool, process: bool) -> None:
    """Add real-time edges (a completed before b was invoked, transitively reduced) and
    process edges (consecutive txns of one process) among the graph's nodes (not failed)."""
    status = t.status
    if process:
        last: dict[Any, int] = {}
        s, d = [], []
        for i in range(len(t)):
            if status[i] == FAIL:
                continue
            p = t.process[i]
            j = last.get(p)
            if j is not None:
                s.append(j)
                d.append(i)
            last[p] = i
        _edges(g, s, d, PR)
    if realtime:
        src, dst = _realtime(t)
        g.add(RT, src, dst)


def _realtime(t: Txns) -> tuple[np.ndarray, np.ndarray]:
    """The real-time edges: each invocation (of a txn not failed) gets one from every ok
    txn in the frontier (completed before it, and not yet known to precede another
    completed one), in history order, each invocation's from the frontier in completion
    order.

    Why no walk over events: an ok txn ``a`` enters the frontier at its completion and
    leaves it at the first completion of an ok txn invoked after that, ``R(a)``; ``R``
    grows with ``a``'s completion, so each invocation's frontier is one run of the ok txns
    in completion order, found by two binary searches (4.3M edges of a million-txn
    history in a fraction of a second, where the walk took two)."""
    import numpy as np

    status = np.asarray(t.status, dtype=np.int8)
    inv = np.asarray(t.inv, dtype=np.int64)
    comp = np.asarray(t.comp, dtype=np.int64)
    b = np.flatnonzero(status != FAIL)  # the invocations, in history order
    b = b[np.argsort(inv[b], kind="stable")]
    b_inv = inv[b]
    a = np.flatnonzero(status == OK)
    a = a[np.argsort(comp[a], kind="stable")]  # the ok txns, in completion order
    a_comp = comp[a]
    # R(a): the least completion among the ok txns invoked after a completed (an
    # invocation at a's completion index comes first, as in history order)
    by_inv = a[np.argsort(inv[a], kind="stable")]
    s_inv = inv[by_inv]
    big = np.iinfo(np.int64).max
    suffix_min = np.append(np.minimum.accumulate(comp[by_inv][::-1])[::-1], big)
    leave = suffix_min[np.searchsorted(s_inv, a_comp, side="right")]
    # invocation b's frontier: the a completed before it (a_comp < b_inv) that have not
    # left it yet (leave >= b_inv: an invocation at the same index as a completion is first)
    hi = np.searchsorted(a_comp, b_inv, side="left")
    lo = np.searchsorted(leave, b_inv, side="left")
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    pos = np.arange(total, dtype=np.int64) + np.repeat(lo - starts, counts)
    return a[pos], np.repeat(b, counts)
