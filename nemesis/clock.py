"""Clock faults: bump, strobe and reset, per node.

Two backends, chosen per host. A lab or container host carries
``Host.extras["faketime_file"]``: everything started in its SSH sessions runs
under libfaketime reading that file on every call (``FAKETIME_NO_CACHE=1``,
``FAKETIME_DONT_FAKE_MONOTONIC=1``), so writing an offset such as ``+1.5`` or ``-300``
(seconds, fractions allowed) skews that host alone. Such a host shares this
machine's kernel clock, so the real-clock backend refuses it outright: ``date
-s`` there would move the harness's own clock.

Hosts with a kernel of their own (a VM lab's guests: ``Host.machine`` set; or
remote machines without a faketime file) get their real clock stepped
(:class:`RealClock`): time sync stopped, ``clock_settime`` by the guest's python3,
and on reset stepped back and checked against the harness's clock, time sync
restarted. A VM host always gets the real clock, even with a faketime file.
"""

from __future__ import annotations

import logging
import math
import shlex
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.db import runs_under_faketime
from harness.core.errors import NemesisError
from harness.core.fault import Draw, Effects, Fault, JournalKind, JournalRecord, Periods, Residue
from nemesis import journal
from nemesis.base import (
    completion,
    host_errors,
    log_errors,
    no_targets,
    on_nodes,
    op_nodes,
    remote_of,
    sudo_kw,
)
from nemesis.targets import NodeFaultOptions, draw_target

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.remote import Host, Remote
    from harness.core.spec import RunContext

__all__ = [
    "format_offset",
    "parse_offset",
    "strobe_script",
    "FaketimeClock",
    "RealClock",
    "measure_offset_ms",
    "ClockNemesis",
    "CLOCK",
]

log = logging.getLogger(__name__)


def format_offset(offset_ms: float) -> str:
    """libfaketime's relative offset: signed seconds, "." as the fraction mark, ``+0`` for none."""
    if abs(offset_ms) < 0.0005:
        return "+0"
    text = f"{offset_ms / 1000.0:+.6f}".rstrip("0").rstrip(".")
    return text


def parse_offset(text: str) -> float:
    """Milliseconds from a faketime file's first line (``+1.5``, ``-10m``, ``+0``)."""
    s = text.strip().split()[0] if text.strip() else "+0"
    mult = {"m": 60.0, "h": 3600.0, "d": 86400.0, "y": 365 * 86400.0}.get(s[-1], 1.0)
    if s[-1] in "mhdy":
        s = s[:-1]
    return float(s.replace(",", ".")) * mult * 1000.0


def strobe_script(
    path: str, base_ms: float, delta_ms: float, period_ms: float, duration_s: float
) -> str:
    """A POSIX shell loop flipping the offset between base and base+delta, ending at base."""
    flips = max(1, math.ceil(duration_s * 1000.0 / (2 * period_ms)))
    f = shlex.quote(path)
    tmp = shlex.quote(path + ".strobe.tmp")
    a, b = shlex.quote(format_offset(base_ms)), shlex.quote(format_offset(base_ms + delta_ms))
    p = f"{period_ms / 1000.0:.4f}"
    return (
        "#!/bin/sh\n"
        f"i=0\n"
        f"put() {{ printf '%s\\n' \"$1\" > {tmp} && mv -f {tmp} {f}; }}\n"
        f"trap 'put {a}; exit 0' TERM INT\n"
        f"while [ $i -lt {flips} ]; do\n"
        f"  put {b}; sleep {p}\n"
        f"  put {a}; sleep {p}\n"
        f"  i=$((i+1))\n"
        "done\n"
    )


def _sudo(remote: Remote) -> bool:
    return remote.host.user != "root"


