"""Process faults through the DB's own capabilities: kill/restart and pause/resume.

The nemesis never guesses how a DB runs: it probes ``Killable`` and
``Pausable`` (harness/core/db.py) and remembers which nodes it broke, so the cure
touches exactly those (a second ``start`` of a running DB could collide with
it). ``HostFreezeNemesis`` freezes a whole lab host through its freezer cgroup
when the inventory provides one.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from harness.core.db import Killable, Pausable
from harness.core.errors import NemesisError
from harness.core.fault import Effects, Fault, JournalKind, JournalRecord, Periods, Residue
from nemesis import journal
from nemesis.base import completion, host_errors, log_errors, no_targets, on_nodes, op_nodes
from nemesis.targets import NodeFaultOptions, draw_target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from harness.core.history import Op
    from harness.core.remote import Host, Remote
    from harness.core.spec import RunContext

__all__ = [
    "KillNemesis",
    "PauseNemesis",
    "HostFreezeNemesis",
    "KILL",
    "PAUSE",
    "FREEZE",
    "frozen",
    "thaw",
]

log = logging.getLogger(__name__)


class KillNemesis:
    """``start-kill`` SIGKILLs the DB on the chosen nodes; ``stop-kill`` restarts the dead ones."""

    def __init__(self) -> None:
        self.dead: set[str] = set()
        self.paused_by: PauseNemesis | None = None

    def fs(self) -> set[str]:
        return {"start-kill", "stop-kill"}

    def _db(self, ctx: RunContext) -> Any:
        from harness.core.db import Killable

        if not isinstance(ctx.db, Killable):
            raise NemesisError(
                f"the DB {type(ctx.db).__name__} cannot be killed and restarted (not Killable)"
            )
        return ctx.db

    def setup(self, ctx: RunContext) -> None:
        self._db(ctx)
        self.dead = set()

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        db = self._db(ctx)
        if op.f == "start-kill":
            value = dict(op.value or {})
            nodes = op_nodes(ctx, value)
            if not nodes:
                return no_targets(op, value)

            def kill(node: str) -> None:
                db.kill(ctx, node)
                self.dead.add(node)
                if self.paused_by is not None:
                    self.paused_by.paused.discard(node)

            errors = host_errors(on_nodes(nodes, kill))
            value["nodes"] = nodes
            value["killed"] = [n for n in nodes if n not in errors]
            return completion(op, value, errors)
        if op.f == "stop-kill":
            restarted, errors = self._restart(ctx)
            return completion(op, {"nodes": restarted}, errors)
        raise NemesisError(f"kill nemesis cannot handle {op.f!r}")

    def _restart(self, ctx: RunContext) -> tuple[list[str], dict[str, str]]:
        db = self._db(ctx)
        dead = sorted(self.dead)

        def start(node: str) -> None:
            db.start(ctx, node)
            self.dead.discard(node)

        errors = host_errors(on_nodes(dead, start))
        return [n for n in dead if n not in errors], errors

    def teardown(self, ctx: RunContext) -> None:
        if self.dead:
            log_errors("restarting killed node", self._restart(ctx)[1])


class PauseNemesis:
    """``start-pause`` SIGSTOPs the DB on the chosen nodes; ``stop-pause`` resumes them."""

    def __init__(self) -> None:
        self.paused: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-pause", "stop-pause"}

    def _db(self, ctx: RunContext) -> Any:
        from harness.core.db import Pausable

        if not isinstance(ctx.db, Pausable):
            raise NemesisError(f"the DB {type(ctx.db).__name__} cannot be paused (not Pausable)")
        return ctx.db

    def setup(self, ctx: RunContext) -> None:
        self._db(ctx)
        self.paused = set()

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        db = self._db(ctx)
        if op.f == "start-pause":
            value = dict(op.value or {})
            nodes = op_nodes(ctx, value)
            if not nodes:
                return no_targets(op, value)

            def pause(node: str) -> None:
                journal.note(
                    ctx,
                    node,
                    "sigstop",
                    "db",
                    {"pidfiles": journal.db_pidfiles(ctx, node)},
                    "DB process stopped (SIGSTOP)",
                )
                db.pause(ctx, node)
                self.paused.add(node)

            errors = host_errors(on_nodes(nodes, pause))
            value["nodes"] = nodes
            value["paused"] = [n for n in nodes if n not in errors]
            return completion(op, value, errors)
        if op.f == "stop-pause":
            resumed, errors = self._resume(ctx)
            return completion(op, {"nodes": resumed}, errors)
        raise NemesisError(f"pause nemesis cannot handle {op.f!r}")

    def _resume(self, ctx: RunContext) -> tuple[list[str], dict[str, str]]:
        db = self._db(ctx)
        paused = sorted(self.paused)

        def resume(node: str) -> None:
            db.resume(ctx, node)
            self.paused.discard(node)
            journal.clear(ctx, node, "sigstop", "db")

        errors = host_errors(on_nodes(paused, resume))
        return [n for n in paused if n not in errors], errors

    def teardown(self, ctx: RunContext) -> None:
        if self.paused:
            log_errors("resuming paused node", self._resume(ctx)[1])


def freeze_file(cgroup: str) -> tuple[str, str, str]:
    """(control file, frozen value, thawed value) for a cgroup v2 or v1 freezer directory."""
    if os.path.exists(os.path.join(cgroup, "cgroup.freeze")):
        return os.path.join(cgroup, "cgroup.freeze"), "1", "0"
    return os.path.join(cgroup, "freezer.state"), "FROZEN", "THAWED"


class HostFreezeNemesis:
    """Freeze whole lab hosts (every process in them, sshd included) through their cgroup.

    The cgroup lives on this machine (``Host.extras["cgroup"]``), so it is
    written locally: a frozen host could not be reached over SSH to thaw it.
    Records ``start-pause``/``stop-pause`` with ``"mode": "freeze"``; use it
    instead of :class:`PauseNemesis`, not beside it.
    """

    def __init__(self) -> None:
        self.frozen: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-pause", "stop-pause"}

    def _cgroup(self, ctx: RunContext, node: str) -> str:
        cg = ctx.hosts[node].extras.get("cgroup") if node in ctx.hosts else None
        if not cg or not os.path.isdir(str(cg)):
            raise NemesisError(f"{node}: no local freezer cgroup to freeze this host with")
        return str(cg)

    def _write(self, ctx: RunContext, node: str, frozen: bool) -> None:
        path, on, off = freeze_file(self._cgroup(ctx, node))
        with open(path, "w") as fh:
            fh.write(on if frozen else off)

    def setup(self, ctx: RunContext) -> None:
        for n in ctx.nodes:
            self._cgroup(ctx, n)
        self.teardown_nodes(ctx, ctx.nodes)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        if op.f == "start-pause":
            value = dict(op.value or {})
            nodes = op_nodes(ctx, value)
            if not nodes:
                return no_targets(op, value)

            def freeze(node: str) -> None:
                cg = self._cgroup(ctx, node)
                journal.note(ctx, node, "freeze", cg, {"cgroup": cg}, "whole host frozen")
                self._write(ctx, node, True)
                self.frozen.add(node)

            errors = host_errors(on_nodes(nodes, freeze))
            return completion(op, {**value, "mode": "freeze", "nodes": nodes}, errors)
        if op.f == "stop-pause":
            nodes = sorted(self.frozen)
            errors = self.teardown_nodes(ctx, nodes)
            return completion(op, {"mode": "freeze", "nodes": nodes}, errors)
        raise NemesisError(f"freeze nemesis cannot handle {op.f!r}")

    def teardown_nodes(self, ctx: RunContext, nodes: list[str]) -> dict[str, str]:
        def thaw(node: str) -> None:
            self._write(ctx, node, False)
            self.frozen.discard(node)
            journal.clear(ctx, node, "freeze", self._cgroup(ctx, node))

        return host_errors(on_nodes(nodes, thaw))

    def teardown(self, ctx: RunContext) -> None:
        log_errors("thawing host", self.teardown_nodes(ctx, list(ctx.nodes)))


def frozen(host: Host) -> str | None:
    """Whether ``host``'s freezer cgroup (on this machine) is frozen: a description, or None."""
    cg = host.extras.get("cgroup")
    if not cg or not os.path.isdir(str(cg)):
        return None
    for fname, on in (("cgroup.freeze", "1"), ("freezer.state", "FROZEN")):
        try:
            with open(os.path.join(str(cg), fname)) as fh:
                if fh.read().strip() == on:
                    return f"cgroup {cg} is frozen"
        except OSError:
            continue
    return None


