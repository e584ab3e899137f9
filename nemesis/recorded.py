"""A schedule that plays back the faults a run recorded (``schedule.json``), at their offsets.

``splitbrain replay`` and ``splitbrain shrink`` need the faults of a red run again, not the
draws of its seed: the same kinds, values and hold times, at the same offsets from the
start of the load. Timing is absolute (every wait is computed from the first ``next``
call, the start of the load, on the history clock), so a slow fault does not push every
later one back.

Aim: the schedule keeps one renaming of the recorded nodes onto the replay's, identity at
first. A fault recorded while a leader was known is aimed at the same ROLE: the renaming is
updated so that the recorded leader maps to the leader now (the two swap places), and
every node name of the value (``nodes``, the partition's ``grudge``) is renamed. So a kill
of "the leader" kills today's leader, a partition that isolated the leader isolates
today's, a kill of two followers stays a kill of two followers, and, since the renaming
persists, a later fault recorded while nobody led (figure 8's pause of the old leader's
side, during an election) still follows the nodes the earlier faults picked. A value
whose ``target`` is ``leader`` and that names no nodes is left to the nemesis, which
resolves it when it applies the fault. With no leader known now (an election under way)
the step waits up to ``leader_wait_s`` for one, then lands under the current renaming.

A fault of the role scripts (:mod:`nemesis.role_motifs`, a DB that declares ``HasRoles``)
names in ``held`` the role each node was hit for; the replay asks the DB's roles as it
lands and moves each such node onto one holding that role now (the node the renaming
already gives, if it still holds the role), by the same transpositions. So a kill of
"the master and a controller" hits today's master and a controller, wherever the roles
moved; a role nobody holds now keeps the renaming.

Pure apart from asking the DB who leads (``nemesis.base.leader_now`` through
:func:`nemesis.schedules.leader_within`); the events are plain data, so a unit test steps it
with a stand-in context.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.op import Op
from harness.core.roles import roles_now
from nemesis.schedules import Retry, fault_op, leader_within, now_s

if TYPE_CHECKING:
    from harness.core.nemesis import PlannedFault
    from harness.core.spec import RunContext

__all__ = [
    "REPLAY_VERSION",
    "Event",
    "events_of",
    "rename_nodes",
    "swap_nodes",
    "aim_leader",
    "aim_roles",
    "RecordedSchedule",
]


REPLAY_VERSION = 3
"""How faults are aimed in a replay; a shrink ledger judged under another version is not
reused (1: each fault's leader swapped alone; 2: one renaming kept across the run; 3: and
role-script faults moved onto their roles' holders now)."""


@dataclass(frozen=True)
class Event:
    """One op to replay: at ``offset_s`` from the load start, ``f`` with ``value``.

    ``leader`` is who led when it was recorded (None: unknown, aim at the nodes).
    """

    offset_s: float
    f: str
    value: Any
    leader: str | None = None
    fault_id: int | None = None


def events_of(faults: Sequence[Mapping[str, Any]], time_limit: float | None = None) -> list[Event]:
    """The start and (when the run had one before its final heal) stop op of each fault,
    in time order; ops at or past ``time_limit`` are dropped (the final heal stops them)."""
    out: list[Event] = []
    for fault in faults:
        leader = fault.get("leader") if fault.get("aim") == "role" else None
        fid = fault.get("id")
        out.append(
            Event(float(fault["offset_s"]), str(fault["f"]), fault.get("value"), leader, fid)
        )
        stop = fault.get("stop")
        if stop:
            out.append(
                Event(float(stop["offset_s"]), str(stop["f"]), stop.get("value"), leader, fid)
            )
    out.sort(key=lambda e: (e.offset_s, 0 if e.f.startswith("stop-") else 1))
    if time_limit is not None:
        out = [e for e in out if e.offset_s < time_limit]
    return out


def rename_nodes(value: Any, mapping: Mapping[str, str]) -> Any:
    """``value`` with every node name renamed by ``mapping`` wherever it appears as a whole
    string (list items, dict keys, dict values); other strings are left alone."""

    def one(x: Any) -> Any:
        if isinstance(x, str):
            return mapping.get(x, x)
        if isinstance(x, list):
            return [one(y) for y in x]
        if isinstance(x, dict):
            return {one(k): one(v) for k, v in x.items()}
        return x

    return one(value)


def swap_nodes(value: Any, a: str, b: str) -> Any:
    """``value`` with node names ``a`` and ``b`` exchanged: the transposition that moves a
    fault's relation to the old leader ``a`` onto the new leader ``b``."""
    return value if a == b else rename_nodes(value, {a: b, b: a})


def aim_leader(mapping: dict[str, str], recorded: str, now: str) -> None:
    """Update the renaming (a permutation) in place so that ``recorded`` maps to ``now``:
    the node that mapped to ``now`` takes ``recorded``'s old image."""
    if mapping.get(recorded, recorded) == now:
        return
    inverse = {v: k for k, v in mapping.items()}
    other = inverse.get(now, now)
    mapping[other], mapping[recorded] = mapping.get(recorded, recorded), now


def aim_roles(
    mapping: dict[str, str], held: Mapping[str, str], now: Mapping[str, Sequence[str]]
) -> None:
    """Update the renaming in place so each recorded node of ``held`` (node -> the role it
    was hit for) maps to a node holding that role in ``now`` (role -> nodes), two recorded
    nodes never onto one. A node whose image still holds its role stays; one whose role
    nobody holds now keeps its image. Deterministic: the first free holder in ``now``'s
    order."""
    used: set[str] = set()
    for recorded, role in held.items():
        holders = [n for n in now.get(role, ()) if n not in used]
        image = mapping.get(recorded, recorded)
        if image in holders or not holders:
            used.add(image)
            continue
        aim_leader(mapping, recorded, holders[0])
        used.add(holders[0])


class RecordedSchedule:
    """Plays :class:`Event` s at their offsets from the first ``next`` call (the load start)."""

    def __init__(
        self,
        events: Sequence[Event],
        *,
        rng: random.Random,
        leader_wait_s: float = 2.0,
    ) -> None:
        self.events = list(events)
        self.rng = rng
        self.leader_wait_s = leader_wait_s
        self.start_s: float | None = None
        self.pos = 0
        self.retry: float | None = None
        self.deadlines: dict[str, float] = {}
        self.mapping: dict[str, str] = {}
        """Recorded node -> replay node (a permutation; absent: itself)."""
        self.landed: list[tuple[float, str]] = []
        """``(offset_s, f)`` of every op handed to the runner (for tests and the log)."""

    def next(self, ctx: RunContext) -> tuple[float, PlannedFault] | None:
        now = now_s(ctx)
        if self.start_s is None:
            self.start_s = now
        if self.pos >= len(self.events):
            return None
        ev = self.events[self.pos]
        if self.retry is not None:
            wait, self.retry = self.retry, None
        else:
            wait = max(0.0, self.start_s + ev.offset_s - now)
        return wait, self._planned(ev)

    def _planned(self, ev: Event) -> PlannedFault:
        def at_landing(ctx: RunContext) -> Op | None:
            value = self.aim(ctx, ev)
            if isinstance(value, Retry):
                self.retry = value.after
                return None
            self.pos += 1
            self.landed.append((now_s(ctx) - (self.start_s or 0.0), ev.f))
            return fault_op(ev.f, value)

        return at_landing

    def aim(self, ctx: RunContext, ev: Event) -> Any:
        """The value to apply now: the recorded one under the renaming, its leader (when one
        was known) moved onto today's."""
        value = ev.value
        if ev.leader is not None and not ev.f.startswith("stop-"):
            now = leader_within(
                ctx, self.rng, None, self.deadlines, f"event-{self.pos}", self.leader_wait_s
            )
            if isinstance(now, Retry):
                return now
            if now is not None:
                aim_leader(self.mapping, ev.leader, now)
        held = value.get("held") if isinstance(value, dict) else None
        if isinstance(held, dict) and held and not ev.f.startswith("stop-"):
            aim_roles(self.mapping, held, roles_now(ctx.db, ctx))
        if isinstance(value, dict) and value.get("target") == "leader" and not value.get("nodes"):
            return value  # the nemesis resolves "leader" when it applies the fault
        return rename_nodes(value, self.mapping)
