"""Partitions as data: a grudge maps each node to the nodes whose packets it drops.

Every shape is built as a networkx graph of who may still talk to whom, then
turned into a grudge by :func:`grudge_from_graph`, so the shapes stay pure,
symmetric by construction, and testable as literal maps (Jepsen's nemesis
tests). Randomness comes only from the ``random.Random`` passed in, so a seeded
run picks the same partitions again.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

import networkx as nx

__all__ = [
    "Grudge",
    "SHAPES",
    "grudge_from_graph",
    "complete_grudge",
    "bisect",
    "halves",
    "majority_minority",
    "majorities_ring",
    "bridge",
    "isolate",
    "random_partition",
    "build_shape",
    "grudge_to_json",
    "grudge_from_json",
    "is_symmetric",
    "visible",
    "MIN_NODES",
    "cuts",
    "cuts_nothing",
]

Grudge = Mapping[str, frozenset[str]]

SHAPES = ("halves", "majority", "majorities-ring", "bridge", "random", "leader")
"""Shape names that appear in partition ops' ``shape`` field."""


def grudge_from_graph(nodes: Iterable[str], graph: nx.Graph) -> dict[str, frozenset[str]]:
    """Each node drops every other node it has no edge to (nodes absent from the graph drop all)."""
    ns = list(dict.fromkeys(nodes))
    out: dict[str, frozenset[str]] = {}
    for n in ns:
        friends = set(graph.neighbors(n)) if n in graph else set()
        out[n] = frozenset(m for m in ns if m != n and m not in friends)
    return out


def complete_grudge(components: Iterable[Iterable[str]]) -> dict[str, frozenset[str]]:
    """Nodes talk freely inside their component and not at all across components.

    A node listed in several components (a bridge) talks to all of them.
    """
    comps = [list(dict.fromkeys(c)) for c in components]
    g = nx.Graph()
    for c in comps:
        g.add_nodes_from(c)
        g.add_edges_from((a, b) for i, a in enumerate(c) for b in c[i + 1 :])
    nodes = [n for c in comps for n in c]
    return grudge_from_graph(nodes, g)


def bisect(nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split in two, the first half the smaller one when the count is odd."""
    k = len(nodes) // 2
    return list(nodes[:k]), list(nodes[k:])


def _shuffled(nodes: Sequence[str], rng: random.Random) -> list[str]:
    ns = list(nodes)
    rng.shuffle(ns)
    return ns


def halves(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Two random halves that cannot see each other (with an odd count, 2/3 for five)."""
    return complete_grudge(bisect(_shuffled(nodes, rng)))


def majority_minority(
    nodes: Sequence[str], rng: random.Random, minority: int | None = None
) -> dict[str, frozenset[str]]:
    """A random minority (default: the largest minority) cut off from the majority.

    Differs from :func:`halves` on even counts: four nodes split 1/3, not 2/2,
    so one side can still elect a leader.
    """
    ns = _shuffled(nodes, rng)
    k = max(1, (len(ns) - 1) // 2) if minority is None else minority
    if not 0 < k < len(ns):
        raise ValueError(f"minority size {k} impossible for {len(ns)} nodes")
    return complete_grudge([ns[:k], ns[k:]])


def majorities_ring(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Every node sees a majority, but no two nodes see the same majority.

    Nodes sit on a random ring and each talks to its ``k`` nearest neighbours on
    either side, with ``2k + 1`` the smallest count that is a majority. With
    three nodes the ring is complete (no partition at all): the shape needs four
    or more nodes to bite.
    """
    ns = _shuffled(nodes, rng)
    n = len(ns)
    majority = n // 2 + 1
    k = -(-(majority - 1) // 2)
    ring = nx.circulant_graph(n, range(1, k + 1)) if n > 1 else nx.empty_graph(n)
    g = nx.relabel_nodes(ring, dict(enumerate(ns)))
    return grudge_from_graph(nodes, g)


def bridge(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Two halves that cannot see each other, and one node in the larger half that sees both."""
    a, b = bisect(_shuffled(nodes, rng))
    if not b:
        return complete_grudge([a])
    return complete_grudge([a + [b[0]], b])


def isolate(nodes: Sequence[str], node: str) -> dict[str, frozenset[str]]:
    """``node`` alone on one side, everyone else on the other."""
    if node not in nodes:
        raise ValueError(f"cannot isolate {node!r}: not one of {list(nodes)}")
    return complete_grudge([[node], [n for n in nodes if n != node]])


def random_partition(nodes: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """A random split into two or three non-empty components."""
    ns = _shuffled(nodes, rng)
    if len(ns) < 2:
        return complete_grudge([ns])
    parts = rng.randint(2, min(3, len(ns)))
    cuts = sorted(rng.sample(range(1, len(ns)), parts - 1))
    bounds = [0, *cuts, len(ns)]
    return complete_grudge([ns[bounds[i] : bounds[i + 1]] for i in range(parts)])


def build_shape(
    shape: str, nodes: Sequence[str], rng: random.Random, leader: str | None = None
) -> dict[str, frozenset[str]]:
    """The grudge for a shape name from :data:`SHAPES`; ``leader`` is needed for "leader"."""
    if shape == "halves":
        return halves(nodes, rng)
    if shape == "majority":
        return majority_minority(nodes, rng)
    if shape == "majorities-ring":
        return majorities_ring(nodes, rng)
    if shape == "bridge":
        return bridge(nodes, rng)
    if shape == "random":
        return random_partition(nodes, rng)
    if shape == "leader":
        if leader is None:
            raise ValueError("shape 'leader' needs the leader's name")
        return isolate(nodes, leader)
    raise ValueError(f"unknown partition shape {shape!r}; known: {', '.join(SHAPES)}")


def grudge_to_json(grudge: Grudge) -> dict[str, list[str]]:
    """Sorted lists, so the history records the same text for the same grudge."""
    return {n: sorted(grudge[n]) for n in sorted(grudge)}


def grudge_from_json(obj: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    return {str(n): frozenset(str(m) for m in ms) for n, ms in obj.items()}


def is_symmetric(grudge: Grudge) -> bool:
    return all(n in grudge.get(m, frozenset()) for n, ms in grudge.items() for m in ms)


def visible(grudge: Grudge, node: str) -> frozenset[str]:
    """The nodes ``node`` still hears from, itself included."""
    return frozenset(n for n in grudge if n not in grudge[node])


MIN_NODES = {
    "halves": 2,
    "majority": 2,
    "majorities-ring": 4,
    "bridge": 3,
    "random": 2,
    "leader": 2,
}
"""The fewest nodes on which each shape cuts anything: on three nodes the majorities ring is
complete (everyone sees everyone), on two a bridge joins both sides."""


def cuts(shape: str, n: int) -> bool:
    """Whether ``shape`` drops any packet on ``n`` nodes (a shape that cuts nothing is no fault)."""
    return n >= MIN_NODES.get(shape, 2)


def cuts_nothing(grudge: Grudge) -> bool:
    return not any(grudge.values())
