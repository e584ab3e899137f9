"""Which nodes a fault hits: pure choices from a node list and a seeded rng.

``leader`` is the one target that needs the live cluster; the schedule leaves it
symbolic and the nemesis resolves it when it applies the fault, through the
DB's ``HasPrimaries`` capability.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from harness.core.errors import ConfigError, NemesisError
from harness.core.fault import Draw
from harness.core.options import option

__all__ = [
    "TARGETS",
    "NODE_TARGETS",
    "DEFAULT_TARGETS",
    "NodeFaultOptions",
    "resolve",
    "resolve_leader",
    "draw_target",
    "role_aims",
    "pick_in_role",
]

TARGETS = ("one", "minority", "majority", "all", "random", "leader")
NODE_TARGETS = ("one", "minority", "majority", "all", "random")
"""Targets resolvable without asking the cluster anything."""


def resolve(target: str, nodes: Sequence[str], rng: random.Random) -> list[str]:
    """Nodes for a target, in the order of ``nodes``.

    ``minority`` is a random set of the largest minority size (at least one
    node); ``majority`` a random smallest majority; ``random`` a random
    non-empty subset of any size.
    """
    ns = list(nodes)
    if not ns:
        raise ValueError("no nodes to choose from")
    n = len(ns)
    if target == "one":
        k = 1
    elif target == "minority":
        k = max(1, (n - 1) // 2)
    elif target == "majority":
        k = n // 2 + 1
    elif target == "all":
        return ns
    elif target == "random":
        k = rng.randint(1, n)
    elif target == "leader":
        raise ValueError("target 'leader' is resolved by the nemesis (needs the DB's primaries)")
    else:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    chosen = set(rng.sample(ns, k))
    return [x for x in ns if x in chosen]


def resolve_leader(primaries: Sequence[str], nodes: Sequence[str], rng: random.Random) -> list[str]:
    """One of the current primaries (several may believe they lead); empty if none is known."""
    known = [p for p in primaries if p in nodes]
    return [rng.choice(sorted(known))] if known else []


DEFAULT_TARGETS = ("one", "minority", "majority", "all", "leader", "random")
"""Whom a node fault may hit when no ``targets`` option says otherwise (in draw order)."""

Target = Literal["one", "minority", "majority", "all", "random", "leader"]


@dataclass(frozen=True)
class NodeFaultOptions:
    """The ``--nemesis-option`` keys of a fault aimed at nodes (``kill_targets=leader``)."""

    targets: tuple[Target, ...] = option(DEFAULT_TARGETS, "whom the fault may hit")

    def __post_init__(self) -> None:
        if not self.targets:
            raise ConfigError(
                f"a node fault needs at least one target; known: {', '.join(TARGETS)}",
                field="targets",
            )


def draw_target(d: Draw, kind: str) -> dict[str, Any]:
    """``{"target": t, "nodes": [...]}`` for a node fault, ``leader`` left symbolic.

    Two draws from ``d.rng`` (the target, then the nodes), the order every seeded
    schedule since the first has used.
    """
    targets = [t for t in d.targets if t != "leader" or d.leader_ok]
    if not targets:
        raise NemesisError(
            f"{kind}: the only target is 'leader' and the DB does not report primaries"
        )
    target = d.rng.choice(targets)
    value: dict[str, Any] = {"target": target}
    if target != "leader":
        value["nodes"] = resolve(target, d.nodes, d.rng)
    return value


def role_aims(
    roles: Mapping[str, Sequence[str]],
) -> tuple[list[str], list[tuple[str, str]]]:
    """The roles to aim at one at a time, and the pairs of roles to aim at together.

    Singles: every role, in the DB's order, less a role whose nodes are exactly an
    earlier role's (an embedded controller's name servers are one aim, named by the
    first). A role with no node now (no master during an election) is kept: its node is
    found when the fault lands. Pairs: every two singles neither of whose node sets holds
    the other's (``controller`` with ``controller-leader`` is the controllers again), in
    order; a role with no node now pairs with every other (its nesting is unknown).
    """
    singles: list[str] = []
    seen: list[frozenset[str]] = []
    for role, nodes in roles.items():
        ns = frozenset(nodes)
        if not ns or ns not in seen:
            singles.append(role)
            seen.append(ns)
    sets = dict(zip(singles, seen, strict=True))

    def nested(a: frozenset[str], b: frozenset[str]) -> bool:
        return bool(a and b) and (a <= b or b <= a)

    pairs = [(a, b) for a, b in combinations(singles, 2) if not nested(sets[a], sets[b])]
    return singles, pairs


def pick_in_role(nodes: Sequence[str], rng: random.Random, avoid: Sequence[str] = ()) -> str | None:
    """One node of a role (a seeded pick), one not in ``avoid`` when there is one, so a
    pair of roles hits two nodes; None for a role with no node."""
    ns = sorted(nodes)
    if not ns:
        return None
    free = [n for n in ns if n not in avoid]
    return rng.choice(free or ns)
