"""Synthetic histories: valid by construction, or with planted anomalies.

The checkers need histories far larger than any lab run produces (the Spark
engine is benchmarked at 10M records), and tests need histories whose verdict is
known without trusting a checker. So this module simulates an idealised cluster
and records what clients would have seen. Validity follows from how the
simulation works, not from checking: an append is placed in the log at the
moment it completes (so real-time order holds), the log holds only what clients
appended and the leaders' NOOPs, every read returns the log as it is, the leader
changes only with the term, and a register op takes effect at its completion. Each
planted ``anomaly`` (one kind, or several) bends exactly one of those rules once,
past the first third of the run.

The simulation is a stream: it keeps the log as two compact integer arrays (about
16 bytes per entry), never a list of ops, and writes values as JSON text
directly, so ``gen-history --ops 10000000 --out h.parquet`` runs in bounded
memory and without building 10M :class:`Op` objects. Log reads are the bulk of a
big history (every final read copies a thousand entries), so the simulation
hands them on as slices of those arrays; the Parquet writer turns the slices
into its typed entry column and into the JSON text with Arrow kernels, never
one Python string per entry.
"""

from __future__ import annotations

import gc
import json
import random
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import click

from harness.core.history import Op

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "ANOMALIES",
    "READ_SHAPES",
    "WORKLOADS",
    "generate",
    "records",
    "write_history",
    "check_args",
]

WORKLOADS = ("append", "register", "mixed")
READ_SHAPES = ("short", "long-prefix")
"""What a client's log read asks for. ``short``: sixteen entries just below the commit
point, one client op in ten. ``long-prefix``: the whole committed log from index 0, as a
tool that reads the log back from its start does: about :data:`_PREFIX_READS` reads per
history, whatever its length, so the entries read grow with the history as its records
do (about eight per record beside the final reads', 370-380 bytes of JSONL per record
against 200 for ``short``; issue 43 measured a foreign 1M-op history of this shape)."""
LOG_ANOMALIES = (
    "lost-ack",
    "divergent-committed",
    "duplicate-payload",
    "committed-regress",
    "two-leaders-in-term",
    "term-regress",
    "committed-beyond-end",
    "failed-append-present",
    "append-order",
    "unproposed-committed",
)
REGISTER_ANOMALIES = ("nonlinearizable",)
ANOMALIES = LOG_ANOMALIES + REGISTER_ANOMALIES

# One raw record: (type, process, f, key, value as JSON text, node, error).
Record = tuple[str, "int | str", str, "str | None", str, "str | None", "str | None"]

# Typed columns of the values the simulation yields most (see _simulate).
_NONE5 = (None,) * 5
_NONE7 = (None,) * 7
_NULL = ("null", None, *_NONE7)
_NUMBER = ("number", None, *_NONE7)
_ARRAY = ("array", None, *_NONE7)
_OBJECT = ("object", None, *_NONE7)
_FINAL = ("object", *_NONE7, "true")

_TORN = '{"undecodable":"7b227061796c6f6164223a22703400000000"}'
"""What the reference node reports for a torn record a recovery kept: the body of an append
cut short and zero-padded (``{"payload":"p4`` and zeros), which no client proposed."""

_READ_SPAN = 16  # entries asked for by a non-final read
_FINAL_CHUNK = 1000  # entries per final read
_TERM_EVERY = 4000  # records between elections, on average
_RESTART_EVERY = 9000  # records between node restarts, on average
_PREFIX_READS = 180  # long-prefix: client reads per history, about (each a whole prefix)


class _Log:
    """The simulated committed log: term and payload id per index (-1 = NOOP)."""

    def __init__(self) -> None:
        self.terms = array("q")
        self.pids = array("q")
        self.ghost: dict[int, str] = {}  # log index -> payload JSON read there instead

    def __len__(self) -> int:
        return len(self.terms)

    def add(self, term: int, pid: int) -> int:
        self.terms.append(term)
        self.pids.append(pid)
        return len(self.terms) - 1

    def read(self, lo: int, hi: int, committed: int, *, corrupt: int | None = None) -> _Slice:
        """A read of entries lo..hi inclusive as the log is now; ``corrupt`` shows one
        client entry as a NOOP (a value the log may hold, so only the disagreement is wrong)."""
        patches = {i - lo: g for i, g in self.ghost.items() if lo <= i <= hi}
        if corrupt is not None:
            patches[corrupt - lo] = "null"
        return _Slice(lo, self.terms[lo : hi + 1], self.pids[lo : hi + 1], patches, committed)


