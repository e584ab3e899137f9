"""The live history format: JSON lines, appended and flushed as the test runs.

A killed harness leaves a checkable prefix; a torn last line is dropped on read
(docs/architecture.md §3). :class:`HistoryWriter` is the only writer a run uses.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time as _time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from harness.core.errors import HistoryError
from harness.core.op import Op
from harness.core.record import parse_op

try:
    import orjson as _orjson
except ImportError:  # the standard parser alone: slower, the same values and errors
    _orjson = None  # type: ignore[assignment]

__all__ = [
    "HistoryWriter",
    "HistoryStoreError",
    "iter_jsonl",
    "read_jsonl",
    "write_jsonl",
    "json_records",
    "json_line",
    "line_spans",
]

log = logging.getLogger(__name__)


_STD_ENCODE = json.JSONEncoder(separators=(",", ":"), default=str).encode


def _line_std(obj: Any) -> bytes:
    return (_STD_ENCODE(obj) + "\n").encode()


if _orjson is not None:
    _ORJSON_OPTS = _orjson.OPT_APPEND_NEWLINE | _orjson.OPT_NON_STR_KEYS

    def _line(obj: Any) -> bytes:
        """One history line: orjson (several times faster: the writer's hot path), the
        standard encoder for what orjson refuses (integers beyond 64 bits, say)."""
        try:
            return _orjson.dumps(obj, default=str, option=_ORJSON_OPTS)
        except TypeError:
            return _line_std(obj)

else:
    _line = _line_std


class HistoryStoreError(HistoryError):
    """The history could not be written (its file system is full or read-only, say).

    One line naming the file and the system's reason; the records before it are intact
    (at most a torn last line, which every reader drops). The run that meets it ends
    ``unknown``: nothing after that moment was recorded.
    """


class HistoryWriter:
    """Appends ops to ``history.jsonl`` as they happen.

    Thread-safe: clients and the nemesis run in threads and share one writer.
    It assigns ``index`` (and ``time``, from a monotonic clock started with the
    writer, unless the op carries one) and writes every line with a ``write(2)`` of
    its own (no buffer in this process) before ``append`` returns, so a crash of the
    harness loses at most the lines being written, never one an ``append`` returned.
    Reopening an existing file continues its numbering: nothing already recorded is
    overwritten.

    Stamping and writing hold two different locks (a group commit). ``_seq`` guards
    only the index, the time stamp and the queue of lines, and nothing done under it
    gives up the GIL; ``_io`` is held by the one thread that writes every queued line,
    in index order, with one ``write(2)``, while the others wait for their line to be
    in the file. With one lock over both, the holder gave up the GIL inside ``write``
    and then had to win it back while every other worker queued behind the lock, and
    CPython's locks are not fair: a worker could wait there for hundreds of ms while
    the others wrote tens of thousands of lines, stamped that late (the issue's p99
    of 1.4 ms, maxima of 0.2-1.2 s; ``splitbrain bench harness``). Times stay in index
    order, since both are taken together under ``_seq``.

    A write the file system refuses (full, read-only, an I/O error) is a
    :class:`HistoryStoreError`: what landed of those lines is cut off again when the
    file system lets us (else it stays as the torn last line readers drop), the writer
    keeps the error as :attr:`failure`, every append whose line had not reached the
    file raises it, and so does every later one, at once. ``close`` never raises for it.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync_every: int = 0, start_ns: int | None = None
    ) -> None:
        self.path = Path(path)
        self._seq = threading.Lock()
        self._io = threading.Lock()
        self._start = _time.monotonic_ns() if start_ns is None else start_ns
        self.origin_wall_ns = _time.time_ns() - (_time.monotonic_ns() - self._start)
        """The wall clock's reading when the history's clock read 0, taken once, now: op
        times never read the wall clock, so a step of it mid-run (an NTP step on the
        harness host) moves neither them nor this; a later ``time_ns() - now()`` would
        carry the step (node log stamps are placed on the history's clock with it)."""
        self._fsync_every = fsync_every
        self._next = 0
        self.failure: HistoryStoreError | None = None
        """Why the history stopped being written, if it did."""
        if self.path.exists() and self.path.stat().st_size:
            self._next = sum(1 for _ in iter_jsonl(self.path))
            _drop_torn_tail(self.path)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._end = os.fstat(self._fd).st_size
        self._queue: list[bytes] = []
        """Lines stamped but not yet written, in index order, from index ``_written``."""
        self._written = self._next
        """Lines in the file: every index below this one."""
        self._closed = False

    def now(self) -> int:
        """Nanoseconds since the test started, on the harness's monotonic clock."""
        return _time.monotonic_ns() - self._start

    def append(self, op: Op) -> Op:
        """Record ``op`` as the next line; returns it with its ``index`` and ``time``.

        Every worker of a run passes through ``_seq``, so the time under it is the
        recorder's pace and the stamping delay of whoever waits: the fields are encoded
        before it (an op that cannot be encoded raises here, using no index), and only
        the index and time are spliced in under it. The line is in the file (a
        ``write(2)``, this thread's or another's) before this returns, as before.
        """
        rest = _line(
            {
                "type": op.type,
                "process": op.process,
                "f": op.f,
                "key": op.key,
                "value": op.value,
                "node": op.node,
                "error": op.error,
            }
        )
        with self._seq:
            if self._closed:
                raise self.failure or HistoryError("history writer is closed", path=self.path)
            index = self._next
            t = op.time or _time.monotonic_ns() - self._start
            self._queue.append(b'{"index":%d,"time":%d,' % (index, t) + rest[1:])
            self._next = index + 1
        if self._written <= index:
            with self._io:
                if self._written <= index:
                    self._write_queued()
            if self._written <= index:  # its line was in a write the file system refused
                raise self.failure or HistoryError("history writer is closed", path=self.path)
        return Op(op.type, op.process, op.f, op.value, op.key, t, index, op.node, op.error)

    def _write_queued(self) -> None:
        """Write every queued line with one ``write(2)`` (the caller holds ``_io``)."""
        with self._seq:
            lines, self._queue = self._queue, []
        if not lines or self._fd is None:
            return
        first = self._written
        data = lines[0] if len(lines) == 1 else b"".join(lines)
        try:
            n = os.write(self._fd, data)
            while n < len(data):  # a short write: the rest, or the error that stopped it
                n += os.write(self._fd, data[n:])
        except OSError as e:
            self._fail(e, first)
        self._end += len(data)
        self._written = first + len(lines)
        fe = self._fsync_every
        if fe and first // fe != self._written // fe:
            try:
                os.fsync(self._fd)
            except OSError as e:
                self._fail(e, self._written, written=True)

    def _fail(self, e: OSError, intact: int, *, written: bool = False) -> None:
        """Stop writing for good; cut partial lines if the file system lets us; raise.

        ``intact``: the lines in the file before the write that failed (all of them, with
        ``written``, when the write went through but the fsync after it did not)."""
        fd, self._fd = self._fd, None
        with self._seq:
            self._closed = True
            self._queue = []
        if fd is not None:
            if not written:
                with contextlib.suppress(OSError):
                    os.ftruncate(
                        fd, self._end
                    )  # what landed of these lines (often allowed on a full disk)
            with contextlib.suppress(OSError):
                os.close(fd)
        why = e.strerror or str(e) or type(e).__name__
        self.failure = HistoryStoreError(
            f"cannot write the history ({why}); its first {intact} records are intact",
            path=self.path,
        )
        log.error("%s", self.failure)
        raise self.failure from None

    def __len__(self) -> int:
        return self._next

    def close(self) -> None:
        """Write what is queued, fsync and close; never raises for the store."""
        with self._io:
            with self._seq:
                self._closed = True
            if self._fd is not None:
                with contextlib.suppress(HistoryStoreError):
                    self._write_queued()
            fd, self._fd = self._fd, None
            if fd is None:
                return
            try:
                os.fsync(fd)
            except OSError as e:
                if self.failure is None:
                    why = e.strerror or str(e)
                    self.failure = HistoryStoreError(
                        f"cannot write the history ({why}) when closing it", path=self.path
                    )
                    log.error("%s", self.failure)
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line without newline so that appends start on a clean line."""
    with open(path, "rb+") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        data_end = size
        chunk = 4096
        pos = size
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            fh.seek(pos)
            buf = fh.read(step)
            nl = buf.rfind(b"\n")
            if nl >= 0:
                data_end = pos + nl + 1
                break
        else:
            data_end = 0
        log.warning("%s: dropping a torn last line (%d bytes)", path, size - data_end)
        fh.truncate(data_end)


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Op]:
    """Yield ops from a JSONL history.

    A last line that does not parse and has no newline is a torn write from a
    killed harness: it is skipped with a warning. Any other bad line is an error
    naming the file, line and field.
    """
    path = Path(path)
    for lineno, obj in json_records(path):
        yield parse_op(obj, path=path, line=lineno)


def json_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Each decoded line of a JSONL file with its line number; the torn-tail rule applied."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the with below; open errors caught here
    except OSError as e:
        raise HistoryError(f"cannot read: {e.strerror or e}", path=path) from None
    with fh:
        lineno = 0
        for raw in fh:
            lineno += 1
            if not raw.strip():
                continue
            try:
                obj = json_line(raw)
            except ValueError as e:
                if not raw.endswith(b"\n") and not fh.read(1):
                    log.warning("%s:%d: skipping a torn last line", path, lineno)
                    return
                raise HistoryError(str(e), path=path, line=lineno) from None
            yield lineno, obj


_ENTRIES_AT = b'"entries":[['
_ENTRIES_KEY = b'"entries":'


def json_records_entries_apart(
    path: Path,
    parse: Callable[[list[bytes]], list[Any]],
    *,
    batch_bytes: int = 8 << 20,
    span: tuple[int, int] | None = None,
) -> Iterator[tuple[int, Any]]:
    """:func:`json_records`, except that a log read's ``value.entries`` may come back as
    whatever ``parse`` made of its raw JSON text instead of a list of lists.

    The entries of final reads are a large share of a history's bytes (a thousand per
    read), and decoding them into Python lists, only to turn each term and payload back
    into JSON text for the columns, cost about a sixth of reading a JSONL history into
    columns (the issue's 377 MB history: 25.7 s of CPU before, 21.5 s after). So each batch of
    lines has its entries arrays cut out (``"entries":[[`` up to the first ``]]``) and
    handed to ``parse`` together, which returns one object per text, or None for a text
    it does not vouch for (it must refuse any text that is not exactly one JSON array of
    arrays without a ``]`` inside its strings, so the cut is the whole array); the rest
    of the line is decoded with ``[]`` in its place. Any line where this could differ
    from decoding it whole (an escape anywhere, ``"entries":`` twice, the cut not being
    ``value.entries``) is decoded whole, so values, errors and the torn-tail rule are
    exactly :func:`json_records`'s.

    ``span`` (start, stop) limits the reading to those bytes, both at line starts (see
    :func:`line_spans`; a stop of -1 reads to the end); line numbers stay the file's, so
    that a part read apart names the same line in an error as the whole file read at once.
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the with below; open errors caught here
    except OSError as e:
        raise HistoryError(f"cannot read: {e.strerror or e}", path=path) from None
    with fh:
        start, stop = span if span is not None else (0, -1)
        lineno = _newlines_before(fh, start)
        while True:
            lines = fh.readlines(batch_bytes) if stop < 0 else _lines_before(fh, stop, batch_bytes)
            if not lines:
                return
            cuts: dict[int, tuple[int, int]] = {}
            for k, raw in enumerate(lines):
                a = raw.find(_ENTRIES_AT)
                if a >= 0 and b"\\" not in raw and raw.count(_ENTRIES_KEY) == 1:
                    b = raw.find(b"]]", a)
                    if b > 0:
                        cuts[k] = (a + 10, b + 2)
            made = parse([lines[k][a:b] for k, (a, b) in cuts.items()]) if cuts else []
            lifted = {k: m for k, m in zip(cuts, made, strict=True) if m is not None}
            last = len(lines) - 1
            for k, raw in enumerate(lines):
                lineno += 1
                obj: Any = None
                got = lifted.get(k)
                if got is not None:
                    a, b = cuts[k]
                    try:
                        short = json_line(raw[:a] + b"[]" + raw[b:])
                    except ValueError:
                        short = None
                    if short.__class__ is dict:
                        v = short.get("value")
                        if v.__class__ is dict and v.get("entries") == []:
                            v["entries"] = got
                            obj = short
                if obj is None:
                    if not raw.strip():
                        continue
                    try:
                        obj = json_line(raw)
                    except ValueError as e:
                        if k == last and not raw.endswith(b"\n") and not fh.read(1):
                            log.warning("%s:%d: skipping a torn last line", path, lineno)
                            return
                        raise HistoryError(str(e), path=path, line=lineno) from None
                yield lineno, obj


