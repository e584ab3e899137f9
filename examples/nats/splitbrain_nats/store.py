"""One replica's messages read from its own files: nats-server's message blocks (2.9 to 2.15).

Why read files: a direct get asked of one server is answered by *any* replica
(measured on the lab: with the other replicas paused, about two in three of 60
direct gets to a server timed out), so the protocol cannot show what one node
holds. The blocks can: ``<store>/jetstream/$G/streams/<stream>/msgs/N.blk``.

A record (little-endian): length (u32; the top bit says headers follow), sequence
(u64; the top bit marks an erased message), timestamp (i64), subject length (u16),
the subject, [header length (u32) and headers], the body, an 8-byte checksum. The
length counts the whole record. The checksum is a keyed HighwayHash that the
standard library cannot compute, so it is not verified; a record running past the
end (a torn write) ends the block.

Deletes: a message removed from the middle of a block (a work queue's ack, a
``STREAM.MSG.DELETE``, a limit) keeps its record in the ``.blk``; only the block's
``N.idx`` knows, through the block's first sequence (everything below it is gone) and its
delete map (sequences above the first that are gone). A secure erase rewrites the record
with the erased flag instead. The ``.idx`` of 2.9 is magic 22, version 1, then unsigned
varints: message count, bytes, first sequence, (signed) first timestamp, last sequence,
(signed) last timestamp, the delete map's length, then the 8-byte checksum of the block's
last record, then the delete map as varint offsets from the first sequence. This module
applies both. The server writes an ``.idx`` lazily (on a timer, and for out-of-order
deletes at most every few seconds), so while it runs the file can be a little behind its
memory: a message deleted in the last moments before a read may still show as stored.
Messages appended after the index was written are kept (they are past its last sequence).
An index in any other format stops the read with :class:`IndexFormatError` rather than
guess.

From 2.10 on the record layout is the same (the 22-byte head, the checksum), but blocks
have no ``.idx``: the stream's deletes are kept in ``index.db`` beside ``msgs/``, which is
not read here, so on those releases a deleted message whose record is still in its block
shows as stored (the ``nats-stream`` workload never deletes). From 2.11 on, a delete may
also write a tombstone record (sequence with bit 62 set), which is not a message and is
skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "block_messages",
    "blocks_messages",
    "BLOCKS_GLOB",
    "BlockIndex",
    "IndexFormatError",
    "block_index",
    "live_messages",
]

_HEAD = struct.Struct("<IQqH")
_HBIT = 1 << 31
_EBIT = 1 << 63
_TBIT = 1 << 62
_CHECKSUM = 8

BLOCKS_GLOB = "jetstream/$G/streams/{stream}/msgs/*.blk"
"""Where a stream's blocks sit under a server's ``store_dir``."""


def block_messages(data: bytes) -> list[tuple[int, bytes]]:
    """``(sequence, body)`` of every live message record of one block, in file order."""
    out: list[tuple[int, bytes]] = []
    i = 0
    while i + _HEAD.size <= len(data):
        rl, seq, _ts, slen = _HEAD.unpack_from(data, i)
        has_headers, rl = rl & _HBIT, rl & ~_HBIT
        if rl < _HEAD.size + _CHECKSUM or i + rl > len(data):
            break
        j = i + _HEAD.size + slen
        if has_headers:
            (hl,) = struct.unpack_from("<I", data, j)
            j += 4 + hl
        if seq and not seq & (_EBIT | _TBIT):
            out.append((seq, data[j : i + rl - _CHECKSUM]))
        i += rl
    return out


def blocks_messages(blocks: Iterable[bytes]) -> list[tuple[int, bytes]]:
    """Every block's messages, blocks given in their number order."""
    return [m for block in blocks for m in block_messages(block)]


_MAGIC, _VERSION = 22, 1


class IndexFormatError(ValueError):
    """A block's ``.idx`` is not nats-server 2.9's: its deletes cannot be applied."""


@dataclass(frozen=True)
class BlockIndex:
    """What a block's ``.idx`` says is gone: everything below ``first``, and ``deleted``."""

    first: int
    last: int
    msgs: int
    deleted: frozenset[int]

    def live(self, seq: int) -> bool:
        return seq >= self.first and seq not in self.deleted


def _uvarint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise IndexFormatError("the index ends inside a number")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _varint(data: bytes, i: int) -> tuple[int, int]:
    u, i = _uvarint(data, i)
    return (u >> 1) ^ -(u & 1), i


def block_index(data: bytes) -> BlockIndex:
    """A 2.9 ``.idx`` parsed; :class:`IndexFormatError` for any other format or a short file."""
    if len(data) < 2 or data[0] != _MAGIC or data[1] != _VERSION:
        head = data[:2].hex() or "empty"
        raise IndexFormatError(
            f"index header {head}, not nats-server 2.9's (magic {_MAGIC}, version {_VERSION}): "
            "deletes cannot be applied (an encrypted store is not supported either)"
        )
    i = 2
    msgs, i = _uvarint(data, i)
    _bytes, i = _uvarint(data, i)
    first, i = _uvarint(data, i)
    _fts, i = _varint(data, i)
    last, i = _uvarint(data, i)
    _lts, i = _varint(data, i)
    ndel, i = _uvarint(data, i)
    first, last = first & ~_EBIT, last & ~_EBIT
    i += _CHECKSUM
    if i > len(data):
        raise IndexFormatError("the index ends before its checksum")
    deleted = set()
    for _ in range(ndel):  # the server drops entries at or below first lazily: fewer may follow
        if i >= len(data):
            break
        off, i = _uvarint(data, i)
        off &= ~_EBIT
        if off == 0:
            break
        deleted.add(first + off)
    return BlockIndex(first=first, last=last, msgs=msgs, deleted=frozenset(deleted))


def live_messages(blocks: Iterable[tuple[bytes, bytes | None]]) -> tuple[list[tuple[int, bytes]], int]:
    """Every block's messages that its ``.idx`` does not call deleted, and how many it did.

    ``blocks`` are ``(block bytes, index bytes or None)`` in number order; a block with no
    index yet (the newest, before the server first writes one) has no known deletes.
    """
    out: list[tuple[int, bytes]] = []
    dropped = 0
    for block, idx in blocks:
        msgs = block_messages(block)
        if idx is None:
            out.extend(msgs)
            continue
        index = block_index(idx)
        for seq, body in msgs:
            if index.live(seq):
                out.append((seq, body))
            else:
                dropped += 1
    return out, dropped