class _Slice:
    """A log read's ok value, ``{"entries": [[index, term, payload], ...], "committed": c}``,
    kept as copies of the log's arrays; ``patches`` (offset -> payload JSON) override pids."""

    __slots__ = ("lo", "terms", "pids", "patches", "committed")

    def __init__(
        self, lo: int, terms: array, pids: array, patches: dict[int, str], committed: int
    ) -> None:
        self.lo, self.terms, self.pids, self.patches, self.committed = (
            lo,
            terms,
            pids,
            patches,
            committed,
        )

    def json(self) -> str:
        parts = []
        for k, (t, pid) in enumerate(zip(self.terms, self.pids, strict=True)):
            p = self.patches.get(k) or ("null" if pid < 0 else f'"p{pid}"')
            parts.append(f"[{self.lo + k},{t},{p}]")
        return f'{{"entries":[{",".join(parts)}],"committed":{self.committed}}}'


def _kinds(anomaly: str | Iterable[str] | None) -> list[str]:
    if anomaly is None:
        return []
    return [anomaly] if isinstance(anomaly, str) else list(anomaly)


def check_args(
    workload: str,
    anomaly: str | Iterable[str] | None,
    nodes: int,
    concurrency: int,
    reads: str = "short",
) -> None:
    if workload not in WORKLOADS:
        raise click.BadParameter(
            f"workload must be one of {', '.join(WORKLOADS)}, got {workload!r}"
        )
    if reads not in READ_SHAPES:
        raise click.BadParameter(f"reads must be one of {', '.join(READ_SHAPES)}, got {reads!r}")
    for kind in _kinds(anomaly):
        if kind not in ANOMALIES:
            raise click.BadParameter(f"anomaly must be one of {', '.join(ANOMALIES)}, got {kind!r}")
        if kind in LOG_ANOMALIES and workload == "register":
            raise click.BadParameter(f"anomaly {kind} needs the append or mixed workload")
        if kind in REGISTER_ANOMALIES and workload == "append":
            raise click.BadParameter(f"anomaly {kind} needs the register or mixed workload")
    if nodes < 2 or concurrency < 1:
        raise click.BadParameter("need at least 2 nodes and 1 client")


class SynthOptions(TypedDict, total=False):
    """What shapes a synthetic history besides its length: :func:`records`'s keywords,
    which :func:`generate` and :func:`write_history` pass on as they are."""

    workload: str
    anomaly: str | Iterable[str] | None
    seed: int
    nodes: int
    concurrency: int
    keys: int | None
    key_window: int | None
    reads: str


def records(
    n_ops: int,
    *,
    workload: str = "append",
    anomaly: str | Iterable[str] | None = None,
    seed: int = 0,
    nodes: int = 5,
    concurrency: int = 10,
    keys: int | None = None,
    key_window: int | None = None,
    reads: str = "short",
) -> Iterator[Record]:
    """Yield about ``n_ops`` raw history records (final reads come on top), in history order.

    Process ids: clients ``0..concurrency-1`` (a client whose op ends ``info``
    continues under a fresh id), the sampler uses its own ids above them.

    Register ops pick one of ``keys`` keys (default one per 400 records) at random,
    or, with ``key_window``, one of ``key_window`` neighbouring keys in a window that
    slides over all keys as the run goes on: then concurrent clients hit the same
    keys, as a real workload's hot keys do, and each key's search has overlapping ops
    to order (uniform picks over 100k keys almost never overlap).

    ``reads`` shapes the clients' log reads (:data:`READ_SHAPES`).
    """
    for typ, proc, f, key, val, node, err, _ in _simulate(
        n_ops,
        workload=workload,
        anomaly=anomaly,
        seed=seed,
        nodes=nodes,
        concurrency=concurrency,
        keys=keys,
        key_window=key_window,
        reads=reads,
    ):
        yield (typ, proc, f, key, val if isinstance(val, str) else val.json(), node, err)


def _read(committed: int) -> tuple[str | None, ...]:
    return ("object", None, None, None, str(committed), *_NONE5[1:])


def _payload(pid: int) -> tuple[str, str]:
    p = f'"p{pid}"'
    return f'{{"payload":{p}}}', p


