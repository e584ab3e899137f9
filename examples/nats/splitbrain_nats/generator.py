"""What the stream workload asks for: publishes, consumer reads, and every node's final read.

Pure state machines behind the harness's ``Generator`` protocol: time and
randomness come from the ``GenContext``, nothing sleeps or touches the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.api import PENDING, GenContext, Op

__all__ = ["StreamGen", "FinalReads"]


def _invoke(ctx: GenContext, f: str, value: Any, node: str | None = None) -> Op:
    return Op(type="invoke", process=ctx.process, f=f, value=value, node=node or ctx.node)


class StreamGen:
    """Publishes with unique payloads; a fraction of reads of the recent stream through a consumer.

    Payloads are ``"<process>-<n>"`` with ``n`` counting every publish of the
    test, so no two attempts share one (the duplicate check relies on it). During
    a lull only reads are proposed, so the quiet cluster is still observed.
    """

    def __init__(self, *, read_fraction: float = 0.1, chunk: int = 100) -> None:
        self.read_fraction, self.chunk = read_fraction, chunk
        self.n = 0
        self.hi = 0  # highest sequence acked so far

    def op(self, ctx: GenContext) -> Op:
        if ctx.lull or ctx.rng.random() < self.read_fraction:
            to = max(self.hi, 1)
            frm = max(1, to - ctx.rng.randrange(self.chunk))
            return _invoke(ctx, "read", {"from": frm, "to": to})
        payload = f"{ctx.process}-{self.n}"
        self.n += 1
        return _invoke(ctx, "append", {"payload": payload})

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type == "ok" and event.f == "append" and isinstance(event.value, dict):
            index = event.value.get("index")
            if isinstance(index, int):
                self.hi = max(self.hi, index)


@dataclass
class _Node:
    name: str
    next_from: int = 1
    failures: int = 0
    done: bool = False
    inflight: int | str | None = None  # the process reading it now
    to: int = 0


class FinalReads:
    """Each node's whole stream from its own replica, in chunks, nodes side by side.

    A node is done once a chunk reaches past the last sequence its replica
    stores (the read's ``end``), when it holds no replica (``end`` null), or
    after ``attempts`` failed chunks in a row (it is down: the checker then
    sees no final read from it).
    """

    def __init__(self, *, chunk: int = 1000, attempts: int = 3) -> None:
        self.chunk, self.attempts = chunk, attempts
        self.nodes: list[_Node] | None = None

    def op(self, ctx: GenContext) -> Any:
        if self.nodes is None:
            self.nodes = [_Node(n) for n in ctx.nodes]
        left = [n for n in self.nodes if not n.done]
        if not left:
            return None
        free = [n for n in left if n.inflight is None]
        if not free:
            return PENDING
        n = next((x for x in free if x.name == ctx.node), free[0])
        n.inflight, n.to = ctx.process, n.next_from + self.chunk - 1
        value = {"from": n.next_from, "to": n.to, "final": True, "local": True}
        return _invoke(ctx, "read", value, node=n.name)

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type == "invoke" or event.f != "read" or self.nodes is None:
            return
        n = next((x for x in self.nodes if x.inflight == event.process), None)
        if n is None:
            return
        n.inflight = None
        if event.type == "ok" and isinstance(event.value, dict):
            n.failures = 0
            end = event.value.get("end")
            n.next_from = n.to + 1
            if not isinstance(end, int) or n.next_from > end:
                n.done = True
            return
        n.failures += 1
        if n.failures >= self.attempts:
            n.done = True
