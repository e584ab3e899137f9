"""Clients that keep talking to the node that last answered them, deposed or not.

Real clients cache the leader they were redirected to and keep sending there
until something goes wrong for long enough; a leader that was frozen (SIGSTOP,
a GC pause, a stalled host) then finds requests queued in its sockets when it
wakes, and answers them before it learns it was deposed, unless its read path
checks. :class:`Sticky` wraps a generator: after an ok completion of one of the
ops it applies to, a worker sticks (with probability ``fraction``) to the node
that answered it for its next ``ops`` such ops, whatever happens to them (a
redirect is still followed once by the client, as any client would).

Two habits of real clients make the frozen leader's stale answers *observable*
rather than merely late:

- a read that failed (timed out, connection lost, refused) is sent again at
  once, to the same node: a client retries on its cached leader. With a read
  timeout shorter than the pause, a worker keeps re-sending a read to the
  sleeper, and the one still waiting when it wakes was invoked after the new
  leader committed elsewhere: if the sleeper answers it from its stale state,
  that read is not linearizable. A single read queued at the start of the
  pause would be stale but legal (it may be ordered before the new writes).
- a write whose fate is unknown (``info``: it timed out) is followed by a read
  of its key, as a client checks whether its write took effect. That key is a
  hot one, the kind the new leader's clients are writing meanwhile.
- stickiness belongs to the worker, not to its process: an ``info`` gives the
  worker a fresh process, which, like a client that reconnects, still asks the
  cached node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.history import Op
from workloads.generator import invoke

if TYPE_CHECKING:
    from harness.core.workload import GenContext, Generator

__all__ = ["Stint", "Sticky", "after_completion"]


@dataclass(frozen=True)
class Stint:
    """One worker's time stuck to a node."""

    node: str
    left: int
    """Ops still to send there (a follow-up read counts as one)."""
    read: str | None = None
    """A key to read there before anything else (a read retried, a write checked)."""


def after_completion(stint: Stint | None, event: Op, *, follow_up: bool) -> Stint | None:
    """The worker's stint once ``event`` (a completion of one of our ops) is known.

    ``info`` keeps the stint: the worker's next process inherits it. The caller
    decides whether an ok completion starts a new stint (a random draw).
    """
    if stint is None or stint.left <= 0:
        return None
    if not follow_up or event.key is None:
        return stint
    failed_read = event.type == "fail" and event.f == "read"
    if failed_read or event.type == "info":
        return Stint(stint.node, stint.left, read=event.key)
    return stint


def _always(op: Op) -> bool:
    return True


class Sticky:
    """``gen``'s ops; those ``applies`` to go to the worker's sticky node while it has one."""

    def __init__(
        self,
        gen: Generator,
        *,
        ops: int = 20,
        fraction: float = 0.5,
        follow_up: bool = True,
        applies: Callable[[Op], bool] = _always,
    ) -> None:
        if ops < 1 or not 0.0 <= fraction <= 1.0:
            raise ValueError("sticky: ops must be positive and fraction in [0, 1]")
        self.gen = gen
        self.ops = ops
        self.fraction = fraction
        self.follow_up = follow_up
        """Re-send a failed read, and read the key of a write that ended ``info`` (on the node)."""
        self.applies = applies
        self.stints: dict[int, Stint] = {}
        """worker -> its stint"""
        self.mine: set[int] = set()
        """workers with one of our ops in flight (completions of other ops are not ours)"""

    def op(self, ctx: GenContext) -> Any:
        st = self.stints.get(ctx.worker)
        if st is not None and st.read is not None:
            o: Any = invoke(ctx, "read", None, key=st.read, node=st.node)
        else:
            o = self.gen.op(ctx)
            if not isinstance(o, Op) or not self.applies(o):
                return o
        self.mine.add(ctx.worker)
        if st is None:
            return o
        if st.left <= 1:
            del self.stints[ctx.worker]
        else:
            self.stints[ctx.worker] = Stint(st.node, st.left - 1)
        return o.replace(node=st.node)

    def update(self, ctx: GenContext, event: Op) -> None:
        self.gen.update(ctx, event)
        w = ctx.worker
        if event.type == "invoke" or w not in self.mine:
            return
        self.mine.discard(w)
        st = after_completion(self.stints.get(w), event, follow_up=self.follow_up)
        if (
            st is None
            and event.type == "ok"
            and event.node is not None
            and ctx.rng.random() < self.fraction
        ):
            st = Stint(event.node, self.ops)
        if st is None:
            self.stints.pop(w, None)
        else:
            self.stints[w] = st
