"""Generators for a consume-and-ack queue (the ``total-queue`` checker, docs/queues.md).

A queue whose consumers remove what they ack must be consumed *during* the faults: a
checker that saw only the final drains would miss, or invent, every loss of the load. So
producers and consumers run side by side from the first second to the last, and after
the heal every final worker dequeues until one answer says the queue is empty. Every
consume-and-ack plugin needs exactly this pair (examples/redisqueue, natsqueue, zkqueue),
so it lives here, exported by ``harness.api``; what differs between systems is the
client, not the schedule of ops.
"""

from __future__ import annotations

from typing import Any

from harness.core.op import Op
from harness.core.workload import PENDING, GenContext

__all__ = ["EnqueueDequeue", "DrainUntilEmpty"]


class EnqueueDequeue:
    """Enqueues of bodies unique in the test (``<prefix><n>``) and dequeues, interleaved.

    Each dequeue asks for at most one message (``"max": 1``): an unknown dequeue can then
    have taken at most one message unseen, which is what bounds ``lost`` in the checker.
    """

    def __init__(self, enqueue_percent: int = 50, *, prefix: str = "m") -> None:
        self.enqueue_percent, self.prefix, self.n = enqueue_percent, prefix, 0

    def op(self, ctx: GenContext) -> Op:
        self.n += 1
        value: dict[str, Any]
        if ctx.rng.randrange(100) < self.enqueue_percent:
            f, value = "enqueue", {"body": f"{self.prefix}{self.n}"}
        else:
            f, value = "dequeue", {"max": 1}
        return Op(type="invoke", process=ctx.process, f=f, value=value, node=ctx.node)

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


class DrainUntilEmpty:
    """After the heal: final dequeues on every worker until one answers ``[]``.

    The queue only shrinks once the load has stopped, so one empty answer (from a client
    that counts unacked messages as present) means drained; dequeues still in flight then
    finish and report what they took. ``attempts`` bounds the whole drain.
    """

    def __init__(self, attempts: int = 20_000) -> None:
        self.attempts, self.drained, self.inflight = attempts, False, 0

    def op(self, ctx: GenContext) -> Any:
        if self.drained or self.attempts <= 0:
            return PENDING if self.inflight else None
        self.attempts -= 1
        self.inflight += 1
        value = {"final": True, "max": 1}
        return Op(type="invoke", process=ctx.process, f="dequeue", value=value, node=ctx.node)

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type == "invoke":
            return
        self.inflight -= 1
        if event.type == "ok" and not (event.value or {}).get("messages"):
            self.drained = True
