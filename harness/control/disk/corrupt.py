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

__all__ = ["OPS", "bitflip", "copy_chunk", "main", "rollback", "snapshot", "truncate"]

OPS = ("bitflip", "truncate", "snapshot", "rollback", "copy-chunk")


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _sync(fd: int) -> None:
    os.fsync(fd)


def _region(size: int, offset: int, length: int | None) -> tuple[int, int]:
    if offset < 0:
        offset = max(0, size + offset)  # from the end, as Python slices
    lo = min(offset, size)
    hi = size if length is None else min(size, lo + max(0, length))
    return lo, hi


def bitflip(
    path: str, *, bits: int = 1, seed: int = 0, offset: int = 0, length: int | None = None
) -> dict[str, Any]:
    """Flip ``bits`` distinct random bits in ``[offset, offset+length)`` (default: the file).

    A negative ``offset`` counts from the end. Returns ``bits`` as ``[byte_offset,
    bit, old_byte, new_byte]`` (bit 0 is the least significant), sorted.
    """
    size = os.path.getsize(path)
    lo, hi = _region(size, offset, length)
    n = min(bits, (hi - lo) * 8)
    rng = random.Random(seed)
    picks = sorted(rng.sample(range(lo * 8, hi * 8), n)) if n > 0 else []
    flipped = []
    fd = os.open(path, os.O_RDWR)
    try:
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
        "seed": seed,
        "bits": flipped,
    }


def truncate(path: str, *, drop: int) -> dict[str, Any]:
    """Drop the last ``drop`` bytes (all of them if the file is shorter)."""
    size = os.path.getsize(path)
    new = max(0, size - max(0, drop))
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


def copy_chunk(path: str, *, src: int, dst: int, length: int) -> dict[str, Any]:
    """Copy ``length`` bytes at ``src`` over the bytes at ``dst`` (clamped to the file)."""
    size = os.path.getsize(path)
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
    t = sub.add_parser("truncate")
    t.add_argument("file")
    t.add_argument("--drop", type=int, required=True)
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
    a = ap.parse_args(argv)
    try:
        if a.op == "bitflip":
            rec = bitflip(a.file, bits=a.bits, seed=a.seed, offset=a.offset, length=a.length)
        elif a.op == "truncate":
            rec = truncate(a.file, drop=a.drop)
        elif a.op == "snapshot":
            rec = snapshot(a.file, a.snapshot)
        elif a.op == "rollback":
            rec = rollback(a.file, a.snapshot)
        else:
            rec = copy_chunk(a.file, src=a.src, dst=a.dst, length=a.length)
    except OSError as e:
        print(json.dumps({"op": a.op, "file": a.file, "error": str(e)}))
        return 1
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
