"""The node's durable state: the entry log, its index, the term file and the checkpoint.

Layout and recovery rules are spec §2-§3. ``data.log`` is the source of truth;
``index.idx`` is a cache of 32-byte records that recovery rewrites from the data
whenever they disagree. Two CRCs (ours) let recovery tell a torn or flipped tail
from a valid one: ``bodyCrc`` covers the body, ``chainCrc`` chains each entry to
its predecessor, so a replica with the same last chainCrc holds the same prefix
of (index, term, bodyCrc).

Writes go to an in-process buffer and reach the OS in batches; :meth:`LogStore.flush`
pushes them out and fsyncs. The flush may run on a worker thread while the event
loop keeps appending, so the buffers and counters sit behind one lock, the fsync
runs outside it, and ``durable_end`` only ever claims the end that was captured
before the fsync started.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import struct
import threading
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

__all__ = [
    "MAGIC_NORMAL",
    "MAGIC_NOOP",
    "HEADER_SIZE",
    "INDEX_RECORD",
    "Entry",
    "InconsistentState",
    "StateFileError",
    "LogStore",
    "TermStore",
    "Checkpoint",
    "encode_body",
    "decode_body",
    "chain_crc",
    "last_index_within",
    "parse_entries",
    "reconcile_term",
    "UNKNOWN_VOTE",
]

MAGIC_NORMAL = 1
MAGIC_NOOP = 2
HEADER_SIZE = 48
INDEX_RECORD = 32

# magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize
_HEADER = struct.Struct(">iiqqqiIIi")
# magic, pos, size, index, term
_INDEX = struct.Struct(">iqiqq")
_CHAIN = struct.Struct(">IqqI")
assert _HEADER.size == HEADER_SIZE and _INDEX.size == INDEX_RECORD

_MAGICS = (MAGIC_NORMAL, MAGIC_NOOP)
_SPILL = 1 << 20  # bytes buffered in-process before they are handed to the OS
_CACHE_ENTRIES = 16384  # recent entries kept in memory for the dispatchers' reads
_CACHE_BYTES = 64 << 20
_SCAN_CHUNK = 8 << 20


def chain_crc(prev_chain: int, index: int, term: int, body_crc: int) -> int:
    """crc32(prev chainCrc ‖ index ‖ term ‖ bodyCrc), big-endian fields."""
    return zlib.crc32(_CHAIN.pack(prev_chain, index, term, body_crc))


def encode_body(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def decode_body(b: bytes) -> Any:
    return msgpack.unpackb(b, raw=False, strict_map_key=False)


class InconsistentState(Exception):
    """An entry does not fit where it was asked to go, or stored bytes fail their checks."""


class StateFileError(Exception):
    """A small state file (term.json, checkpoint.json) exists but cannot be read."""


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    magic: int
    pos: int
    size: int
    body_crc: int
    chain_crc: int
    body: bytes

    def to_wire(self) -> dict:
        return {
            "index": self.index,
            "term": self.term,
            "magic": self.magic,
            "pos": self.pos,
            "size": self.size,
            "bodyCrc": self.body_crc,
            "chainCrc": self.chain_crc,
            "body": self.body,
        }

    @classmethod
    def from_wire(cls, d: Any) -> Entry:
        """Build from a peer's map; raises ValueError naming the bad field."""
        try:
            e = cls(
                d["index"],
                d["term"],
                d["magic"],
                d["pos"],
                d["size"],
                d["bodyCrc"],
                d["chainCrc"],
                d["body"],
            )
        except (KeyError, TypeError, IndexError):
            e = None
        if (
            e is None
            or type(e.index) is not int
            or type(e.term) is not int
            or type(e.magic) is not int
            or type(e.pos) is not int
            or type(e.size) is not int
            or type(e.body_crc) is not int
            or type(e.chain_crc) is not int
            or type(e.body) is not bytes
        ):
            cls._explain(d)
        return e  # type: ignore[return-value]

    @staticmethod
    def _explain(d: Any) -> None:
        if not isinstance(d, dict):
            raise ValueError(f"entry must be a map, got {type(d).__name__}")
        for k in ("index", "term", "magic", "pos", "size", "bodyCrc", "chainCrc"):
            v = d.get(k)
            if type(v) is not int:
                raise ValueError(f"entry field {k!r} must be an int, got {v!r}")
        raise ValueError(f"entry field 'body' must be bin, got {type(d.get('body')).__name__}")

    def same_as(self, other: Entry) -> bool:
        """The spec's equality: magic, size, index, term, pos, bodyCrc and body bytes."""
        return (
            self.index == other.index
            and self.term == other.term
            and self.magic == other.magic
            and self.pos == other.pos
            and self.size == other.size
            and self.body_crc == other.body_crc
            and self.body == other.body
        )


