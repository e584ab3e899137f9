"""RocketMQ's push consumer as a consume-and-ack queue (``--db-option consumer=push``, or
``--workload harness.dbs.rocketmq_push:workload``), checked by ``total-queue``.

The pull workload (``queue``) reads RocketMQ as what it is underneath, a log per queue
read by offset. Applications mostly use the push consumer instead: RocketMQ's client pulls
for them, calls a listener, and a listener that returns CONSUME_SUCCESS has consumed the
message, which is the ack. So this history is docs/queues.md's consume-and-ack one, and the
question it answers is the one users ask: is every acked send delivered to the consumer
group at least once, and never again once its consumption was confirmed?

The gateway (``splitbrain.rocketmq.Gateway``: ``enqueue``, ``dequeue``) runs one
``DefaultMQPushConsumer`` for the group; each ``dequeue`` op takes at most one delivery
from its listener (a rendezvous, so the listener returns CONSUME_SUCCESS only for a
message an op holds for its reply). What ``acked`` means is the ``ack`` option:

- ``master`` (the default): the consumer's offset past the message, committed to the
  master by a synchronous UPDATE_CONSUMER_OFFSET and answered SUCCESS. That is the most a
  RocketMQ consumer can have confirmed; RocketMQ keeps the offset in the broker's memory
  and writes ``consumerOffset.json`` every ``flushConsumerOffsetInterval`` (5 s), and a
  slave copies it periodically, so a redelivery after such an ack would be RocketMQ's
  at-least-once (an offset lost with a broker's memory), for the triage to tell apart
  from a message handed out twice.
- ``none``: nothing is committed by us and every delivery says ``acked: false``; only
  ``lost``, ``unexpected`` and ``failed-enqueue-delivered`` are judged.

A final drain's ``[]`` is proved by the gateway against the broker: for each queue, the
group's committed offset on the master has reached the queue's max offset (else the
answer is ``NOT_DRAINED``, a fail: nothing delivered, nothing removed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from harness.core.options import as_options, declares_options, option
from harness.core.workload import Workload
from workloads.dledger_client import DLedgerClient, Session, finish
from workloads.total_queue import DrainUntilEmpty, EnqueueDequeue

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = ["NOTHING_DELIVERED", "NOTHING_WRITTEN", "PushOptions", "PushQueueClient", "workload"]

NOTHING_WRITTEN = frozenset({"MASTER_NOT_READY", "NO_PERMISSION"})
"""Send answers that prove nothing was stored (the gateway's, as for the pull workload)."""
NOTHING_DELIVERED = frozenset({"NO_DELIVERY", "NOT_DRAINED", "GATEWAY_ERROR"})
"""Dequeue answers that prove nothing was delivered: no message within the wait, a final
drain that found a queue not yet consumed to its end, or the consumer failing to start (the
gateway's only exception before it takes a delivery; afterwards it always answers)."""


@dataclass(frozen=True)
class PushOptions:
    """``--workload-option`` keys of the push-consumer workload."""

    enqueue_percent: int = option(50, "share of ops that enqueue (send)", minimum=1, maximum=99)
    ack: Literal["master", "none"] = option(
        "master",
        "what acked means: master (the consumer's offset past the message, confirmed by the "
        "master) or none (nothing confirmed; redeliveries are never anomalies)",
    )
    wait_ms: int = option(1000, "how long a dequeue waits for a delivery", minimum=10)
    drain_attempts: int = option(2000, "final dequeues in all before the drain gives up", minimum=1)


class PushQueueClient(DLedgerClient):
    """``enqueue`` and ``dequeue`` through the gateway's push consumer (docs/queues.md)."""

    read_fs = frozenset()

    def __init__(self, *, ack: str = "master", wait_ms: int = 1000) -> None:
        super().__init__()
        self.ack, self.wait_ms = ack, wait_ms

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        v = dict(op.value or {})
        node = self.target(op)
        if op.f == "enqueue":
            msg = {"type": "enqueue", "body": v["body"]}
            res = session.call(node, lambda c: c.call(msg), follow=False)
            if res.code in NOTHING_WRITTEN:
                return op.complete("fail", op.value, error=str(res.code)).replace(node=res.node)
            return finish(
                op,
                res,
                read=False,
                ok_value=lambda r: {
                    "body": v["body"],
                    "id": r.get("msg_id"),
                    "queue": r.get("queue"),
                    "queue_offset": r.get("queue_offset"),
                    "offset": r.get("offset"),
                },
            )
        if op.f == "dequeue":
            msg = {
                "type": "dequeue",
                "final": bool(v.get("final")),
                "ack": self.ack,
                "wait_ms": self.wait_ms,
            }
            res = session.call(node, lambda c: c.call(msg), follow=False)
            if res.code in NOTHING_DELIVERED:
                reply = res.reply or {}
                error = str(res.code) + (f" {reply['behind']}" if reply.get("behind") else "")
                return op.complete("fail", op.value, error=error).replace(node=res.node)
            return finish(
                op, res, read=False, ok_value=lambda r: {**v, "messages": r.get("messages") or []}
            )
        raise ValueError(f"rocketmq push workload cannot do {op.f!r}")


@declares_options(PushOptions)
def workload(options: PushOptions | Mapping[str, Any]) -> Workload:
    """Enqueues and dequeues side by side for the whole load, then final dequeues on every
    worker until one proves the group consumed every queue to its end."""
    o = as_options(PushOptions, options, role="workload rocketmq push")
    return Workload(
        name="rocketmq-push",
        client=PushQueueClient(ack=o.ack, wait_ms=o.wait_ms),
        generator=EnqueueDequeue(o.enqueue_percent, prefix="m"),
        final_generator=DrainUntilEmpty(o.drain_attempts),
        checker={"model": None, "checks": ["total-queue"]},
    )
