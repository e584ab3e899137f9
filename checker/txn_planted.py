"""Transactional histories with known answers: a simulated database that is strictly
serializable, and small histories with one anomaly of each class planted.

Why our own: the checker's claims must be tested against histories whose verdict is known
by construction. :func:`simulate` runs the workload generator (:mod:`workloads.txn`)
against an in-memory store that applies each transaction atomically at one instant
between its invocation and its completion, so every history it writes is strictly
serializable (with aborts, which apply nothing, and unknown outcomes, which apply or not):
the checker must find nothing in it at any level, real-time edges included.
:func:`plant` writes the minimal history of each anomaly class, for both workloads;
:func:`examples` is what the engine-agreement test runs on both engines.
"""

from __future__ import annotations

import random
from typing import Any

from harness.core.checker import Example
from harness.core.op import Op
from harness.core.workload import GenContext

__all__ = ["simulate", "plant", "examples", "stale_read", "failover_loss", "LOSS_WINDOW"]


class _Builder:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    def inv(self, process: int, mops: list[list[Any]]) -> Op:
        op = Op("invoke", process, "txn", mops, index=len(self.ops), time=len(self.ops))
        self.ops.append(op)
        return op

    def done(self, op: Op, typ: str, value: list[list[Any]] | None = None) -> None:
        v = op.value if value is None else value
        self.ops.append(op.replace(type=typ, value=v, index=len(self.ops), time=len(self.ops)))

    def txn(self, process: int, mops: list[list[Any]], typ: str = "ok", done: Any = None) -> None:
        """One transaction, invoked and completed at once; ``done`` the filled micro-ops."""
        op = self.inv(process, [[f, k, None if f == "r" else v] for f, k, v in mops])
        self.done(op, typ, mops if done is None else done)


def simulate(
    n: int,
    kind: str = "list-append",
    *,
    concurrency: int = 8,
    seed: int = 1,
    fail_rate: float = 0.02,
    info_rate: float = 0.01,
    **gen: Any,
) -> list[Op]:
    """A strictly serializable history of ``n`` transactions (module docstring)."""
    from workloads.txn import TxnGen, TxnGenOptions

    rng = random.Random(seed)
    g = TxnGen(kind, TxnGenOptions(**gen))
    store: dict[Any, Any] = {}
    ops: list[Op] = []
    procs = list(range(concurrency))
    # per worker: None (idle) or [invocation, applied?, filled micro-ops, outcome]
    flight: list[list[Any] | None] = [None] * concurrency
    started = 0
    ctx = GenContext(time_ns=0, process=0, worker=0, node="n1", rng=rng)

    def emit(typ: str, process: int, value: Any) -> Op:
        op = Op(typ, process, "txn", value, index=len(ops), time=len(ops) * 1000)
        ops.append(op)
        return op

    while started < n or any(flight):
        w = rng.randrange(concurrency)
        f = flight[w]
        if f is None:
            if started >= n:
                continue
            started += 1
            mops = g.txn(ctx)
            inv = emit("invoke", procs[w], mops)
            r = rng.random()
            outcome = "fail" if r < fail_rate else "info" if r < fail_rate + info_rate else "ok"
            flight[w] = [inv, False, None, outcome]
        elif not f[1]:
            inv, _, _, outcome = f
            applies = outcome == "ok" or (outcome == "info" and rng.random() < 0.5)
            f[2] = _apply(store, inv.value, kind) if applies else None
            f[1] = True
        else:
            inv, _, filled, outcome = f
            if outcome == "ok":
                emit("ok", inv.process, filled)
            else:
                emit(outcome, inv.process, inv.value)
                if outcome == "info":
                    procs[w] += concurrency
            flight[w] = None
    return ops


def _apply(store: dict[Any, Any], mops: list[list[Any]], kind: str) -> list[list[Any]]:
    out = []
    for f, k, v in mops:
        if f == "r":
            cur = store.get(k)
            out.append(["r", k, list(cur or []) if kind == "list-append" else cur])
        elif f == "append":
            store.setdefault(k, []).append(v)
            out.append([f, k, v])
        else:
            store[k] = v
            out.append([f, k, v])
    return out