def _newlines_before(fh: IO[bytes], offset: int) -> int:
    """Lines before byte ``offset`` (a line start), leaving ``fh`` at ``offset``."""
    fh.seek(0)
    n, left = 0, offset
    while left > 0:
        chunk = fh.read(min(left, 16 << 20))
        if not chunk:
            break
        n += chunk.count(b"\n")
        left -= len(chunk)
    fh.seek(offset)
    return n


def _lines_before(fh: IO[bytes], stop: int, batch_bytes: int) -> list[bytes]:
    """``fh.readlines(batch_bytes)``, without reading past ``stop`` (a line start).

    ``readlines`` stops only once its lines *exceed* its hint, so the hint is one short."""
    left = stop - fh.tell()
    if left <= 1:
        return [fh.readline()] if left == 1 else []
    return fh.readlines(min(batch_bytes, left - 1))


def line_spans(path: Path, parts: int) -> list[tuple[int, int]]:
    """``path`` cut into at most ``parts`` byte spans of about equal size, each starting at
    a line start and ending where the next starts, so that the spans can be read apart."""
    size = path.stat().st_size
    cuts = [0]
    with open(path, "rb") as fh:
        for k in range(1, parts):
            fh.seek(max(size * k // parts, cuts[-1]))
            if fh.tell() > 0:
                fh.seek(fh.tell() - 1)
                fh.readline()  # to the start of the next line (stays put at a line start)
            at = fh.tell()
            if cuts[-1] < at < size:
                cuts.append(at)
    cuts.append(size)
    return list(zip(cuts, cuts[1:], strict=False))


_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def json_line(raw: bytes) -> Any:
    """Decode one JSONL line; every failure is a ValueError with a one-line reason.

    The bytes are decoded as UTF-8 here rather than by ``json.loads(bytes)``,
    which guesses UTF-16/32 from NUL bytes and raises ``UnicodeDecodeError``
    (no ``.msg``). Deep nesting raises ``RecursionError`` and an over-long
    integer a plain ``ValueError``: both become the same one-line reason.
    """
    if _orjson is not None and _LONG_DIGITS.search(raw) is None:
        # orjson is four times faster and agrees with json on everything it accepts, but
        # for integers beyond int64, which it turns into floats: a line with 19 digits in
        # a row goes to json. Anything orjson refuses (NaN, 1e400, lone surrogates, bad
        # UTF-8 or JSON) goes to json too, which accepts it or words the error.
        try:
            return _orjson.loads(raw)
        except _orjson.JSONDecodeError:
            pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise ValueError(f"not valid JSON ({str(e).splitlines()[0][:200]})") from None


def read_jsonl(path: str | os.PathLike[str]) -> list[Op]:
    return list(iter_jsonl(path))


def write_jsonl(ops: Iterable[Op], path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for op in ops:
            fh.write(json.dumps(op.to_dict(), separators=(",", ":"), default=str) + "\n")