def _header(e: Entry) -> bytes:
    return _HEADER.pack(
        e.magic, e.size, e.index, e.term, e.pos, 0, e.chain_crc, e.body_crc, len(e.body)
    )


def last_index_within(positions: Sequence[int], data_length: int, offset: int) -> int:
    """The last entry index whose bytes all lie below ``offset`` (-1 if none).

    A replica that reports a byte offset (mode ``ha``) has every entry that ends at or
    below it; an entry cut by the offset is not there yet. ``positions`` are the
    ascending entry start offsets; the last entry ends at ``data_length``.
    """
    n = len(positions)
    if n == 0 or offset <= 0:
        return -1
    if offset >= data_length:
        return n - 1
    k = bisect.bisect_right(positions, offset)  # entries starting at or below offset
    return k - 2


def parse_entries(
    buf: bytes | bytearray, start_index: int, *, max_size: int | None = None
) -> tuple[list[Entry], int]:
    """Complete entries at the head of raw ``data.log`` bytes; returns them and the bytes used.

    A byte stream (mode ``ha``) may split an entry anywhere, so an incomplete tail is
    left for the caller to extend. Only the header's own sizes are checked here (a
    bad one can never complete, so it is an error at once, as is one above
    ``max_size``); :meth:`LogStore.append_follower` validates the rest.
    """
    out: list[Entry] = []
    off = 0
    index = start_index
    while len(buf) - off >= HEADER_SIZE:
        magic, size, eindex, term, pos, _ch, ccrc, bcrc, bsize = _HEADER.unpack_from(buf, off)
        if size != HEADER_SIZE + bsize or bsize < 0 or (max_size is not None and size > max_size):
            raise InconsistentState(f"bad entry header at index {index} (size {size})")
        if len(buf) - off < size:
            break
        body = bytes(buf[off + HEADER_SIZE : off + size])
        out.append(Entry(eindex, term, magic, pos, size, bcrc, ccrc, body))
        off += size
        index += 1
    return out, off


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dir(path: Path, *, fsync: bool) -> bool:
    """``mkdir -p`` whose new entries survive a power cut; True if ``path`` was created.

    Each directory created is made durable in its parent (fsync of the parent), so
    files fsynced inside it later are reachable after a crash.
    """
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    path.mkdir(parents=True, exist_ok=True)
    if fsync:
        for d in reversed(missing):
            _fsync_dir(d.parent)
    return bool(missing)


