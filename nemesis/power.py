"""Power loss and whole-guest pause, through the hypervisor (``Host.machine``).

A kill -9 loses what a process had not yet handed to the OS; a power cut also
loses the guest's page cache, so only it finds a node that acknowledges writes
it never fsynced. ``start-power`` cuts the chosen guests at once (several at
once is what loses a quorum's copy), ``stop-power`` boots them, waits for sshd
and restarts the DB on them through its ``Killable.start``. ``start-vm-pause``
freezes whole guests (every vCPU, the kernel's timers, sshd) from outside, which
no signal inside the guest can do; ``stop-vm-pause`` resumes them.

Only an inventory that owns the hypervisor sets ``Host.machine`` (the VM lab).
Asking for these faults on other hosts is a :class:`ConfigError` naming them:
skipping the fault silently would report a durability campaign that never cut
anything as valid. Both faults are journaled before they land (kinds ``power``
and ``vm-pause``, undone by :mod:`nemesis.undo_journal`: power on, resume).
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError, NemesisError, RemoteError
from harness.core.fault import Effects, Fault, JournalKind, JournalRecord, Periods, Residue
from nemesis import journal
from nemesis.base import completion, host_errors, log_errors, no_targets, on_nodes, op_nodes
from nemesis.targets import NodeFaultOptions, draw_target

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.machine import Machine
    from harness.core.remote import Host, Remote
    from harness.core.spec import RunContext
    from nemesis.process import KillNemesis, PauseNemesis

__all__ = [
    "BOOT_TIMEOUT_S",
    "machines_of",
    "await_boot",
    "restore",
    "PowerNemesis",
    "VmPauseNemesis",
    "POWER",
    "VM_PAUSE",
    "machine_down",
]

log = logging.getLogger(__name__)

BOOT_TIMEOUT_S = 300.0
"""How long a guest may take from power-on to a working SSH login (TCG guests are slow)."""


def machines_of(hosts: Iterable[Host], fault: str) -> dict[str, Machine]:
    """Each host's machine; ConfigError naming every host that has none."""
    hosts = list(hosts)
    missing = [h.name for h in hosts if h.machine is None]
    if missing:
        raise ConfigError(
            f"nemesis fault {fault!r} needs hosts that are virtual machines of a VM lab "
            f"(`splitbrain lab up --driver vm`); these have no hypervisor to act on: "
            f"{', '.join(sorted(missing))}",
            field="nemesis",
        )
    return {h.name: h.machine for h in hosts if h.machine is not None}