class FaketimeClock:
    """Offsets through a host's libfaketime file; strobe is a shell daemon in the host."""

    def __init__(self, remote: Remote, path: str) -> None:
        self.remote, self.path = remote, path
        self.pidfile = path + ".strobe.pid"

    def set_offset(self, offset_ms: float) -> None:
        f, tmp = shlex.quote(self.path), shlex.quote(self.path + ".tmp")
        self.remote.run(
            f"printf '%s\\n' {shlex.quote(format_offset(offset_ms))} > {tmp} && mv -f {tmp} {f}",
            timeout=30,
        )

    def strobe(self, base_ms: float, delta_ms: float, period_ms: float, duration_s: float) -> None:
        self.stop_strobe()
        script = self.path + ".strobe.sh"
        text = strobe_script(self.path, base_ms, delta_ms, period_ms, duration_s)
        self.remote.run(f"printf '%s' {shlex.quote(text)} > {shlex.quote(script)}", timeout=30)
        # Not under libfaketime: the loop's own sleeps must follow the real clock.
        self.remote.start_daemon(
            f"env -u LD_PRELOAD -u FAKETIME_TIMESTAMP_FILE sh {shlex.quote(script)}",
            pidfile=self.pidfile,
            logfile=self.path + ".strobe.log",
        )

    def stop_strobe(self) -> None:
        if self.remote.daemon_running(self.pidfile):
            self.remote.stop_daemon(self.pidfile, timeout=3.0)

    def reset(self) -> None:
        self.stop_strobe()
        self.set_offset(0.0)


SYNC_MARKER = "/run/splitbrain-timesync"
"""On a guest: which time sync services the clock nemesis stopped (restarted on reset)."""
STROBE_SCRIPT = "/tmp/splitbrain-strobe.py"
STROBE_PID = "/tmp/splitbrain-strobe.pid"
STROBE_LOG = "/tmp/splitbrain-strobe.log"
RESET_TOLERANCE_MS = 20.0
"""A reset leaves a real clock alone when it measures closer than this (or than the
measurement's own uncertainty, half an SSH round trip) to the harness's clock."""

_STOP_SYNC = (
    f"m={SYNC_MARKER}; for s in chrony chronyd ntp ntpsec systemd-timesyncd; do "
    'if systemctl is-active -q "$s" 2>/dev/null; then systemctl stop "$s" && echo "systemctl $s" >> $m; fi; '
    "done; for p in /run/chrony/chronyd.pid /var/run/chronyd.pid /run/chronyd.pid; do "
    'if [ -s "$p" ] && kill -0 "$(cat "$p")" 2>/dev/null; then kill "$(cat "$p")" && echo chronyd >> $m; fi; '
    "done; true"
)
_START_SYNC = (
    f"m={SYNC_MARKER}; if [ -f $m ]; then sort -u $m | while read how s; do "
    'case "$how" in systemctl) systemctl start "$s";; chronyd) chronyd;; esac; done; '
    "rm -f $m; fi; true"
)

_SHIFT_PY = (
    "import sys, time; R = time.CLOCK_REALTIME; "
    "time.clock_settime(R, time.clock_gettime(R) + float(sys.argv[1]) / 1000.0)"
)

_STROBE_PY = """\
# splitbrain real-clock strobe: flip CLOCK_REALTIME by +delta / -delta, end where it began
import signal, sys, time
R = time.CLOCK_REALTIME
delta, period, flips = float(sys.argv[1]) / 1000, float(sys.argv[2]) / 1000, int(sys.argv[3])
SIGS = {signal.SIGTERM, signal.SIGINT}
up = False
def flip(d, state):
    global up
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGS)  # the shift and the flag change together
    time.clock_settime(R, time.clock_gettime(R) + d)
    up = state
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGS)
def stop(*_):
    if up:
        flip(-delta, False)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
print("strobing", flush=True)
for _ in range(flips):
    flip(delta, True)
    time.sleep(period)
    flip(-delta, False)
    time.sleep(period)
"""


def measure_offset_ms(
    remote: Remote, *, tries: int = 3, now: Callable[[], float] = time.time
) -> tuple[float, float]:
    """(the host's clock minus ours, uncertainty), in ms, from the best of a few ``date`` calls.

    The remote clock is read somewhere inside the round trip; the midpoint is the
    estimate and half the round trip bounds its error, so the fastest try wins.
    """
    best: tuple[float, float] | None = None
    for _ in range(max(1, tries)):
        t0 = now()
        r = remote.run("date +%s.%N", timeout=30)
        t1 = now()
        theirs = float(r.stdout.split()[-1])
        est = (theirs - (t0 + t1) / 2.0) * 1000.0
        unc = (t1 - t0) / 2.0 * 1000.0
        if best is None or unc < best[1]:
            best = (est, unc)
    assert best is not None
    return best


