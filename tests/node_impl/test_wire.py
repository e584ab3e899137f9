"""Framing: round trips over real sockets, and every kind of bad frame refused cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading

import msgpack
import pytest

from node_impl.client import AsyncNodeClient, NodeClient, classify, classify_reply
from node_impl.wire import (
    MAX_FRAME,
    FrameError,
    decode_payload,
    encode_frame,
    read_frame,
    recv_frame,
    send_frame,
)


def frame_bytes(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


async def _read_all(data: bytes) -> dict:
    r = asyncio.StreamReader()
    r.feed_data(data)
    r.feed_eof()
    return await read_frame(r)


def read_bytes(data: bytes) -> dict:
    return asyncio.run(_read_all(data))


MSG = {"type": "push", "rid": 7, "entries": [{"body": b"\x00\xff", "index": 1}], "n": None}


def test_round_trip_async_and_sync() -> None:
    data = encode_frame(MSG)
    assert struct.unpack(">I", data[:4])[0] == len(data) - 4
    assert read_bytes(data) == MSG
    a, b = socket.socketpair()
    with a, b:
        sender = threading.Thread(
            target=lambda: [send_frame(a, MSG), send_frame(a, {"type": "x", "big": b"z" * 300_000})]
        )
        sender.start()
        assert recv_frame(b) == MSG
        assert recv_frame(b)["big"] == b"z" * 300_000
        sender.join()


def test_bytes_stay_bytes_and_strings_stay_strings() -> None:
    got = read_bytes(encode_frame({"type": "t", "s": "é", "b": b"\xc3\xa9"}))
    assert got["s"] == "é" and got["b"] == b"\xc3\xa9"


@pytest.mark.parametrize(
    "data, match",
    [
        (struct.pack(">I", MAX_FRAME + 1) + b"\x00" * 10, "exceeds"),
        (struct.pack(">I", 0), "empty"),
        (frame_bytes(msgpack.packb([1, 2, 3])), "not a map"),
        (frame_bytes(msgpack.packb({"rid": 1})), "type"),
        (frame_bytes(msgpack.packb({"type": 5})), "type"),
        (frame_bytes(b"\xc1\xc1\xc1"), "undecodable"),
        (frame_bytes(msgpack.packb({"type": "a"}) + b"\x01"), "undecodable"),  # trailing bytes
        # a bin claiming 1 GiB inside a tiny frame: refused without allocating it
        (frame_bytes(b"\x81\xa4type\xc6\x40\x00\x00\x00abc"), "undecodable"),
        (frame_bytes(b"\x91" * 5000 + b"\x01"), "undecodable"),  # nesting bomb
    ],
)
def test_bad_frames_raise_frame_error(data: bytes, match: str) -> None:
    with pytest.raises(FrameError, match=match):
        read_bytes(data)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(FrameError, match=match):
            recv_frame(b)


def test_eof_is_eof_error() -> None:
    with pytest.raises(asyncio.IncompleteReadError):
        read_bytes(b"")
    with pytest.raises(EOFError):
        read_bytes(encode_frame(MSG)[:-1])
    a, b = socket.socketpair()
    with a, b:
        a.sendall(encode_frame(MSG)[:5])
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(EOFError):
            recv_frame(b)


def test_encode_refuses_what_receiver_would_reject() -> None:
    with pytest.raises(FrameError):
        encode_frame({"type": "x", "b": b"\x00" * (MAX_FRAME + 1)})
    with pytest.raises(FrameError):
        encode_frame({"type": "x", "o": object()})
    assert decode_payload(msgpack.packb({"type": "x"})) == {"type": "x"}


def test_classify() -> None:
    assert classify("SUCCESS") == "ok"
    for c in ("NOT_LEADER", "redirect", "LEADER_PENDING_FULL", "NOT_COMMITTED"):
        assert classify(c) == "fail"
    for c in ("WAIT_QUORUM_ACK_TIMEOUT", "TERM_CHANGED", "FLUSH_SLAVE_TIMEOUT", "WHATEVER"):
        assert classify(c) == "info"
    assert classify_reply({"type": "kv-cas-resp", "code": "SUCCESS", "ok": False}) == "fail"
    assert classify_reply({"type": "redirect", "code": "NOT_LEADER"}) == "fail"


# ---------------------------------------------------------------- clients vs a tiny server


class EchoServer:
    """Replies to each frame out of order-ish; drops the connection on type 'die'."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    m = recv_frame(conn)
                    if m["type"] == "die":
                        return
                    if m["type"] == "silent":
                        continue
                    # a stale reply first: the client must skip it
                    send_frame(conn, {"type": "x-resp", "rid": -1, "code": "SUCCESS"})
                    send_frame(conn, {"type": m["type"] + "-resp", "rid": m["rid"], "echo": m})
            except (EOFError, OSError, FrameError):
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.sock.close()
        self.thread.join(2)


@pytest.fixture
def server():
    s = EchoServer()
    yield s
    s.close()


def test_node_client_errors_and_reconnect(server: EchoServer) -> None:
    c = NodeClient("127.0.0.1", server.port, timeout=0.5)
    r = c.get(frm=1, to=3, local=True)
    assert r["echo"] == {"type": "get", "local": True, "from": 1, "to": 3, "rid": r["rid"]}
    assert c.append_batch([1, 2])["echo"]["bodies"] == [1, 2]
    assert c.kv_cas("k", 1, 2)["echo"]["old"] == 1
    with pytest.raises(TimeoutError):
        c.call({"type": "silent"}, timeout=0.2)
    assert c._sock is None
    with pytest.raises(ConnectionError):
        c.call({"type": "die"})
    assert c.status()["type"] == "status-resp"  # reconnected
    c.close()
    port = server.port
    server.close()
    with pytest.raises(ConnectionError):
        NodeClient("127.0.0.1", port, timeout=0.5).status()


def test_async_client_pipelines(server: EchoServer) -> None:
    async def main() -> None:
        c = AsyncNodeClient("127.0.0.1", server.port, timeout=1.0)
        rs = await asyncio.gather(*(c.append(i) for i in range(50)))
        assert [r["echo"]["body"] for r in rs] == list(range(50))
        with pytest.raises(TimeoutError):
            await c.call({"type": "silent"}, timeout=0.1)
        assert (await c.kv_read("k"))["echo"]["key"] == "k"
        with pytest.raises(ConnectionError):
            await c.call({"type": "die"})
        assert (await c.status())["type"] == "status-resp"
        await c.close()

    asyncio.run(main())
