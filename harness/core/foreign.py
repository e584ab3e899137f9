"""Import of foreign histories: Jepsen/Knossos EDN and Porcupine's test logs.

These exist so that the checker can be validated against histories whose
verdicts other tools established (``/work/shared/corpora``), and so users can
check a stored Jepsen run. Import only: splitbrain never writes these formats.

Mapping to :class:`~harness.core.history.Op`: keywords become their names without
the colon (``:invoke`` -> ``"invoke"``), the ``:nemesis`` process becomes
``"nemesis"``, ``index`` is the record's position (a file's own ``:index`` is
ignored, because the checker relies on positions), and a missing ``:time`` is 0.
A ``jepsen.independent`` history, where every client op's value is a tuple
``[k v]`` with a scalar ``k``, is split into ``key=str(k)``, ``value=v``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.core.errors import HistoryError
from harness.core.op import NEMESIS, OP_TYPES, Op

__all__ = ["read_edn", "read_porcupine", "from_edn", "edn_records_to_ops"]


# --------------------------------------------------------------------------- EDN

def from_edn(x: Any) -> Any:
    """An EDN value as plain JSON-like Python: keywords/symbols as names, vectors as lists."""
    import edn_format

    if isinstance(x, (edn_format.Keyword, edn_format.Symbol)):
        return x.name
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, Mapping):
        return {_key_str(from_edn(k)): from_edn(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, edn_format.ImmutableList)):
        return [from_edn(v) for v in x]
    if isinstance(x, (set, frozenset)):
        items = [from_edn(v) for v in x]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(x, edn_format.TaggedElement):
        return from_edn(getattr(x, "value", str(x)))
    return str(x)


def _key_str(k: Any) -> Any:
    return k if isinstance(k, str) else json.dumps(k)


def _map_lines(text: str) -> list[int]:
    """The 1-based line of each top-level operation map, for error messages.

    A small scanner that skips strings and ``;`` comments; maps directly inside
    the outer collection (or at top level, for a bare sequence) are counted.
    """
    lines, depth, line, i, n = [], 0, 1, 0, len(text)
    outer = 0 if text.lstrip().startswith("{") else 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == ";":
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line += 1
                i += 1
        elif c in "[({":
            if c == "{" and depth == outer:
                lines.append(line)
            depth += 1
        elif c in "])}":
            depth -= 1
        i += 1
    return lines


def _is_scalar_key(k: Any) -> bool:
    return isinstance(k, (str, int)) and not isinstance(k, bool)


def _independent(records: list[dict[str, Any]]) -> bool:
    """Whether a history is ``jepsen.independent``: all client values are ``[k v]``.

    Unkeyed cas values ``[a b]`` look the same, so a cas whose ``v`` is not
    itself a pair, or any client value that is not a pair with a scalar first
    element, makes the history unkeyed.
    """
    client = [r for r in records if r.get("process") != NEMESIS]
    if not client:
        return False
    for r in client:
        v = r.get("value")
        if not (isinstance(v, list) and len(v) == 2 and _is_scalar_key(v[0])):
            return False
        if r.get("f") == "cas" and v[1] is not None and not (
                isinstance(v[1], list) and len(v[1]) == 2):
            return False
    return True


def edn_records_to_ops(records: list[Any], *, path: object | None = None,
                       lines: list[int] | None = None) -> list[Op]:
    """Turn converted EDN maps (see :func:`from_edn`) into ops; errors name file and line."""
    recs: list[dict[str, Any]] = []
    for pos, r in enumerate(records):
        line = lines[pos] if lines and pos < len(lines) else None
        if not isinstance(r, dict):
            raise HistoryError(f"record {pos} is not a map", path=path, line=line, index=pos)
        recs.append(r)
    keyed = _independent(recs)
    ops = []
    for pos, r in enumerate(recs):
        line = lines[pos] if lines and pos < len(lines) else None

        def bad(field: str, why: str, pos: int = pos, line: int | None = line) -> HistoryError:
            return HistoryError(why, path=path, line=line, index=pos, field=field)

        typ = r.get("type")
        if typ not in OP_TYPES:
            raise bad("type", f"must be one of {', '.join(OP_TYPES)}, got {typ!r}")
        proc = r.get("process")
        if proc != NEMESIS and not (isinstance(proc, int) and not isinstance(proc, bool)):
            raise bad("process", f"must be an integer or :nemesis, got {proc!r}")
        f = r.get("f")
        if not isinstance(f, str) or not f:
            raise bad("f", f"must be a keyword or string, got {f!r}")
        t = r.get("time", 0)
        if t is None:
            t = 0
        if not isinstance(t, int) or isinstance(t, bool):
            raise bad("time", f"must be integer nanoseconds, got {t!r}")
        value = r.get("value")
        key = None
        if keyed and proc != NEMESIS:
            if not isinstance(value, (list, tuple)) or len(value) != 2:
                raise bad("value", f"an independent op's value must be [key, value], got {value!r}")
            key, value = str(value[0]), value[1]
        err = r.get("error")
        if err is not None and not isinstance(err, str):
            try:
                err = json.dumps(err, default=str)
            except (RecursionError, ValueError):
                raise bad("error", "nested too deeply") from None
        node = r.get("node")
        ops.append(Op(type=typ, process=proc, f=f, value=value, key=key, time=t, index=pos,
                      node=node if isinstance(node, str) else None, error=err))
    return ops


_TOKEN = re.compile(r"""
    (?P<skip>[\s,]+|;[^\n]*)
  | (?P<open>[\[({])
  | (?P<close>[\])}])
  | (?P<str>"(?:[^"\\]|\\["\\nt])*")
  | (?P<kw>:[A-Za-z*+!_?<>=/.-][A-Za-z0-9*+!_?<>=/.:#-]*)
  | (?P<int>-?[0-9]+)(?![0-9A-Za-z.])
  | (?P<const>nil|true|false)(?![A-Za-z0-9*+!_?<>=/.:#-])
""", re.VERBOSE)
_CONST = {"nil": None, "true": True, "false": False}


class _NotSimple(Exception):
    """The fast scanner cannot take the text from ``pos`` on (``edn_format`` will try)."""

    def __init__(self, pos: int = 0) -> None:
        super().__init__(pos)
        self.pos = pos


def _fast_edn(text: str) -> list[Any]:
    """Parse the EDN subset histories use (collections, keywords, ints, strings, nil).

    About ten times faster than edn_format, which matters for big histories;
    anything else (tags, floats, symbols, sets, chars) raises ``_NotSimple``
    and the caller falls back to edn_format. Values come out as :func:`from_edn`
    would make them.
    """
    top: list[Any] = []
    stack: list[tuple[str, list[Any]]] = []
    cur = top
    pos, n = 0, len(text)
    match = _TOKEN.match
    while pos < n:
        m = match(text, pos)
        if m is None:
            raise _NotSimple(pos)
        start, pos = pos, m.end()
        kind = m.lastgroup
        if kind == "skip":
            continue
        tok = m.group()
        if kind == "open":
            stack.append((tok, cur))
            cur = []
            continue
        if kind == "close":
            if not stack:
                raise _NotSimple(start)
            opener, parent = stack.pop()
            if "([{"[")]}".index(tok)] != opener:
                raise _NotSimple(start)
            if opener == "{":
                if len(cur) % 2:
                    raise _NotSimple(start)
                val: Any = {_key_str(cur[i]): cur[i + 1] for i in range(0, len(cur), 2)}
            else:
                val = cur
            parent.append(val)
            cur = parent
            continue
        try:
            if kind == "str":
                # strict=False: an EDN string may hold a raw newline or tab, JSON's may not
                val = json.loads(tok, strict=False)
            elif kind == "kw":
                val = tok[1:]
            elif kind == "int":
                val = int(tok)  # ValueError past Python's digit limit
            else:
                val = _CONST[tok]
        except ValueError:
            raise _NotSimple(start) from None
        cur.append(val)
    if stack:
        raise _NotSimple(pos)
    return top


def _line_at(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _read_text(path: Path) -> str:
    """The file as UTF-8 text; a bad byte is an error naming its line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise HistoryError("no such file", path=path) from None
    except OSError as e:
        raise HistoryError(f"cannot read: {e.strerror or e}", path=path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HistoryError(f"not valid UTF-8 (byte 0x{data[e.start]:02x})", path=path,
                           line=data.count(b"\n", 0, e.start) + 1) from None


def read_edn(path: str | os.PathLike[str]) -> list[Op]:
    """Read a Jepsen/Knossos ``history.edn``: one collection of op maps, or a bare sequence."""
    import edn_format

    path = Path(path)
    text = _read_text(path)
    try:
        data = _fast_edn(text)
    except _NotSimple as ns:
        try:
            data = [from_edn(x) for x in edn_format.loads_all(text)]
        except Exception as e:  # edn_format raises several types for bad syntax
            # edn_format knows no lines; where the simple scanner stopped is the best guess
            raise HistoryError(f"not valid EDN ({_one_line(e)})", path=path,
                               line=_line_at(text, ns.pos)) from None
    records = data[0] if len(data) == 1 and isinstance(data[0], list) else data
    try:
        return edn_records_to_ops(records, path=path)
    except HistoryError:
        # Only now pay for locating each record's line: the retry raises the same
        # error, this time naming the line.
        return edn_records_to_ops(records, path=path, lines=_map_lines(text))


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


# --------------------------------------------------------------------------- Porcupine

_ETCD = re.compile(
    r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(invoke|ok|fail|info)\s+:(read|write|cas)\s+(.*?)\s*$")
_KV = re.compile(
    r'^\{:process (\d+), :type :(invoke|ok|fail|info), :f :(get|put|append), '
    r':key "([^"\\]*)", :value (nil|"[^"\\]*")\}\s*$')


def _etcd_value(text: str) -> tuple[Any, str | None]:
    """(value, error) of an etcd log's VALUE field."""
    if text == "nil":
        return None, None
    if text == ":timed-out":
        return None, "timed-out"
    if re.fullmatch(r"-?\d+", text):
        return int(text), None
    m = re.fullmatch(r"\[\s*(-?\d+)\s+(-?\d+)\s*\]", text)
    if m:
        return [int(m.group(1)), int(m.group(2))], None
    raise ValueError(text)


def read_porcupine(path: str | os.PathLike[str]) -> list[Op]:
    """Read a Porcupine test log: an etcd Jepsen console log or a kv EDN-map-per-line file.

    The format is recognised from the first non-blank line. etcd logs hold one
    unkeyed register; ``:timed-out`` values become ``value=None,
    error="timed-out"`` with the record's own type (``info``, or ``fail`` for the
    few timed-out reads). kv files keep ``get``/``put``/``append`` and their
    string keys.
    """
    path = Path(path)
    text = _read_text(path)
    # split on "\n" only: str.splitlines also breaks at \f, \x1c, U+2028 ..., which would
    # make every later error name the wrong line
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if not first:
        raise HistoryError("empty history", path=path)
    ops: list[Op] = []
    if first.startswith("INFO"):
        for no, ln in enumerate(lines, 1):
            if not ln.strip():
                continue
            m = _ETCD.match(ln)
            if not m:
                raise HistoryError("not a Jepsen etcd log line "
                                   "('INFO jepsen.util - PROCESS :TYPE :F VALUE')", path=path, line=no)
            try:
                value, err = _etcd_value(m.group(4))
            except ValueError:
                raise HistoryError(f"bad value {m.group(4)[:60]!r}", path=path, line=no,
                                   field="value") from None
            ops.append(Op(type=m.group(2), process=_process(m.group(1), path, no), f=m.group(3),
                          value=value, index=len(ops), error=err))
        return ops
    if first.startswith("{"):
        for no, ln in enumerate(lines, 1):
            if not ln.strip():
                continue
            m = _KV.match(ln)
            if m:
                v = m.group(5)
                ops.append(Op(type=m.group(2), process=_process(m.group(1), path, no), f=m.group(3),
                              key=m.group(4), value=None if v == "nil" else v[1:-1],
                              index=len(ops)))
                continue
            ops.append(_kv_line_slow(ln, path, no, len(ops)))
        return ops
    raise HistoryError("neither a Jepsen etcd log nor a kv EDN-per-line file", path=path, line=1)


def _process(text: str, path: Path, line: int) -> int:
    """A process number; ``int`` refuses more digits than Python's limit with ValueError."""
    try:
        return int(text)
    except ValueError:
        raise HistoryError(f"process number of {len(text)} digits", path=path, line=line,
                           field="process") from None


def _kv_line_slow(ln: str, path: Path, no: int, index: int) -> Op:
    """A kv line in another key order or spacing: parse it as EDN."""
    import edn_format

    try:
        rec = from_edn(edn_format.loads(ln))
    except Exception as e:
        raise HistoryError(f"not an EDN map ({_one_line(e)})", path=path, line=no) from None
    if not isinstance(rec, dict):
        raise HistoryError("not an EDN map", path=path, line=no)
    key = rec.get("key")
    rec["value"] = rec.get("value")
    op = edn_records_to_ops([rec], path=path, lines=[no])[0]
    if key is not None and not isinstance(key, str):
        key = json.dumps(key)
    return op.replace(index=index, key=key)
