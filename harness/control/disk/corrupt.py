"""File corruption operations on a stopped node's files, for a ``corrupt`` fault.

Each operation is a pure function of (file, arguments, seed) that changes the file,
syncs it (so a lazy fs under it cannot undo the damage later) and returns a
JSON-able record of exactly what it did: file, offsets, bits, sizes, digests. The
history keeps that record, so a failing run says which byte broke the node.

This file runs on the host, alone (standard library only, Python 3.8+): shipped
with ``Remote.upload`` and run as ``python3 corrupt.py OP FILE ...``, which prints
the record as one JSON line. Python rather than ``dd``/``truncate``: a seeded
choice of bits, and a record of the exact bytes before and after, are one line
here and fragile pipelines in shell; every host already has python3 for the node.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
from typing import Any

__all__ = [
    "OPS",
    "TEXT_RUN",
    "bitflip",
    "copy_chunk",
    "data_end",
    "main",
    "rollback",
    "snapshot",
    "text_bytes",
    "truncate",
]

OPS = ("bitflip", "truncate", "snapshot", "rollback", "copy-chunk")


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _sync(fd: int) -> None:
    os.fsync(fd)


def data_end(path: str) -> int:
    """The offset just past the file's last non-zero byte.

    Logs that preallocate (etcd's 64 MB WAL segments, ZooKeeper's padded txn logs)
    end in zeros that hold no record: "the end of the log" is where the data ends,
    not the file, or a flip "in the tail" lands in padding every reader skips.
    """
    size = os.path.getsize(path)
    step = 1 << 16
    with open(path, "rb") as f:
        hi = size
        while hi > 0:
            lo = max(0, hi - step)
            f.seek(lo)
            chunk = f.read(hi - lo).rstrip(b"\0")
            if chunk:
                return lo + len(chunk)
            hi = lo
    return 0


def _region(size: int, offset: int, length: int | None, end: int | None = None) -> tuple[int, int]:
    """``[lo, hi)``; a negative ``offset`` counts back from ``end`` (default: the size)."""
    end = size if end is None else min(end, size)
    if offset < 0:
        offset = max(0, end + offset)  # from the end, as Python slices
    lo = min(offset, size)
    hi = size if length is None else min(size, lo + max(0, length))
    return lo, hi


def bitflip(
    path: str,
    *,
    bits: int = 1,
    seed: int = 0,
    offset: int = 0,
    length: int | None = None,
    from_data_end: bool = False,
    text: bool = False,
) -> dict[str, Any]:
    """Flip ``bits`` distinct random bits in ``[offset, offset+length)`` (default: the file).

    A negative ``offset`` counts from the end: of the file, or with ``from_data_end``
    of its data (:func:`data_end`), and the region then stops there too. With
    ``text`` the bits land only in runs of printable text (:func:`text_bytes`) of the
    region, when it has any. Returns ``bits`` as ``[byte_offset, bit, old_byte,
    new_byte]`` (bit 0 is the least significant), sorted.
    """
    size = os.path.getsize(path)
    end = data_end(path) if from_data_end else None
    lo, hi = _region(size, offset, length, end)
    if end is not None:
        hi = min(hi, end)
    rng = random.Random(seed)
    fd = os.open(path, os.O_RDWR)
    try:
        aimed = text_bytes(os.pread(fd, hi - lo, lo), lo) if text and hi > lo else []
        if aimed:
            n = min(bits, len(aimed) * 8)
            picks = sorted(p * 8 + b for p, b in _sample_bits(rng, aimed, n))
        else:
            n = min(bits, (hi - lo) * 8)
            picks = sorted(rng.sample(range(lo * 8, hi * 8), n)) if n > 0 else []
        flipped = []
        for p in picks:
            off, bit = divmod(p, 8)
            old = os.pread(fd, 1, off)[0]
            new = old ^ (1 << bit)
            os.pwrite(fd, bytes([new]), off)
            flipped.append([off, bit, old, new])
        _sync(fd)
    finally:
        os.close(fd)
    return {
        "op": "bitflip",
        "file": path,
        "size": size,
        "region": [lo, hi],
        **({"data_end": end} if end is not None else {}),
        **({"text_bytes": len(aimed)} if text else {}),
        "seed": seed,
        "bits": flipped,
    }


TEXT_RUN = 5
"""Printable bytes in a row that :func:`text_bytes` takes for stored text."""


def text_bytes(buf: bytes, base: int = 0) -> list[int]:
    """Offsets (``base`` + index) of the bytes of ``buf`` in runs of printable ASCII.

    A log's framing (lengths, indexes, offsets, checksums) is binary and its high
    bytes are zeros; the keys, values and payloads it stores are mostly text. A flip
    in framing is caught by any recovery that checks its record sizes; a flip in the
    text is the corruption only a checksum over the record tells. Runs of at least
    :data:`TEXT_RUN` bytes: a checksum's bytes are printable by chance in short runs.
    """
    out: list[int] = []
    run = 0
    for i, c in enumerate(buf):
        if 0x20 <= c < 0x7F:
            run += 1
            continue
        if run >= TEXT_RUN:
            out.extend(range(base + i - run, base + i))
        run = 0
    if run >= TEXT_RUN:
        out.extend(range(base + len(buf) - run, base + len(buf)))
    return out


def _sample_bits(rng: random.Random, offsets: list[int], n: int) -> list[tuple[int, int]]:
    """``n`` distinct (byte offset, bit) pairs among the bits of the bytes at ``offsets``."""
    return [(offsets[k // 8], k % 8) for k in rng.sample(range(len(offsets) * 8), n)]


def truncate(path: str, *, drop: int, from_data_end: bool = False) -> dict[str, Any]:
    """Drop the last ``drop`` bytes (all of them if the file is shorter).

    With ``from_data_end`` the cut is ``drop`` bytes before the end of the data
    (:func:`data_end`): a preallocated file's zeros go too, and the cut bites a record.
    """
    size = os.path.getsize(path)
    end = data_end(path) if from_data_end else size
    new = max(0, end - max(0, drop))
    fd = os.open(path, os.O_RDWR)
    try:
        dropped = os.pread(fd, min(size - new, 64), new)
        os.ftruncate(fd, new)
        _sync(fd)
    finally:
        os.close(fd)
    return {
        "op": "truncate",
        "file": path,
        "old_size": size,
        **({"data_end": end} if from_data_end else {}),
        "new_size": new,
        "dropped_head": dropped.hex(),  # the first (up to 64) bytes removed
    }


def snapshot(path: str, snap: str) -> dict[str, Any]:
    """Copy ``path`` to ``snap`` (synced): the state a later :func:`rollback` restores."""
    with open(path, "rb") as src, open(snap, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
        dst.flush()
        _sync(dst.fileno())
    return {
        "op": "snapshot",
        "file": path,
        "snapshot": snap,
        "size": os.path.getsize(snap),
        "sha256": _digest(snap),
    }


def rollback(path: str, snap: str) -> dict[str, Any]:
    """Restore ``path`` in place (same inode) to the bytes of ``snap``; synced.

    A file that no longer exists is created: a rollback undoes a deletion too.
    """
    existed = os.path.exists(path)
    before = (os.path.getsize(path), _digest(path)) if existed else (None, None)
    text_before = _small_text(path) if existed else None
    with open(snap, "rb") as f:
        data = f.read()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        off = 0
        while off < len(view):
            off += os.pwrite(fd, view[off:], off)
        os.ftruncate(fd, len(data))
        _sync(fd)
    finally:
        os.close(fd)
    if not existed:
        dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            _sync(dfd)
        finally:
            os.close(dfd)
    return {
        "op": "rollback",
        "file": path,
        "snapshot": snap,
        "size_before": before[0],
        "sha256_before": before[1],
        "size_after": len(data),
        "sha256_after": _digest(path),
        "text_before": text_before,
        "text_after": _small_text(path),
    }


def _small_text(path: str, limit: int = 256) -> str | None:
    """A small text file's content, for the record (``{"term": 5, ...}`` says what went
    back in time, a digest does not); None for a large or binary one."""
    if os.path.getsize(path) > limit:
        return None
    with open(path, "rb") as f:
        raw = f.read(limit)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def copy_chunk(
    path: str, *, src: int, dst: int, length: int, from_data_end: bool = False
) -> dict[str, Any]:
    """Copy ``length`` bytes at ``src`` over the bytes at ``dst`` (clamped to the file).

    With ``from_data_end``, a negative ``src`` or ``dst`` counts back from the end of
    the data (:func:`data_end`): a misdirected write over the log's last record.
    """
    size = os.path.getsize(path)
    end = data_end(path) if from_data_end else None
    if end is not None:
        src = max(0, end + src) if src < 0 else src
        dst = max(0, end + dst) if dst < 0 else dst
    fd = os.open(path, os.O_RDWR)
    try:
        chunk = os.pread(fd, max(0, min(length, size - src)), src) if 0 <= src < size else b""
        chunk = chunk[: max(0, size - dst)] if dst >= 0 else b""
        old = os.pread(fd, len(chunk), dst) if chunk else b""
        if chunk:
            os.pwrite(fd, chunk, dst)
        _sync(fd)
    finally:
        os.close(fd)
    return {
        "op": "copy-chunk",
        "file": path,
        "size": size,
        **({"data_end": end} if end is not None else {}),
        "src": src,
        "dst": dst,
        "length": len(chunk),
        "changed": sum(a != b for a, b in zip(old, chunk, strict=True)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="corrupt.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="op", required=True)
    b = sub.add_parser("bitflip")
    b.add_argument("file")
    b.add_argument("--bits", type=int, default=1)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--offset", type=int, default=0)
    b.add_argument("--length", type=int, default=None)
    b.add_argument("--from-data-end", action="store_true")
    b.add_argument("--text", action="store_true")
    t = sub.add_parser("truncate")
    t.add_argument("file")
    t.add_argument("--drop", type=int, required=True)
    t.add_argument("--from-data-end", action="store_true")
    s = sub.add_parser("snapshot")
    s.add_argument("file")
    s.add_argument("snapshot")
    r = sub.add_parser("rollback")
    r.add_argument("file")
    r.add_argument("snapshot")
    c = sub.add_parser("copy-chunk")
    c.add_argument("file")
    c.add_argument("--src", type=int, required=True)
    c.add_argument("--dst", type=int, required=True)
    c.add_argument("--length", type=int, required=True)
    c.add_argument("--from-data-end", action="store_true")
    a = ap.parse_args(argv)
    try:
        if a.op == "bitflip":
            rec = bitflip(
                a.file,
                bits=a.bits,
                seed=a.seed,
                offset=a.offset,
                length=a.length,
                from_data_end=a.from_data_end,
                text=a.text,
            )
        elif a.op == "truncate":
            rec = truncate(a.file, drop=a.drop, from_data_end=a.from_data_end)
        elif a.op == "snapshot":
            rec = snapshot(a.file, a.snapshot)
        elif a.op == "rollback":
            rec = rollback(a.file, a.snapshot)
        else:
            rec = copy_chunk(
                a.file, src=a.src, dst=a.dst, length=a.length, from_data_end=a.from_data_end
            )
    except OSError as e:
        print(json.dumps({"op": a.op, "file": a.file, "error": str(e)}))
        return 1
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
