"""Transactional workloads: ``list-append`` and ``rw-register`` (Elle's two histories).

Why these two: a transaction over lists whose appends are unique per key leaves, in every
read, the order in which the appends were applied (the list is a prefix of the key's
version order), so the checker (:mod:`checker.txn`) can infer write-write, write-read and
read-write dependencies without trusting the database; registers with unique writes are
weaker (a read names its writer, not the order of versions) but are what most stores
offer. Both are the shapes Elle's checker judges, generated with Elle's properties:

* values are unique per key (each key counts its own writes, 1, 2, 3, ...);
* keys rotate: ``key_count`` keys are live at once, a key that received
  ``max_writes_per_key`` writes is retired and a fresh key takes its place, so reads stay
  short and every key's order is seen by many transactions;
* a transaction holds ``min_txn_length`` to ``max_txn_length`` micro-ops, each a read with
  probability ``read_fraction`` and a write otherwise, on keys drawn from the live set
  (exponentially skewed towards the first live keys by default, for contention);
* during a lull only read-only transactions are proposed.

The history (docs/architecture.md §3, docs/transactions.md): one op per transaction, ``f``
``txn``, ``key`` null, ``value`` a list of micro-ops ``[f, k, v]``:

* list-append: ``["append", k, v]`` and ``["r", k, null]``; the ok completion fills each
  read: ``["r", k, [v1, v2, ...]]`` (the whole list, ``[]`` when empty);
* rw-register: ``["w", k, v]`` and ``["r", k, null]``; ok fills ``["r", k, v]`` (null when
  never written).

``ok`` means the transaction committed, ``fail`` that it certainly did not (an abort, a
serialization failure), ``info`` that nobody knows. Keys are integers.

Three ways to run them:

* a DB that implements :class:`TransactionalDB` (``--db postgres``): the workload asks it
  for a :class:`TxnSession` per worker;
* any program speaking the stdio protocol (:mod:`workloads.stdio`), given as
  ``-w list-append:PROGRAM`` or ``--workload-option program=PROGRAM``: each line it reads
  carries ``"f": "txn"`` and the micro-ops as ``value``, and it answers
  ``{"type": "ok", "value": [micro-ops with reads filled]}``;
* a plugin's own client, with :func:`txn_generator` and :func:`txn_checker_options` (both in
  ``harness.api``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harness.core.errors import ConfigError
from harness.core.options import as_options, declares_options, option
from harness.core.workload import GenContext, Workload

if TYPE_CHECKING:
    from harness.core.op import Op
    from harness.core.spec import RunContext

__all__ = [
    "KINDS",
    "TXN_F",
    "TxnAborted",
    "TxnSession",
    "TransactionalDB",
    "TxnGen",
    "TxnClient",
    "TxnOptions",
    "txn_generator",
    "txn_checker_options",
    "list_append",
    "rw_register",
    "writes_of",
]

TXN_F = "txn"
KINDS = ("list-append", "rw-register")
WRITE_F = {"list-append": "append", "rw-register": "w"}


class TxnAborted(Exception):
    """The database refused the transaction and certainly applied none of it (``fail``)."""


@runtime_checkable
class TxnSession(Protocol):
    """One client's connection to a transactional database."""

    def transact(self, mops: list[list[Any]]) -> list[list[Any]]:
        """Run the micro-ops as one transaction and return them with every read filled.

        Raises :class:`TxnAborted` when it certainly did not commit; any other exception
        means the outcome is unknown."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class TransactionalDB(Protocol):
    """A DB whose nodes run transactions (``--db postgres``): what the workloads ask."""

    def txn_session(self, ctx: RunContext, node: str, kind: str) -> TxnSession:
        """A session on ``node`` for the workload ``kind`` (``list-append``, ``rw-register``)."""
        ...


@dataclass(frozen=True)
class TxnGenOptions:
    key_count: int = option(10, "keys live at once", minimum=1)
    min_txn_length: int = option(1, "fewest micro-ops in a transaction", minimum=1)
    max_txn_length: int = option(4, "most micro-ops in a transaction", minimum=1)
    max_writes_per_key: int = option(
        32, "writes a key receives before it is retired for a fresh one", minimum=1
    )
    read_fraction: float = option(
        0.5, "share of micro-ops that are reads", minimum=0.0, maximum=1.0
    )
    key_dist: str = option("exponential", "how keys are drawn: exponential or uniform")


@dataclass(frozen=True)
class TxnOptions(TxnGenOptions):
    argument: str | None = option(None, "a stdio program (what follows ``list-append:``)")
    program: str | None = option(None, "a stdio program speaking JSON lines (workloads/stdio.py)")
    stdio_timeout: float = option(
        5.0, "seconds the stdio program may take to answer one transaction", minimum=0.001
    )
    isolation: str | None = option(
        None,
        "the isolation level the checker holds the database to (default: what the DB "
        "declares, else serializable)",
    )


class TxnGen:
    """Transactions over rotating keys with unique values per key (module docstring)."""

    def __init__(self, kind: str, options: TxnGenOptions | None = None) -> None:
        o = options or TxnGenOptions()
        if kind not in KINDS:
            raise ConfigError(f"transaction workload must be one of {KINDS}, got {kind!r}")
        if o.min_txn_length > o.max_txn_length:
            raise ConfigError(
                f"min_txn_length {o.min_txn_length} > max_txn_length {o.max_txn_length}",
                field="min_txn_length",
            )
        if o.key_dist not in ("exponential", "uniform"):
            raise ConfigError(
                f"key_dist must be exponential or uniform, got {o.key_dist!r}", field="key_dist"
            )
        self.kind = kind
        self.write_f = WRITE_F[kind]
        self.o = o
        self.live = list(range(o.key_count))
        self.next_key = o.key_count
        self.writes: dict[int, int] = {}
        # exponential: key i of the live set drawn with weight base**-i, base chosen so the
        # last live key is drawn about a tenth as often as the first
        n = o.key_count
        self._base = 10 ** (1 / max(1, n - 1)) if o.key_dist == "exponential" and n > 1 else 1.0

    def _slot(self, ctx: GenContext) -> int:
        n = len(self.live)
        if self._base == 1.0:
            return ctx.rng.randrange(n)
        # inverse CDF of a truncated geometric distribution over 0..n-1
        q = 1 / self._base
        u = ctx.rng.random()
        i = int(math.log(1 - u * (1 - q**n)) / math.log(q))
        return min(i, n - 1)

    def txn(self, ctx: GenContext) -> list[list[Any]]:
        """One transaction's micro-ops (reads with a null value)."""
        o = self.o
        length = ctx.rng.randint(o.min_txn_length, o.max_txn_length)
        out: list[list[Any]] = []
        for _ in range(length):
            slot = self._slot(ctx)
            k = self.live[slot]
            if ctx.lull or ctx.rng.random() < o.read_fraction:
                out.append(["r", k, None])
                continue
            v = self.writes.get(k, 0) + 1
            self.writes[k] = v
            out.append([self.write_f, k, v])
            if v >= o.max_writes_per_key:
                self.writes.pop(k, None)
                self.live[slot] = self.next_key
                self.next_key += 1
        return out

    def op(self, ctx: GenContext) -> Op:
        from workloads.generator import invoke

        return invoke(ctx, TXN_F, self.txn(ctx))

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