class RealClock:
    """The host's real clock: ``clock_settime`` with time sync stopped, as Jepsen does on VMs.

    Only for hosts with a kernel of their own: a VM of the VM lab (``Host.machine``
    set, whatever its address) or a remote machine. A host at a loopback address
    without a machine is a namespace of this machine, and stepping its clock would
    step the harness's own. Shifts are relative (``clock_gettime + delta`` in one
    Python call on the host, no SSH latency in between); a reset steps back by
    what was applied, then measures against the harness's clock and corrects any
    rest (a strobe killed mid-flip, a journal replay that knows no offset), and
    restarts the time sync services it stopped.
    """

    SYNC_SERVICES = "chrony chronyd ntp ntpsec systemd-timesyncd"

    def __init__(self, remote: Remote) -> None:
        host = remote.host
        loopback = host.address.startswith("127.") or host.address in ("localhost", "::1")
        if loopback and host.machine is None:
            raise NemesisError(
                f"{host.name}: refusing to change the real clock of a host at "
                f"{host.address}: it shares this machine's clock (give it a faketime_file)"
            )
        self.remote = remote
        self.pidfile = STROBE_PID
        self.python = str(host.extras.get("python") or "python3")

    def _run(self, cmd: str, **kw: Any) -> Any:
        return self.remote.run(cmd, sudo=_sudo(self.remote), timeout=30, **kw)

    def _shift_cmd(self, delta_ms: float) -> str:
        return f"{shlex.quote(self.python)} -c {shlex.quote(_SHIFT_PY)} {delta_ms!r}"

    def shift(self, delta_ms: float) -> None:
        """Step the clock by ``delta_ms`` (time sync stopped first, so it stays stepped)."""
        self._run(f"{_STOP_SYNC}; {self._shift_cmd(delta_ms)}")

    def set_offset(self, offset_ms: float, current_ms: float) -> None:
        self.shift(offset_ms - current_ms)

    def strobe(self, base_ms: float, delta_ms: float, period_ms: float, duration_s: float) -> None:
        """Flip between base and base+delta every ``period_ms`` for ``duration_s``, ending at base."""
        self.stop_strobe()
        flips = max(1, math.ceil(duration_s * 1000.0 / (2 * period_ms)))
        self._run(f"{_STOP_SYNC}; cat > {STROBE_SCRIPT}", stdin=_STROBE_PY)
        self.remote.start_daemon(
            f"{shlex.quote(self.python)} {STROBE_SCRIPT} {delta_ms!r} {period_ms!r} {flips}",
            pidfile=self.pidfile,
            logfile=STROBE_LOG,
            **sudo_kw(self.remote),
        )

    def stop_strobe(self) -> None:
        if self.remote.daemon_running(self.pidfile, **sudo_kw(self.remote)):
            self.remote.stop_daemon(self.pidfile, timeout=3.0, **sudo_kw(self.remote))

    def reset(self, applied_ms: float | None = None) -> float:
        """Undo every skew; returns the offset measured before the final correction (ms)."""
        self.stop_strobe()
        if applied_ms:
            self._run(self._shift_cmd(-applied_ms))
        off, unc = measure_offset_ms(self.remote)
        if abs(off) > max(RESET_TOLERANCE_MS, unc):
            log.info(
                "%s: real clock %+.1f ms off (±%.1f): stepping it back",
                self.remote.host.name,
                off,
                unc,
            )
            self._run(self._shift_cmd(-off))
        self._run(_START_SYNC, check=False)
        return off


