"""The transactional checker (``txn``): list-append and rw-register histories, judged by the
isolation level the database claims.

What it does, in order (docs/transactions.md has the long form):

1. takes every ``txn`` op (value: a list of micro-ops ``[f, k, v]``), checks each
   micro-op's shape (a :class:`HistoryError` names the op);
2. infers version orders and the ww, wr and rw edges from the history alone, and finds
   the anomalies that need no cycle (:mod:`checker.txn_infer`): ``internal``,
   ``duplicate-elements``, ``incompatible-order``, ``garbage-read``, ``G1a`` (aborted
   read), ``G1b`` (intermediate read), ``lost-update``;
3. adds process edges (option ``process``) and real-time edges (option ``realtime``, on
   for ``strict-serializable``);
4. finds the cycles (:mod:`checker.txn_cycles`): ``G0``, ``G1c``, ``G-single``, ``G2-item``
   and their ``-process`` / ``-realtime`` variants, one shortest cycle per class and
   strongly connected component, each explained edge by edge (the txns, the edge types,
   and why each edge holds: which key, which values, which read);
5. decides: an anomaly the claimed ``isolation`` proscribes makes the history invalid
   (``anomalies``); one it allows is reported under ``notes.allowed-anomaly`` with the
   same explanation, never as a failure. ``internal``, ``duplicate-elements``,
   ``incompatible-order`` and ``garbage-read`` say the data itself is wrong and are
   proscribed at every level.

What each level proscribes (Adya's generalized levels; ``repeatable-read`` is PL-2.99):

=====================  ===========================================================
read-uncommitted       G0
read-committed         G0, G1a, G1b, G1c
snapshot-isolation     read-committed's, G-single, lost-update
repeatable-read        read-committed's, G-single, G2-item, lost-update
serializable           repeatable-read's
strict-serializable    serializable's, and each of them with real-time edges
=====================  ===========================================================

A ``-process`` variant is proscribed when option ``process`` is on (the database claims
each client sees its own transactions in order), a ``-realtime`` one when ``realtime`` is
on or the level is strict; in both cases only if its base class is proscribed.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from checker.txn_cycles import (
    CYCLE_KINDS,
    Cycle,
    components,
    cycle_nodes,
    cycles_in,
    cyclic_core,
)
from checker.txn_infer import (
    EDGE_NAMES,
    PR,
    RT,
    RW,
    WR,
    WW,
    Graph,
    Txns,
    foreign_reads,
    infer,
    order_edges,
    txns_of,
    workload_of,
)
from checker.txn_lost import (
    FAILOVER_F,
    Failover,
    failovers,
    in_window,
    lost_examples,
    lost_writes,
    strip,
    window_stats,
)
from harness.core.checker import ALL, CheckConfig, CheckerSpec, OpShape
from harness.core.op import NEMESIS, Op
from harness.core.options import option, parse_options

__all__ = [
    "TXN",
    "TxnCheckOptions",
    "ANOMALY_KINDS",
    "LEVELS",
    "proscribed",
    "check_txn",
    "judge",
    "explanation",
]

TXN_F = "txn"
DATA_KINDS = ("internal", "duplicate-elements", "incompatible-order", "garbage-read")
LOST = "lost-commit"
WINDOW_NOTE = "lost-commit-window"
ANOMALY_KINDS = (*DATA_KINDS, LOST, "G1a", "G1b", "lost-update", *CYCLE_KINDS)
_RC = frozenset({"G0", "G1a", "G1b", "G1c"})
LEVELS: dict[str, frozenset[str]] = {
    "read-uncommitted": frozenset({"G0"}),
    "read-committed": _RC,
    "snapshot-isolation": _RC | {"G-single", "lost-update"},
    "repeatable-read": _RC | {"G-single", "G2-item", "lost-update"},
    "serializable": _RC | {"G-single", "G2-item", "lost-update"},
    "strict-serializable": _RC | {"G-single", "G2-item", "lost-update"},
}
Level = Literal[
    "read-uncommitted",
    "read-committed",
    "snapshot-isolation",
    "repeatable-read",
    "serializable",
    "strict-serializable",
]


@dataclass(frozen=True)
class TxnCheckOptions:
    """What the database claims, and what the history's values are."""

    isolation: Level = option("serializable", "the isolation level the database claims")
    workload: Literal["auto", "list-append", "rw-register"] = option(
        "auto", "the history's kind (auto: from its first write)"
    )
    realtime: bool = option(
        False, "add real-time edges (a txn completed before another began); on when strict"
    )
    process: bool = option(
        False, "add process edges: each client's txns in its order (session guarantees)"
    )
    wfr: bool = option(True, "rw-register: a txn's write follows the version it read of that key")
    durable: bool = option(
        False,
        "the database promises an acknowledged commit is never undone (lost-commit is then "
        "proscribed; it is under strict-serializable or realtime anyway)",
    )
    loss_window: str | None = option(
        None,
        "the DB's declared loss window, in words (e.g. PostgreSQL's asynchronous standby "
        "promoted): commits lost by a failover are measured as lost-commit-window notes, "
        "and the rest judged as the promoted standby kept it",
    )


