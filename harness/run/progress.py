"""A live status line for a running campaign.

On a terminal, rich redraws one line on stderr (elapsed time, ops/s, ok/fail/info
counts, the fault in force). Piped into a file or a CI log, redrawing would
produce garbage, so the same figures are printed as a plain line every few
seconds instead. The counters are the runner's; this module only reads them.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any

from harness.core.history import Op

__all__ = ["Counters", "Progress", "describe_fault", "step_status"]


def describe_fault(op: Op) -> str | None:
    """A short label for a nemesis op, or None when it ends every fault (a heal)."""
    f = op.f
    if f.startswith(("stop", "heal", "resume", "reset", "recover")) or f in ("start-all",):
        return None
    name = f.removeprefix("start-")
    val = op.value
    if isinstance(val, dict):
        bits = []
        for k, v in val.items():
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                bits.append(f"{k}={v}")
            elif isinstance(v, list) and v and all(isinstance(x, str) for x in v):
                bits.append(f"{k}={','.join(v)}")
        if bits:
            return f"{name} ({', '.join(bits[:3])})"
    elif isinstance(val, (str, int, float)) and val != "":
        return f"{name} {val}"
    return name


@dataclass
class Counters:
    """Op counts by completion type, updated by worker threads."""

    started: float = field(default_factory=time.monotonic)
    ok: int = 0
    fail: int = 0
    info: int = 0
    extra: int = 0
    """Completions of the extra workers (the samplers): not client ops, so not in ok/fail/info."""
    faults: dict[str, str] = field(default_factory=dict)
    started_faults: set[str] = field(default_factory=set)
    """Every fault kind a ``start-<kind>`` op of the nemesis began during the run."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, op: Op, *, extra: bool = False) -> None:
        if not op.is_client:
            if op.type != "invoke":
                self._note_fault(op)
            return
        if op.type == "invoke":
            return
        with self._lock:
            if extra:
                self.extra += 1
                return
            if op.type == "ok":
                self.ok += 1
            elif op.type == "fail":
                self.fail += 1
            else:
                self.info += 1

    def _note_fault(self, op: Op) -> None:
        """Track faults in force by family (partition, kill, clock...)."""
        family = op.f.split("-", 1)[-1]
        label = describe_fault(op)
        with self._lock:
            if op.f.startswith("start-"):
                self.started_faults.add(op.f.removeprefix("start-"))
            if label is None:
                if op.f.startswith(("heal", "reset-all")) or op.f == "stop-all":
                    self.faults.clear()
                else:
                    self.faults.pop(family, None)
            else:
                self.faults[family] = label

    @property
    def completed(self) -> int:
        return self.ok + self.fail + self.info

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            elapsed = time.monotonic() - self.started
            done = self.ok + self.fail + self.info
            return {
                "elapsed": elapsed,
                "ok": self.ok,
                "fail": self.fail,
                "info": self.info,
                "rate": done / elapsed if elapsed > 0 else 0.0,
                "faults": list(self.faults.values()),
            }


def _line(snap: dict[str, Any], phase: str, rate: float | None = None) -> str:
    fault = ", ".join(snap["faults"]) or "none"
    rate = snap["rate"] if rate is None else rate
    return (
        f"[{phase}] {snap['elapsed']:6.1f}s  {rate:7.1f} ops/s  "
        f"ok {snap['ok']}  fail {snap['fail']}  info {snap['info']}  fault: {fault}"
    )


class Progress:
    """Shows ``Counters`` while a run is in progress; ``phase`` names what it is doing."""

    def __init__(
        self,
        counters: Counters,
        *,
        stream: IO[str] | None = None,
        enabled: bool = True,
        interval: float = 5.0,
    ) -> None:
        self.counters = counters
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interval = interval
        self.phase = "setup"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Any = None
        self._window: list[tuple[float, int]] = []

    @property
    def is_tty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def start(self) -> Progress:
        if not self.enabled:
            return self
        if self.is_tty:
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            console = Console(file=self.stream)
            self._live = Live(Text(""), console=console, refresh_per_second=4, transient=True)
            self._live.start()
            target = self._redraw
        else:
            target = self._plain
        self._thread = threading.Thread(target=target, name="progress", daemon=True)
        self._thread.start()
        return self

    def _recent_rate(self, snap: dict[str, Any]) -> float:
        """Ops/s over the last few seconds, not since setup began."""
        done = snap["ok"] + snap["fail"] + snap["info"]
        now = snap["elapsed"]
        self._window.append((now, done))
        while len(self._window) > 2 and now - self._window[0][0] > 5.0:
            self._window.pop(0)
        t0, d0 = self._window[0]
        return (done - d0) / (now - t0) if now > t0 else 0.0

    def line(self) -> str:
        snap = self.counters.snapshot()
        return _line(snap, self.phase, self._recent_rate(snap))

    def _redraw(self) -> None:
        from rich.text import Text

        while not self._stop.wait(0.25):
            self._live.update(Text(self.line()))

    def _plain(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.stream, flush=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if self._live is not None:
            try:
                self._live.stop()
            finally:
                self._live = None

    def __enter__(self) -> Progress:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class step_status:  # noqa: N801 (used as a context manager, like open())
    """A live "doing X... 12 s" line for a long step that has no counters (check, report).

    On a terminal a rich spinner with the elapsed time, then one line saying how long
    it took. Elsewhere nothing: scripts read these commands' output, and stderr stays
    for errors.
    """

    def __init__(self, what: str, *, stream: IO[str] | None = None) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self._status: Any = None
        self._t0 = 0.0

    def __enter__(self) -> step_status:
        self._t0 = time.monotonic()
        if self.stream.isatty():
            from rich.console import Console

            self._status = Console(file=self.stream).status(self.what + " ...")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        took = time.monotonic() - self._t0
        if self._status is not None:
            self._status.__exit__(*exc)
            print(
                f"{self.what}: {'failed' if exc[0] else 'done'} in {took:.1f} s",
                file=self.stream,
                flush=True,
            )