class ClockNemesis:
    """``start-clock`` bumps (cumulative, per node) or strobes; ``stop-clock`` resets all nodes.

    Invocation values: ``{"mode": "bump", "nodes": [...], "offset_ms": d}``,
    ``{"mode": "strobe", "nodes": [...], "delta_ms": d, "period_ms": p,
    "duration_s": s}``, ``{"mode": "reset", "nodes": [...]}``; ``"target":
    "leader"`` in place of ``nodes`` picks the current leader.
    """

    def __init__(self) -> None:
        self.offsets: dict[str, float] = {}
        self.touched_real: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-clock", "stop-clock"}

    def _clock(self, ctx: RunContext, node: str) -> FaketimeClock | RealClock:
        remote = remote_of(ctx, node)
        host = ctx.hosts.get(node)
        if host is not None and host.machine is not None:
            return RealClock(remote)  # its own kernel: the real thing, as Jepsen does on VMs
        path = host.extras.get("faketime_file") if host is not None else None
        if path:
            return FaketimeClock(remote, str(path))
        return RealClock(remote)

    def _note(
        self, ctx: RunContext, node: str, clock: FaketimeClock | RealClock, what: str
    ) -> None:
        """Journal the skew before it lands (nemesis/journal.py): a killed harness cannot reset it."""
        if isinstance(clock, FaketimeClock):
            journal.note(ctx, node, "faketime", clock.path, {"file": clock.path}, what)
        else:
            journal.note(
                ctx,
                node,
                "real-clock",
                "clock",
                {"strobe_pidfile": clock.pidfile},
                what,
            )

    def setup(self, ctx: RunContext) -> None:
        why = _blind_hosts(ctx.db, [ctx.hosts[n] for n in ctx.nodes if n in ctx.hosts])
        if why is not None:
            # A clock fault recorded as done that moved no clock the DB reads would let a
            # clock campaign pass as VALID without ever testing clocks.
            raise NemesisError(f"{why} (use VM hosts, or leave out the clock fault)")

        def one(node: str) -> None:
            clock = self._clock(ctx, node)
            if isinstance(clock, FaketimeClock):
                clock.reset()

        errors = host_errors(on_nodes(ctx.nodes, one))
        if errors:
            raise NemesisError(
                "cannot prepare clocks: "
                + "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
            )
        self.offsets = {n: 0.0 for n in ctx.nodes}

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        if op.f == "stop-clock":
            return self._reset(ctx, op, list(ctx.nodes), {"mode": "reset"})
        if op.f != "start-clock":
            raise NemesisError(f"clock nemesis cannot handle {op.f!r}")
        value: dict[str, Any] = dict(op.value or {})
        mode = value.get("mode", "bump")
        nodes = op_nodes(ctx, value)
        if not nodes:
            return no_targets(op, value)
        value["nodes"] = nodes
        if mode == "reset":
            return self._reset(ctx, op, nodes, value)
        if mode == "bump":
            delta = float(value["offset_ms"])

            def bump(node: str) -> float:
                clock = self._clock(ctx, node)
                cur = self.offsets.get(node, 0.0)
                self._note(ctx, node, clock, f"clock offset {cur + delta:+g} ms")
                if isinstance(clock, RealClock):
                    self.touched_real.add(node)
                    clock.set_offset(cur + delta, cur)
                else:
                    clock.set_offset(cur + delta)
                self.offsets[node] = cur + delta
                return cur + delta

            results = on_nodes(nodes, bump)
            value["offsets_ms"] = {n: r for n, r in results.items() if isinstance(r, float)}
            return completion(op, value, host_errors(results))
        if mode == "strobe":
            delta, period = float(value["delta_ms"]), float(value["period_ms"])
            duration = float(value["duration_s"])
            if period <= 0 or duration <= 0:
                raise NemesisError(f"strobe needs positive period_ms and duration_s, got {value!r}")

            def strobe(node: str) -> None:
                clock = self._clock(ctx, node)
                self._note(ctx, node, clock, f"clock strobe ±{delta:g} ms every {period:g} ms")
                if isinstance(clock, RealClock):
                    self.touched_real.add(node)
                clock.strobe(self.offsets.get(node, 0.0), delta, period, duration)

            return completion(op, value, host_errors(on_nodes(nodes, strobe)))
        raise NemesisError(f"unknown clock mode {mode!r}; known: bump, strobe, reset")

    def _reset(self, ctx: RunContext, op: Op, nodes: list[str], value: dict[str, Any]) -> Op:
        errors = self._reset_nodes(ctx, nodes)
        value = {**value, "nodes": nodes, "offsets_ms": {n: 0.0 for n in nodes if n not in errors}}
        return completion(op, value, errors)

    def _reset_nodes(self, ctx: RunContext, nodes: list[str]) -> dict[str, str]:
        def one(node: str) -> None:
            clock = self._clock(ctx, node)
            if isinstance(clock, RealClock):
                if node not in self.touched_real:
                    return
                clock.reset(self.offsets.get(node, 0.0))
            else:
                clock.reset()
            self.offsets[node] = 0.0
            self.touched_real.discard(node)
            journal.clear(
                ctx,
                node,
                *(
                    ("faketime", clock.path)
                    if isinstance(clock, FaketimeClock)
                    else ("real-clock", "clock")
                ),
            )

        return host_errors(on_nodes(nodes, one))

    def teardown(self, ctx: RunContext) -> None:
        log_errors("resetting clock", self._reset_nodes(ctx, list(ctx.nodes)))


