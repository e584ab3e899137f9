"""Clients that keep talking to the node that last answered them, deposed or not.

Real clients cache the leader they were redirected to and keep sending there
until something goes wrong for long enough; a leader that was frozen (SIGSTOP,
a GC pause, a stalled host) then finds requests queued in its sockets when it
wakes, and answers them before it learns it was deposed, unless its read path
checks. :class:`Sticky` wraps a generator: after an ok completion, a process
sticks (with probability ``fraction``) to the node that answered it for its
next ``ops`` ops, whatever happens to them (a redirect is still followed once
by the client, as any client would).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.core.history import Op

if TYPE_CHECKING:
    from harness.core.workload import GenContext, Generator

__all__ = ["Sticky"]


class Sticky:
    """``gen``'s ops, each sent to its process's sticky node while the process has one."""

    def __init__(self, gen: Generator, *, ops: int = 20, fraction: float = 0.5) -> None:
        if ops < 1 or not 0.0 <= fraction <= 1.0:
            raise ValueError("sticky: ops must be positive and fraction in [0, 1]")
        self.gen = gen
        self.ops = ops
        self.fraction = fraction
        self.stuck: dict[int | str, list[Any]] = {}
        """process -> [node, ops left]"""
        self.mine: set[int | str] = set()
        """processes with one of our ops in flight (completions of other generators are not ours)"""

    def op(self, ctx: GenContext) -> Any:
        o = self.gen.op(ctx)
        if not isinstance(o, Op):
            return o
        self.mine.add(o.process)
        st = self.stuck.get(o.process)
        if st is None:
            return o
        st[1] -= 1
        if st[1] <= 0:
            del self.stuck[o.process]
        return o.replace(node=st[0])

    def update(self, ctx: GenContext, event: Op) -> None:
        self.gen.update(ctx, event)
        if event.type == "invoke" or event.process not in self.mine:
            return
        self.mine.discard(event.process)
        if event.type == "info":  # the process is done for good (a fresh one replaces it)
            self.stuck.pop(event.process, None)
            return
        if (
            event.type == "ok"
            and event.node is not None
            and event.process not in self.stuck
            and ctx.rng.random() < self.fraction
        ):
            self.stuck[event.process] = [event.node, self.ops]
