"""The set workload: unique ints added through the log, the whole set read at the end.

History values (docs/architecture.md §3): ``add`` invoke e, ok e; ``read`` invoke null,
ok the sorted list of elements.

Storage: an element e is one log entry with body ``{"set": e}`` (an append).
A read asks the node it names for entry 0 (a linearizable, non-local get,
redirected to the leader) to learn the committed index C, then pages through
0..C in chunks of ``read_chunk`` and collects every ``{"set": e}`` payload. All
entries up to C were committed when the first reply was made, so the result is
the set as of that moment. Final reads: one read per node, each starting at
that node (they all end at the leader; the checker uses the last ok one).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.options import as_options, declares_options, option
from harness.core.workload import GenContext, Generator, Workload
from workloads.dledger_client import DLedgerClient, Result, Session, finish
from workloads.generator import each_node, invoke, once
from workloads.options import DEFAULT_CHUNK, SamplerOptions
from workloads.register import checks
from workloads.sampler import handle_sample, maybe_sampler_workers

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = ["SetOptions", "SetGen", "SetClient", "handle_set", "final_set_reads", "workload"]


class SetGen:
    """Adds of 0, 1, 2, ... (each element once per test)."""

    def __init__(self) -> None:
        self.n = 0

    def op(self, ctx: GenContext) -> Op:
        e = self.n
        self.n += 1
        return invoke(ctx, "add", e)

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


def final_set_reads() -> Generator:
    """One whole-set read starting at each node."""

    def factory(node: str) -> Generator:
        return once(lambda ctx: invoke(ctx, "read", None, node=node))

    return each_node(factory)


def _get_range(c: Any, *, frm: int, to: int) -> dict[str, Any]:
    """One chunk of a set read (a named function: a lambda in a loop would capture late)."""
    reply: dict[str, Any] = c.get(frm=frm, to=to)
    return reply


def _read_set(session: Session, node: str, chunk: int) -> tuple[Result, list[Any] | None]:
    first = session.call(node, lambda c: c.get(0))
    if first.reply is None or first.code != "SUCCESS":
        return first, None
    committed = first.reply.get("committedIndex")
    if not isinstance(committed, int):
        return Result(
            first.node, exc=ValueError(f"get reply without committedIndex: {first.reply}")
        ), None
    elements: set[Any] = set()
    res, frm = first, 0
    while frm <= committed:
        to = min(frm + chunk - 1, committed)
        res = session.call(res.node, functools.partial(_get_range, frm=frm, to=to))
        if res.reply is None or res.code != "SUCCESS":
            return res, None
        for e in res.reply.get("entries") or []:
            payload = e[3] if len(e) > 3 else None
            if isinstance(payload, dict) and "set" in payload:
                elements.add(payload["set"])
        frm = to + 1
    return res, sorted(elements)


def handle_set(client: DLedgerClient, session: Session, op: Op, *, chunk: int = 1000) -> Op:
    node = client.target(op)
    if op.f == "add":
        element = op.value
        res = session.call(node, lambda c: c.append({"set": element}), to_leader=True)
        return finish(op, res, read=False)
    if op.f == "read":
        res, elements = _read_set(session, node, chunk)
        if elements is None:
            return finish(op, res, read=True)
        return finish(op, res, read=True, ok_value=lambda r: elements)
    raise ValueError(f"set workload cannot do {op.f!r}")


class SetClient(DLedgerClient):
    read_fs = frozenset({"read", "sample"})

    def __init__(self, *, chunk: int = 1000, **kw: Any) -> None:
        super().__init__(**kw)
        self.chunk = chunk

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        if op.f == "sample":
            return handle_sample(self, session, op)
        return handle_set(self, session, op, chunk=self.chunk)


@dataclass(frozen=True)
class SetOptions(SamplerOptions):
    read_chunk: int = option(DEFAULT_CHUNK, "most log entries one final read asks for", minimum=1)


@declares_options(SetOptions)
def workload(options: SetOptions | Mapping[str, Any]) -> Workload:
    opts = as_options(SetOptions, options, role="workload set")
    return Workload(
        name="set",
        client=SetClient(chunk=opts.read_chunk),
        generator=SetGen(),
        final_generator=final_set_reads(),
        checker={"model": None, "checks": checks(["set"], opts)},
        extra_workers=maybe_sampler_workers(opts),
    )
