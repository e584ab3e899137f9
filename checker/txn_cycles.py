"""Cycles in a transaction dependency graph: which transactions can be on one, the strongly
connected components, and in each a shortest cycle of every anomaly class it holds.

Why in three steps: a valid history of a million transactions has millions of edges and no
cycle, and a search that visits every edge in Python is what makes a checker slow. Step 1
peels the graph (Kahn's algorithm forwards, then backwards, over arrays): a node with no
remaining predecessor, or no remaining successor, is on no cycle. In a valid history that
leaves nothing, and the check is done. Step 2 runs networkx's strongly connected
components on what is left. Step 3 searches each component for cycles by class, each a
breadth-first search from one edge of the kind the class needs back to its start, through
edges of the kinds the class allows, so what it finds is a shortest cycle through that edge.

The classes (Adya's, with Elle's names; ``-process`` / ``-realtime`` when the cycle needs
a process or real-time edge, searched only when those edges were asked for):

* ``G0``: write cycle, ww edges only;
* ``G1c``: ww and wr edges, at least one wr;
* ``G-single``: exactly one rw edge (read skew);
* ``G2-item``: two or more rw edges (write skew and its kin).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from checker.txn_infer import PR, RT, RW, WR, WW, Graph

__all__ = [
    "cyclic_core",
    "components",
    "Cycle",
    "cycles_in",
    "cycle_nodes",
    "classify",
    "CYCLE_KINDS",
]

BASE = ("G0", "G1c", "G-single", "G2-item")
CYCLE_KINDS = (*BASE, *(f"{b}-process" for b in BASE), *(f"{b}-realtime" for b in BASE))
Cycle = list[tuple[int, int, int]]
"""A cycle as its edges (src, dst, the one type bit that explains it), in order."""
_PREFER = (WW, WR, PR, RT, RW)
"""Which of a pair's edge types explains a step: the one that weakens the class least."""
MAX_STARTS = 64
"""Start edges tried per class and component (the shortest cycle found among them is kept)."""


ROUNDS = 48
"""Rounds of :func:`_ordered` before it gives up on finding an order (then peeling decides)."""


def cyclic_core(n: int, src: Any, dst: Any, hint: Sequence[int] | None = None) -> list[int]:
    """The nodes that may lie on a cycle: what is left after peeling every node with no
    remaining predecessor (in a valid history: nothing, and the check is done), then
    every node with no remaining successor (ascending). ``src`` and ``dst``: the edges,
    as int sequences or arrays.

    ``hint``: a guess at a topological order (a position per node; the invocation index
    does). When a few rounds of :func:`_ordered` turn it into one every edge respects, the
    graph has no cycle and nothing is peeled."""
    import numpy as np

    if not len(src):
        return []
    s = np.asarray(src, dtype=np.int64)
    d = np.asarray(dst, dtype=np.int64)
    if hint is not None and _ordered(s, d, np.asarray(hint, dtype=np.int64)):
        return []
    alive = np.ones(n, dtype=bool)
    for a, b in ((s, d), (d, s)):
        if not alive.all():
            keep = alive[a] & alive[b]
            a, b = a[keep], b[keep]
        order = np.argsort(a, kind="stable")
        targets = b[order].tolist()
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(a, minlength=n), out=ptr[1:])
        ptr_l = ptr.tolist()
        deg = np.bincount(b, minlength=n)
        deg_l = deg.tolist()
        stack = np.flatnonzero(alive & (deg == 0)).tolist()
        removed = bytearray(n)
        pop, push = stack.pop, stack.append
        while stack:
            u = pop()
            removed[u] = 1
            for v in targets[ptr_l[u] : ptr_l[u + 1]]:
                deg_l[v] -= 1
                if not deg_l[v]:
                    push(v)
        alive &= np.frombuffer(bytes(removed), dtype=np.uint8) == 0
        if not alive.any():
            return []
    return np.flatnonzero(alive).tolist()


def _ordered(s: Any, d: Any, hint: Any) -> bool:
    """Whether positions exist that every edge ``s -> d`` climbs, found from ``hint`` by
    pushing each violated edge's head past its tail, round by round (longest-path
    relaxation; a graph has such positions exactly when it has no cycle).

    Why: on a serializable history the invocation order is nearly a serialization order
    (an edge against it joins overlapping txns), so 6-8 rounds of array operations settle
    a million-txn graph, where peeling walks every edge in Python. True proves there is
    no cycle; False (a cycle, or no order within :data:`ROUNDS`) leaves it to peeling."""
    import numpy as np

    pos = hint * 1024  # room between neighbours, so a push rarely reaches the next one
    for _ in range(ROUNDS):
        up = pos[s] + 1
        bad = up > pos[d]
        if not bad.any():
            return True
        np.maximum.at(pos, d[bad], up[bad])
    return False


