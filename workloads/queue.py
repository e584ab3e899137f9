"""The queue workload: producers send with acks, consumers pull and commit consume offsets.

It speaks to any system with RocketMQ-like semantics; the client here talks to the
reference node in mode ``broker`` (docs/broker-mode.md), and another system needs
only another client producing the same history values (checker/queue.py reads
nothing else):

- ``send``: invoke ``{"topic", "queue", "body"}`` (bodies unique per attempt:
  ``"<process>-<n>"``), ok adds ``{"offset", "queue_offset"}``: the message's
  physical commitlog offset and its offset in the queue.
- ``pull``: invoke ``{"topic", "queue", "offset", "max"}`` (final drains add
  ``"final": true`` and name their node), ok ``{"topic", "queue", "offset",
  "messages": [[queue_offset, offset, body], ...], "max_offset"}``. Pulls go to
  the worker's own node, master or slave: both serve committed messages.
- ``commit-offset``: invoke and ok ``{"group", "topic", "queue", "offset"}``.

After the nemesis heals, every node drains every queue from offset 0 (the final
generator), so the checker can compare what each replica serves.

Options: :class:`QueueOptions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.options import as_options, declares_options, option
from harness.core.workload import PENDING, GenContext, Generator, Workload
from workloads.dledger_client import DLedgerClient, Session, finish
from workloads.generator import each_node, invoke

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = ["QueueOptions", "QueueClient", "QueueDrain", "QueueGen", "final_drains", "workload"]

GROUP = "g0"
NOTHING_WRITTEN = frozenset({"MASTER_NOT_READY", "NO_PERMISSION"})
"""Broker codes that refuse a send before it is written (the node's own fail codes aside):
no master yet (mode broker), or a broker sealed read-only for the upgrade (mode ha)."""
FINAL_CHUNK = 200


def _queues(topics: int, queues: int) -> list[tuple[str, int]]:
    return [(f"t{t}", q) for t in range(topics) for q in range(queues)]


class QueueGen:
    """Sends to random queues; pulls each queue from the group's consume offset.

    The consume offsets are the generator's own (one consumer group shared by all
    workers), advanced by ok pulls and committed to the broker now and then.
    """

    def __init__(
        self,
        *,
        topics: int = 1,
        queues: int = 4,
        pull_fraction: float = 0.3,
        commit_fraction: float = 0.05,
        pull_max: int = 32,
    ) -> None:
        self.targets = _queues(topics, queues)
        self.pull_fraction, self.commit_fraction = pull_fraction, commit_fraction
        self.pull_max = pull_max
        self.n = 0
        self.cursor: dict[tuple[str, int], int] = dict.fromkeys(self.targets, 0)

    def op(self, ctx: GenContext) -> Op:
        topic, queue = self.targets[ctx.rng.randrange(len(self.targets))]
        r = ctx.rng.random()
        if ctx.lull or r < self.pull_fraction:
            return invoke(
                ctx,
                "pull",
                {
                    "topic": topic,
                    "queue": queue,
                    "offset": self.cursor[(topic, queue)],
                    "max": self.pull_max,
                },
            )
        if r < self.pull_fraction + self.commit_fraction:
            return invoke(
                ctx,
                "commit-offset",
                {
                    "group": GROUP,
                    "topic": topic,
                    "queue": queue,
                    "offset": self.cursor[(topic, queue)],
                },
            )
        body = f"{ctx.process}-{self.n}"
        self.n += 1
        return invoke(ctx, "send", {"topic": topic, "queue": queue, "body": body})

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type != "ok" or event.f != "pull" or not isinstance(event.value, dict):
            return
        msgs = event.value.get("messages") or []
        key = (event.value.get("topic"), event.value.get("queue"))
        if msgs and key in self.cursor:
            self.cursor[key] = max(self.cursor[key], int(msgs[-1][0]) + 1)


class QueueDrain:
    """One node's final drain: every queue from offset 0 until a pull comes back empty.

    A pull that fails is retried up to ``attempts`` times in a row, then the node
    is given up (it is down): the checker sees no final drain from it.
    """

    def __init__(self, node: str, targets: list[tuple[str, int]], *, attempts: int = 5) -> None:
        self.node, self.todo, self.attempts = node, list(targets), attempts
        self.offset = 0
        self.failures = 0
        self.inflight: int | str | None = None

    def op(self, ctx: GenContext) -> Any:
        if not self.todo:
            return None
        if self.inflight is not None:
            return PENDING
        self.inflight = ctx.process
        topic, queue = self.todo[0]
        return invoke(
            ctx,
            "pull",
            {
                "topic": topic,
                "queue": queue,
                "offset": self.offset,
                "max": FINAL_CHUNK,
                "final": True,
            },
            node=self.node,
        )

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type == "invoke" or event.process != self.inflight or event.f != "pull":
            return
        self.inflight = None
        if event.type == "ok" and isinstance(event.value, dict):
            self.failures = 0
            msgs = event.value.get("messages") or []
            if msgs:
                self.offset = int(msgs[-1][0]) + 1
            else:
                self.todo.pop(0)
                self.offset = 0
            return
        self.failures += 1
        if self.failures >= self.attempts:
            self.todo = []


def final_drains(targets: list[tuple[str, int]]) -> Generator:
    return each_node(lambda node: QueueDrain(node, targets))


def _messages(reply: Mapping[str, Any]) -> list[list[Any]]:
    return [[m[0], m[1], m[2]] for m in reply.get("messages") or [] if len(m) >= 3]


class QueueClient(DLedgerClient):
    """Sends follow a NOT_LEADER redirect to the master; pulls stay on the node asked."""

    read_fs = frozenset({"pull"})

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        v = dict(op.value)
        node = self.target(op)
        if op.f == "send":
            msg = {"type": "send", "topic": v["topic"], "queue": v["queue"], "body": v["body"]}
            res = session.call(node, lambda c: c.call(msg))
            if res.code in NOTHING_WRITTEN:  # refused before any write: certainly not sent
                return op.complete("fail", op.value, error=str(res.code)).replace(node=res.node)
            return finish(
                op,
                res,
                read=False,
                ok_value=lambda r: {
                    **v,
                    "offset": r.get("offset"),
                    "queue_offset": r.get("queue_offset"),
                },
            )
        if op.f == "pull":
            msg = {
                "type": "pull",
                "topic": v["topic"],
                "queue": v["queue"],
                "offset": v["offset"],
                "max": v["max"],
            }
            res = session.call(node, lambda c: c.call(msg), follow=False)
            return finish(
                op,
                res,
                read=True,
                ok_value=lambda r: {
                    **v,
                    "messages": _messages(r),
                    "max_offset": r.get("max_offset"),
                },
            )
        if op.f == "commit-offset":
            msg = {"type": "commit-offset", **v}
            res = session.call(node, lambda c: c.call(msg))
            return finish(op, res, read=False)
        raise ValueError(f"queue workload cannot do {op.f!r}")


@dataclass(frozen=True)
class QueueOptions:
    topics: int = option(1, "topics sent to", minimum=1)
    queues: int = option(4, "queues per topic", minimum=1)
    pull_fraction: float = option(0.3, "share of ops that pull", minimum=0.0, maximum=1.0)
    commit_fraction: float = option(
        0.05, "share of ops that commit a consumer offset", minimum=0.0, maximum=1.0
    )
    pull_max: int = option(32, "most messages one pull asks for", minimum=1)


@declares_options(QueueOptions)
def workload(options: QueueOptions | Mapping[str, Any]) -> Workload:
    opts = as_options(QueueOptions, options, role="workload queue")
    gen = QueueGen(
        topics=opts.topics,
        queues=opts.queues,
        pull_fraction=opts.pull_fraction,
        commit_fraction=opts.commit_fraction,
        pull_max=opts.pull_max,
    )
    return Workload(
        name="queue",
        client=QueueClient(),
        generator=gen,
        final_generator=final_drains(gen.targets),
        checker={"model": None, "checks": ["queue"]},
        extra_workers=None,
    )