def proscribed(o: TxnCheckOptions) -> frozenset[str]:
    """Every anomaly kind that makes a history invalid under the options' claim."""
    base = LEVELS[o.isolation]
    out = set(base) | set(DATA_KINDS)
    rt = o.realtime or o.isolation == "strict-serializable"
    if o.durable or rt:
        out.add(LOST)
    for b in ("G0", "G1c", "G-single", "G2-item"):
        if b in base:
            if o.process or rt:
                out.add(f"{b}-process")
            if rt:
                out.add(f"{b}-realtime")
    return frozenset(out)


def _txn_name(t: Txns, i: int) -> str:
    return f"T{t.inv[i]}"


def _why(t: Txns, g: Graph, kind: str, a: int, b: int, typ: int) -> str:
    """Why the edge a -> b of type ``typ`` holds, in words."""
    A, B = _txn_name(t, a), _txn_name(t, b)
    if typ == RT:
        return f"{A} completed (op {t.comp[a]}) before {B} was invoked (op {t.inv[b]})"
    if typ == PR:
        return f"{A} and {B} ran on process {t.process[a]}, {A} first"
    wb = g.writes.get(b, {})
    if kind == "list-append":
        ra, rb = foreign_reads(t, a), foreign_reads(t, b)
    else:
        ra, rb = g.reads.get(a, []), g.reads.get(b, [])
    if kind == "list-append":
        for k, order in g.orders.items():
            src = f"op {t.comp[g.order_from[k]]} read key {k!r} as {_short(order)}"
            if typ == WW:
                pos = {x: j for j, x in enumerate(order)}
                ja = {pos[x] for x in _appends(t, a, k) if x in pos}
                for j in sorted(pos[x] for x in _appends(t, b, k) if x in pos):
                    if j - 1 in ja:
                        return (
                            f"{A} appended {order[j - 1]!r} to key {k!r} and {B} appended "
                            f"{order[j]!r} right after it ({src})"
                        )
            if typ == RW:
                for kk, v in ra:
                    n = len(v)
                    if kk == k and n < len(order) and g.writer_of(k, order[n]) == b:
                        return (
                            f"{A} read key {k!r} as {_short(v)}, without {order[n]!r}, which "
                            f"{B} appended next ({src})"
                        )
        if typ == WR:
            for k, v in rb:
                if v and g.writer_of(k, v[-1]) == a:
                    return f"{B} read key {k!r} as {_short(v)}, ending in {A}'s append {v[-1]!r}"
    else:
        if typ == WR:
            for k, v in rb:
                if v is not None and g.writer_of(k, v) == a:
                    return f"{B} read key {k!r} = {v!r}, which {A} wrote"
        if typ == WW:
            for k, v in rb:
                if k in wb and v is not None and g.writer_of(k, v) == a:
                    return f"{B} read key {k!r} = {v!r} ({A}'s write), then wrote {wb[k]!r} over it"
        if typ == RW:
            for k, v in ra:
                if k not in wb:
                    continue
                if v is None:
                    return f"{A} read key {k!r} as its initial null, and {B} wrote {wb[k]!r}"
                if any(kk == k and vv == v for kk, vv in rb):
                    return (
                        f"{A} read key {k!r} = {v!r}, and {B} read the same version, then "
                        f"wrote {wb[k]!r} over it"
                    )
    return f"{EDGE_NAMES[typ]} edge"


def _appends(t: Txns, i: int, k: Any) -> list[Any]:
    return [v for f, kk, v in t.mops[i] if f == "append" and kk == k]


def _short(v: Any, n: int = 5) -> str:
    if isinstance(v, list) and len(v) > n:
        return "[..., " + ", ".join(map(repr, v[-n:])) + "]"
    return repr(v)


