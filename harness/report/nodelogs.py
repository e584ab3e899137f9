"""Node log lines beside the ops they explain: the history's clock mapped to wall time.

The history's ``time`` counts nanoseconds from the test's start on the harness's
monotonic clock, and nothing in the store records that start as a wall-clock time.
Node logs carry their own wall-clock stamps (the reference node's ``time=<epoch>``,
ISO-8601 stamps elsewhere), so the report estimates the start, in this order:

1. ``splitbrain.log``: the runner logs every nemesis completion (``nemesis start-X
   ...``) right after appending it to the history; matching those lines to the
   history's nemesis completions, in order per kind, gives one offset per fault. The
   smallest is kept (the log line can only come after the append) and the spread of
   the others says how far to trust it. The log's stamps are local time: the zone is
   found by comparing its first line with the run directory's UTC name, both written
   at the same moment.
2. The run directory's name (``store/<test>/<UTC time>``): made a few milliseconds
   before the history's clock starts; used when no fault was logged.

Node clocks are another matter: a fault that moves clocks (``Effects.moves_clock``)
moves a node's clock by an offset (libfaketime, or the guest's real clock), so its log
stamps move too. Lines of a node inside such a period (:class:`ClockShift`, derived once
for the report and coverage alike by :meth:`harness.core.periods.Timeline.clock_shifts`)
are shifted back by that node's offset and marked; a period whose offset cannot be told
(a strobe) makes the stamps of that period unreliable, and the page says so.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.core.history import Op
from harness.core.periods import ClockShift

__all__ = [
    "Origin",
    "ClockShift",
    "history_origin",
    "line_epoch",
    "LogWindows",
]

_DIR_STAMP = re.compile(r"^(\d{8}T\d{6})(?:\.(\d{1,6}))?Z$")
_LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
_NEMESIS_LINE = re.compile(r" harness\.run\.phases: nemesis (\S+) ")
_EPOCH = re.compile(r"\b(?:time|ts)=(\d{9,11}(?:\.\d+)?)\b")
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?")


@dataclass(frozen=True)
class Origin:
    """The wall-clock time (ns since the epoch) at which the history's clock read 0."""

    wall_ns: int
    method: str  # how it was found, for the page
    spread_ms: float | None = None  # disagreement between the faults used; None: unknown


