"""One replica's messages read from its own files: nats-server 2.9's message blocks.

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
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["block_messages", "blocks_messages", "BLOCKS_GLOB"]

_HEAD = struct.Struct("<IQqH")
_HBIT = 1 << 31
_EBIT = 1 << 63
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
        if seq and not seq & _EBIT:
            out.append((seq, data[j : i + rl - _CHECKSUM]))
        i += rl
    return out


def blocks_messages(blocks: Iterable[bytes]) -> list[tuple[int, bytes]]:
    """Every block's messages, blocks given in their number order."""
    return [m for block in blocks for m in block_messages(block)]
