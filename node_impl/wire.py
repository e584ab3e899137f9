"""Frames on the wire: a u32 big-endian length, then one msgpack map (spec §1).

Both the asyncio server and the blocking harness clients speak through this
module, so the limits that protect a node from a hostile peer live in one
place: a length above :data:`MAX_FRAME` is refused before anything is read, and
the unpacker's per-object limits are bounded by the frame itself, so a frame
claiming a 4 GiB ``bin`` cannot make us allocate it.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import msgpack

__all__ = [
    "MAX_FRAME",
    "FrameError",
    "encode_frame",
    "decode_payload",
    "read_frame",
    "send_frame",
    "recv_frame",
]

MAX_FRAME = 16 * 2**20

_LEN = struct.Struct(">I")


class FrameError(Exception):
    """The peer sent something that is not a valid frame; the connection is unusable."""


def encode_frame(msg: dict) -> bytes:
    """Length-prefix one message. Refuses to build a frame the receiver would reject."""
    if not isinstance(msg, dict):
        raise FrameError(f"frame payload must be a map, got {type(msg).__name__}")
    try:
        payload = msgpack.packb(msg, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise FrameError(f"cannot encode frame of type {msg.get('type')!r}: {e}") from e
    if len(payload) > MAX_FRAME:
        raise FrameError(f"frame of {len(payload)} bytes exceeds the {MAX_FRAME}-byte limit")
    return _LEN.pack(len(payload)) + payload


def _check_length(n: int) -> None:
    if n > MAX_FRAME:
        raise FrameError(f"frame length {n} exceeds the {MAX_FRAME}-byte limit")
    if n == 0:
        raise FrameError("empty frame")


def decode_payload(payload: bytes) -> dict:
    """Unpack and validate one frame body (without its length prefix)."""
    n = len(payload)
    try:
        msg = msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=False,
            max_str_len=n,
            max_bin_len=n,
            max_array_len=n,
            max_map_len=n // 2 + 1,
            max_ext_len=n,
        )
    except Exception as e:  # msgpack raises a zoo of types: all mean "not a frame"
        raise FrameError(f"undecodable frame payload ({n} bytes): {type(e).__name__}: {e}") from e
    if not isinstance(msg, dict):
        raise FrameError(f"frame payload is a {type(msg).__name__}, not a map")
    t = msg.get("type")
    if not isinstance(t, str):
        raise FrameError(f"frame has no string 'type' field (got {t!r})")
    return msg


async def read_frame(reader: asyncio.StreamReader) -> dict:
    """Read one frame. EOF surfaces as :class:`asyncio.IncompleteReadError` (an EOFError)."""
    head = await reader.readexactly(4)
    (n,) = _LEN.unpack(head)
    _check_length(n)
    return decode_payload(await reader.readexactly(n))


def send_frame(sock: socket.socket, msg: dict) -> None:
    sock.sendall(encode_frame(msg))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def recv_frame(sock: socket.socket) -> dict:
    """Blocking twin of :func:`read_frame`; the socket's own timeout applies to each recv."""
    (n,) = _LEN.unpack(_recv_exact(sock, 4))
    _check_length(n)
    return decode_payload(_recv_exact(sock, n))
