"""checker/node_events.py: invariants from the nodes' own events, judged only where declared."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.node_events import check_node_events, merge_node_events
from harness.core.events import NodeEvent, event_invariants
from harness.dbs.nodelog_events import NodeLogEvents, read_node_logs

BOTH = frozenset({"one-vote-per-term", "one-leader-per-term"})
KINDS = frozenset({"start", "role", "vote", "safety"})


def vote(node: str, term: int, cand: str, member: str | None = None) -> NodeEvent:
    return NodeEvent(node, "vote", term=term, candidate=cand, member=member or node)


def leader(node: str, term: int, member: str | None = None) -> NodeEvent:
    return NodeEvent(node, "role", term=term, role="leader", leader=node, member=member or node)


def test_a_member_voting_twice_in_a_term_is_an_anomaly_and_a_repeat_is_not() -> None:
    evs = [vote("n1", 3, "n2"), vote("n1", 3, "n2"), vote("n1", 4, "n3"), vote("n2", 3, "n2")]
    assert check_node_events(evs, KINDS, BOTH)["valid"] is True
    res = check_node_events([*evs, vote("n1", 3, "n1")], KINDS, BOTH)
    assert res["valid"] is False
    (a,) = res["anomalies"]["event-double-vote"]
    assert a["member"] == "n1" and a["term"] == 3 and a["candidates"] == ["n2", "n1"]
    assert res["stats"]["anomaly_counts"] == {"event-double-vote": 1}


def test_a_new_member_on_a_wiped_host_may_vote_again_but_a_restart_may_not() -> None:
    fresh = [vote("n1", 5, "n2", member="n1"), vote("n1", 5, "n3", member="n1.1")]
    assert check_node_events(fresh, KINDS, BOTH)["valid"] is True
    restarted = [
        vote("n1", 5, "n2"),
        NodeEvent("n1", "start", term=5, member="n1"),
        vote("n1", 5, "n3"),
    ]
    assert check_node_events(restarted, KINDS, BOTH)["valid"] is False


def test_two_leaders_of_one_term_from_role_events() -> None:
    ok = [leader("n1", 2), leader("n1", 2), leader("n2", 3)]
    assert check_node_events(ok, KINDS, BOTH)["valid"] is True
    res = check_node_events([*ok, leader("n3", 2)], KINDS, BOTH)
    assert res["valid"] is False
    assert res["anomalies"]["event-two-leaders"][0]["leaders"] == ["n1", "n3"]


def test_nothing_declared_nothing_judged_and_unreported_kinds_are_said() -> None:
    evs = [vote("n1", 3, "n2"), vote("n1", 3, "n3"), leader("n1", 2), leader("n2", 2)]
    res = check_node_events(evs, frozenset({"vote", "role"}), frozenset())
    assert res["valid"] is True and res["stats"]["judged"] == []
    res = check_node_events(evs, frozenset({"role"}), BOTH)
    assert res["stats"]["not_judged"] == {"one-vote-per-term": "the DB's logs report no votes"}
    assert set(res["anomalies"]) == {"event-two-leaders"}


def test_a_safety_line_is_an_anomaly_for_any_db_that_reports_them() -> None:
    ev = NodeEvent("n2", "safety", term=7, why="truncate-below-commit", member="n2")
    res = check_node_events([ev], frozenset({"safety"}), frozenset())
    assert res["valid"] is False
    assert res["anomalies"]["node-safety-check"][0]["check"] == "truncate-below-commit"


def test_the_reference_nodes_log_gives_members_and_safety_lines(tmp_path: Path) -> None:
    old = tmp_path / "node.n1.log"
    old.write_text(
        "INFO event=start id=n1 incarnation=1 term=0 time=1.0 mono=1.0\n"
        "INFO event=vote term=4 candidate=n2 time=2.0 mono=2.0\n"
    )
    cur = tmp_path / "node.log"
    cur.write_text(
        "INFO event=start id=n1.1 incarnation=2 term=4 time=3.0 mono=3.0\n"
        "INFO event=vote term=4 candidate=n3 time=3.5 mono=3.5\n"
        "SAFETY check=commit-beyond-end commit=9 end=7 term=4 time=4.0 mono=4.0\n"
    )
    evs = list(read_node_logs("n1", [cur, old]))
    assert [(e.kind, e.member) for e in evs] == [
        ("start", "n1"), ("vote", "n1"), ("start", "n1.1"), ("vote", "n1.1"), ("safety", "n1.1")
    ]  # fmt: skip
    db = NodeLogEvents()
    res = check_node_events(evs, db.event_kinds(), event_invariants(db))
    assert set(res["anomalies"]) == {"node-safety-check"}  # two members: two votes allowed


def test_a_db_declaring_an_unknown_invariant_is_refused() -> None:
    class Odd:
        event_invariants = frozenset({"one-leader-per-epoch"})

    with pytest.raises(ValueError, match="one-leader-per-epoch"):
        event_invariants(Odd())


def test_merged_into_a_runs_results_only_when_something_was_judged() -> None:
    bad = check_node_events([leader("n1", 2), leader("n2", 2)], KINDS, BOTH)
    results = {"valid": True, "checkers": {"linearizable": {"valid": True}}, "anomalies": {}}
    merge_node_events(results, bad)
    assert results["valid"] is False and "event-two-leaders" in results["anomalies"]
    assert results["checkers"]["node-events"]["valid"] is False
    nothing = check_node_events([], frozenset(), frozenset())
    results = {"valid": "unknown", "checkers": {}, "anomalies": {}}
    merge_node_events(results, nothing)
    assert results["valid"] == "unknown"