def stale_read(ops: list[Op], *, seed: int = 1) -> tuple[list[Op], int]:
    """The history with one read made stale: an ok list-append read of a key, by a txn that
    neither appends to it nor reads it again, loses its last element whose appender had completed before the
    read's txn was invoked (a G-single-realtime at least). Returns (ops, the op's index)."""
    rng = random.Random(seed)
    completed_at: dict[tuple[Any, Any], int] = {}
    for op in ops:
        if op.type == "ok":
            for f, k, v in op.value:
                if f == "append":
                    completed_at[(k, v)] = op.index
    inv_of: dict[Any, int] = {}
    candidates = []
    for op in ops:
        if op.type == "invoke":
            inv_of[op.process] = op.index
        elif op.type == "ok":
            keys_written = {k for f, k, _ in op.value if f == "append"}
            reads = [k for f, k, _ in op.value if f == "r"]
            for j, (f, k, v) in enumerate(op.value):
                if f == "r" and v and k not in keys_written and reads.count(k) == 1:
                    at = completed_at.get((k, v[-1]))
                    if at is not None and at < inv_of[op.process]:
                        candidates.append((op.index, j))
    index, j = candidates[rng.randrange(len(candidates))]
    op = ops[index]
    mops = [list(m) for m in op.value]
    mops[j] = ["r", mops[j][1], mops[j][2][:-1]]
    out = list(ops)
    out[index] = op.replace(value=mops)
    return out, index


def plant(kind: str) -> dict[str, tuple[Any, ...]]:
    """``{label: (ops, anomaly kind, ...)}``: the minimal history of each class for ``kind``,
    with every kind it shows (a lost update on a list is also a G-single: the second
    writer read the version before the first one's append; on registers, a G2-item, since
    the order of the two writes is not known)."""
    if kind == "list-append":
        return _plant_list()
    return _plant_register()


def _plant_list() -> dict[str, tuple[Any, ...]]:
    A = "append"
    out: dict[str, tuple[Any, ...]] = {}

    def new() -> _Builder:
        return _Builder()

    b = new()
    b.txn(0, [[A, 0, 1], [A, 1, 2]])
    b.txn(1, [[A, 0, 2], [A, 1, 1]])
    b.txn(2, [["r", 0, [1, 2]], ["r", 1, [1, 2]]])
    out["G0"] = (b.ops, "G0")
    b = new()
    b.txn(0, [[A, 0, 1]], "fail")
    b.txn(1, [["r", 0, [1]]])
    out["G1a"] = (b.ops, "G1a")
    b = new()
    b.txn(0, [[A, 0, 1], [A, 0, 2]])
    b.txn(1, [["r", 0, [1]]])
    out["G1b"] = (b.ops, "G1b")
    b = new()
    i1 = b.inv(0, [[A, 0, 1], ["r", 1, None]])
    i2 = b.inv(1, [[A, 1, 1], ["r", 0, None]])
    b.done(i1, "ok", [[A, 0, 1], ["r", 1, [1]]])
    b.done(i2, "ok", [[A, 1, 1], ["r", 0, [1]]])
    out["G1c"] = (b.ops, "G1c")
    b = new()
    i1 = b.inv(0, [["r", 0, None], ["r", 1, None]])
    b.txn(1, [[A, 0, 1], [A, 1, 1]])
    b.done(i1, "ok", [["r", 0, []], ["r", 1, [1]]])
    b.txn(2, [["r", 0, [1]]])
    out["G-single"] = (b.ops, "G-single")
    b = new()
    i1 = b.inv(0, [["r", 0, None], [A, 1, 1]])
    i2 = b.inv(1, [["r", 1, None], [A, 0, 1]])
    b.done(i1, "ok", [["r", 0, []], [A, 1, 1]])
    b.done(i2, "ok", [["r", 1, []], [A, 0, 1]])
    b.txn(2, [["r", 0, [1]], ["r", 1, [1]]])
    out["G2-item"] = (b.ops, "G2-item")
    b = new()
    i1 = b.inv(0, [["r", 0, None], [A, 0, 1]])
    i2 = b.inv(1, [["r", 0, None], [A, 0, 2]])
    b.done(i1, "ok", [["r", 0, []], [A, 0, 1]])
    b.done(i2, "ok", [["r", 0, []], [A, 0, 2]])
    b.txn(2, [["r", 0, [1, 2]]])
    out["lost-update"] = (b.ops, "lost-update", "G-single")
    b = new()
    i1 = b.inv(0, [["r", 0, None], ["r", 0, None]])
    b.txn(1, [[A, 0, 1]])
    b.done(i1, "ok", [["r", 0, []], ["r", 0, [1]]])
    out["G-single-nonrepeatable"] = (b.ops, "G-single")
    b = new()
    b.txn(0, [[A, 0, 1], ["r", 0, []]])
    out["internal"] = (b.ops, "internal")
    b = new()
    b.txn(0, [[A, 0, 1]])
    b.txn(1, [["r", 0, [1, 1]]])
    out["duplicate-elements"] = (b.ops, "duplicate-elements")
    b = new()
    b.txn(0, [[A, 0, 1]])
    b.txn(1, [[A, 0, 2]])
    b.txn(2, [["r", 0, [1, 2]]])
    b.txn(3, [["r", 0, [2, 1]]])
    out["incompatible-order"] = (b.ops, "incompatible-order")
    b = new()
    b.txn(0, [["r", 0, [9]]])
    out["garbage-read"] = (b.ops, "garbage-read")
    b = new()
    b.txn(0, [[A, 0, 1]])
    b.txn(1, [["r", 0, []]])
    b.txn(2, [["r", 0, [1]]])
    out["G-single-realtime"] = (b.ops, "G-single-realtime")
    b = new()
    b.txn(0, [[A, 0, 1]])
    b.txn(0, [["r", 0, []]])
    b.txn(2, [["r", 0, [1]]])
    out["G-single-process"] = (b.ops, "G-single-process")
    return out