def await_boot(
    remote: Remote,
    timeout: float = BOOT_TIMEOUT_S,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Block until a command runs on the freshly booted host, then set its clock;
    returns the seconds waited for SSH.

    The connection from before the cut is dead: the rebooted guest answers it
    with a reset, and the remote dials afresh (a closed Remote stays closed, so
    it is not closed here). The guest boots with its RTC's time, whole seconds (up
    to a second behind, more under TCG), and a lab has no time server: left alone,
    the next run's clean-start check can find a clock off by a second that no fault
    touched and refuse to run, so it is stepped to the harness's, as NTP would at boot.
    """
    t0 = clock()
    last: Exception | None = None
    while True:
        try:
            remote.run("true", timeout=min(20.0, max(1.0, timeout)))
            break
        except Exception as e:  # noqa: BLE001 - any failure means "not up yet"
            last = e
        if clock() - t0 >= timeout:
            raise RemoteError(
                f"no SSH login {timeout:g} s after power-on (last: {last})",
                host=remote.host.name,
            )
        sleep(1.0)
    waited = clock() - t0
    from nemesis.clock import RealClock

    try:
        RealClock(remote).reset()
    except Exception as e:  # noqa: BLE001 - the boot succeeded; the check will say more
        log.warning("%s: could not set the clock after boot: %s", remote.host.name, e)
    return waited


def restore(
    remote: Remote | None, machine: Machine, *, boot_timeout: float = BOOT_TIMEOUT_S
) -> str:
    """Bring a guest back to running whatever a fault left: resume if paused, boot if off.

    Idempotent (the journal replays it without knowing how far the fault got);
    returns what was done (``running``, ``resumed``, ``booted``).
    """
    state = machine.state()
    if state == "running":
        return "running"
    if state == "paused":
        machine.resume()
        return "resumed"
    machine.power_on()
    if remote is not None:
        await_boot(remote, boot_timeout)
    return "booted"


def _stale_pidfiles_cmd(pidfiles: list[str]) -> str:
    """Remove pid files that outlived a reboot: their pids now name other processes."""
    return "rm -f " + " ".join(shlex.quote(p) for p in pidfiles) + "; true"


class PowerNemesis:
    """``start-power`` cuts the power of the chosen guests; ``stop-power`` brings them all back.

    Values: ``{"nodes": [...]}`` (or a ``target``); the completion of
    ``start-power`` lists ``cut``, that of ``stop-power`` the booted ``nodes``,
    the seconds each took to answer SSH (``boot_s``), the ``restarted`` DB
    nodes and the seconds until the DB said it was ready again (``ready_s``, a
    ``WaitsReady`` DB). The DB must be ``Killable``: its processes died with the guest.
    """

    def __init__(self, *, boot_timeout: float = BOOT_TIMEOUT_S) -> None:
        self.off: set[str] = set()
        self.boot_timeout = boot_timeout
        self.killed_by: KillNemesis | None = None
        self.paused_by: PauseNemesis | None = None

    def fs(self) -> set[str]:
        return {"start-power", "stop-power"}

    def _db(self, ctx: RunContext) -> Any:
        from harness.core.db import Killable

        if not isinstance(ctx.db, Killable):
            raise NemesisError(
                f"power loss needs a DB that can be restarted after the boot; "
                f"{type(ctx.db).__name__} is not Killable"
            )
        return ctx.db

    def _machines(self, ctx: RunContext) -> dict[str, Machine]:
        return machines_of([ctx.hosts[n] for n in ctx.nodes], "power")

    def setup(self, ctx: RunContext) -> None:
        self._machines(ctx)
        self._db(ctx)
        self.off = set()

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        if op.f == "start-power":
            return self._cut(ctx, op)
        if op.f == "stop-power":
            return self._restore_all(ctx, op)
        raise NemesisError(f"power nemesis cannot handle {op.f!r}")

    def _cut(self, ctx: RunContext, op: Op) -> Op:
        machines = self._machines(ctx)
        value = dict(op.value or {})
        nodes = op_nodes(ctx, value)
        if not nodes:
            return no_targets(op, value)
        value["nodes"] = nodes
        # Every cut journaled first, then all cut together: a quorum loses its page
        # caches at the same instant, as in a rack's power failure.
        for n in nodes:
            journal.note(
                ctx, n, "power", "machine", {"machine": machines[n].name}, "guest powered off"
            )

        def cut(node: str) -> None:
            machines[node].power_cut()
            self.off.add(node)
            if self.paused_by is not None:
                self.paused_by.paused.discard(node)  # its processes are gone

        errors = host_errors(on_nodes(nodes, cut))
        value["cut"] = [n for n in nodes if n not in errors]
        return completion(op, value, errors)

    def _restore_all(self, ctx: RunContext, op: Op) -> Op:
        booted, boot_s, restarted, errors = self._restore(ctx, sorted(self.off))
        value: dict[str, Any] = {"nodes": booted, "boot_s": boot_s, "restarted": restarted}
        if restarted:
            value["ready_s"] = self._wait_ready(ctx)
        return completion(op, value, errors)

    @staticmethod
    def _wait_ready(ctx: RunContext) -> float | None:
        """Seconds until the cluster serves again (None: the DB cannot say).

        A node started on a freshly booted guest takes long to come up, and until
        a leader re-commits what the quorum holds, final reads would find acked
        entries only beyond every node's commit index: the power fault ends when
        the cluster is back, not when the processes are.
        """
        from harness.core.db import WaitsReady

        if not isinstance(ctx.db, WaitsReady):
            return None
        t0 = time.monotonic()
        try:
            ctx.db.wait_ready(ctx)
        except Exception as e:  # noqa: BLE001 - the run goes on; the log says so
            log.warning("cluster not ready after power-on: %s", e)
        return round(time.monotonic() - t0, 2)

    def _restore(
        self, ctx: RunContext, nodes: list[str]
    ) -> tuple[list[str], dict[str, float], list[str], dict[str, str]]:
        machines = self._machines(ctx)
        db = self._db(ctx)
        boot_s: dict[str, float] = {}
        restarted: list[str] = []

        def one(node: str) -> None:
            remote = ctx.remotes[node]
            machines[node].power_on()
            boot_s[node] = round(await_boot(remote, self.boot_timeout), 2)
            self.off.discard(node)
            journal.clear(ctx, node, "power", "machine")
            pidfiles = journal.db_pidfiles(ctx, node)
            if pidfiles:
                remote.run(_stale_pidfiles_cmd(pidfiles), timeout=30)
            db.start(ctx, node)
            restarted.append(node)
            if self.killed_by is not None:
                self.killed_by.dead.discard(node)  # started here: a second start would collide

        errors = host_errors(on_nodes(nodes, one))
        return sorted(boot_s), boot_s, sorted(restarted), errors

    def teardown(self, ctx: RunContext) -> None:
        if self.off:
            log_errors("powering on", self._restore(ctx, sorted(self.off))[3])


class VmPauseNemesis:
    """``start-vm-pause`` suspends whole guests (QMP stop); ``stop-vm-pause`` resumes them."""

    def __init__(self) -> None:
        self.paused: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-vm-pause", "stop-vm-pause"}

    def _machines(self, ctx: RunContext) -> dict[str, Machine]:
        return machines_of([ctx.hosts[n] for n in ctx.nodes], "vm-pause")

    def setup(self, ctx: RunContext) -> None:
        self._machines(ctx)
        self.paused = set()

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        machines = self._machines(ctx)
        if op.f == "start-vm-pause":
            value = dict(op.value or {})
            nodes = op_nodes(ctx, value)
            if not nodes:
                return no_targets(op, value)
            value["nodes"] = nodes

            def pause(node: str) -> None:
                journal.note(
                    ctx,
                    node,
                    "vm-pause",
                    "machine",
                    {"machine": machines[node].name},
                    "whole guest paused",
                )
                machines[node].suspend()
                self.paused.add(node)

            errors = host_errors(on_nodes(nodes, pause))
            value["paused"] = [n for n in nodes if n not in errors]
            return completion(op, value, errors)
        if op.f == "stop-vm-pause":
            nodes = sorted(self.paused)
            errors = self._resume(ctx, nodes)
            return completion(op, {"nodes": [n for n in nodes if n not in errors]}, errors)
        raise NemesisError(f"vm-pause nemesis cannot handle {op.f!r}")

    def _resume(self, ctx: RunContext, nodes: list[str]) -> dict[str, str]:
        machines = self._machines(ctx)

        def one(node: str) -> None:
            machines[node].resume()
            self.paused.discard(node)
            journal.clear(ctx, node, "vm-pause", "machine")

        return host_errors(on_nodes(nodes, one))

    def teardown(self, ctx: RunContext) -> None:
        if self.paused:
            log_errors("resuming guest", self._resume(ctx, sorted(self.paused)))


def _undo_machine(remote: Remote | None, entry: JournalRecord) -> None:
    """Power on or resume the guest through its hypervisor (the one way to reach it)."""
    machine = remote.host.machine if remote is not None else None
    if machine is None or remote is None:
        raise ValueError(
            f"undoing {entry.describe()} needs the VM lab's hold on guest "
            f"{entry.undo.get('machine', entry.host)} (run with the same --lab, or "
            "`splitbrain lab down`)"
        )
    restore(remote, machine)


def machine_down(host: Host) -> str | None:
    """A guest its hypervisor holds off or paused (asked locally: SSH cannot reach it)."""
    if host.machine is None:
        return None
    try:
        state = host.machine.state()
    except Exception as e:  # noqa: BLE001 - reported as the leftover
        return f"guest state unknown: {e}"
    return None if state == "running" else f"guest is {state}"


def _wake(host: Host, remote: Remote | None) -> None:
    if host.machine is not None and machine_down(host) is not None:
        how = restore(remote, host.machine)
        log.warning("%s: guest was not running: %s", host.name, how)


_GUEST = Residue(kind="machine", local=machine_down, cure_local=_wake)
"""A guest left off or paused, journaled or not: seen and cured from this machine."""

POWER_OFF = JournalKind(
    name="power",
    rank=10,
    undo=_undo_machine,
    doc="a guest powered off by its hypervisor: booted, clock set, stale pid files removed",
)
GUEST_PAUSED = JournalKind(
    name="vm-pause",
    rank=11,
    undo=_undo_machine,
    doc="a guest stopped by its hypervisor: resumed",
)


def _link_power(nem: PowerNemesis, built: Mapping[str, object]) -> None:
    """A power cut ends a kill (the node restarts with its guest) and a pause (its processes are gone)."""
    from nemesis.process import KillNemesis, PauseNemesis

    kill, pause = built.get("kill"), built.get("pause")
    nem.killed_by = kill if isinstance(kill, KillNemesis) else None
    nem.paused_by = pause if isinstance(pause, PauseNemesis) else None


POWER = Fault(
    name="power",
    nemesis=lambda chosen: PowerNemesis(),
    heal_rank=20,
    draw=lambda d: draw_target(d, "power"),
    options=NodeFaultOptions,
    needs=frozenset({"machine"}),
    link=_link_power,
    journal=(POWER_OFF,),
    residue=_GUEST,
    effects=Effects(kills=True, loses_writes=True),
    # "cut": the guests whose power went; "restarted": whose DB came back with them.
    periods=Periods(hit=("cut",), ended=("restarted", "nodes")),
    colour="#6d597a",
    doc="the guest's power cut (its page cache lost); VM hosts only",
)
VM_PAUSE = Fault(
    name="vm-pause",
    nemesis=lambda chosen: VmPauseNemesis(),
    heal_rank=10,
    draw=lambda d: draw_target(d, "vm-pause"),
    options=NodeFaultOptions,
    needs=frozenset({"machine"}),
    journal=(GUEST_PAUSED,),
    residue=_GUEST,
    effects=Effects(pauses=True),
    periods=Periods(hit=("paused", "nodes"), ended=("nodes",)),
    colour="#b56576",
    doc="the whole guest stopped by its hypervisor; VM hosts only",
)
