"""Clients for a node's client port (spec §8).

:class:`NodeClient` is blocking and one-request-at-a-time: the harness runs one per
workload thread, and its error contract is what the history needs. Any error
closes the socket, so a late reply to a timed-out request can never be mistaken
for the answer to the next one; the next call reconnects.

:class:`AsyncNodeClient` pipelines many requests over one connection, matched by
``rid``, for the benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import time
from typing import Any

from node_impl.wire import FrameError, encode_frame, read_frame, recv_frame

__all__ = [
    "NodeClient",
    "AsyncNodeClient",
    "classify",
    "classify_reply",
    "OK_CODES",
    "FAIL_CODES",
    "INFO_CODES",
]

OK_CODES = frozenset({"SUCCESS"})
FAIL_CODES = frozenset(
    {
        "NOT_LEADER",
        "LEADER_PENDING_FULL",
        "LEADER_NOT_READY",
        "UNSUPPORTED",
        "INDEX_OUT_OF_RANGE",
        "NOT_COMMITTED",
        # membership (docs/membership.md): refused before anything was appended
        "LEADER_TRANSFERRING",
        "CONFIG_CHANGE_PENDING",
    }
)
INFO_CODES = frozenset(
    {"WAIT_QUORUM_ACK_TIMEOUT", "TERM_CHANGED", "SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT"}
)


def classify(code: str) -> str:
    """How a history records a reply code: "ok", "fail" (nothing happened) or "info".

    Unknown codes are "info": claiming an unknown outcome never hides a lost write.
    """
    if code in OK_CODES:
        return "ok"
    if code in FAIL_CODES or code == "redirect":
        return "fail"
    return "info"


def classify_reply(reply: dict) -> str:
    """Like :func:`classify`, also reading the reply type and kv-cas's ``ok`` flag."""
    if reply.get("type") == "redirect":
        return "fail"
    c = classify(str(reply.get("code")))
    if c == "ok" and reply.get("type") == "kv-cas-resp" and reply.get("ok") is False:
        return "fail"
    return c


def _get_msg(index: int | None, frm: int | None, to: int | None, local: bool) -> dict[str, Any]:
    msg: dict[str, Any] = {"type": "get", "local": bool(local)}
    if index is not None:
        msg["index"] = index
    else:
        if frm is None or to is None:
            raise ValueError("get needs index, or both frm and to")
        msg["from"], msg["to"] = frm, to
    return msg


def _transfer_msg(target: str, timeout_ms: int | None) -> dict[str, Any]:
    msg: dict[str, Any] = {"type": "transfer-leader", "id": target}
    if timeout_ms is not None:
        msg["timeout_ms"] = timeout_ms
    return msg