def _plant_register() -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    b = _Builder()
    i1 = b.inv(0, [["w", 0, 1], ["r", 1, None], ["w", 1, 2]])
    i2 = b.inv(1, [["w", 1, 1], ["r", 0, None], ["w", 0, 2]])
    b.done(i1, "ok", [["w", 0, 1], ["r", 1, 1], ["w", 1, 2]])
    b.done(i2, "ok", [["w", 1, 1], ["r", 0, 1], ["w", 0, 2]])
    out["G0"] = (b.ops, "G0")
    b = _Builder()
    b.txn(0, [["w", 0, 1]], "fail")
    b.txn(1, [["r", 0, 1]])
    out["G1a"] = (b.ops, "G1a")
    b = _Builder()
    b.txn(0, [["w", 0, 1], ["w", 0, 2]])
    b.txn(1, [["r", 0, 1]])
    out["G1b"] = (b.ops, "G1b")
    b = _Builder()
    i1 = b.inv(0, [["w", 0, 1], ["r", 1, None]])
    i2 = b.inv(1, [["w", 1, 1], ["r", 0, None]])
    b.done(i1, "ok", [["w", 0, 1], ["r", 1, 1]])
    b.done(i2, "ok", [["w", 1, 1], ["r", 0, 1]])
    out["G1c"] = (b.ops, "G1c")
    b = _Builder()
    i1 = b.inv(0, [["r", 0, None], ["r", 1, None]])
    b.txn(1, [["w", 0, 1], ["w", 1, 1]])
    b.done(i1, "ok", [["r", 0, None], ["r", 1, 1]])
    out["G-single"] = (b.ops, "G-single")
    b = _Builder()
    i1 = b.inv(0, [["r", 0, None], ["w", 1, 1]])
    i2 = b.inv(1, [["r", 1, None], ["w", 0, 1]])
    b.done(i1, "ok", [["r", 0, None], ["w", 1, 1]])
    b.done(i2, "ok", [["r", 1, None], ["w", 0, 1]])
    out["G2-item"] = (b.ops, "G2-item")
    b = _Builder()
    b.txn(0, [["w", 0, 1]])
    i1 = b.inv(1, [["r", 0, None], ["w", 0, 2]])
    i2 = b.inv(2, [["r", 0, None], ["w", 0, 3]])
    b.done(i1, "ok", [["r", 0, 1], ["w", 0, 2]])
    b.done(i2, "ok", [["r", 0, 1], ["w", 0, 3]])
    out["lost-update"] = (b.ops, "lost-update", "G2-item")
    b = _Builder()
    b.txn(0, [["w", 0, 1]])
    i1 = b.inv(1, [["r", 0, None], ["r", 0, None]])
    b.txn(2, [["r", 0, 1], ["w", 0, 2]])
    b.done(i1, "ok", [["r", 0, 1], ["r", 0, 2]])
    out["G-single-nonrepeatable"] = (b.ops, "G-single")
    b = _Builder()
    b.txn(0, [["w", 0, 1], ["r", 0, None]])
    out["internal"] = (b.ops, "internal")
    b = _Builder()
    b.txn(0, [["r", 0, 7]])
    out["garbage-read"] = (b.ops, "garbage-read")
    b = _Builder()
    b.txn(0, [["w", 0, 1]])
    b.txn(1, [["r", 0, None]])
    out["G-single-realtime"] = (b.ops, "G-single-realtime")
    return out