def thaw(cgroup: str) -> None:
    """Thaw a freezer cgroup of this machine (absent: nothing to do)."""
    if os.path.isdir(cgroup):
        path, _on, off = freeze_file(cgroup)
        with open(path, "w") as fh:
            fh.write(off)


def _thaw_host(host: Host, remote: Remote | None) -> None:
    if frozen(host) is not None:
        thaw(str(host.extras["cgroup"]))


def _undo_freeze(remote: Remote | None, entry: JournalRecord) -> None:
    thaw(str(entry.undo["cgroup"]))


def _undo_sigstop(remote: Remote | None, entry: JournalRecord) -> None:
    remote = journal.connected(remote, entry)
    kw = {"sudo": True} if remote.host.user != "root" else {}
    for pf in entry.undo.get("pidfiles", []):
        remote.signal_daemon(str(pf), "CONT", **kw)


FROZEN = JournalKind(
    name="freeze",
    rank=12,
    undo=_undo_freeze,
    local=True,
    doc="a lab host's freezer cgroup, on this machine: thawed",
)
SIGSTOPPED = JournalKind(
    name="sigstop",
    rank=40,
    undo=_undo_sigstop,
    doc="the DB's processes stopped with SIGSTOP: sent SIGCONT by pid file",
)


def _link_kill(nem: KillNemesis, built: Mapping[str, object]) -> None:
    """A kill ends a pause of the same node (the stopped process is gone)."""
    pause = built.get("pause")
    nem.paused_by = pause if isinstance(pause, PauseNemesis) else None


