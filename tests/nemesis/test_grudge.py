"""Grudges are pure data: literal maps for fixed inputs, properties for random ones."""

from __future__ import annotations

import random

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nemesis.grudge as g

F = frozenset


def test_complete_grudge_literal() -> None:
    assert g.complete_grudge([["n1", "n2"], ["n3"]]) == {
        "n1": F({"n3"}),
        "n2": F({"n3"}),
        "n3": F({"n1", "n2"}),
    }


def test_complete_grudge_bridge_node_in_two_components() -> None:
    assert g.complete_grudge([["a", "b"], ["b", "c"]]) == {"a": F({"c"}), "b": F(), "c": F({"a"})}


def test_grudge_from_graph_literal() -> None:
    graph = nx.path_graph(["a", "b", "c"])
    assert g.grudge_from_graph(["a", "b", "c", "d"], graph) == {
        "a": F({"c", "d"}),
        "b": F({"d"}),
        "c": F({"a", "d"}),
        "d": F({"a", "b", "c"}),
    }


def test_isolate_literal() -> None:
    assert g.isolate(["n1", "n2", "n3"], "n2") == {
        "n1": F({"n2"}),
        "n2": F({"n1", "n3"}),
        "n3": F({"n2"}),
    }
    with pytest.raises(ValueError, match="n9"):
        g.isolate(["n1"], "n9")


def test_bisect() -> None:
    assert g.bisect(["a", "b", "c", "d", "e"]) == (["a", "b"], ["c", "d", "e"])


class NoShuffle(random.Random):
    """Keeps node order, so the literal maps below are exactly Jepsen's shapes."""

    def shuffle(self, x: list) -> None:  # type: ignore[override]
        pass


def test_halves_literal() -> None:
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    assert g.halves(nodes, NoShuffle()) == {
        "n1": F({"n3", "n4", "n5"}),
        "n2": F({"n3", "n4", "n5"}),
        "n3": F({"n1", "n2"}),
        "n4": F({"n1", "n2"}),
        "n5": F({"n1", "n2"}),
    }


def test_majority_minority_literal_four_nodes() -> None:
    assert g.majority_minority(["n1", "n2", "n3", "n4"], NoShuffle()) == {
        "n1": F({"n2", "n3", "n4"}),
        "n2": F({"n1"}),
        "n3": F({"n1"}),
        "n4": F({"n1"}),
    }


def test_majorities_ring_literal_five_nodes() -> None:
    # Ring n1-n2-n3-n4-n5-n1: each node hears itself and its two ring neighbours.
    assert g.majorities_ring(["n1", "n2", "n3", "n4", "n5"], NoShuffle()) == {
        "n1": F({"n3", "n4"}),
        "n2": F({"n4", "n5"}),
        "n3": F({"n5", "n1"}),
        "n4": F({"n1", "n2"}),
        "n5": F({"n2", "n3"}),
    }


def test_bridge_literal() -> None:
    assert g.bridge(["n1", "n2", "n3", "n4", "n5"], NoShuffle()) == {
        "n1": F({"n4", "n5"}),
        "n2": F({"n4", "n5"}),
        "n3": F(),
        "n4": F({"n1", "n2"}),
        "n5": F({"n1", "n2"}),
    }


def test_build_shape_errors() -> None:
    with pytest.raises(ValueError, match="unknown partition shape 'moon'"):
        g.build_shape("moon", ["a", "b"], random.Random(0))
    with pytest.raises(ValueError, match="leader"):
        g.build_shape("leader", ["a", "b"], random.Random(0))


def test_json_round_trip() -> None:
    gr = g.bridge(["a", "b", "c", "d", "e"], random.Random(3))
    js = g.grudge_to_json(gr)
    assert all(v == sorted(v) for v in js.values())
    assert g.grudge_from_json(js) == gr


node_lists = st.integers(min_value=2, max_value=9).map(lambda n: [f"n{i}" for i in range(1, n + 1)])
seeds = st.integers(min_value=0, max_value=2**32)


@given(
    node_lists,
    seeds,
    st.sampled_from(["halves", "majority", "majorities-ring", "bridge", "random"]),
)
def test_every_shape_is_symmetric_and_covers_nodes(nodes: list[str], seed: int, shape: str) -> None:
    gr = g.build_shape(shape, nodes, random.Random(seed))
    assert set(gr) == set(nodes)
    assert g.is_symmetric(gr)
    assert all(n not in gr[n] for n in nodes)


@given(node_lists, seeds)
def test_majorities_ring_everyone_sees_a_distinct_majority(nodes: list[str], seed: int) -> None:
    gr = g.majorities_ring(nodes, random.Random(seed))
    majority = len(nodes) // 2 + 1
    views = [g.visible(gr, n) for n in nodes]
    assert all(len(v) >= majority for v in views)
    if len(nodes) >= 4:
        assert len(set(views)) == len(nodes)  # no two nodes see the same majority
        assert any(gr[n] for n in nodes)  # and it is a real partition


@given(node_lists.filter(lambda ns: len(ns) >= 3), seeds)
def test_bridge_node_sees_everyone_and_sides_do_not(nodes: list[str], seed: int) -> None:
    gr = g.bridge(nodes, random.Random(seed))
    bridges = [n for n in nodes if not gr[n]]
    assert len(bridges) == 1
    others = [n for n in nodes if gr[n]]
    assert others and all(len(g.visible(gr, n)) < len(nodes) for n in others)


@given(node_lists.filter(lambda ns: len(ns) >= 3), seeds)
def test_majority_minority_has_exactly_one_majority_side(nodes: list[str], seed: int) -> None:
    gr = g.majority_minority(nodes, random.Random(seed))
    views = {g.visible(gr, n) for n in nodes}
    assert len(views) == 2
    small, big = sorted(views, key=len)
    assert len(big) > len(nodes) // 2 >= len(small)
    assert small | big == set(nodes)


@given(node_lists, seeds)
def test_random_partition_is_transitive(nodes: list[str], seed: int) -> None:
    gr = g.random_partition(nodes, random.Random(seed))
    comps = {g.visible(gr, n) for n in nodes}
    assert 2 <= len(comps) <= 3
    assert sum(len(c) for c in comps) == len(nodes)  # disjoint components


@given(node_lists, seeds, st.sampled_from(["halves", "majorities-ring", "bridge", "random"]))
def test_same_seed_same_grudge(nodes: list[str], seed: int, shape: str) -> None:
    assert g.build_shape(shape, nodes, random.Random(seed)) == g.build_shape(
        shape, nodes, random.Random(seed)
    )