def combined(kind: str) -> tuple[list[Op], tuple[str, ...]]:
    """Every planted history of ``kind`` in one, one after another, each on keys and
    processes of its own (so no edge joins two of them but real-time ones, which only
    point forwards), and the kinds it shows."""
    ops: list[Op] = []
    kinds: set[str] = set()
    for n, (plant_ops, *shows) in enumerate(plant(kind).values()):
        base = len(ops)
        for op in plant_ops:
            mops = [[f, n * 1000 + k, v] for f, k, v in op.value]
            ops.append(
                op.replace(
                    index=base + op.index,
                    time=base + op.index,
                    process=n * 100 + int(op.process),
                    value=mops,
                )
            )
        kinds.update(shows)
    return ops, tuple(sorted(kinds))


MS = 1_000_000
LOSS_WINDOW = "asynchronous standby promoted: commits it had not received"
"""A loss window in words, as a DB declares one (harness/dbs/postgres.py)."""


class _Timed(_Builder):
    """Ops 1 ms apart, with failovers as nemesis/failover.py records them."""

    def txn(self, process: int, mops: list[list[Any]], typ: str = "ok", done: Any = None) -> None:
        super().txn(process, mops, typ, done)
        for j in (-2, -1):
            op = self.ops[j]
            self.ops[j] = op.replace(time=op.index * MS)

    def failover(self, **more: Any) -> None:
        n = len(self.ops)
        self.ops.append(Op("invoke", "nemesis", "start-failover", {"target": "master"}, index=n))
        value = {"nodes": ["n1"], "killed": "n1", "promoted": "n2", **more}
        self.ops.append(Op("info", "nemesis", "start-failover", value, index=n + 1))
        for j in (-2, -1):
            op = self.ops[j]
            self.ops[j] = op.replace(time=op.index * MS)


def failover_loss(kind: str, *, failover: bool = True, after_promotion: bool = False) -> list[Op]:
    """A primary failed over to a standby that lacked its last acknowledged commit: the
    txn invoked at op 4 (list-append: appends 2 to key 0 and 1 to key 1; rw-register:
    writes 2 to key 0), acknowledged at op 5 and read back, then the failover (ops 8-9,
    or 6-7), after which the keys go on without it. ``failover=False``: the same loss
    with no failover; ``after_promotion``: the lost txn acknowledged by the new primary."""
    b = _Timed()
    if kind == "rw-register":
        b.txn(0, [["w", 0, 1]])
        b.txn(1, [["r", 0, 1], ["w", 0, 2]])
        b.txn(0, [["r", 0, 2]])
        if failover:
            b.failover()
        b.txn(1, [["r", 0, 1], ["w", 0, 3]])
        b.txn(0, [["r", 0, 3]])
        return b.ops
    b.txn(0, [["append", 0, 1]])
    b.txn(1, [["r", 0, [1]]])
    if not after_promotion:
        b.txn(0, [["append", 0, 2], ["append", 1, 1]])
        b.txn(1, [["r", 0, [1, 2]], ["r", 1, [1]]])
    if failover:
        b.failover()
    if after_promotion:
        b.txn(0, [["append", 0, 2], ["append", 1, 1]])
    b.txn(0, [["r", 0, [1]], ["append", 0, 3]])
    b.txn(1, [["append", 1, 2]])
    b.txn(1, [["r", 0, [1, 3]], ["r", 1, [2]]])
    return b.ops


def examples() -> dict[str, Example]:
    """Every planted class of each workload in one history (strict serializability and
    process order claimed, so the -realtime and -process classes count), and a valid
    simulated history of each."""
    out: dict[str, Example] = {}
    for kind in ("list-append", "rw-register"):
        claim = {"workload": kind, "isolation": "strict-serializable", "process": True}
        ops, kinds = combined(kind)
        out[f"{kind}-every-anomaly"] = (ops, {"options": {"txn": claim}}, kinds)
        sim = simulate(300, kind, seed=7, concurrency=5, key_count=4)
        out[f"{kind}-valid"] = (sim, {"options": {"txn": claim}}, ())
        lost = failover_loss(kind)
        durable = {"workload": kind, "durable": True}
        shows = (
            ("incompatible-order", "lost-commit")
            if kind == "list-append"
            else (
                "lost-commit",
                "lost-update",
                "G2-item",
            )
        )
        out[f"{kind}-failover-lost-commit"] = (lost, {"options": {"txn": durable}}, shows)
        window = {**durable, "loss_window": LOSS_WINDOW}
        out[f"{kind}-failover-in-window"] = (lost, {"options": {"txn": window}}, ())
    return out