def _dir_epoch_ns(name: str) -> int | None:
    m = _DIR_STAMP.match(name)
    if not m:
        return None
    dt = datetime.strptime(m.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    frac = (m.group(2) or "0").ljust(6, "0")
    return int(dt.timestamp()) * 1_000_000_000 + int(frac) * 1000


def _log_naive_ns(line: str) -> int | None:
    m = _LOG_STAMP.match(line)
    if not m:
        return None
    dt = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return int(dt.timestamp()) * 1_000_000_000 + int(m.group(2)) * 1_000_000


def history_origin(run: Path, nemesis: Sequence[Op]) -> Origin | None:
    """The history's start in wall time (see the module's doc), or None when nothing tells."""
    dir_ns = _dir_epoch_ns(run.name)
    log_path = run / "splitbrain.log"
    offsets: list[int] = []
    if log_path.exists() and nemesis:
        completions: dict[str, list[int]] = {}
        for op in nemesis:
            if op.type != "invoke":
                completions.setdefault(op.f, []).append(op.time)
        # Without a stamped directory to compare with, the log is taken to be in this
        # machine's zone (the report is usually built where the run ran).
        local = datetime.now().astimezone().utcoffset()
        zone_ns = 0 if local is None else int(local.total_seconds()) * 1_000_000_000
        used: dict[str, int] = {}
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            first = True
            for line in fh:
                t = _log_naive_ns(line)
                if t is None:
                    continue
                if first:
                    first = False
                    if dir_ns is not None:
                        # The log's zone, in whole quarter hours.
                        q = 900 * 1_000_000_000
                        zone_ns = round((t - dir_ns) / q) * q
                m = _NEMESIS_LINE.search(line)
                if not m:
                    continue
                f = m.group(1)
                k = used.get(f, 0)
                times = completions.get(f, [])
                if k < len(times):
                    offsets.append(t - zone_ns - times[k])
                    used[f] = k + 1
    if offsets:
        best = min(offsets)
        zone = "" if dir_ns is not None else " (its time zone taken to be this machine's)"
        return Origin(
            best,
            f"splitbrain.log: {len(offsets)} logged fault completion(s) matched to the "
            f"history{zone}",
            (max(offsets) - best) / 1e6,
        )
    if dir_ns is not None:
        return Origin(dir_ns, "the run directory's name (made just before the history began)")
    return None


def line_epoch(line: str) -> float | None:
    """The wall-clock stamp of a log line, in seconds since the epoch; None when it has none.

    Knows ``time=<epoch>``/``ts=<epoch>`` (the reference node) and ISO-8601 stamps
    (most servers; a stamp without a zone is taken as UTC).
    """
    m = _EPOCH.search(line)
    if m:
        return float(m.group(1))
    m = _ISO.search(line)
    if not m:
        return None
    try:
        dt = datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    zone = m.group(4)
    secs = dt.replace(tzinfo=timezone.utc).timestamp()
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        hh, mm = int(zone[1:3]), int(zone[-2:])
        secs -= sign * (hh * 3600 + mm * 60)
    frac = m.group(3)
    if frac:
        secs += int(frac) / 10 ** len(frac)
    return secs


@dataclass
class LogWindows:
    """The node log lines within ``pad_ns`` of given spans of the history, per span and node.

    Each node's files are read a line at a time, and at most ``max_lines`` lines are kept
    per span and node, so the report's memory depends on the number of spans (the
    results' capped examples), not on the logs' length. A line without a stamp takes
    the stamp of the line before it (a stack trace's lines follow their message).
    """

    spans: list[tuple[int, int]]
    origin: Origin | None
    shifts: Sequence[ClockShift] = ()
    pad_ns: int = 1_000_000_000
    max_lines: int = 80
    max_chars: int = 300
    lines: list[dict[str, list[list[Any]]]] = field(default_factory=list)
    cut: set[int] = field(default_factory=set)
    unreliable: set[str] = field(default_factory=set)
    files: dict[str, list[str]] = field(default_factory=dict)

    def read(self, nodes_dir: Path) -> None:
        """Fill ``lines``: one map per span, node → ``[history ms | None, own stamp, text, shift]``."""
        self.lines = [{} for _ in self.spans]
        if self.origin is None or not self.spans or not nodes_dir.is_dir():
            return
        wins = sorted(
            (lo - self.pad_ns, hi + self.pad_ns, i) for i, (lo, hi) in enumerate(self.spans)
        )
        starts = [w[0] for w in wins]
        widest = max(w[1] - w[0] for w in wins)
        for node_dir in sorted(p for p in nodes_dir.iterdir() if p.is_dir()):
            node = node_dir.name
            shifts = [s for s in self.shifts if s.node == node]
            for path in sorted(p for p in node_dir.rglob("*") if p.is_file()):
                self.files.setdefault(node, []).append(str(path.relative_to(nodes_dir.parent)))
                self._read_file(path, node, shifts, wins, starts, widest)

    def _read_file(
        self,
        path: Path,
        node: str,
        shifts: Iterable[ClockShift],
        wins: Sequence[tuple[int, int, int]],
        starts: Sequence[int],
        widest: int,
    ) -> None:
        assert self.origin is not None
        origin = self.origin.wall_ns
        shifts = list(shifts)
        last: float | None = None
        try:
            fh = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
        except OSError:
            return
        with fh:
            for raw in fh:
                stamp = line_epoch(raw)
                if stamp is None:
                    stamp = last
                else:
                    last = stamp
                if stamp is None:
                    continue
                t = int(stamp * 1e9) - origin
                shift = None
                for s in shifts:
                    if s.offset_ms is None:
                        if s.start <= t <= s.end:
                            self.unreliable.add(node)
                        continue
                    moved = t - int(s.offset_ms * 1e6)
                    if s.start <= moved <= s.end:
                        t, shift = moved, s.offset_ms
                        break
                hi = bisect.bisect_right(starts, t)
                lo = bisect.bisect_left(starts, t - widest)
                for w0, w1, i in wins[lo:hi]:
                    if not (w0 <= t <= w1):
                        continue
                    got = self.lines[i].setdefault(node, [])
                    if len(got) >= self.max_lines:
                        self.cut.add(i)
                        continue
                    text = raw.rstrip("\n")
                    if len(text) > self.max_chars:
                        text = text[: self.max_chars] + "…"
                    got.append([round(t / 1e6, 3), _fmt_stamp(stamp), text, shift])


def _fmt_stamp(epoch: float) -> str:
    dt = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return dt.strftime("%H:%M:%S.") + f"{dt.microsecond // 1000:03d}"
