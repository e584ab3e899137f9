"""A history whose client ops are paired once: what every checker receives.

Every checker needs to know, for each invocation, its completion (or that it never
completed). Pairing walks the whole history keeping one open op per process, and
rejects what Jepsen's history rejects: a double invoke, an orphan completion, a
completion whose ``f`` differs from its invocation's and, when asked, a process
invoking again after an ``info`` completion (docs/architecture.md §3). Doing that
once, where the history enters the checker, means one error message for all
checkers and no checker re-walking the history to find its pairs.

:class:`PairedHistory` is a ``Sequence[Op]`` (the client records, by index), so a
checker written against plain op lists works unchanged; :meth:`PairedHistory.pairs`
gives the ``(invocation, completion or None)`` pairs in invocation order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from harness.core.errors import HistoryError
from harness.core.op import NEMESIS, Op

__all__ = ["Pair", "PairedHistory", "pair_arrays", "pair_positions"]

Pair = tuple[Op, Op | None]
"""An invocation and its completion (None: the op never completed)."""


def pair_positions(ops: Sequence[Op], *, strict: bool = False) -> dict[int, int | None]:
    """Each client invocation's position in ``ops`` -> its completion's position (None if open).

    Raises :class:`HistoryError` on a double invoke, an orphan completion or a completion
    whose ``f`` differs from its invocation's; with ``strict`` also on a process that
    invokes again after an ``info`` completion (its op may still be in flight, so the
    process is gone for good).
    """
    open_by_proc: dict[int | str, int] = {}
    crashed: set[int | str] = set()
    pairs: dict[int, int | None] = {}
    for pos, op in enumerate(ops):
        if op.process == NEMESIS:
            continue
        if op.type == "invoke":
            if op.process in open_by_proc:
                prev = open_by_proc[op.process]
                raise HistoryError(
                    f"process {op.process} invoked again while op {ops[prev].index} was open",
                    index=op.index,
                    field="process",
                )
            if strict and op.process in crashed:
                raise HistoryError(
                    f"process {op.process} invoked again after an info completion",
                    index=op.index,
                    field="process",
                )
            open_by_proc[op.process] = pos
            pairs[pos] = None
            continue
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
        if op.type == "info":
            crashed.add(op.process)
    return pairs


def _by_index(ops: Sequence[Op]) -> list[Op]:
    if all(ops[i].index <= ops[i + 1].index for i in range(len(ops) - 1)):
        return list(ops)
    return sorted(ops, key=lambda o: o.index)


class PairedHistory(Sequence[Op]):
    """The client records of a history, by index, with every op paired once.

    Build it with :meth:`of` (pairs and validates); a checker's share of it is
    :meth:`subset`, which keeps the pairs already found. Immutable.
    """

    __slots__ = ("_ops", "_pairs")

    def __init__(self, ops: list[Op], pairs: list[tuple[int, int | None]]) -> None:
        """Internal: ``ops`` sorted by index, ``pairs`` as positions into it; use :meth:`of`."""
        self._ops = ops
        self._pairs = pairs

    @classmethod
    def of(cls, ops: Iterable[Op], *, strict: bool = False) -> PairedHistory:
        """Pair ``ops`` (any order; nemesis records are dropped). ``HistoryError`` on a
        malformed history (see :func:`pair_positions`; ``strict`` adds reuse after info)."""
        if isinstance(ops, PairedHistory):
            return ops
        client = _by_index([op for op in ops if op.process != NEMESIS])
        pairs = sorted(pair_positions(client, strict=strict).items())
        return cls(client, pairs)

    def __len__(self) -> int:
        return len(self._ops)

    @overload
    def __getitem__(self, i: int) -> Op: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Op]: ...

    def __getitem__(self, i: int | slice) -> Op | Sequence[Op]:
        return self._ops[i]

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def __repr__(self) -> str:
        return f"<PairedHistory: {len(self._ops)} records, {len(self._pairs)} ops>"

    def pairs(self, *fs: str) -> list[Pair]:
        """``(invocation, completion or None)`` in invocation order; only ops whose f is
        one of ``fs`` when given."""
        ops = self._ops
        want = set(fs)
        return [
            (ops[i], None if c is None else ops[c])
            for i, c in self._pairs
            if not want or ops[i].f in want
        ]

    def pair_positions(self) -> list[tuple[int, int | None]]:
        """The pairs as positions into this sequence, in invocation order."""
        return list(self._pairs)

    def subset(self, keep: Iterable[int]) -> PairedHistory:
        """The ops whose pair numbers (positions in :meth:`pair_positions`) are in
        ``keep``, both records of each, paired as here (nothing is walked again)."""
        chosen = sorted(set(keep))
        positions: list[int] = []
        for n in chosen:
            i, c = self._pairs[n]
            positions.append(i)
            if c is not None:
                positions.append(c)
        positions.sort()
        new_pos = {p: k for k, p in enumerate(positions)}
        pairs = []
        for n in chosen:
            i, c = self._pairs[n]
            pairs.append((new_pos[i], None if c is None else new_pos[c]))
        pairs.sort()
        return PairedHistory([self._ops[p] for p in positions], pairs)


def pair_arrays(
    process: Any, invoke: Any, info: Any, f: Any, *, strict: bool = False
) -> tuple[Any, Any] | None:
    """:func:`pair_positions` over columns (numpy arrays, one entry per client record in
    history order): ``process`` and ``f`` as integer codes, ``invoke`` and ``info`` as
    booleans. Returns ``(inv, comp)``, the invocations' positions in invocation order and
    their completions' (-1 when open), or None when the history is malformed in any way
    :func:`pair_positions` rejects; the caller then pairs the ops themselves for the exact
    error, which costs nothing on the valid histories this is for.

    Sorting by process (stably, so history order holds within one) puts every op's
    completion right after its invocation; each rule is then one comparison of
    neighbours, with no Python step per record.
    """
    import numpy as np

    proc = np.asarray(process)
    inv = np.asarray(invoke, dtype=bool)
    n = len(proc)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(proc, kind="stable")
    p, iv = proc[order], inv[order]
    same_next = np.zeros(n, bool)
    same_next[:-1] = p[1:] == p[:-1]
    same_prev = np.zeros(n, bool)
    same_prev[1:] = same_next[:-1]
    prev_inv = np.zeros(n, bool)
    prev_inv[1:] = iv[:-1]
    if np.any(iv[:-1] & same_next[:-1] & iv[1:]):  # a double invoke
        return None
    if np.any(~iv & ~(same_prev & prev_inv)):  # an orphan completion
        return None
    ks = np.flatnonzero(iv)
    nxt = np.minimum(ks + 1, n - 1)
    done = same_next[ks] & ~iv[nxt]
    inv_pos = order[ks]
    comp_pos = np.where(done, order[nxt], -1)
    fc = np.asarray(f)
    if np.any(fc[inv_pos[done]] != fc[comp_pos[done]]):  # a completion of another f
        return None
    if strict:
        inf = np.asarray(info, dtype=bool)[order].astype(np.int64)
        upto = np.cumsum(inf) - inf  # infos before each sorted row
        start = np.maximum.accumulate(np.where(same_prev, 0, np.arange(n)))
        if np.any(iv & (upto - upto[start] > 0)):  # a process reused after info
            return None
    by_inv = np.argsort(inv_pos, kind="stable")
    return inv_pos[by_inv], comp_pos[by_inv]
