"""Role scripts: every fault aimed at each role a DB declares, and at pairs of roles at once.

A DB with several kinds of process (``HasRoles``, harness/core/roles.py: RocketMQ's
name servers, controllers, the master and its slaves) fails in ways that depend on which
kind a fault hits: a slave killed is routine, the controllers' leader killed while the
master is killed too is the case an election protocol must get right. The stock motifs
aim at "the leader" or at random nodes, so they meet such cases only by chance. The deck
(:mod:`nemesis.deck`) adds these two scripts for a DB that declares roles:

  role-each   for each role in the DB's order, one node of it killed, then one paused,
              then one cut off from every other node (clients still reach it), each
              healed before the next.
  role-pairs  for each pair of roles, a node of each killed together; then either both
              cut off together from the rest (a master and a slave cut off from the
              controllers and name servers) or the two cut off from each other only
              (a master that cannot reach the controllers' leader), one drawn per pair.

The roles come from the DB when the deck draws the script (which roles and pairs, so
the steps) and again when each fault lands (which node holds the role now: masters
move); a role with nobody in it when a fault lands falls back to the nodes it had when
the script was drawn, and the value says so. Roles that name exactly the same nodes are
one aim (:func:`nemesis.targets.role_aims`). Every value names its role(s), so the
history tells which role each fault hit, and ``held`` maps each node hit to the role it was
hit for, so a replay (:mod:`nemesis.recorded`) aims at whoever holds that role then.

Pure like every script: plain :class:`~nemesis.schedules.Step` data whose builders ask
the DB only for its roles.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import nemesis.grudge as g
from harness.core.errors import ConfigError
from harness.core.roles import roles_now
from nemesis.schedules import Step, scaled, start, stop
from nemesis.targets import pick_in_role, role_aims

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["ROLE_MOTIFS", "ROLE_KINDS", "NO_ROLES", "role_steps"]

ROLE_MOTIFS = ("role-each", "role-pairs")
ROLE_KINDS = ("kill", "pause", "partition")
"""What role-each aims at every role (role-pairs: kill and partition)."""
NO_ROLES = "the DB declares no process roles (HasRoles)"
"""Why the deck leaves the role scripts out for a DB without roles."""
FALLBACK = "the DB named no roles when the script was drawn: the first node against the rest"


def _fallback(nodes: Sequence[str]) -> dict[str, list[str]]:
    """Two stand-in roles, so a script drawn while the DB could not answer still plays
    (and :func:`nemesis.deck.script_faults` can read its fault kinds without a DB)."""
    return {"first": [nodes[0]], "rest": list(nodes[1:])}


class _Aim:
    """The roles a script was drawn with, asked again when each of its faults lands."""

    def __init__(self, nodes: list[str], drawn: Mapping[str, Sequence[str]], rng: random.Random):
        self.nodes, self.drawn, self.rng = nodes, drawn, rng
        self.fallback = not drawn
        if self.fallback:
            self.drawn = _fallback(nodes)

    def node(self, ctx: RunContext, role: str, avoid: Sequence[str] = ()) -> tuple[str, bool]:
        """One node holding ``role`` now (a seeded pick), and whether it is the drawn one
        because nobody holds the role now."""
        now = [] if self.fallback else roles_now(ctx.db, ctx).get(role, [])
        stale = not now
        got = pick_in_role(now or self.drawn.get(role, ()), self.rng, avoid)
        if got is None:  # nobody at the draw either: any node but the pair's other
            got = pick_in_role(self.nodes, self.rng, avoid)
        return (got if got is not None else self.nodes[0]), stale

    def note(self, value: dict[str, Any], stale: bool) -> dict[str, Any]:
        if self.fallback:
            value["aimed"] = FALLBACK
        elif stale:
            value["stale"] = (
                "nobody held the role when the fault landed: its node at the draw (a seeded "
                "pick when it had none then either)"
            )
        return value

    def one(self, kind: str, role: str) -> Callable[[RunContext], dict[str, Any]]:
        """A kill or pause of one node of ``role``, or its cut from every other node."""

        def build(ctx: RunContext) -> dict[str, Any]:
            n, stale = self.node(ctx, role)
            if kind == "partition":
                rest = [x for x in self.nodes if x != n]
                grudge = g.complete_grudge([[n], rest])
                value = {
                    "shape": "role",
                    "role": role,
                    "isolated": n,
                    "grudge": g.grudge_to_json(grudge),
                }
            else:
                value = {"nodes": [n], "role": role, "why": "role-each"}
            value["held"] = {n: role}  # whom a replay aims at: the role's holder then
            return self.note(value, stale)

        return build

    def two(self, kind: str, a: str, b: str) -> Callable[[RunContext], dict[str, Any]]:
        """A node of ``a`` and one of ``b`` killed together, cut off together from the rest
        (``together``), or cut off from each other only (``apart``)."""

        def build(ctx: RunContext) -> dict[str, Any]:
            x, stale_a = self.node(ctx, a)
            y, stale_b = self.node(ctx, b, avoid=[x])
            pair = sorted({x, y}, key=self.nodes.index)
            roles = [a, b]
            if kind == "kill":
                value: dict[str, Any] = {"nodes": pair, "roles": roles, "why": "role-pairs"}
            elif kind == "together":
                rest = [n for n in self.nodes if n not in pair]
                grudge = g.complete_grudge([pair, rest]) if rest else {}
                value = {"shape": "roles-together", "roles": roles, "with": pair,
                         "grudge": g.grudge_to_json(grudge)}  # fmt: skip
            else:
                grudge = {x: frozenset({y}), y: frozenset({x})} if x != y else {}
                value = {"shape": "roles-apart", "roles": roles, "with": pair,
                         "grudge": g.grudge_to_json(grudge)}  # fmt: skip
            value["held"] = {x: a} if x == y else {x: a, y: b}
            return self.note(value, stale_a or stale_b)

        return build


def _round(rng: random.Random, hold: float, kind: str, value: Any) -> list[Step]:
    return [
        start(scaled(rng, hold, 0.3, 0.6), kind, value),
        stop(scaled(rng, hold, 0.6, 1.0), kind),
    ]


def role_steps(
    name: str,
    nodes: Sequence[str],
    rng: random.Random,
    hold: float,
    roles: Mapping[str, Sequence[str]] | None = None,
) -> list[Step]:
    """One role script's steps for the roles the DB declared at the draw (None or empty:
    two stand-in roles, see :func:`_fallback`). Every fault it starts, it stops."""
    if name not in ROLE_MOTIFS:
        raise ConfigError(
            f"unknown role script {name!r} (known: {', '.join(ROLE_MOTIFS)})", field="profiles"
        )
    if len(nodes) < 2:
        raise ConfigError(f"role script {name!r} needs at least 2 nodes", field="nodes")
    aim = _Aim(list(nodes), dict(roles or {}), rng)
    singles, pairs = role_aims(aim.drawn)
    steps: list[Step] = []
    if name == "role-each":
        for role in singles:
            for kind in ROLE_KINDS:
                steps += _round(rng, hold, kind, aim.one(kind, role))
        return steps
    if not pairs and len(singles) >= 2:  # every role within another: the first two
        pairs = [(singles[0], singles[1])]
    elif not pairs:  # one role only: the stand-ins
        aim.drawn, aim.fallback = _fallback(nodes), True
        pairs = [("first", "rest")]
    for a, b in pairs:
        steps += _round(rng, hold, "kill", aim.two("kill", a, b))
        shape = rng.choice(("together", "apart"))
        steps += _round(rng, hold, "partition", aim.two(shape, a, b))
    return steps