class NodeClient:
    """Blocking client for one node; not thread-safe (one per worker thread)."""

    def __init__(self, host: str, port: int, *, timeout: float = 2.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._sock: socket.socket | None = None
        self._rids = itertools.count(1)

    def __repr__(self) -> str:
        return f"NodeClient({self.host}:{self.port})"

    def _connect(self, timeout: float) -> socket.socket:
        if self._sock is None:
            try:
                s = socket.create_connection((self.host, self.port), timeout=timeout)
            except TimeoutError:
                raise
            except OSError as e:
                raise ConnectionError(f"{self.host}:{self.port}: connect failed: {e}") from e
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = s
        return self._sock

    def call(self, msg: dict, timeout: float | None = None) -> dict:
        """Send one request and wait for its reply. Raises ConnectionError, TimeoutError, FrameError."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        rid = next(self._rids)
        msg = dict(msg, rid=rid)
        try:
            sock = self._connect(timeout)
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.sendall(encode_frame(msg))
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{self.host}:{self.port}: no reply to {msg['type']} within {timeout}s"
                    )
                sock.settimeout(left)
                reply = recv_frame(sock)
                if reply.get("rid") == rid:
                    return reply
        except TimeoutError as e:
            self.close()
            raise TimeoutError(
                f"{self.host}:{self.port}: no reply to {msg['type']} within {timeout}s"
            ) from e
        except (FrameError, ConnectionError):
            self.close()
            raise
        except (EOFError, OSError) as e:
            self.close()
            raise ConnectionError(f"{self.host}:{self.port}: {msg['type']}: {e}") from e

    def append(self, body: Any, timeout: float | None = None) -> dict:
        return self.call({"type": "append", "body": body}, timeout)

    def append_batch(self, bodies: list, timeout: float | None = None) -> dict:
        return self.call({"type": "append", "bodies": list(bodies)}, timeout)

    def get(
        self,
        index: int | None = None,
        *,
        frm: int | None = None,
        to: int | None = None,
        local: bool = False,
        timeout: float | None = None,
    ) -> dict:
        return self.call(_get_msg(index, frm, to, local), timeout)

    def kv_write(self, key: str, value: Any, timeout: float | None = None) -> dict:
        return self.call({"type": "kv-write", "key": key, "value": value}, timeout)

    def kv_read(self, key: str, timeout: float | None = None) -> dict:
        return self.call({"type": "kv-read", "key": key}, timeout)

    def kv_read_keys(self, keys: list[str], timeout: float | None = None) -> dict:
        """One linearizable read of every key in ``keys``: ``values``, one per key in order."""
        return self.call({"type": "kv-read", "keys": list(keys)}, timeout)

    def kv_cas(self, key: str, old: Any, new: Any, timeout: float | None = None) -> dict:
        return self.call({"type": "kv-cas", "key": key, "old": old, "new": new}, timeout)

    def status(self, timeout: float | None = None) -> dict:
        return self.call({"type": "status"}, timeout)

    # membership (docs/membership.md M10): changes go to the leader (others redirect)
    # and are answered once the config entry commits, so allow them a few seconds.

    def members(self, timeout: float | None = None) -> dict:
        """This node's view: voters, learners ({id: peer addr}), configIndex, pending."""
        return self.call({"type": "members"}, timeout)

    def add_member(self, node_id: str, addr: str, timeout: float | None = None) -> dict:
        """Add ``node_id`` (peer address ``addr``) as a learner; promoted once caught up."""
        return self.call({"type": "add-member", "id": node_id, "addr": addr}, timeout)

    def remove_member(self, node_id: str, timeout: float | None = None) -> dict:
        return self.call({"type": "remove-member", "id": node_id}, timeout)

    def transfer_leader(
        self, target: str, timeout_ms: int | None = None, timeout: float | None = None
    ) -> dict:
        """Hand leadership to ``target``; ``timeout_ms`` bounds the write pause."""
        return self.call(_transfer_msg(target, timeout_ms), timeout)

    def close(self) -> None:
        s, self._sock = self._sock, None
        if s is not None:
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> NodeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncNodeClient:
    """Pipelining asyncio client: many outstanding requests on one connection.

    A timeout fails only its own request (the late reply is dropped by rid); a lost
    connection fails every outstanding request with ConnectionError, and the next
    call reconnects.
    """

    def __init__(self, host: str, port: int, *, timeout: float = 2.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._rids = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._connecting: asyncio.Lock | None = None

    async def _ensure(self, timeout: float) -> asyncio.StreamWriter:
        if self._writer is not None:
            return self._writer
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is None:
                try:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(self.host, self.port), timeout
                    )
                except asyncio.TimeoutError as e:
                    raise TimeoutError(f"{self.host}:{self.port}: connect timed out") from e
                except OSError as e:
                    raise ConnectionError(f"{self.host}:{self.port}: connect failed: {e}") from e
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._writer = writer
                self._reader_task = asyncio.create_task(self._read_loop(reader, writer))
            return self._writer

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        err: BaseException
        try:
            while True:
                reply = await read_frame(reader)
                fut = self._pending.pop(reply.get("rid"), None)  # type: ignore[arg-type]
                if fut is not None and not fut.done():
                    fut.set_result(reply)
        except asyncio.CancelledError:
            err = ConnectionError(f"{self.host}:{self.port}: client closed")
        except FrameError as e:
            err = e
        except (EOFError, OSError) as e:
            err = ConnectionError(f"{self.host}:{self.port}: connection lost: {e}")
        if self._writer is writer:
            self._writer = None
        writer.close()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)

    async def call(self, msg: dict, timeout: float | None = None) -> dict:
        timeout = self.timeout if timeout is None else timeout
        writer = await self._ensure(timeout)
        rid = next(self._rids)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            writer.write(encode_frame(dict(msg, rid=rid)))
            await writer.drain()
        except (OSError, RuntimeError) as e:
            self._pending.pop(rid, None)
            raise ConnectionError(f"{self.host}:{self.port}: send failed: {e}") from e
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError as e:
            self._pending.pop(rid, None)
            raise TimeoutError(
                f"{self.host}:{self.port}: no reply to {msg.get('type')} within {timeout}s"
            ) from e

    async def append(self, body: Any, timeout: float | None = None) -> dict:
        return await self.call({"type": "append", "body": body}, timeout)

    async def append_batch(self, bodies: list, timeout: float | None = None) -> dict:
        return await self.call({"type": "append", "bodies": list(bodies)}, timeout)

    async def get(
        self,
        index: int | None = None,
        *,
        frm: int | None = None,
        to: int | None = None,
        local: bool = False,
        timeout: float | None = None,
    ) -> dict:
        return await self.call(_get_msg(index, frm, to, local), timeout)

    async def kv_write(self, key: str, value: Any, timeout: float | None = None) -> dict:
        return await self.call({"type": "kv-write", "key": key, "value": value}, timeout)

    async def kv_read(self, key: str, timeout: float | None = None) -> dict:
        return await self.call({"type": "kv-read", "key": key}, timeout)

    async def kv_read_keys(self, keys: list[str], timeout: float | None = None) -> dict:
        return await self.call({"type": "kv-read", "keys": list(keys)}, timeout)

    async def kv_cas(self, key: str, old: Any, new: Any, timeout: float | None = None) -> dict:
        return await self.call({"type": "kv-cas", "key": key, "old": old, "new": new}, timeout)

    async def status(self, timeout: float | None = None) -> dict:
        return await self.call({"type": "status"}, timeout)

    async def members(self, timeout: float | None = None) -> dict:
        return await self.call({"type": "members"}, timeout)

    async def add_member(self, node_id: str, addr: str, timeout: float | None = None) -> dict:
        return await self.call({"type": "add-member", "id": node_id, "addr": addr}, timeout)

    async def remove_member(self, node_id: str, timeout: float | None = None) -> dict:
        return await self.call({"type": "remove-member", "id": node_id}, timeout)

    async def transfer_leader(
        self, target: str, timeout_ms: int | None = None, timeout: float | None = None
    ) -> dict:
        return await self.call(_transfer_msg(target, timeout_ms), timeout)

    async def close(self) -> None:
        task, self._reader_task = self._reader_task, None
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def __aenter__(self) -> AsyncNodeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
