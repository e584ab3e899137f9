"""One outbound connection per peer, with replies matched to requests by ``rid``.

Replies may arrive out of order (spec §1), so each request gets a future keyed by
its rid and one reader task completes them. A broken connection fails every
in-flight future with ``ConnectionError``; the next request reconnects. Nothing
here retries: the elector and the dispatchers own their retry policies.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import socket

from node_impl.wire import FrameError, encode_frame, read_frame

__all__ = ["PeerLink"]

_rids = itertools.count(1)
SILENCE_RESET_S = 2.0


class PeerLink:
    def __init__(
        self, self_id: str, peer_id: str, host: str, port: int, *, local_host: str | None = None
    ) -> None:
        self.self_id, self.peer_id, self.host, self.port = self_id, peer_id, host, port
        # Connect from our own configured address, so that a partition written as
        # "drop from A to B" by source address also cuts A's outbound connections.
        self.local_host = local_host
        self._last_rx = 0.0
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._futs: dict[int, asyncio.Future] = {}
        self._connecting: asyncio.Lock | None = None
        self._closed = False

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    def buffered(self) -> int:
        w = self._writer
        return w.transport.get_write_buffer_size() if w is not None else 0

    async def connect(self, timeout: float) -> bool:
        if self.connected:
            return True
        if self._closed:
            return False
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self.connected:
                return True
            try:
                reader, writer = await asyncio.wait_for(self._open(), timeout)
            except (OSError, asyncio.TimeoutError):
                return False
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._writer = writer
            self._last_rx = asyncio.get_running_loop().time()
            self._reader_task = asyncio.get_running_loop().create_task(
                self._read_loop(reader, writer)
            )
            return True

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.local_host:
            try:
                return await asyncio.open_connection(
                    self.host, self.port, local_addr=(self.local_host, 0)
                )
            except OSError as e:
                if e.errno != errno.EADDRNOTAVAIL:
                    raise
        return await asyncio.open_connection(self.host, self.port)

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                msg = await read_frame(reader)
                self._last_rx = asyncio.get_running_loop().time()
                fut = self._futs.pop(msg.get("rid", 0), None)  # rids start at 1
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (OSError, EOFError, FrameError, asyncio.IncompleteReadError):
            pass
        finally:
            self._drop(writer)

    def _drop(self, writer: asyncio.StreamWriter) -> None:
        if self._writer is writer:
            self._writer = None
            futs, self._futs = self._futs, {}
            for f in futs.values():
                if not f.done():
                    f.set_exception(ConnectionError(f"connection to {self.peer_id} lost"))
        with contextlib.suppress(Exception):
            writer.close()

    def send(self, msg: dict) -> asyncio.Future:
        """Write one request now; the future gets the reply or ConnectionError."""
        fut = asyncio.get_running_loop().create_future()
        w = self._writer
        if w is None or w.is_closing():
            fut.set_exception(ConnectionError(f"not connected to {self.peer_id}"))
            return fut
        rid = next(_rids)
        msg["rid"] = rid
        msg["from"] = self.self_id
        self._futs[rid] = fut
        try:
            w.write(encode_frame(msg))
        except (OSError, RuntimeError) as e:
            self._futs.pop(rid, None)
            fut.set_exception(ConnectionError(str(e)))
            self._drop(w)
        return fut

    def forget(self, fut: asyncio.Future) -> None:
        """Stop waiting for a reply (after a timeout) so the map does not grow."""
        for rid, f in list(self._futs.items()):
            if f is fut:
                del self._futs[rid]
                break

    async def request(self, msg: dict, timeout: float) -> dict | None:
        """Connect if needed, send, wait; None on timeout or a broken connection."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not await self.connect(timeout):
            return None
        fut = self.send(msg)
        try:
            return await asyncio.wait_for(fut, max(0.0, deadline - loop.time()))
        except (asyncio.TimeoutError, ConnectionError):
            self.forget(fut)
            self.reset_if_silent()
            return None

    def reset_if_silent(self, silence: float = SILENCE_RESET_S) -> None:
        """Drop a connection that has answered nothing for a while.

        After a partition heals, TCP may sit in retransmission backoff for seconds;
        a fresh connection works at once.
        """
        w = self._writer
        if w is not None and asyncio.get_running_loop().time() - self._last_rx > silence:
            self._drop(w)

    async def drain(self, timeout: float) -> None:
        w = self._writer
        if w is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(w.drain(), timeout)

    def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._drop(self._writer)
        if self._reader_task is not None:
            self._reader_task.cancel()