BUMP_MS = (5, 50, 500, 5_000, 60_000, 300_000)
STROBE_DELTA_MS = (10, 100, 1000)
STROBE_PERIOD_MS = (2, 5, 10, 20)


def _draw_clock(d: Draw) -> dict[str, Any]:
    """Targets, then a bump (two in three) of a jittered size and sign, or a strobe."""
    value = draw_target(d, "clock")
    mode = d.rng.choice(("bump", "bump", "strobe"))
    value["mode"] = mode
    if mode == "bump":
        ms = d.rng.choice(BUMP_MS) * d.rng.uniform(0.5, 1.5)
        value["offset_ms"] = round(ms if d.rng.random() < 0.5 else -ms)
    else:
        value["delta_ms"] = d.rng.choice(STROBE_DELTA_MS)
        value["period_ms"] = d.rng.choice(STROBE_PERIOD_MS)
        value["duration_s"] = round(d.interval, 3)
    return value


def _undo_faketime(remote: Remote | None, entry: JournalRecord) -> None:
    remote = journal.connected(remote, entry)
    FaketimeClock(remote, str(entry.undo["file"])).reset()


def _undo_real_clock(remote: Remote | None, entry: JournalRecord) -> None:
    remote = journal.connected(remote, entry)
    clock = RealClock(remote)
    if entry.undo.get("strobe_pidfile"):
        clock.pidfile = str(entry.undo["strobe_pidfile"])
    clock.reset()


def _strobe_pidfiles(host: Host) -> list[str]:
    ft = host.extras.get("faketime_file")
    return [STROBE_PID, *([f"{ft}.strobe.pid"] if ft else [])]


def _cure_clock(remote: Remote) -> None:
    """A clock the scan found off: the faketime file back to +0, or the real clock stepped back."""
    ft = remote.host.extras.get("faketime_file")
    if ft and remote.host.machine is None:
        FaketimeClock(remote, str(ft)).reset()
    else:
        RealClock(remote).reset()


FAKETIME = JournalKind(
    name="faketime",
    rank=30,
    undo=_undo_faketime,
    doc="a host's libfaketime offset (and strobe daemon): back to +0",
)
REAL_CLOCK = JournalKind(
    name="real-clock",
    rank=31,
    undo=_undo_real_clock,
    doc="a guest's real clock: strobe stopped, stepped back to the harness's, time sync restarted",
)


def _blind_hosts(db: object, hosts: Sequence[Host]) -> str | None:
    """Hosts whose only clock is libfaketime cannot move the clock of a DB outside it."""
    if runs_under_faketime(db):
        return None
    blind = sorted(h.name for h in hosts if h.machine is None and h.extras.get("faketime_file"))
    if not blind:
        return None
    return (
        f"clock cannot reach {type(db).__name__}: it does not run under libfaketime and "
        f"{', '.join(blind)} have no clock of their own"
    )


CLOCK = Fault(
    name="clock",
    nemesis=lambda chosen: ClockNemesis(),
    heal_rank=50,
    draw=_draw_clock,
    options=NodeFaultOptions,
    refuse=_blind_hosts,
    journal=(FAKETIME, REAL_CLOCK),
    effects=Effects(moves_clock=True),
    # A bump's completion gives each node's offset now ("offsets_ms", cumulative; 0 is a
    # reset); a strobe's names its "nodes" only (its stamps cannot be corrected).
    periods=Periods(hit=("offsets_ms", "nodes"), neutral=0.0),
    residue=Residue(
        pidfiles=_strobe_pidfiles,
        markers=(".strobe.sh", "splitbrain-strobe"),
        cures=("clock",),
        cure=_cure_clock,
    ),
    colour="#f3a712",
    doc="clock bumps and strobes: libfaketime on lab hosts, the real clock on VMs",
)