PAUSED = Periods(hit=("paused", "nodes"), ended=("nodes",))
"""A pause's periods: ``paused`` (a freeze names only ``nodes``), ended by the resumed ``nodes``."""

KILL = Fault(
    name="kill",
    nemesis=lambda chosen: KillNemesis(),
    heal_rank=70,
    draw=lambda d: draw_target(d, "kill"),
    options=NodeFaultOptions,
    db_needs=(Killable,),
    link=_link_kill,
    effects=Effects(kills=True),
    periods=Periods(hit=("killed", "nodes"), ended=("nodes",)),
    colour="#8e44ad",
    doc="SIGKILL to the DB's processes (Killable), restarted on heal",
)
PAUSE = Fault(
    name="pause",
    nemesis=lambda chosen: PauseNemesis(),
    heal_rank=60,
    draw=lambda d: draw_target(d, "pause"),
    options=NodeFaultOptions,
    db_needs=(Pausable,),
    journal=(SIGSTOPPED,),
    effects=Effects(pauses=True),
    periods=PAUSED,
    colour="#29335c",
    doc="SIGSTOP to the DB's processes (Pausable), SIGCONT on heal",
)
FREEZE = Fault(
    name="freeze",
    kind="pause",
    nemesis=lambda chosen: HostFreezeNemesis(),
    heal_rank=60,
    draw=lambda d: draw_target(d, "pause"),
    options=NodeFaultOptions,
    journal=(FROZEN,),
    residue=Residue(kind="frozen", local=frozen, cure_local=_thaw_host),
    effects=Effects(pauses=True),
    periods=PAUSED,  # one op kind, one meaning: freeze records start-pause like pause
    colour="#29335c",
    doc="a whole lab host paused through its freezer cgroup (sshd too); records start-pause",
)