class LogStore:
    """Append-only entry log with recovery, truncation and group-commit flushes.

    ``verify_crc`` False (seeded bug ``skip-crc``) and ``trust_torn_tail`` True
    (seeded bug ``trust-torn-tail``) weaken recovery; only a disk fault (a flipped
    bit, a torn write) can tell them from the correct store.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        fsync: bool = True,
        verify_crc: bool = True,
        trust_torn_tail: bool = False,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._fsync = fsync
        self._verify = verify_crc
        self._trust_tail = trust_torn_tail
        new_dir = _make_dir(self.data_dir, fsync=fsync)
        self._lock = threading.RLock()
        self._data_path = self.data_dir / "data.log"
        self._index_path = self.data_dir / "index.idx"
        created = new_dir or not self._data_path.exists() or not self._index_path.exists()
        self._dfd = os.open(self._data_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._ifd = os.open(self._index_path, os.O_RDWR | os.O_CREAT, 0o644)
        if created and fsync:
            # fdatasync of a file does not make its directory entry durable: without
            # this, a power cut right after the first acks may leave no data.log at all.
            # The parent too: whoever made the data directory (the node, an installer's
            # mkdir -p) may not have synced its entry.
            _fsync_dir(self.data_dir)
            _fsync_dir(self.data_dir.parent)
        self._closed = False
        # Per-index metadata for the whole log (there is no compaction).
        self._pos = array("q")
        self._term = array("q")
        self._size = array("i")
        self._last_chain = 0
        self._dfile = 0  # bytes of data.log handed to the OS
        self._dbuf = bytearray()  # bytes after _dfile not yet written
        self._ifile = 0
        self._ibuf = bytearray()
        self._cache: dict[int, Entry] = {}
        self._cache_lo = 0  # no cached key is below this
        self._cache_bytes = 0
        self._gen = 0  # bumped by truncate: an in-flight flush must not claim its end
        self._durable = -1
        try:
            self._recover()
        except BaseException:
            os.close(self._dfd)
            os.close(self._ifd)
            raise

    # ---------------------------------------------------------------- recovery

    def _recover(self) -> None:
        """Spec §3 recovery: keep the longest valid prefix, then make the index agree.

        A record that runs past the end of ``data.log`` (a torn write) or fails a CRC
        (a torn or flipped one) ends the valid prefix, and the file is cut there.
        Seeded bug ``skip-crc`` skips both CRC checks (DLedger's scan); seeded bug
        ``trust-torn-tail`` keeps such a record when it is the file's last: it pads
        the body with zeros to the size its header claims and re-stamps its CRCs.
        """
        size = os.fstat(self._dfd).st_size
        off = 0
        prev_chain = 0
        prev_term = -1
        index = 0
        pos, term, sz = self._pos, self._term, self._size
        magics = bytearray()
        hdr = _HEADER
        buf = b""
        buf_off = 0  # file offset of buf[0]
        ok = True
        while ok and off < size:
            rel = off - buf_off
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(self._dfd, max(_SCAN_CHUNK, HEADER_SIZE), off)
                buf_off, rel = off, 0
                if len(buf) < HEADER_SIZE:
                    break
            magic, esize, eindex, eterm, epos, _ch, ccrc, bcrc, bsize = hdr.unpack_from(buf, rel)
            if (
                magic not in _MAGICS
                or bsize < 0
                or esize != HEADER_SIZE + bsize
                or epos != off
                or eindex != index
                or eterm < prev_term
            ):
                break
            torn = off + esize > size
            if torn and not self._trust_tail:
                break
            if rel + esize > len(buf):
                buf = os.pread(self._dfd, max(_SCAN_CHUNK, esize), off)
                buf_off, rel = off, 0
                if len(buf) < esize and not torn:
                    break
            body = buf[rel + HEADER_SIZE : rel + esize]
            bad = self._verify and (
                zlib.crc32(body) != bcrc or chain_crc(prev_chain, eindex, eterm, bcrc) != ccrc
            )
            if torn or bad:
                if not (self._trust_tail and off + esize >= size):
                    break
                # seeded bug trust-torn-tail: the last record is kept, made to look whole
                body = bytes(body).ljust(bsize, b"\0")
                bcrc = zlib.crc32(body)
                ccrc = chain_crc(prev_chain, eindex, eterm, bcrc)
                fixed = Entry(eindex, eterm, magic, off, esize, bcrc, ccrc, body)
                _pwrite_all(self._dfd, _header(fixed) + body, off)
                size = max(size, off + esize)
            pos.append(off)
            magics.append(magic)
            term.append(eterm)
            sz.append(esize)
            prev_chain, prev_term = ccrc, eterm
            index += 1
            off += esize
        self._last_chain = prev_chain
        if off != size:
            os.ftruncate(self._dfd, off)
            if self._fsync:
                os.fsync(self._dfd)
        self._dfile = off
        self._rebuild_index_if_needed(magics)
        self._durable = len(pos) - 1

    def _rebuild_index_if_needed(self, magics: bytearray) -> None:
        n = len(self._pos)
        want = bytearray(n * INDEX_RECORD)
        pack_into, pos, size, term = _INDEX.pack_into, self._pos, self._size, self._term
        for i in range(n):
            pack_into(want, i * INDEX_RECORD, magics[i], pos[i], size[i], i, term[i])
        have_size = os.fstat(self._ifd).st_size
        have = os.pread(self._ifd, len(want), 0) if want else b""
        if have != want:
            os.pwrite(self._ifd, want, 0)
        if have_size != len(want) or have != want:
            os.ftruncate(self._ifd, len(want))
            if self._fsync:
                os.fsync(self._ifd)
        self._ifile = len(want)

    # ---------------------------------------------------------------- properties

    @property
    def begin_index(self) -> int:
        return 0 if self._pos else -1

    @property
    def end_index(self) -> int:
        return len(self._pos) - 1

    @property
    def end_term(self) -> int:
        return self._term[-1] if self._term else -1

    @property
    def data_length(self) -> int:
        with self._lock:  # a flush thread moves bytes from the buffer to the file
            return self._dfile + len(self._dbuf)

    @property
    def durable_end(self) -> int:
        return self._durable

    @property
    def last_chain_crc(self) -> int:
        return self._last_chain

    # ---------------------------------------------------------------- appends

    def append_leader(self, term: int, body: bytes, magic: int = MAGIC_NORMAL) -> Entry:
        """Stamp and write a new entry at the end; durable only after :meth:`flush`."""
        with self._lock:
            index = len(self._pos)
            if self._term and term < self._term[-1]:
                raise InconsistentState(
                    f"append at index {index}: term {term} below the last entry's {self._term[-1]}"
                )
            pos = self._dfile + len(self._dbuf)
            bcrc = zlib.crc32(body)
            ccrc = zlib.crc32(_CHAIN.pack(self._last_chain, index, term, bcrc))
            size = HEADER_SIZE + len(body)
            e = Entry(index, term, magic, pos, size, bcrc, ccrc, body)
            self._write(e)
            return e

    def append_follower(self, entry: Entry) -> None:
        """Append a leader's entry; it must land exactly at our end with a valid chain."""
        with self._lock:
            end = len(self._pos) - 1
            length = self._dfile + len(self._dbuf)
            self._check_fits(entry, end + 1, length, self._last_chain)
            self._write(entry)

    def _check_fits(self, e: Entry, index: int, pos: int, prev_chain: int) -> None:
        if e.index != index:
            raise InconsistentState(
                f"entry index {e.index} does not follow the local end {index - 1}"
            )
        if e.pos != pos:
            raise InconsistentState(f"entry {e.index} has pos {e.pos}, local data length is {pos}")
        if e.magic not in _MAGICS:
            raise InconsistentState(f"entry {e.index} has unknown magic {e.magic}")
        if e.size != HEADER_SIZE + len(e.body):
            raise InconsistentState(f"entry {e.index} size {e.size} != 48 + {len(e.body)}")
        if zlib.crc32(e.body) != e.body_crc:
            raise InconsistentState(f"entry {e.index} body fails its bodyCrc")
        if index > 0 and e.term < self._term[index - 1]:
            raise InconsistentState(
                f"entry {e.index} term {e.term} below the previous entry's {self._term[index - 1]}"
            )
        if chain_crc(prev_chain, e.index, e.term, e.body_crc) != e.chain_crc:
            raise InconsistentState(f"entry {e.index} chainCrc does not extend the local chain")

    def _write(self, e: Entry) -> None:
        # Caller holds the lock and has validated e against the current end.
        self._dbuf += _header(e)
        self._dbuf += e.body
        self._ibuf += _INDEX.pack(e.magic, e.pos, e.size, e.index, e.term)
        self._pos.append(e.pos)
        self._term.append(e.term)
        self._size.append(e.size)
        self._last_chain = e.chain_crc
        cache = self._cache
        cache[e.index] = e
        self._cache_bytes += e.size
        while len(cache) > _CACHE_ENTRIES or self._cache_bytes > _CACHE_BYTES:
            old = cache.pop(self._cache_lo, None)
            self._cache_lo += 1
            if old is not None:
                self._cache_bytes -= old.size
        if len(self._dbuf) >= _SPILL:
            # Early hand-off only: the entry is in the log whatever the disk says, so a
            # failed write must not fail the append (a leader answered UNSUPPORTED, a
            # definite failure, for an entry that went on to commit). The bytes stay
            # buffered; flush() writes them again and is the one to report the failure.
            with contextlib.suppress(OSError):
                self._spill()

    def hand_to_os(self) -> None:
        """Hand every buffered byte to the OS now, without fsync: a killed process then
        loses nothing (a power cut still may). Mode ha's commitlog behaves so, as
        RocketMQ's memory-mapped one does."""
        with self._lock:
            self._spill()

    def _spill(self) -> None:
        """Hand buffered bytes to the OS (no fsync). Caller holds the lock."""
        if self._dbuf:
            _pwrite_all(self._dfd, self._dbuf, self._dfile)
            self._dfile += len(self._dbuf)
            self._dbuf = bytearray()
        if self._ibuf:
            _pwrite_all(self._ifd, self._ibuf, self._ifile)
            self._ifile += len(self._ibuf)
            self._ibuf = bytearray()

    # ---------------------------------------------------------------- reads

    def read_data(self, pos: int, n: int) -> bytes:
        """Up to ``n`` raw ``data.log`` bytes from ``pos``, the unflushed tail included.

        Mode ``ha`` streams the file itself to its slaves (RocketMQ pushes page cache,
        not fsynced data), so the buffered bytes count.
        """
        with self._lock:
            n = min(n, self._dfile + len(self._dbuf) - pos)
            if n <= 0 or pos < 0:
                return b""
            return self._read(pos, n)

    def end_offset(self, index: int) -> int:
        """The byte offset just past entry ``index`` (0 for -1): what a replica holding
        entries ..index reports in mode ``ha``."""
        with self._lock:
            if index < 0:
                return 0
            return self._pos[index] + self._size[index]

    def index_within(self, offset: int) -> int:
        """The last entry wholly below byte ``offset`` (see :func:`last_index_within`)."""
        with self._lock:
            return last_index_within(self._pos, self._dfile + len(self._dbuf), offset)

    def _read(self, pos: int, n: int) -> bytes:
        # Caller holds the lock: bytes may sit partly on disk, partly in the buffer.
        if pos >= self._dfile:
            rel = pos - self._dfile
            return bytes(self._dbuf[rel : rel + n])
        if pos + n <= self._dfile:
            return os.pread(self._dfd, n, pos)
        head = os.pread(self._dfd, self._dfile - pos, pos)
        return head + bytes(self._dbuf[: n - len(head)])

    def _parse(self, index: int, raw: bytes, rel: int) -> Entry:
        pos, size, term = self._pos[index], self._size[index], self._term[index]
        if len(raw) < rel + size:
            raise InconsistentState(f"entry {index}: data.log is short at pos {pos}")
        magic, esize, eindex, eterm, epos, _ch, ccrc, bcrc, bsize = _HEADER.unpack_from(raw, rel)
        if epos != pos or eindex != index or esize != size or eterm != term:
            raise InconsistentState(
                f"entry {index}: header at pos {pos} says index {eindex} pos {epos} "
                f"size {esize} term {eterm}"
            )
        body = bytes(raw[rel + HEADER_SIZE : rel + esize])
        if self._verify and zlib.crc32(body) != bcrc:  # seeded bug skip-crc: not checked
            raise InconsistentState(f"entry {index}: body at pos {pos} fails its bodyCrc")
        return Entry(eindex, eterm, magic, epos, esize, bcrc, ccrc, body)

    def get(self, index: int) -> Entry:
        with self._lock:
            if not 0 <= index < len(self._pos):
                raise IndexError(f"index {index} outside [{self.begin_index}, {self.end_index}]")
            e = self._cache.get(index)
            if e is not None:
                return e
            raw = self._read(self._pos[index], self._size[index])
            return self._parse(index, raw, 0)

    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries lo..hi inclusive, clamped to the log; one read for the uncached part."""
        with self._lock:
            lo = max(lo, 0)
            hi = min(hi, len(self._pos) - 1)
            if lo > hi:
                return []
            cache = self._cache
            out: list[Entry] = []
            i = lo
            while i <= hi:
                e = cache.get(i)
                if e is not None:
                    out.append(e)
                    i += 1
                    continue
                j = i
                while j < hi and (j + 1) not in cache:
                    j += 1
                start = self._pos[i]
                raw = self._read(start, self._pos[j] + self._size[j] - start)
                for k in range(i, j + 1):
                    out.append(self._parse(k, raw, self._pos[k] - start))
                i = j + 1
            return out

    def term_at(self, index: int) -> int:
        if 0 <= index < len(self._term):
            return self._term[index]
        return -1

    # ---------------------------------------------------------------- truncate

    def truncate(self, entry: Entry) -> bool:
        """Make ``entry`` the last entry (spec §3 Truncate). True if anything was removed or replaced."""
        with self._lock:
            e = entry
            end = len(self._pos) - 1
            if e.index < 0 or e.index > end + 1:
                raise InconsistentState(f"truncate at {e.index}: local end is {end}")
            if e.index <= end and self.get(e.index).same_as(e):
                removed = end > e.index
                self._cut(e.index + 1)
            else:
                prev_chain = self._chain_before(e.index)
                want_pos = self._pos[e.index] if e.index <= end else self.data_length
                self._check_fits(e, e.index, want_pos, prev_chain)
                removed = e.index <= end
                self._cut(e.index)
                self._last_chain = prev_chain
                self._write(e)
            self._gen += 1
            self._spill()
            if self._fsync:
                os.fsync(self._dfd)
                os.fsync(self._ifd)
            self._durable = len(self._pos) - 1
            return removed

    def _chain_before(self, index: int) -> int:
        if index == 0:
            return 0
        if index - 1 == len(self._pos) - 1:
            return self._last_chain
        return self.get(index - 1).chain_crc

    def _cut(self, new_len: int) -> None:
        """Drop entries >= new_len from memory, buffers and files. Caller holds the lock."""
        if new_len >= len(self._pos):
            return
        last_chain = self._chain_before(new_len)
        data_off = self._pos[new_len]
        self._spill()
        os.ftruncate(self._dfd, data_off)
        os.ftruncate(self._ifd, new_len * INDEX_RECORD)
        self._dfile = data_off
        self._ifile = new_len * INDEX_RECORD
        del self._pos[new_len:]
        del self._term[new_len:]
        del self._size[new_len:]
        for k in [k for k in self._cache if k >= new_len]:
            self._cache_bytes -= self._cache.pop(k).size
        self._cache_lo = min(self._cache_lo, new_len)
        self._last_chain = last_chain
        self._durable = min(self._durable, new_len - 1)

    # ---------------------------------------------------------------- flush

    def flush(self) -> int:
        """Make everything appended so far durable; returns the new durable end.

        Safe on a worker thread: appends made during the fsync are not claimed.
        """
        with self._lock:
            if self._closed:
                return self._durable
            end = len(self._pos) - 1
            gen = self._gen
            self._spill()
            dfd = self._dfd
        if self._fsync:
            # Only the data file is synced on the hot path: index.idx is derived from
            # data.log and recovery rewrites any record that disagrees with it, so one
            # sync per group commit (not two) is all durability needs.
            try:
                os.fdatasync(dfd)
            except OSError:
                if self._closed:  # closed under us: nothing more can become durable
                    return self._durable
                raise
        with self._lock:
            if gen == self._gen and end > self._durable:
                self._durable = end
            return self._durable

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self._spill()
                if self._fsync:
                    os.fsync(self._dfd)
                    os.fsync(self._ifd)
            finally:
                self._closed = True
                os.close(self._dfd)
                os.close(self._ifd)

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pwrite_all(fd: int, data: bytes | bytearray, offset: int) -> None:
    """Write all of ``data`` at ``offset``.

    Every view of ``data`` is released before this returns, an error included: a view
    left in a failed write's traceback keeps the bytearray exported, and until the
    garbage collector freed it every append to the buffer raised ``BufferError``.
    """
    with memoryview(data) as whole:
        done = 0
        while done < len(whole):
            with whole[done:] as rest:
                done += os.pwrite(fd, rest, offset + done)


# -------------------------------------------------------------------- small state files


def _atomic_write_json(path: Path, obj: dict, *, fsync: bool = True) -> None:
    """Temp file, fsync, rename, fsync the directory: a crash leaves the old or the new file.

    ``fsync`` False (seeded bug ``skip-fsync``) keeps the write and the rename, so a
    killed process loses nothing, but a power cut may leave the old file, none, or
    an empty one.
    """
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(obj).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _pwrite_all(fd, data, 0)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(path.parent)


def _read_json(path: Path) -> dict | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise StateFileError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(obj, dict):
        raise StateFileError(f"{path}: expected a JSON object")
    return obj


UNKNOWN_VOTE = "?"
"""votedFor after a repaired term file: a vote may have been cast in this term, for
whom is unknown. It is no peer's id, so every vote request of the term, the node's
own included, is refused as ``REJECT_ALREADY_VOTED``."""


def reconcile_term(term: int, voted_for: str | None, log_end_term: int) -> tuple[int, str | None]:
    """The term state to run with, given ``term.json`` and the log's last term.

    A node persists a term (R1) before it takes or makes an entry of that term, so a
    ``term.json`` below the log's last term was rolled back (restored from an old
    copy, or lost with its directory entry). The vote it held is gone: the safe
    state is the log's term with a vote already cast (:data:`UNKNOWN_VOTE`), or the
    node may vote twice in that term. A rollback to a term at or above the log's
    cannot be seen from here and is taken as it is.
    """
    if term < log_end_term:
        return log_end_term, UNKNOWN_VOTE
    return term, voted_for


class TermStore:
    """``term.json``: currentTerm and votedFor, replaced atomically (R1)."""

    def __init__(self, data_dir: Path, *, fsync: bool = True) -> None:
        self.path = Path(data_dir) / "term.json"
        self.fsync = fsync
        _make_dir(self.path.parent, fsync=fsync)

    def load(self) -> tuple[int, str | None]:
        obj = _read_json(self.path)
        if obj is None:
            return 0, None
        term, voted = obj.get("term"), obj.get("votedFor")
        if type(term) is not int or not (voted is None or isinstance(voted, str)):
            raise StateFileError(f"{self.path}: field 'term' or 'votedFor' has the wrong type")
        return term, voted

    def save(self, term: int, voted_for: str | None) -> None:
        _atomic_write_json(self.path, {"term": term, "votedFor": voted_for}, fsync=self.fsync)


class Checkpoint:
    """``checkpoint.json``: the last committed index written (R3)."""

    def __init__(self, data_dir: Path, *, fsync: bool = True) -> None:
        self.path = Path(data_dir) / "checkpoint.json"
        self.fsync = fsync
        _make_dir(self.path.parent, fsync=fsync)

    def load(self) -> int:
        obj = _read_json(self.path)
        if obj is None:
            return -1
        c = obj.get("committedIndex")
        if type(c) is not int:
            raise StateFileError(f"{self.path}: field 'committedIndex' must be an int")
        return c

    def save(self, committed: int) -> None:
        _atomic_write_json(self.path, {"committedIndex": committed}, fsync=self.fsync)
