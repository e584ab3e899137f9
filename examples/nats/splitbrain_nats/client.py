"""The stream client: nats-py (asyncio) driven from the harness's worker threads.

Each client owns one event loop on its own daemon thread and its connections
live on that loop, so no two workers share a loop or a connection; a worker
blocks on a future with a timeout, and a timeout becomes ``info``. A client
talks only to the server of the node an op names (servers do not advertise
their peers: ``no_advertise``), so a fault on that server reaches it.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import threading
import time
import uuid
from collections.abc import Coroutine, Mapping
from typing import Any

from harness.api import Op, RunContext

from .mapping import (
    STREAM,
    SUBJECT,
    appended,
    final_read_value,
    publish_failed,
    read_value,
)
from .server import node_dir
from .store import BLOCKS_GLOB, IndexFormatError, live_messages

__all__ = ["StreamClient", "EventLoopThread"]

Address = tuple[str, int]


class EventLoopThread:
    """One asyncio loop running on a daemon thread; ``call`` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="nats-loop")
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """The coroutine's result; ``TimeoutError`` (and the coroutine cancelled) after ``timeout``."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"no answer in {timeout:g} s") from None

    def stop(self) -> None:
        """Cancel what is still running (nats-py's readers), then stop and close the loop."""
        with contextlib.suppress(Exception):
            self.call(_cancel_all(), 2.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(2)
        if not self.thread.is_alive():
            self.loop.close()


async def _cancel_all() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _quiet(*_: Any) -> None:
    """nats-py's callbacks: reconnects and errors are the test's faults, not news."""


class StreamClient:
    """Publishes to and reads the stream; final reads come from one node's own replica."""

    read_fs = frozenset({"read"})

    def __init__(
        self,
        *,
        replicas: int | None = None,
        timeout: float = 3.0,
        node: str = "",
        clients: Mapping[str, Address] | None = None,
        monitors: Mapping[str, Address] | None = None,
    ) -> None:
        self.replicas, self.timeout, self.node = replicas, timeout, node
        self.clients, self.monitors = dict(clients or {}), dict(monitors or {})
        self._loop: EventLoopThread | None = None
        self._conns: dict[str, Any] = {}

    def open(self, ctx: RunContext, node: str) -> StreamClient:
        return StreamClient(
            replicas=self.replicas,
            timeout=self.timeout,
            node=node,
            clients=ctx.addresses["client"],
            monitors=ctx.addresses["monitor"],
        )

    # ------------------------------------------------------------------ plumbing

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        if self._loop is None:
            self._loop = EventLoopThread()
        return self._loop.call(coro, timeout)

    async def _conn(self, node: str) -> Any:
        nc = self._conns.get(node)
        if nc is not None and not nc.is_closed:
            return nc
        import nats  # type: ignore[import-not-found, unused-ignore]

        host, port = self.clients[node]
        nc = await nats.connect(
            servers=[f"nats://{host}:{port}"],
            connect_timeout=min(2.0, self.timeout),
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=_quiet,
            disconnected_cb=_quiet,
            reconnected_cb=_quiet,
            closed_cb=_quiet,
        )
        self._conns[node] = nc
        return nc

    # ------------------------------------------------------------------ roles

    def setup(self, ctx: RunContext) -> None:
        """Create the stream (file storage, R replicas, direct gets on every replica).

        Creating a stream with the very config it already has succeeds, so every
        worker may run this; it retries while the meta group elects a leader.
        """
        replicas = self.replicas or min(len(ctx.nodes), 5)
        deadline = time.monotonic() + 60
        while True:
            try:
                self._call(self._add_stream(self.node, replicas), self.timeout * 3)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    async def _add_stream(self, node: str, replicas: int) -> None:
        from nats.js.api import StorageType, StreamConfig  # type: ignore[import-not-found, unused-ignore]

        js = (await self._conn(node)).jetstream(timeout=self.timeout * 2)
        await js.add_stream(
            StreamConfig(
                name=STREAM,
                subjects=[SUBJECT],
                storage=StorageType.FILE,
                num_replicas=replicas,
                allow_direct=True,
                duplicate_window=120.0,
            )
        )

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        node = op.node or self.node
        if op.f == "append":
            return self._append(node, op)
        if op.f == "read":
            if isinstance(op.value, dict) and op.value.get("final"):
                return self._final_read(ctx, node, op)
            return self._read(node, op)
        raise ValueError(f"nats-stream cannot do {op.f!r}")

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        loop, conns, self._loop, self._conns = self._loop, self._conns, None, {}
        if loop is None:
            return
        for nc in conns.values():
            with contextlib.suppress(Exception):
                loop.call(nc.close(), 2.0)
        loop.stop()

    # ------------------------------------------------------------------ ops

    def _append(self, node: str, op: Op) -> Op:
        from nats.errors import NoRespondersError  # type: ignore[import-not-found, unused-ignore]
        from nats.js.errors import APIError, NoStreamResponseError  # type: ignore[import-not-found, unused-ignore]

        try:
            self._call(self._conn(node), self.timeout)
        except Exception as e:  # never connected: nothing was sent
            return publish_failed(op, "not-connected", f"{type(e).__name__}: {e}")
        try:
            ack = self._call(self._publish(node, op.value["payload"]), self.timeout + 1)
        except (NoStreamResponseError, NoRespondersError) as e:
            return publish_failed(op, "no-responders", type(e).__name__)
        except APIError as e:
            return publish_failed(op, "api-error", str(e))
        except TimeoutError as e:
            return publish_failed(op, "timeout", str(e) or type(e).__name__)
        except Exception as e:
            return publish_failed(op, "connection", f"{type(e).__name__}: {e}")
        return appended(op, ack)

    async def _publish(self, node: str, payload: str) -> dict[str, Any]:
        js = (await self._conn(node)).jetstream(timeout=self.timeout)
        ack = await js.publish(
            SUBJECT,
            payload.encode(),
            timeout=self.timeout,
            stream=STREAM,
            headers={"Nats-Msg-Id": payload},
        )
        return {"stream": ack.stream, "seq": ack.seq, "duplicate": bool(ack.duplicate)}

    def _read(self, node: str, op: Op) -> Op:
        """Read ``[from, to]`` through a fresh consumer; any error is ``fail`` (reads change nothing)."""
        frm, to = int(op.value["from"]), int(op.value["to"])
        try:
            msgs = self._call(self._consume(node, frm, to), self.timeout * 2)
        except Exception as e:
            return op.complete("fail", op.value, error=f"{type(e).__name__}: {e}"[:200])
        return op.complete("ok", read_value(msgs, upto=to))

    async def _consume(self, node: str, frm: int, to: int) -> list[tuple[int, bytes]]:
        import nats.errors  # type: ignore[import-not-found, unused-ignore]
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy  # type: ignore[import-not-found, unused-ignore]

        js = (await self._conn(node)).jetstream(timeout=self.timeout)
        name = f"sb-{uuid.uuid4().hex[:16]}"
        await js.add_consumer(
            STREAM,
            config=ConsumerConfig(
                name=name,
                filter_subject=SUBJECT,
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=frm,
                ack_policy=AckPolicy.NONE,
                mem_storage=True,
                num_replicas=1,
                inactive_threshold=5.0,  # the server drops it if our delete is lost
            ),
        )
        got: list[tuple[int, bytes]] = []
        try:
            sub = await js.pull_subscribe_bind(stream=STREAM, name=name)
            while not got or got[-1][0] < to:
                try:
                    batch = await sub.fetch(min(to - frm + 1, 256), timeout=self.timeout / 3)
                except nats.errors.TimeoutError:
                    break  # nothing more stored yet
                got.extend((m.metadata.sequence.stream, m.data) for m in batch)
            await sub.unsubscribe()
        finally:
            with contextlib.suppress(Exception):
                await js.delete_consumer(STREAM, name)
        return got

    def _final_read(self, ctx: RunContext, node: str, op: Op) -> Op:
        """``[from, to]`` of ``node``'s own replica, read from its message blocks over SSH.

        Not by direct get: any replica answers those (see :mod:`.store`).
        """
        frm, to = int(op.value["from"]), int(op.value["to"])
        msgs = f"{node_dir(ctx, node)}/store/" + BLOCKS_GLOB.format(stream=STREAM)
        folder = msgs.rsplit("/", 1)[0]
        # One line per block, in number order: the block's base64, a colon, its index's
        # base64 (``-`` when the server has not written one yet); exit 3: no replica here.
        cmd = (
            f"cd '{folder}' 2>/dev/null || exit 3; "
            "for f in $(ls | grep '[.]blk$' | sort -n); do base64 -w0 \"$f\"; printf :; "
            'i="${f%.blk}.idx"; if [ -f "$i" ]; then base64 -w0 "$i"; else printf -; fi; echo; '
            "done"
        )
        try:
            res = ctx.remotes[node].run(cmd, check=False, timeout=self.timeout * 10)
        except Exception as e:
            return op.complete("fail", op.value, error=f"{type(e).__name__}: {e}"[:200])
        if res.exit_status == 3:
            return op.complete("ok", final_read_value([], end=None))
        if not res.ok:
            return op.complete("fail", op.value, error=f"reading blocks: {res.stderr[-150:]}")
        try:
            stored, deleted = live_messages(_block_pairs(res.stdout))
        except IndexFormatError as e:
            return op.complete("fail", op.value, error=f"IndexFormatError: {e}"[:200])
        end = max((seq for seq, _ in stored), default=0)
        value = final_read_value(stored, end=end, frm=frm, to=to)
        if deleted:
            value["deleted"] = deleted  # records the blocks hold that their .idx calls gone
        return op.complete("ok", value)


def _block_pairs(listing: str) -> list[tuple[bytes, bytes | None]]:
    """The final read's listing (``blk-base64:idx-base64`` lines, ``-`` for no index)."""
    out: list[tuple[bytes, bytes | None]] = []
    for line in listing.split():
        blk, _, idx = line.partition(":")
        out.append((base64.b64decode(blk), None if idx in ("", "-") else base64.b64decode(idx)))
    return out