def _explain(t: Txns, g: Graph, kind: str, name: str, cyc: Cycle) -> dict[str, Any]:
    """A cycle as the report shows it: the chain, then one line per edge saying why it
    holds (each its own field, short enough to be read whole), then the txns."""
    nodes = cycle_nodes(cyc)
    chain = "".join(f"{_txn_name(t, a)} -{EDGE_NAMES[ty]}-> " for a, _, ty in cyc)
    out: dict[str, Any] = {
        "indexes": sorted(x for i in nodes for x in t.indexes(i)),
        "cycle": chain + _txn_name(t, nodes[0]),
    }
    for j, (a, b, ty) in enumerate(cyc, 1):
        out[f"edge {j}"] = f"{_txn_name(t, a)} -{EDGE_NAMES[ty]}-> {_txn_name(t, b)}: " + _why(
            t, g, kind, a, b, ty
        )
    out["txns"] = [
        {"name": _txn_name(t, i), "process": t.process[i], "value": t.mops[i]} for i in nodes
    ]
    return out


def explanation(name: str, ex: dict[str, Any]) -> str:
    """An anomaly example as text: a cycle's chain and edges, or the one-line why."""
    if "cycle" not in ex:
        return f"{name}: {ex.get('why', '')}"
    edges = [str(v) for k, v in ex.items() if k.startswith("edge ")]
    return "\n".join([f"{name}: {ex['cycle']}", *(f"  {e}" for e in edges)])


