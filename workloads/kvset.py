"""A grow-only set kept in the kv map: one key per element, read back from every node.

``add e`` writes key ``s<e>`` = e; a ``read`` reads the keys of every element
added so far (its invoke value ``n``: elements ``0 .. n-1`` had been tried
when it was asked) and answers the sorted list of those found. Unlike the log
set (:mod:`workloads.sets`) this goes through the kv state machine, so an
element added long before a restart is only there if the map was rebuilt
right. The final reads, after the heal, start one at each node (each
``kv-read`` follows a redirect once, as the client always does), and name many
keys a request (``kv-read`` with ``keys``, one linearizable read of them all); the set
checker (:mod:`checker.sets`) judges the last of them for lost adds and all
of them for unexpected elements.

History: ``add`` invoke e, ok e; ``read`` invoke n, ok the sorted list.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from harness.core.workload import PENDING
from workloads.dledger_client import DLedgerClient, Result, Session, finish
from workloads.generator import each_node, invoke, once

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.workload import GenContext, Generator

__all__ = ["KvSetGen", "element_key", "handle_kv_set", "is_kv_set_op"]


def element_key(e: int) -> str:
    return f"s{e}"


def is_kv_set_op(op: Op) -> bool:
    """A kv-set op: an add, or a read whose value is the element count (no key, not a log read)."""
    return op.f == "add" or (op.f == "read" and op.key is None and isinstance(op.value, int))


class KvSetGen:
    """Adds of 0, 1, 2, ... through the kv map (each element once per test); reads are final only."""

    def __init__(self) -> None:
        self.n = 0

    def op(self, ctx: GenContext) -> Any:
        if ctx.lull:
            return PENDING  # nothing to read mid-run: the other generators serve the lull
        e = self.n
        self.n += 1
        return invoke(ctx, "add", e)

    def update(self, ctx: GenContext, event: Op) -> None:
        pass

    def final_reads(self) -> Generator:
        """One read of every element tried, starting at each node, all nodes side by side."""
        gen = self

        def factory(node: str) -> Generator:
            return once(lambda ctx: invoke(ctx, "read", gen.n, node=node))

        return each_node(factory)


def _kv_read(c: Any, *, key: str) -> dict[str, Any]:
    """One element's read (a named function: a lambda in a loop would capture late)."""
    reply: dict[str, Any] = c.kv_read(key)
    return reply


def _kv_read_keys(c: Any, *, keys: list[str]) -> dict[str, Any]:
    """Many elements in one read (``kv-read`` with ``keys``)."""
    reply: dict[str, Any] = c.kv_read_keys(keys)
    return reply


READ_KEYS_CHUNK = 250
"""Elements one request of a set read names. A key at a time, a final read of 600 elements
was 600 quorum rounds (commits in read mode ``log``), and five of them side by side
outlasted the final read's 30 s on the loaded machine (docs/zoo.md, seeds 7301, 7304)."""


def _read_elements(session: Session, node: str, n: int) -> tuple[Result, list[Any] | None]:
    """Every element's key, ``READ_KEYS_CHUNK`` keys a request; a DB that does not take
    ``keys`` (``UNSUPPORTED``: a gateway to another system) is read a key at a time."""
    found: list[Any] = []
    res = Result(node, reply={"code": "SUCCESS"})
    for lo in range(0, n, READ_KEYS_CHUNK):
        keys = [element_key(e) for e in range(lo, min(n, lo + READ_KEYS_CHUNK))]
        res = session.call(node, functools.partial(_kv_read_keys, keys=keys))
        if lo == 0 and res.code == "UNSUPPORTED":
            return _read_elements_one_by_one(session, node, n)
        values = res.reply.get("values") if res.reply is not None else None
        if res.code != "SUCCESS":
            return res, None
        if not isinstance(values, list) or len(values) != len(keys):
            return Result(
                res.node, exc=ValueError(f"kv-read of {len(keys)} keys: {res.reply}")
            ), None
        found.extend(v.get("value") for v in values if isinstance(v, dict) and v.get("found"))
    return res, sorted(found)


def _read_elements_one_by_one(
    session: Session, node: str, n: int
) -> tuple[Result, list[Any] | None]:
    found: list[Any] = []
    res = Result(node, reply={"code": "SUCCESS"})
    for e in range(n):
        res = session.call(node, functools.partial(_kv_read, key=element_key(e)))
        if res.reply is None or res.code != "SUCCESS":
            return res, None
        if res.reply.get("found"):
            found.append(res.reply.get("value"))
    return res, sorted(found)


def handle_kv_set(client: DLedgerClient, session: Session, op: Op) -> Op:
    node = client.target(op)
    if op.f == "add":
        element = op.value
        res = session.call(node, lambda c: c.kv_write(element_key(element), element))
        return finish(op, res, read=False)
    if op.f == "read":
        res, elements = _read_elements(session, node, int(op.value))
        if elements is None:
            return finish(op, res, read=True)
        return finish(op, res, read=True, ok_value=lambda r: elements)
    raise ValueError(f"kv set cannot do {op.f!r}")