def _simulate(
    n_ops: int,
    *,
    workload: str,
    anomaly: str | Iterable[str] | None,
    seed: int,
    nodes: int,
    concurrency: int,
    keys: int | None,
    key_window: int | None = None,
    reads: str = "short",
) -> Iterator[tuple[Any, ...]]:
    """The records of :func:`records`, with two differences for the Parquet writer: a log
    read's ok value is a :class:`_Slice` rather than text, and each record carries its
    value's typed columns: ``v_kind``, then one text (or None) per
    :data:`harness.core.history.VALUE_FIELDS`."""
    check_args(workload, anomaly, nodes, concurrency, reads)
    rng = random.Random(seed)
    # long-prefix: the chance that a log client's op is a read (a whole prefix)
    prefix_p = min(0.5, _PREFIX_READS / max(n_ops, 1)) if reads == "long-prefix" else None
    names = [f"n{i + 1}" for i in range(nodes)]
    do_log = workload in ("append", "mixed")
    do_reg = workload in ("register", "mixed")
    n_keys = keys if keys is not None else max(1, n_ops // 400)
    plant_at = max(n_ops // 3, 1)  # the record count after which anomalies are planted
    pending = set(_kinds(anomaly))

    def due(kind: str) -> bool:
        return kind in pending and emitted >= plant_at

    term_every = max(200, min(_TERM_EVERY, n_ops // 8))
    restart_every = max(300, min(_RESTART_EVERY, n_ops // 6))

    log = _Log()
    term, leader = 1, rng.randrange(nodes)
    log.add(term, -1)  # the first leader's NOOP
    commit_of = [0] * nodes  # per node, what its last sample said
    incarnation = [1] * nodes
    seen_term = [0] * nodes  # per node, the highest term its samples showed
    next_pid = 0
    # append-order: a slot reserved for the next ok append, placed below an already acked one.
    reserved: int | None = None
    reserved_at = 0
    regs: dict[str, int | None] = {}
    next_val = 1

    next_proc = concurrency + 1
    sampler = concurrency
    procs = list(range(concurrency))
    open_op: dict[int, tuple[str, str | None, Any]] = {}  # worker -> (f, key, invoke detail)
    emitted = 0

    def committed() -> int:
        return (reserved - 1) if reserved is not None else len(log) - 1

    while emitted < n_ops:
        # ----- cluster events: elections and restarts
        if (
            do_log
            and reserved is None
            and (rng.randrange(term_every) == 0 or (due("term-regress") and term == 1))
        ):
            term += 1
            leader = rng.randrange(nodes)
            log.add(term, -1)
        if do_log and rng.randrange(restart_every) == 0:
            n = rng.randrange(nodes)
            incarnation[n] += 1
            commit_of[n] = -1  # committedIndex is not persisted: it restarts low
        # ----- the sampler: one complete sample now and then
        if do_log and rng.random() < 0.2:
            n = rng.randrange(nodes)
            end = len(log) - 1
            prev = commit_of[n]
            c = max(prev, min(committed(), prev + rng.randrange(1, 40)))
            commit_of[n] = c
            role = "leader" if n == leader else "follower"
            t, inc = term, incarnation[n]
            if due("committed-regress") and prev >= 3:
                c = prev - 2
                pending.discard("committed-regress")
            elif due("two-leaders-in-term") and n != leader:
                role = "leader"
                pending.discard("two-leaders-in-term")
            elif due("term-regress") and seen_term[n] > 1:
                t, role = seen_term[n] - 1, "follower"
                pending.discard("term-regress")
            elif due("committed-beyond-end") and c >= 1:
                end = c - 1
                pending.discard("committed-beyond-end")
            seen_term[n] = max(seen_term[n], t)
            val = (
                f'{{"role":"{role}","term":{t},"leader":"{names[leader]}","begin":0,'
                f'"end":{end},"committed":{c},"incarnation":{inc}}}'
            )
            yield ("invoke", sampler, "sample", None, "null", names[n], None, _NULL)
            yield (
                "ok",
                sampler,
                "sample",
                None,
                val,
                names[n],
                None,
                ("object", None, None, str(t), str(c), str(end), f'"{role}"', str(inc), None),
            )
            emitted += 2
            continue
        # ----- a client worker steps: complete its open op, or invoke a new one
        w = rng.randrange(concurrency)
        proc = procs[w]
        node = names[leader] if do_log else names[w % nodes]
        op = open_op.pop(w, None)
        if op is None:
            if do_reg and (not do_log or rng.random() < 0.5):
                if key_window:
                    key = f"k{(emitted * n_keys // n_ops + rng.randrange(key_window)) % n_keys}"
                else:
                    key = f"k{rng.randrange(n_keys)}"
                r = rng.random()
                if r < 0.4:
                    open_op[w] = ("read", key, None)
                    yield ("invoke", proc, "read", key, "null", node, None, _NULL)
                elif r < 0.75:
                    v = next_val
                    next_val += 1
                    open_op[w] = ("write", key, v)
                    yield ("invoke", proc, "write", key, str(v), node, None, _NUMBER)
                else:
                    cur = regs.get(key)
                    old = (
                        cur
                        if (cur is not None and rng.random() < 0.6)
                        else rng.randrange(1, next_val + 1)
                    )
                    v = next_val
                    next_val += 1
                    open_op[w] = ("cas", key, (old, v))
                    yield ("invoke", proc, "cas", key, f"[{old},{v}]", node, None, _ARRAY)
            elif rng.random() < (0.9 if prefix_p is None else 1 - prefix_p):
                pid = next_pid
                next_pid += 1
                open_op[w] = ("append", None, (pid, emitted))
                val, p = _payload(pid)
                yield ("invoke", proc, "append", None, val, node, None, ("object", p, *_NONE7))
            else:
                hi = committed()
                if prefix_p is not None:
                    lo, to = 0, hi
                else:
                    lo = max(0, hi - rng.randrange(_READ_SPAN * 4))
                    to = lo + _READ_SPAN - 1
                open_op[w] = ("read", None, (lo, to))
                yield (
                    "invoke",
                    proc,
                    "read",
                    None,
                    f'{{"from":{lo},"to":{to}}}',
                    node,
                    None,
                    _OBJECT,
                )
            emitted += 1
            continue

        f, op_key, detail = op
        key = op_key or ""  # appends carry no key; register ops always do
        emitted += 1
        if f == "append":
            pid, invoked_at = detail
            r = rng.random()
            if due("failed-append-present"):
                log.add(term, pid)
                pending.discard("failed-append-present")
                val, p = _payload(pid)
                yield ("fail", proc, f, None, val, node, "not-leader", ("object", p, *_NONE7))
                continue
            if r < 0.03:
                val, p = _payload(pid)
                yield ("fail", proc, f, None, val, node, "not-leader", ("object", p, *_NONE7))
                continue
            if r < 0.05:
                if rng.random() < 0.5:
                    log.add(term, pid)  # an info append may or may not have landed
                procs[w] = next_proc
                next_proc += 1
                val, p = _payload(pid)
                yield ("info", proc, f, None, val, node, "timeout", ("object", p, *_NONE7))
                continue
            if reserved is not None and invoked_at > reserved_at:
                idx, log.pids[reserved] = reserved, pid
                reserved = None
            elif due("append-order"):
                reserved = log.add(term, -2)  # filled by an append invoked after this ack
                reserved_at = emitted
                idx = log.add(term, pid)
                pending.discard("append-order")
            else:
                idx = log.add(term, pid)
            t = log.terms[idx]
            if due("lost-ack"):
                log.ghost[idx] = "null"  # a later leader's NOOP took the acked entry's slot
                pending.discard("lost-ack")
            elif due("duplicate-payload"):
                log.add(term, pid)
                pending.discard("duplicate-payload")
            elif due("unproposed-committed"):
                log.ghost[log.add(term, -1)] = _TORN
                pending.discard("unproposed-committed")
            p = f'"p{pid}"'
            yield (
                "ok",
                proc,
                f,
                None,
                f'{{"payload":{p},"index":{idx},"term":{t}}}',
                node,
                None,
                ("object", p, str(idx), str(t), *_NONE5),
            )
        elif f == "read" and op_key is None:
            lo, hi = detail
            c = committed()
            hi = min(hi, c)
            corrupt = None
            if due("divergent-committed"):
                corrupt = next(
                    (i for i in range(hi, lo - 1, -1) if log.pids[i] >= 0 and i not in log.ghost),
                    None,
                )
                if corrupt is not None:
                    pending.discard("divergent-committed")
            yield ("ok", proc, f, None, log.read(lo, hi, c, corrupt=corrupt), node, None, _read(c))
        else:
            cur = regs.get(key)
            if f == "read":
                got = cur
                if due("nonlinearizable"):
                    got = -7
                    pending.discard("nonlinearizable")
                if got is None:
                    yield ("ok", proc, f, key, "null", node, None, _NULL)
                else:
                    yield ("ok", proc, f, key, str(got), node, None, _NUMBER)
            elif f == "write":
                if rng.random() < 0.03:
                    if rng.random() < 0.5:
                        regs[key] = detail
                    procs[w] = next_proc
                    next_proc += 1
                    yield ("info", proc, f, key, str(detail), node, "timeout", _NUMBER)
                else:
                    regs[key] = detail
                    yield ("ok", proc, f, key, str(detail), node, None, _NUMBER)
            else:
                old, new = detail
                if cur == old:
                    regs[key] = new
                    yield ("ok", proc, f, key, f"[{old},{new}]", node, None, _ARRAY)
                else:
                    yield ("fail", proc, f, key, f"[{old},{new}]", node, "precondition", _ARRAY)

    # ----- quiesce: complete what is open (as info: never judged), then the final reads
    for w, (f, op_key, detail) in sorted(open_op.items()):
        key = op_key or ""
        proc = procs[w]
        if f == "append":
            val, p = _payload(detail[0])
            yield ("info", proc, f, None, val, names[leader], "timeout", ("object", p, *_NONE7))
        elif f == "read" and op_key is None:
            yield ("info", proc, f, None, "null", names[leader], "timeout", _NULL)
        else:
            if f == "read":
                yield ("info", proc, f, key, "null", names[w % nodes], "timeout", _NULL)
            elif f == "cas":
                yield (
                    "info",
                    proc,
                    f,
                    key,
                    json.dumps(list(detail)),
                    names[w % nodes],
                    "timeout",
                    _ARRAY,
                )
            else:
                yield (
                    "info",
                    proc,
                    f,
                    key,
                    json.dumps(detail),
                    names[w % nodes],
                    "timeout",
                    _NUMBER,
                )
    if reserved is not None:  # append-order planted at the very end: fill the hole with a NOOP
        log.pids[reserved] = -1
    if do_log:
        proc = next_proc
        last = len(log) - 1
        for n in range(nodes):
            for lo in range(0, last + 1, _FINAL_CHUNK):
                hi = min(lo + _FINAL_CHUNK - 1, last)
                yield (
                    "invoke",
                    proc,
                    "read",
                    None,
                    f'{{"from":{lo},"to":{hi},"final":true}}',
                    names[n],
                    None,
                    _FINAL,
                )
                yield (
                    "ok",
                    proc,
                    "read",
                    None,
                    log.read(lo, hi, last),
                    names[n],
                    None,
                    _read(last),
                )


def generate(n_ops: int, **kw: Unpack[SynthOptions]) -> Iterator[Op]:
    """The same stream as :func:`records`, as :class:`Op` objects with index and time set."""
    for i, (typ, proc, f, key, val, node, err) in enumerate(records(n_ops, **kw)):
        yield Op(
            type=typ,
            process=proc,
            f=f,
            value=json.loads(val),
            key=key,
            time=i * 1000,
            index=i,
            node=node,
            error=err,
        )


def write_history(
    path: str | Path, n_ops: int, *, batch: int = 200_000, **kw: Unpack[SynthOptions]
) -> int:
    """Stream a synthetic history to ``.parquet`` (columnar batches, typed columns) or ``.jsonl``."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        n = 0
        with open(path, "w", encoding="utf-8") as fh:
            for i, (typ, proc, f, key, val, node, err) in enumerate(records(n_ops, **kw)):
                fh.write(
                    f'{{"index":{i},"time":{i * 1000},"type":"{typ}","process":'
                    f'{json.dumps(proc)},"f":"{f}","key":{json.dumps(key)},"value":{val},'
                    f'"node":{json.dumps(node)},"error":{json.dumps(err)}}}\n'
                )
                n += 1
        return n
    if suffix != ".parquet":
        raise click.BadParameter(f"{path}: output must end in .jsonl or .parquet")
    kw = {
        "workload": "append",
        "anomaly": None,
        "seed": 0,
        "nodes": 5,
        "concurrency": 10,
        "keys": None,
        "key_window": None,
        "reads": "short",
        **kw,
    }
    check_args(kw["workload"], kw["anomaly"], kw["nodes"], kw["concurrency"], kw["reads"])
    from harness.core.history import parquet_schema, parquet_writer

    out = _ParquetBatch(parquet_schema())
    # The stream makes no reference cycles, and a batch holds hundreds of thousands of small
    # tuples that the collector would scan again and again (a fifth of the time).
    paused = gc.isenabled()
    gc.disable()
    try:
        with parquet_writer(path) as w:
            for rec in _simulate(n_ops, **kw):
                if out.add(rec) >= batch or out.entries >= 2_000_000:
                    w.write_table(out.table())
            if out.rows:
                w.write_table(out.table())
    finally:
        if paused:
            gc.enable()
    return out.n


class _ParquetBatch:
    """One Parquet batch. Records are kept as the simulation yields them and turned into
    columns when the batch is written; log reads' entries (:class:`_Slice`) become flat
    integer arrays from which Arrow kernels make both ``v_entries`` and the JSON text
    of ``value``."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.n = 0  # records written before this batch
        self.recs: list[tuple[Any, ...]] = []
        self.entries = 0

    @property
    def rows(self) -> int:
        return len(self.recs)

    def add(self, rec: tuple[Any, ...]) -> int:
        self.recs.append(rec)
        if rec[4].__class__ is _Slice:
            self.entries += len(rec[4].pids)
        return len(self.recs)

    def table(self) -> Any:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from harness.core.history import entries_column

        m = len(self.recs)
        typ, proc, f, key, val, node, err, fields = zip(*self.recs, strict=True)
        is_text = [v.__class__ is str for v in val]
        e_index, e_terms, e_pids = array("q"), array("q"), array("q")
        patches: list[str] = []  # e_pids <= -10 name the patch text -10 - pid
        for v in val:
            if v.__class__ is _Slice:
                start = len(e_pids)
                e_index.extend(range(v.lo, v.lo + len(v.pids)))
                e_terms.extend(v.terms)
                e_pids.extend(v.pids)
                for k, text in v.patches.items():
                    e_pids[start + k] = -10 - len(patches)
                    patches.append(text)
        counts = np.fromiter(
            (0 if t else len(v.pids) for t, v in zip(is_text, val, strict=True)), np.int64, m
        )
        offsets = pa.array(np.concatenate(([0], np.cumsum(counts))).astype(np.int32))
        pid = pa.array(np.frombuffer(e_pids, np.int64))
        payload = pc.if_else(
            pc.less(pid, 0),
            pa.scalar("null"),
            pc.binary_join_element_wise('"p', pc.cast(pid, pa.string()), '"', ""),
        )
        if patches:
            k = pc.if_else(
                pc.less_equal(pid, -10),
                pc.subtract(pa.scalar(-10, pa.int64()), pid),
                pa.scalar(None, pa.int64()),
            )
            payload = pc.coalesce(pc.take(pa.array(patches, pa.string()), k), payload)
        terms = pc.cast(pa.array(np.frombuffer(e_terms, np.int64)), pa.string())
        idx = pa.array(np.frombuffer(e_index, np.int64))
        entries = entries_column(offsets, [not t for t in is_text], idx, terms, payload)
        kind, *columns = zip(*fields, strict=True)
        text = pc.binary_join_element_wise(
            "[", pc.cast(idx, pa.string()), ",", terms, ",", payload, "]", ""
        )
        joined = pc.binary_join(
            pa.ListArray.from_arrays(offsets, text, mask=entries.is_null()), ","
        )
        reads = pc.binary_join_element_wise(
            '{"entries":[', joined, '],"committed":', pa.array(columns[3], pa.string()), "}", ""
        )
        value = pc.coalesce(
            pa.array([v if t else None for t, v in zip(is_text, val, strict=True)], pa.string()),
            reads,
        )
        s = pa.string()
        index = np.arange(self.n, self.n + m, dtype=np.int64)
        cols = [
            pa.array(index),
            pa.array(index * 1000),
            pa.array(typ, s),
            pa.array([str(p) for p in proc], s),
            pa.array(f, s),
            pa.array(key, s),
            value,
            pa.array(node, s),
            pa.array(err, s),
            pa.array(kind, s),
            *(pa.array(c, s) for c in columns),
            # typed fields the simulation never fills (a sample's member and config)
            *(pa.nulls(m, s) for _ in range(len(self.schema) - len(columns) - 11)),
            entries,
        ]
        table = pa.Table.from_arrays(cols, schema=self.schema)
        self.n += m
        self.recs = []
        self.entries = 0
        return table
