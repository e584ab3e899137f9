"""A test fault on the harness itself: cut its SSH control link to a lab host.

Every other fault hits the system under test; this one hits the harness's own hands.
A flapping bastion, a restarted sshd or a host that reboots takes the control link
away while that host is partitioned or its clock is skewed, and the heal of that
fault then cannot reach it. This module reproduces that on a namespace lab host,
from this machine and without SSH (the link is what it cuts): a chain ``SBCONTROL``
in the host's network namespace, jumped to first from ``INPUT``, that refuses TCP
to the host's sshd port. The DB's own ports stay open, so clients keep working and
only the harness loses the host.

Two modes, as links die in two ways: ``reset`` answers every packet with a TCP
reset (the connection dies at once and reconnecting is refused: a restarted sshd),
``drop`` discards them (the connection hangs until a timeout: a dead bastion).

The cut is journaled before it lands (kind ``control-cut``, undone on this machine,
so the next clean start or ``splitbrain heal`` lifts it before it needs the link),
with no run of its own: a run's cleanup, which retries its own heals until the
link returns, never lifts the cut itself (that would be the harness healing the
world's fault on itself).
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import threading
from typing import TYPE_CHECKING

from harness.core.errors import ConfigError
from harness.core.fault import JournalKind, JournalRecord
from harness.core.remote import Host

if TYPE_CHECKING:
    from harness.core.remote import Remote

__all__ = ["CHAIN", "CONTROL_CUT", "MODES", "cut_control", "restore_control", "ControlCut"]

log = logging.getLogger(__name__)

CHAIN = "SBCONTROL"
"""The chain holding the cut; not a ``SPLITBRAIN*`` chain, which the partition heal flushes."""
MODES = ("reset", "drop")
_KEY = "ssh"


def _netns(host: Host) -> str:
    ns = (host.extras or {}).get("netns")
    if not ns:
        raise ConfigError(
            f"cutting the control link of {host.name} needs a namespace lab host "
            f"(extras 'netns'); {host.name} at {host.address} has none",
            field="hosts",
        )
    return str(ns)


def _iptables(netns: str, script: str, *, check: bool) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        ["ip", "netns", "exec", netns, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if check and r.returncode != 0:
        raise RuntimeError(
            f"netns {netns}: {script!r} exited {r.returncode}: {(r.stderr or r.stdout).strip()}"
        )
    return r


def _remove_script() -> str:
    ipt = "iptables -w 10"
    return (
        f"while {ipt} -D INPUT -j {CHAIN} 2>/dev/null; do :; done; "
        f"{ipt} -F {CHAIN} 2>/dev/null; {ipt} -X {CHAIN} 2>/dev/null; "
        f"! {ipt} -S {CHAIN} >/dev/null 2>&1"
    )


def _undo_cut(remote: Remote | None, entry: JournalRecord) -> None:
    """Lift a cut from this machine (the host's link is what it cut): idempotent."""
    _iptables(str(entry.undo["netns"]), _remove_script(), check=True)


CONTROL_CUT = JournalKind(
    name="control-cut",
    rank=1,
    undo=_undo_cut,
    local=True,
    doc="the harness's SSH to a lab host cut (a test fault): lifted from this machine, first",
)


def _register() -> None:
    from nemesis import registry

    registry.register_journal_kind(CONTROL_CUT)


_register()


def cut_control(host: Host, *, mode: str = "reset") -> None:
    """Refuse the harness's SSH to ``host`` until :func:`restore_control` (journaled first)."""
    if mode not in MODES:
        raise ConfigError(f"control cut mode {mode!r}; known: {', '.join(MODES)}", field="mode")
    from nemesis.journal import HostJournal

    netns = _netns(host)
    port = int(host.port or 22)
    HostJournal(host).record(
        CONTROL_CUT.name,
        _KEY,
        {"netns": netns, "port": port},
        f"control link cut ({mode}): tcp port {port} refused",
    )
    target = "REJECT --reject-with tcp-reset" if mode == "reset" else "DROP"
    ipt = "iptables -w 10"
    _iptables(
        netns,
        f"{_remove_script()}; {ipt} -N {CHAIN} && "
        f"{ipt} -A {CHAIN} -p tcp --dport {port} -j {target} && {ipt} -I INPUT 1 -j {CHAIN}",
        check=True,
    )
    log.warning("%s: control link cut (%s, tcp port %d)", host.name, mode, port)


def restore_control(host: Host) -> None:
    """Give the link back and forget the journal entry (idempotent)."""
    from nemesis.journal import HostJournal

    _iptables(_netns(host), _remove_script(), check=True)
    HostJournal(host).clear(CONTROL_CUT.name, _KEY)
    log.warning("%s: control link restored", host.name)


def is_cut(host: Host) -> bool:
    """Whether the host's namespace holds the cut's chain (seen from this machine)."""
    r = _iptables(_netns(host), f"iptables -w 10 -S {CHAIN} >/dev/null 2>&1", check=False)
    return r.returncode == 0


class ControlCut:
    """A cut that lifts itself after ``seconds`` (None: only by :meth:`restore`).

    For tests that cut the link while another fault is in force: ``start`` cuts now
    and arms a timer, ``restore`` lifts it at once (and disarms the timer).
    """

    def __init__(self, host: Host, *, seconds: float | None, mode: str = "reset") -> None:
        self.host, self.seconds, self.mode = host, seconds, mode
        self._timer: threading.Timer | None = None
        self.restored = threading.Event()

    def start(self) -> ControlCut:
        cut_control(self.host, mode=self.mode)
        if self.seconds is not None:
            self._timer = threading.Timer(self.seconds, self.restore)
            self._timer.daemon = True
            self._timer.start()
        return self

    def restore(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        restore_control(self.host)
        self.restored.set()

    def __repr__(self) -> str:
        return f"ControlCut({self.host.name!r}, {self.seconds}, {shlex.quote(self.mode)})"
