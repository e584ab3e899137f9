"""Which nodes a fault hits: pure choices from a node list and a seeded rng.

``leader`` is the one target that needs the live cluster; the schedule leaves it
symbolic and the nemesis resolves it when it applies the fault, through the
DB's ``HasPrimaries`` capability.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["TARGETS", "NODE_TARGETS", "resolve", "resolve_leader"]

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
