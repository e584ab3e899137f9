"""The work-queue client: nats-py on its own event loop, one durable pull consumer for all.

What each outcome means here:

* ``enqueue``: ``js.publish`` with ``Nats-Msg-Id = body``. ok with the stream sequence
  as ``"id"``; ``fail`` when no server could take it (no responders, never connected);
  ``info`` on a timeout or any other error (a leader may have stored it).
* ``dequeue``: ``fetch(1)`` from the consumer ``workers``, then ``ack_sync`` (the
  server confirms the ack, and work-queue retention deletes the message). A message
  is acked only after it was fetched and put in the op's value, so no dequeue
  removes a message it does not report; a fetched message whose ack was not
  confirmed is reported ``"acked": false`` (it comes back after ``ack_wait`` unless
  the ack did land). Each delivery also records the server's view: the message's
  stream sequence (``seq``) and how many times it was delivered (``delivery``).
  Nothing fetched in time is ``fail``: nothing was acked, and a
  message delivered into a lost reply is redelivered. A final dequeue that fetches
  nothing asks the stream: no message left means ``ok`` with no messages (drained);
  otherwise ``fail`` (some wait for their redelivery).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Coroutine
from typing import Any

from splitbrain_nats.client import EventLoopThread

from harness.api import Op, RunContext

__all__ = ["WorkQueueClient", "STREAM", "SUBJECT", "CONSUMER"]

STREAM, SUBJECT, CONSUMER = "SBQUEUE", "sbq.work", "workers"


async def _quiet(*_: Any) -> None:
    """nats-py's callbacks: reconnects and errors are the test's faults, not news."""


class WorkQueueClient:
    """Talks only to its node's server (the ``nats`` DB runs with ``no_advertise``)."""

    read_fs: frozenset[str] = frozenset()

    def __init__(
        self,
        *,
        replicas: int | None = None,
        timeout: float = 1.5,
        ack_wait: float = 3.0,
        address: tuple[str, int] = ("", 0),
    ) -> None:
        self.replicas, self.timeout, self.ack_wait = replicas, timeout, ack_wait
        self.address = address
        self._loop: EventLoopThread | None = None
        self._nc: Any = None
        self._sub: Any = None

    def open(self, ctx: RunContext, node: str) -> WorkQueueClient:
        return WorkQueueClient(
            replicas=self.replicas,
            timeout=self.timeout,
            ack_wait=self.ack_wait,
            address=ctx.addresses["client"][node],
        )

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        if self._loop is None:
            self._loop = EventLoopThread()
        return self._loop.call(coro, timeout)

    async def _js(self) -> Any:
        import nats  # type: ignore[import-not-found, unused-ignore]

        if self._nc is None or self._nc.is_closed:
            host, port = self.address
            self._nc = await nats.connect(
                servers=[f"nats://{host}:{port}"],
                connect_timeout=self.timeout,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                error_cb=_quiet,
                disconnected_cb=_quiet,
                reconnected_cb=_quiet,
                closed_cb=_quiet,
            )
            self._sub = None
        return self._nc.jetstream(timeout=self.timeout)

    # ------------------------------------------------------------------ roles

    def setup(self, ctx: RunContext) -> None:
        """Create the work-queue stream and its consumer (idempotent: every worker runs it);
        retried while the JetStream meta group elects a leader."""
        replicas = self.replicas or min(len(ctx.nodes), 5)
        deadline = time.monotonic() + 60
        while True:
            try:
                self._call(self._create(replicas), self.timeout * 6)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    async def _create(self, replicas: int) -> None:
        from nats.js.api import (  # type: ignore[import-not-found, unused-ignore]
            AckPolicy,
            ConsumerConfig,
            RetentionPolicy,
            StorageType,
            StreamConfig,
        )

        js = await self._js()
        await js.add_stream(
            StreamConfig(
                name=STREAM,
                subjects=[SUBJECT],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                num_replicas=replicas,
                duplicate_window=120.0,
            )
        )
        await js.add_consumer(
            STREAM,
            config=ConsumerConfig(
                durable_name=CONSUMER,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self.ack_wait,
                max_deliver=-1,
                filter_subject=SUBJECT,
            ),
        )

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        if op.f == "enqueue":
            return self._enqueue(op)
        if op.f == "dequeue":
            return self._dequeue(op, final=bool((op.value or {}).get("final")))
        raise ValueError(f"nats-workqueue cannot do {op.f!r}")

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        loop, nc, self._loop, self._nc, self._sub = self._loop, self._nc, None, None, None
        if loop is None:
            return
        if nc is not None:
            with contextlib.suppress(Exception):
                loop.call(nc.close(), 2.0)
        loop.stop()

    # ------------------------------------------------------------------ ops

    def _connected(self, op: Op) -> Op | None:
        """None when connected; else the op's ``fail`` (nothing was sent)."""
        try:
            self._call(self._js(), self.timeout + 0.5)
        except Exception as e:
            return op.complete("fail", op.value, error=f"not connected: {type(e).__name__}: {e}")
        return None

    def _enqueue(self, op: Op) -> Op:
        from nats.errors import NoRespondersError  # type: ignore[import-not-found, unused-ignore]
        from nats.js.errors import NoStreamResponseError  # type: ignore[import-not-found, unused-ignore]

        failed = self._connected(op)
        if failed is not None:
            return failed
        body = op.value["body"]
        try:
            seq = self._call(self._publish(body), self.timeout + 1)
        except (NoRespondersError, NoStreamResponseError) as e:
            return op.complete("fail", op.value, error=type(e).__name__)
        except Exception as e:  # a timeout, an API error, a lost connection: may be stored
            return op.complete("info", op.value, error=f"{type(e).__name__}: {e}"[:200])
        return op.complete("ok", {"body": body, "id": seq})

    async def _publish(self, body: str) -> int:
        js = await self._js()
        ack = await js.publish(
            SUBJECT,
            body.encode(),
            timeout=self.timeout,
            stream=STREAM,
            headers={"Nats-Msg-Id": body},
        )
        return int(ack.seq)

    def _dequeue(self, op: Op, *, final: bool) -> Op:
        failed = self._connected(op)
        if failed is not None:
            return failed
        msgs: list[dict[str, Any]] = []
        ended: list[bool] = []
        try:
            self._call(self._fetch(msgs, ended), self.timeout * 2 + 1)
        except Exception as e:
            if not ended:  # still running on the loop: it may yet fetch and ack
                return op.complete("info", {"messages": msgs}, error=f"{type(e).__name__}: {e}")
            if not msgs:  # nothing fetched, so nothing acked
                if final:
                    return self._empty_or_not(op, e)
                return op.complete("fail", op.value, error=f"{type(e).__name__}: {e}"[:200])
            # fetched, and the ack unconfirmed: a delivery all the same
            return op.complete("ok", {"messages": msgs, "ack_error": f"{type(e).__name__}"})
        return op.complete("ok", {"messages": msgs})

    async def _fetch(self, msgs: list[dict[str, Any]], ended: list[bool]) -> None:
        """Fetch one message into ``msgs`` (before acking it), then ack and mark it;
        ``ended`` gets an entry once nothing more can happen."""
        try:
            js = await self._js()
            if self._sub is None:
                self._sub = await js.pull_subscribe_bind(durable=CONSUMER, stream=STREAM)
            got = await self._sub.fetch(1, timeout=self.timeout)
            for m in got:
                meta = m.metadata  # what the server says: stream sequence, delivery count
                msgs.append(
                    {
                        "body": m.data.decode(),
                        "acked": False,
                        "seq": meta.sequence.stream,
                        "delivery": meta.num_delivered,
                    }
                )
                await m.ack_sync(timeout=self.timeout)
                msgs[-1]["acked"] = True
        finally:
            ended.append(True)

    def _empty_or_not(self, op: Op, why: Exception) -> Op:
        """A final dequeue that fetched nothing: drained only if the stream holds no message."""
        try:
            left = self._call(self._stored(), self.timeout + 1)
        except Exception as e:
            return op.complete("fail", op.value, error=f"stream info: {type(e).__name__}"[:200])
        if left == 0:
            return op.complete("ok", {"messages": []})
        return op.complete("fail", op.value, error=f"{left} message(s) left, awaiting redelivery")

    async def _stored(self) -> int:
        js = await self._js()
        info = await js.stream_info(STREAM)
        return int(info.state.messages)