def txn_generator(kind: str, options: TxnGenOptions | Mapping[str, Any] | None = None) -> TxnGen:
    """The generator of ``kind`` (``list-append`` or ``rw-register``), for a plugin's client."""
    o = (
        options
        if isinstance(options, TxnGenOptions)
        else as_options(TxnGenOptions, dict(options or {}), role=f"workload {kind}")
    )
    return TxnGen(kind, o)


def writes_of(mops: Any) -> bool:
    """Whether a transaction's micro-ops write anything (a read-only one can be ``fail``ed
    safely on any error: it changed nothing)."""
    return isinstance(mops, list) and any(
        isinstance(m, list) and m and m[0] in ("append", "w") for m in mops
    )


class TxnClient:
    """Runs each transaction through the DB's :class:`TxnSession` (one per worker)."""

    read_fs: frozenset[str] = frozenset()

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.node: str | None = None
        self.session: TxnSession | None = None

    def open(self, ctx: RunContext, node: str) -> TxnClient:
        if not isinstance(ctx.db, TransactionalDB):
            raise ConfigError(
                f"workload {self.kind} needs a DB that runs transactions (such as --db "
                f"postgres) or a stdio program (-w {self.kind}:PROGRAM); "
                f"{type(ctx.db).__name__} runs none",
                field="workload",
            )
        c = TxnClient(self.kind)
        c.node = node
        return c

    def setup(self, ctx: RunContext) -> None:
        pass

    def _drop(self) -> None:
        s, self.session = self.session, None
        if s is not None:
            with contextlib.suppress(Exception):
                s.close()

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        node = op.node or self.node
        assert node is not None
        db = ctx.db
        assert isinstance(db, TransactionalDB)
        if self.session is None:
            try:
                self.session = db.txn_session(ctx, node, self.kind)
            except Exception as e:  # noqa: BLE001 - nothing was sent
                return op.complete("fail", op.value, error=f"connect: {_describe(e)}").replace(
                    node=node
                )
        try:
            done = self.session.transact([list(m) for m in op.value])
        except TxnAborted as e:
            return op.complete("fail", op.value, error=_describe(e)).replace(node=node)
        except Exception as e:  # noqa: BLE001 - every failure of a request is a completion
            self._drop()
            typ = "info" if writes_of(op.value) else "fail"
            return op.complete(typ, op.value, error=_describe(e)).replace(node=node)
        return op.complete("ok", done).replace(node=node)

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        self._drop()


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    name = type(e).__name__
    return f"{name}: {text}" if text else name


def txn_checker_options(kind: str, isolation: str | None = None) -> dict[str, Any]:
    """The checker mapping a transactional workload hands the runner."""
    opts: dict[str, Any] = {"workload": kind}
    if isolation is not None:
        opts["isolation"] = isolation
    return {"model": None, "checks": ["txn"], "options": {"txn": opts}}


def _workload(kind: str, options: TxnOptions | Mapping[str, Any]) -> Workload:
    opts = as_options(TxnOptions, options, role=f"workload {kind}")
    program = opts.argument or opts.program
    client: Any
    if program:
        from workloads.stdio import StdioClient, parse_program

        client = StdioClient(parse_program(str(program)), opts.stdio_timeout)
        client.read_fs = frozenset()
    else:
        client = TxnClient(kind)
    return Workload(
        name=kind,
        client=client,
        generator=TxnGen(kind, opts),
        final_generator=None,
        checker=txn_checker_options(kind, opts.isolation),
    )


@declares_options(TxnOptions)
def list_append(options: TxnOptions | Mapping[str, Any]) -> Workload:
    """``list-append``: transactions of appends to and reads of lists, by key."""
    return _workload("list-append", options)


@declares_options(TxnOptions)
def rw_register(options: TxnOptions | Mapping[str, Any]) -> Workload:
    """``rw-register``: transactions of writes and reads of registers, by key."""
    return _workload("rw-register", options)