def components(g: Graph, core: list[int]) -> list[dict[int, dict[int, int]]]:
    """The strongly connected components (of two or more nodes) of the graph on ``core``,
    each as its adjacency ``{src: {dst: type bits}}`` restricted to the component."""
    import networkx as nx
    import numpy as np

    src, dst, typ = g.arrays()
    inside = np.zeros(int(max(src.max(), dst.max(), max(core))) + 1, dtype=bool)
    inside[core] = True
    keep = inside[src] & inside[dst] & (src != dst)
    adj: dict[int, dict[int, int]] = {}
    for a, b, ty in zip(src[keep].tolist(), dst[keep].tolist(), typ[keep].tolist(), strict=True):
        row = adj.get(a)
        if row is None:
            row = adj[a] = {}
        row[b] = row.get(b, 0) | ty
    dg = nx.DiGraph()
    dg.add_nodes_from(core)
    dg.add_edges_from((a, b) for a, row in adj.items() for b in row)
    out = []
    for comp in nx.strongly_connected_components(dg):
        if len(comp) < 2:
            continue
        sub = {a: {b: ty for b, ty in adj.get(a, {}).items() if b in comp} for a in comp}
        out.append(sub)
    out.sort(key=lambda c: min(c))
    return out


def _bfs(adj: dict[int, dict[int, int]], start: int, goal: int, allowed: int) -> list[int] | None:
    """Shortest path start -> goal through edges with a type in ``allowed`` (node list)."""
    if start == goal:
        return [start]
    prev = {start: start}
    q = deque([start])
    while q:
        u = q.popleft()
        for v, ty in adj[u].items():
            if ty & allowed and v not in prev:
                prev[v] = u
                if v == goal:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1]
                q.append(v)
    return None


def _label(ty: int, allowed: int) -> int:
    for p in _PREFER:
        if ty & allowed & p:
            return p
    raise AssertionError("edge without an allowed type")


def classify(cycle: Cycle) -> str:
    """The anomaly class of a cycle, from the types of its edges."""
    types = [ty for _, _, ty in cycle]
    rws = types.count(RW)
    base = ("G1c" if WR in types else "G0") if rws == 0 else "G-single" if rws == 1 else "G2-item"
    if RT in types:
        return f"{base}-realtime"
    if PR in types:
        return f"{base}-process"
    return base


def _searches(order_types: int) -> list[tuple[int, int]]:
    """(start edge type, allowed types) per search, weakest class first."""
    out = [(WW, WW), (WR, WW | WR), (RW, WW | WR), (RW, WW | WR | RW)]
    for o in (PR, RT):
        if order_types & o:
            out += [(o, WW | o), (o, WW | WR | o), (o, WW | WR | RW | o)]
    return out


def cycles_in(comp: dict[int, dict[int, int]], order_types: int = 0) -> dict[str, Cycle]:
    """A shortest found cycle of every class the component holds (class -> cycle)."""
    found: dict[str, Cycle] = {}
    big = sum(len(r) for r in comp.values()) > 200_000
    for start_ty, allowed in _searches(order_types):
        starts: Iterable[tuple[int, int, int]] = (
            (a, b, ty) for a in sorted(comp) for b, ty in comp[a].items() if ty & start_ty
        )
        best: Cycle | None = None
        tried = 0
        for a, b, _ in starts:
            tried += 1
            if tried > (4 if big else MAX_STARTS):
                break
            path = _bfs(comp, b, a, allowed)
            if path is None:
                continue
            cyc: Cycle = [(a, b, _label(comp[a][b], allowed | start_ty))]
            for u, v in zip(path, path[1:], strict=False):
                cyc.append((u, v, _label(comp[u][v], allowed)))
            if best is None or len(cyc) < len(best):
                best = cyc
                if len(best) == 2:
                    break
        if best is not None:
            name = classify(best)
            if name not in found or len(best) < len(found[name]):
                found[name] = _rotate(best)
    return found


def _rotate(cyc: Cycle) -> Cycle:
    """The cycle starting at its least node, so both engines print it alike."""
    i = min(range(len(cyc)), key=lambda j: cyc[j][0])
    return cyc[i:] + cyc[:i]


def cycle_nodes(cyc: Cycle) -> list[int]:
    return [a for a, _, _ in cyc]