def judge(
    pairs: Sequence[tuple[Op, Op | None]],
    opts: TxnCheckOptions,
    *,
    cap: int = 20,
    faults: Sequence[Op] = (),
) -> dict[str, Any]:
    """The result map for the transactions ``pairs`` (invocation order) under ``opts``;
    ``faults``: the history's fault records (a failover's tell which lost commits fall in
    a declared loss window, :mod:`checker.txn_lost`).

    The cyclic garbage collector is paused meanwhile: inference builds millions of small
    lists and tuples, none of them cyclic, and the collector's passes over them took half
    the time of a million-txn check."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _judge(pairs, opts, cap=cap, faults=faults)
    finally:
        if enabled:
            gc.enable()


def _judge(
    pairs: Sequence[tuple[Op, Op | None]],
    opts: TxnCheckOptions,
    *,
    cap: int = 20,
    faults: Sequence[Op] = (),
    rejudge: bool = True,
) -> dict[str, Any]:
    kind = workload_of((p[0] for p in pairs), opts.workload)
    t = txns_of(pairs, kind)
    g, found = infer(t, kind, wfr=opts.wfr)
    lost = lost_writes(t, g, kind)
    window_notes: list[dict[str, Any]] = []
    lost_stats: dict[str, Any] | None = None
    if lost:
        fos = failovers(faults)
        ack = {x.txn: _ack_time(pairs, x.txn) for x in lost}
        window: dict[int, Failover | None] = {}
        for x in lost:
            window[x.txn] = window.get(x.txn) or in_window(t, x, fos, ack[x.txn])
        inside = [x for x in lost if opts.loss_window and window[x.txn] is not None]
        outside = [x for x in lost if not (opts.loss_window and window[x.txn] is not None)]
        lost_stats = window_stats(lost, window, ack, fos)
        if inside:
            window_notes = lost_examples(t, inside, window, ack)
        if inside and rejudge:
            # the verdict is of what the promoted standby kept; the window is measured
            kept = _judge(
                strip(pairs, t, inside, kind), opts, cap=cap, faults=faults, rejudge=False
            )
            kept["notes"][WINDOW_NOTE] = window_notes[:cap]
            kept["stats"]["lost_commits"] = {
                **lost_stats,
                "judged_without": len({x.txn for x in inside}),
            }
            return kept
        if outside:
            found[LOST] = lost_examples(t, outside, window, ack)
    rt = opts.realtime or opts.isolation == "strict-serializable"
    order_edges(t, g, realtime=rt, process=opts.process)
    src, dst, _ = g.arrays()
    core = cyclic_core(len(t), src, dst, hint=t.inv)
    comps = components(g, core) if core else []
    order_types = (RT if rt else 0) | (PR if opts.process else 0)
    for comp in comps:
        for name, cyc in cycles_in(comp, order_types).items():
            found.setdefault(name, []).append(_explain(t, g, kind, name, cyc))
    bad = proscribed(opts)
    anomalies: dict[str, list[dict[str, Any]]] = {}
    allowed: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for name in ANOMALY_KINDS:
        exs = found.get(name)
        if not exs:
            continue
        exs = sorted(exs, key=lambda e: (e["indexes"], e.get("why", e.get("cycle", ""))))
        if name in bad:
            counts[name] = len(exs)
            anomalies[name] = exs[:cap]
        else:
            allowed += [{"kind": name, **e} for e in exs[:cap]]
    n_edges = {EDGE_NAMES[b]: g.count(b) for b in (WW, WR, RW, RT, PR)}
    st = {name: t.status.count(code) for code, name in enumerate(("ok", "info", "fail"))}
    valid: bool | str = not anomalies
    reason = None
    if (
        valid
        and kind == "rw-register"
        and opts.isolation == "snapshot-isolation"
        and "G2-item" in found
    ):
        # a register's inferred successor need not be the next version, so a cycle of two
        # inferred rw edges may stand for one rw edge in Adya's graph: G-single, which
        # snapshot isolation proscribes
        valid = "unknown"
        reason = (
            "rw-register: a G2-item cycle was found, and registers do not show whether it "
            "is a G-single (which snapshot isolation proscribes); list-append would tell"
        )
    out: dict[str, Any] = {
        "valid": valid,
        "isolation": opts.isolation,
        "workload": kind,
        "anomalies": anomalies,
        "notes": {
            **({"allowed-anomaly": allowed} if allowed else {}),
            **({WINDOW_NOTE: window_notes[:cap]} if window_notes else {}),
        },
        "stats": {
            "txns": st,
            "keys": g.keys(),
            "edges": n_edges,
            "cyclic_txns": len(core),
            "components": len(comps),
            "anomaly_counts": counts,
            "allowed_counts": {
                n: len(found[n]) for n in ANOMALY_KINDS if n in found and n not in bad
            },
        },
    }
    out["promise"] = _promise(opts, bad)
    if opts.loss_window:
        out["stats"]["loss_window"] = opts.loss_window
    if lost_stats is not None:
        out["stats"]["lost_commits"] = lost_stats
    if reason:
        out["reason"] = reason
    texts = [explanation(name, e) for name, exs in anomalies.items() for e in exs[:3]]
    if texts:
        out["counterexample_text"] = "\n\n".join(texts)
    return out


def _ack_time(pairs: Sequence[tuple[Op, Op | None]], i: int) -> int:
    comp = pairs[i][1]
    return comp.time if comp is not None else pairs[i][0].time


def _promise(opts: TxnCheckOptions, bad: frozenset[str]) -> str:
    """Which promise the verdict checked, in words: the level, and durability with its
    declared exception."""
    out: str = opts.isolation
    if LOST in bad:
        out += "; every acknowledged commit kept"
        if opts.loss_window:
            out += f", except in the declared loss window ({opts.loss_window})"
    return out


def check_txn(
    ops: Sequence[Op], opts: Mapping[str, Any] | TxnCheckOptions | None = None, *, cap: int = 20
) -> dict[str, Any]:
    """:func:`judge` of a plain op list (its ``txn`` ops paired here, its failovers'
    fault records read)."""
    from harness.core.paired import PairedHistory

    o = (
        opts
        if isinstance(opts, TxnCheckOptions)
        else parse_options(TxnCheckOptions, opts, role="checker txn")
    )
    h = PairedHistory.of(o_ for o_ in ops if o_.is_client and o_.f == TXN_F)
    faults = [o_ for o_ in ops if o_.process == NEMESIS]
    return judge(h.pairs(TXN_F), o, cap=cap, faults=faults)


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    """Every ``txn`` op (a malformed one is an error, not someone else's op)."""
    return ALL if shape.f == TXN_F else None


def _local(history: Any, config: CheckConfig) -> dict[str, Any]:
    o = config.options if isinstance(config.options, TxnCheckOptions) else TxnCheckOptions()
    return judge(history.pairs(TXN_F), o, cap=config.cap, faults=config.faults)


TXN = CheckerSpec(
    name="txn",
    claims=_claims,
    anomalies=ANOMALY_KINDS,
    notes=("allowed-anomaly", WINDOW_NOTE),
    options=TxnCheckOptions,
    local=_local,
    faults=frozenset({FAILOVER_F}),
    examples="checker.txn_planted:examples",
    doc="transactions over lists (list-append) and registers (rw-register): Adya's "
    "anomalies from inferred dependency graphs, each with a shortest cycle explained, "
    "judged by the claimed isolation level",
)
"""The registered checker (entry point ``txn`` of ``splitbrain.checkers``)."""
