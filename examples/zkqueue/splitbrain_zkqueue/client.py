"""ZooKeeper's queue recipe as consume-and-ack, and the history it records.

Enqueue creates a PERSISTENT_SEQUENTIAL znode ``/queue/qn-<seq>`` holding the body.
Dequeue lists ``/queue``, reads the lowest child and deletes it; the delete is the
claim and the ack at once, so a message is ours only when our delete returned ok.

Outcomes follow what the client can know (kazoo never resends a request by itself:
a request answered by a dropped connection fails with ``ConnectionLoss``, one not yet
sent waits for the reconnect; only ``KazooRetry`` retries, and this client uses none):

* enqueue: ``fail`` only when there was no connected session, so nothing was sent;
  any error after sending is ``info`` (the create may have been applied, now or, from
  kazoo's send queue, later). One create per op: retrying a sequential create whose
  reply was lost can leave a second znode with the same body.
* dequeue: ``sync``, list, read the lowest child, delete it. An error while syncing,
  listing or reading is ``fail`` (only reads ran). A read followed by ``NoNodeError``
  on the delete is **no delivery**: another consumer's delete won (the read may even
  have come from a server that was behind), the body was never ours, and we try the
  next child. A delete without an answer is ``info`` with the body listed ``acked:
  false`` (the znode may or may not be gone: if not, another consumer gets it later,
  which is a redelivery). A delete answered ok is the body with ``acked: true``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from splitbrain_zookeeper import ZkClient, server_address

from harness.api import Op, RunContext, client_timeout

__all__ = ["WorkQueueClient", "QUEUE", "PREFIX"]

QUEUE = "/queue"
PREFIX = "qn-"


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:200]


class WorkQueueClient(ZkClient):
    """One kazoo session to one server (``ZkClient``'s), with enqueue/dequeue ops."""

    read_fs: frozenset[str] = frozenset()

    def __init__(
        self,
        address: tuple[str, int] = ("", 0),
        timeout: float = 5.0,
        drop_acked: list[int] | None = None,
        rounds: int = 5,
    ) -> None:
        super().__init__(address, timeout)
        # shared by every opened copy: the test aid's budget of deliveries to hide
        self.drop_left = drop_acked if drop_acked is not None else [0]
        self.rounds = rounds

    def open(self, ctx: RunContext, node: str) -> WorkQueueClient:
        return WorkQueueClient(
            server_address(ctx, node), client_timeout(ctx), self.drop_left, self.rounds
        )

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        try:
            zk = self._session()
        except Exception as e:  # no session: nothing was sent
            return op.complete("fail", op.value, error=f"no session: {_error(e)}")
        if not zk.connected:  # a call now would wait in kazoo's queue: send nothing
            return op.complete("fail", op.value, error="not connected: nothing sent")
        deadline = time.monotonic() + self.timeout
        if op.f == "enqueue":
            return self._enqueue(zk, op, deadline)
        if op.f == "dequeue":
            return self._dequeue(zk, op, deadline)
        raise ValueError(f"zk-workqueue cannot do {op.f!r}")

    def _enqueue(self, zk: Any, op: Op, deadline: float) -> Op:
        from kazoo.exceptions import NodeExistsError, NoNodeError  # type: ignore[import-untyped]

        body = op.value["body"]
        data = str(body).encode()

        def create() -> str:
            return str(
                zk.create_async(f"{QUEUE}/{PREFIX}", data, sequence=True).get(
                    timeout=_left(deadline)
                )
            )

        try:
            try:
                path = create()
            except NoNodeError:
                # /queue does not exist yet: the server rejected the create, nothing was
                # made, so creating again is a second attempt, not a retry of an unknown one
                with contextlib.suppress(NodeExistsError):
                    zk.create_async(QUEUE, b"").get(timeout=_left(deadline))
                path = create()
        except Exception as e:  # connection loss, timeout: it may have been created
            return op.complete("info", op.value, error=_error(e))
        return op.complete("ok", {"body": body, "id": path.rsplit("/", 1)[-1]})

    def _dequeue(self, zk: Any, op: Op, deadline: float) -> Op:
        """Take the lowest child: read it, delete it.

        Every listing follows a ``sync``, so the server has applied every delete
        confirmed before this op began: a final drain's ``[]`` means every committed
        message is gone, and a body whose delete was confirmed to another consumer
        is not read again and reported (should our own delete then go unanswered)
        as a second delivery after that ack.

        Losing every listed child to other consumers says nothing about the queue now,
        so that lists again; after ``rounds`` such rounds the op is ``fail``: it deleted
        nothing.
        """
        from kazoo.exceptions import NoNodeError  # type: ignore[import-untyped]

        final = bool((op.value or {}).get("final"))
        msgs: list[dict[str, Any]] = []
        value: dict[str, Any] = {"messages": msgs}
        for _ in range(self.rounds):
            try:
                zk.sync_async(QUEUE).get(timeout=_left(deadline))
                try:
                    children = sorted(zk.get_children_async(QUEUE).get(timeout=_left(deadline)))
                except NoNodeError:  # nothing was ever enqueued
                    children = []
            except Exception as e:  # only reads ran: nothing removed
                return op.complete("fail", op.value, error=_error(e))
            if not children:
                return op.complete("ok", value)
            for child in children:
                path = f"{QUEUE}/{child}"
                try:
                    data, _stat = zk.get_async(path).get(timeout=_left(deadline))
                except NoNodeError:
                    continue  # already taken
                except Exception as e:
                    return op.complete("fail", op.value, error=_error(e))
                # in the value before the ack is sent: no reply can remove it unseen
                msgs.append({"body": data.decode(), "acked": False, "znode": child})
                try:
                    zk.delete_async(path).get(timeout=_left(deadline))
                except NoNodeError:
                    msgs.pop()  # another consumer's delete won: never ours
                    continue
                except Exception as e:  # the delete may or may not have been applied
                    return op.complete("info", value, error=_error(e))
                msgs[-1]["acked"] = True
                return op.complete("ok", self._recorded(value, final))
        return op.complete("fail", op.value, error=f"lost every child to others {self.rounds}x")

    def _recorded(self, value: dict[str, Any], final: bool) -> dict[str, Any]:
        """The value as recorded: with ``drop_acked``, acked deliveries of the load are
        left out on purpose (listed under ``dropped_on_purpose``), a planted loss the
        checker must report; never in a final drain, whose ``[]`` must stay true."""
        if final or self.drop_left[0] <= 0:
            return value
        kept, dropped = [], []
        for m in value["messages"]:
            if m["acked"] and self.drop_left[0] > 0:
                self.drop_left[0] -= 1
                dropped.append(m["body"])
            else:
                kept.append(m)
        return {**value, "messages": kept, "dropped_on_purpose": dropped}


def _left(deadline: float) -> float:
    """Seconds left of the op's budget (at least a little: a call must be able to answer)."""
    return max(0.05, deadline - time.monotonic())
