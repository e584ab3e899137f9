"""checker/node_events.py: invariants from the nodes' own events, judged only where declared."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

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
    results: dict[str, Any] = {
        "valid": True, "checkers": {"linearizable": {"valid": True}}, "anomalies": {},
    }  # fmt: skip
    merge_node_events(results, bad)
    assert results["valid"] is False and "event-two-leaders" in results["anomalies"]
    assert results["checkers"]["node-events"]["valid"] is False
    nothing = check_node_events([], frozenset(), frozenset())
    results = {"valid": "unknown", "checkers": {}, "anomalies": {}}
    merge_node_events(results, nothing)
    assert results["valid"] == "unknown"


# ---------------------------------------------------------------- leader completeness

ALL = frozenset(
    {"one-vote-per-term", "one-leader-per-term", "leader-completeness", "follower-commit-bound"}
)
RAFT_KINDS = frozenset({"start", "role", "vote", "truncate", "safety", "commit", "elected"})


def commit(
    node: str, term: int, index: int, eterm: int, role: str = "leader", match: int | None = None
) -> NodeEvent:
    return NodeEvent(
        node, "commit", term=term, role=role, index=index, entry_term=eterm, match=match,
        member=node,
    )  # fmt: skip


def elected(node: str, term: int, end: int, eterm: int) -> NodeEvent:
    return NodeEvent(
        node, "elected", term=term, role="leader", index=end, entry_term=eterm, member=node
    )


def truncated(node: str, term: int, *runs: tuple[int, int, int]) -> NodeEvent:
    return NodeEvent(
        node, "truncate", term=term, index=runs[0][1], removed=tuple(runs), member=node
    )


def test_a_leader_elected_without_an_entry_committed_before_its_term_is_an_anomaly() -> None:
    base = [commit("n1", 2, 10, 2), elected("n2", 3, 12, 2), commit("n2", 3, 20, 3)]
    ok = check_node_events(base, RAFT_KINDS, ALL)
    assert ok["valid"] is True and "leader-completeness" in ok["stats"]["judged"]
    short = check_node_events([*base, elected("n3", 4, 15, 3)], RAFT_KINDS, ALL)
    (a,) = short["anomalies"]["event-leader-incomplete"]
    assert a["how"] == "elected" and a["leader"] == "n3" and a["committed"]["index"] == 20
    # long enough, but its last entry older than one committed: it cannot hold that one
    old = check_node_events([*base, elected("n3", 4, 30, 2)], RAFT_KINDS, ALL)
    assert old["anomalies"]["event-leader-incomplete"][0]["committed"]["entry_term"] == 3
    # a commit in the new leader's own term or later binds nothing at its election
    later = [commit("n1", 5, 40, 5), elected("n2", 5, 30, 4), elected("n3", 4, 25, 3)]
    assert check_node_events([*base, *later], RAFT_KINDS, ALL)["valid"] is True


def test_a_follower_cutting_a_committed_entry_away_is_an_anomaly() -> None:
    base = [commit("n1", 3, 10, 3)]
    cut = check_node_events([*base, truncated("n4", 4, (3, 8, 12))], RAFT_KINDS, ALL)
    (a,) = cut["anomalies"]["event-leader-incomplete"]
    assert a["how"] == "truncated" and a["cut"] == [8, 10] and a["cut_term"] == 3
    # entries of another term at the same indexes were never committed: a fine cut
    other = check_node_events([*base, truncated("n4", 4, (2, 8, 12))], RAFT_KINDS, ALL)
    assert other["valid"] is True
    # beyond what was committed: fine
    beyond = check_node_events([*base, truncated("n4", 4, (3, 11, 12))], RAFT_KINDS, ALL)
    assert beyond["valid"] is True
    # cut in term 4, and committed only later, in term 5 (a leader of 5 that held it): fine
    late = [commit("n1", 5, 10, 3), truncated("n4", 4, (3, 8, 12))]
    assert check_node_events(late, RAFT_KINDS, ALL)["valid"] is True


def test_a_cut_of_entries_the_leader_holds_is_not_incompleteness() -> None:
    """A stale APPEND of the leader of term 4, delivered after its later COMPARE, makes
    the follower longer than the compare point and the leader has it cut back (and
    re-sends): the entries were the leader's own, committed by it, so nothing is lacking.
    The check before this fix called it leader incompleteness."""
    own = [elected("n1", 4, 7, 3), commit("n1", 4, 10, 4), truncated("n4", 4, (4, 8, 12))]
    assert check_node_events(own, RAFT_KINDS, ALL)["valid"] is True
    # older-term entries re-sent by the leader of 5: its log ended at (20, 3) when elected,
    # and that entry is among the cut ones, so every cut entry up to 20 is its own too
    old = [commit("n1", 3, 15, 3), elected("n2", 5, 20, 3), truncated("n4", 5, (3, 12, 20))]
    assert check_node_events(old, RAFT_KINDS, ALL)["valid"] is True
    # the same cut when nothing says the leader of 5 holds those entries (its log, long
    # and new enough, may differ there): the committed 15 may be what it lacks
    part = [commit("n1", 3, 15, 3), elected("n2", 5, 25, 4), truncated("n4", 5, (3, 12, 20))]
    (a,) = check_node_events(part, RAFT_KINDS, ALL)["anomalies"]["event-leader-incomplete"]
    assert a["how"] == "truncated" and a["cut"] == [12, 15]
    # known to hold up to 13 (a commit of its own there): the cut from 14 on still counts
    held = [*part, commit("n2", 5, 13, 3)]
    (a,) = check_node_events(held, RAFT_KINDS, ALL)["anomalies"]["event-leader-incomplete"]
    assert a["cut"] == [14, 15]
    # what the leader of another term holds proves nothing about the leader of 5
    other = [commit("n1", 3, 15, 3), elected("n3", 6, 20, 3), truncated("n4", 5, (3, 12, 20))]
    assert check_node_events(other, RAFT_KINDS, ALL)["valid"] is False


def test_only_leaders_commits_count_as_committed_for_completeness() -> None:
    evs = [commit("n2", 3, 10, 3, role="follower", match=10), truncated("n4", 4, (3, 8, 12))]
    assert check_node_events(evs, RAFT_KINDS, ALL)["valid"] is True


def test_a_follower_commit_beyond_its_match_is_an_anomaly() -> None:
    ok = [commit("n2", 3, 10, 3, role="follower", match=12), commit("n1", 3, 14, 3)]
    assert check_node_events(ok, RAFT_KINDS, ALL)["valid"] is True
    res = check_node_events(
        [*ok, commit("n3", 3, 14, 2, role="follower", match=9)], RAFT_KINDS, ALL
    )
    (a,) = res["anomalies"]["event-commit-beyond-match"]
    assert (a["member"], a["commit"], a["match"]) == ("n3", 14, 9)


def test_commit_invariants_unjudged_without_commit_events() -> None:
    res = check_node_events([leader("n1", 2)], RAFT_KINDS, ALL)
    assert res["stats"]["not_judged"]["leader-completeness"] == "no commit events were read"
    assert "follower-commit-bound" in res["stats"]["not_judged"]
    res = check_node_events([commit("n1", 2, 3, 2)], KINDS | {"commit"}, ALL)
    assert "leader-completeness" in res["stats"]["not_judged"]
    assert "follower-commit-bound" in res["stats"]["judged"]


def test_the_reference_nodes_commit_elected_and_truncated_lines(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text(
        "INFO event=start id=n2 incarnation=1 term=3 time=1.0 mono=1.0\n"
        "INFO event=elected term=4 end=17 eterm=3 time=2.0 mono=2.0\n"
        "INFO event=commit index=18 eterm=4 term=4 role=leader match=- time=2.1 mono=2.1\n"
        "INFO event=commit index=9 eterm=3 term=5 role=follower match=12 time=3 mono=3\n"
        "INFO event=truncated at=10 old_end=14 new_end=9 term=5 leader=n1 "
        "removed=3:10-12,4:13-14 time=4 mono=4\n"
    )
    evs = list(read_node_logs("n2", [log]))
    el, c1, c2, tr = evs[1:]
    assert (el.kind, el.term, el.index, el.entry_term) == ("elected", 4, 17, 3)
    assert (c1.kind, c1.index, c1.entry_term, c1.role, c1.match) == (
        "commit",
        18,
        4,
        "leader",
        None,
    )
    assert (c2.role, c2.match) == ("follower", 12)
    assert tr.removed == ((3, 10, 12), (4, 13, 14)) and tr.term == 5


def _stale_tail_and_rejoin(c: Any, round_: int) -> None:
    """The leader appends entries nobody else gets, is killed, and comes back as a
    follower of a newer leader once that one has committed past its stale tail."""
    old = c.wait_for_leader(30)
    others = [n for n in c.nodes if n != old]
    with c.client(old, timeout=5.0) as cl:
        assert cl.kv_write(f"k{round_}", 0)["code"] == "SUCCESS"
    for n in others:
        c.pause(n)
    with c.client(old, timeout=1.0) as cl:  # appended on the old leader alone
        for i in range(5):
            with contextlib.suppress(Exception):
                cl.kv_write(f"stale{round_}-{i}", i, timeout=0.3)
    c.kill(old)
    for n in others:
        c.resume(n)
    new = c.wait_for_leader(30)
    with c.client(new, timeout=5.0) as cl:
        for i in range(8):
            assert cl.kv_write(f"j{round_}-{i}", i)["code"] == "SUCCESS"
    c.start(old)
    c.wait_until(
        lambda: (
            (c.status(old) or {}).get("committedIndex", -1)
            >= (c.status(new) or {}).get("committedIndex", 0)
        ),
        30,
        "the old leader catching up",
    )


@pytest.mark.parametrize("bug", [None, "lax-push-term"])
def test_a_real_cluster_logs_what_the_commit_invariants_need(
    tmp_path: Path, bug: str | None
) -> None:
    """A real 3-node cluster: an old leader appends entries nobody else gets, is killed,
    and comes back as a follower of a newer leader. The correct node's events hold
    commits and elections, every invariant is judged and none broken; ``lax-push-term``
    (DLedger 0.2: a follower's commit capped at its ledger end, not at what it matched)
    takes the new leader's commit over its stale tail, which its commit lines show.

    Whether the rejoining node takes a commit before its log is repaired depends on
    whether the new leader's dispatcher saw it go (then it compares first): about one
    round in four did not show it on the loaded machine, so the bug gets up to four
    rounds and must show in one; the correct node must show nothing in two."""
    from harness.dbs.dledger import DLedgerDB
    from node_impl.local_cluster import LocalCluster

    db = DLedgerDB()
    with LocalCluster(3, tmp_path, bug=bug) as c:
        c.start_all()
        for round_ in range(2 if bug is None else 4):
            _stale_tail_and_rejoin(c, round_)
            evs = [e for n in c.nodes for e in read_node_logs(n, [c.data_dir(n) / "node.log"])]
            res = check_node_events(evs, db.event_kinds(), event_invariants(db))
            if bug is not None and res["anomalies"].get("event-commit-beyond-match"):
                break
    assert {e.kind for e in evs} >= {"commit", "elected"}
    assert set(res["stats"]["judged"]) >= {"leader-completeness", "follower-commit-bound"}
    if bug is None:
        assert res["valid"] is True, res["anomalies"]
        return
    found = res["anomalies"].get("event-commit-beyond-match") or []
    assert found and all(a["commit"] > a["match"] for a in found), res["stats"]


def test_stats_say_how_much_each_judged_invariant_rested_on() -> None:
    """0 anomalies over 0 votes is no evidence: the counts tell a held invariant from an
    idle one (issue 42's 20 correct runs are read by them)."""
    evs = [
        vote("n1", 3, "n2"), vote("n1", 3, "n2"), vote("n3", 3, "n2"), vote("n1", 4, "n1"),
        leader("n2", 3), leader("n2", 3), leader("n1", 4),
        commit("n2", 3, 10, 3), elected("n1", 4, 10, 3), truncated("n4", 4, (3, 11, 12)),
        commit("n3", 3, 10, 3, role="follower", match=10),
        commit("n5", 3, 10, 3, role="follower"),
    ]  # fmt: skip
    checked = check_node_events(evs, RAFT_KINDS, ALL)["stats"]["checked"]
    assert checked == {
        "one-vote-per-term": {"votes": 4, "member_terms": 3, "terms": 2},
        "one-leader-per-term": {"terms": 2, "leaderships": 2},
        "leader-completeness": {"elections": 1, "truncations": 1, "leader_commits": 1},
        "follower-commit-bound": {"follower_commits": 1},
        "safety-checks": {"lines": 0},
    }
    # only what was judged is counted
    only_votes = check_node_events(evs, KINDS, frozenset({"one-vote-per-term"}))
    assert set(only_votes["stats"]["checked"]) == {"one-vote-per-term", "safety-checks"}


def test_a_cut_past_a_same_term_re_election_is_not_incompleteness() -> None:
    """Seed 7317 (correct node, read mode index): n2 led term 3, restarted having lost
    its unflushed entry 273 (which n5 held), won term 3 again at log end 272 (DLedger
    polls in its persisted term first) and committed a new 273 and 274 of term 3. The
    leader of term 4 held those (elected at 279 of term 3) and had n5 cut its old 273.
    (index, term) named two entries there, so the cut proves nothing; the check before
    this fix called it leader incompleteness."""
    base = [
        elected("n2", 3, 190, 2), commit("n2", 3, 272, 3),
        elected("n2", 3, 272, 3), commit("n2", 3, 274, 3),
        elected("n4", 4, 279, 3),
    ]  # fmt: skip
    seen = check_node_events([*base, truncated("n5", 4, (3, 273, 273))], RAFT_KINDS, ALL)
    assert seen["valid"] is True, seen["anomalies"]
    # a cut reaching below the re-election's log end still counts, up to that end
    deep = check_node_events([*base, truncated("n5", 4, (3, 260, 273))], RAFT_KINDS, ALL)
    (a,) = deep["anomalies"]["event-leader-incomplete"]
    assert a["cut"] == [260, 272]
    # without the re-election, the same cut of 273 is the anomaly it always was
    once = [elected("n2", 3, 190, 2), commit("n2", 3, 274, 3), elected("n4", 4, 279, 3)]
    alone = check_node_events([*once, truncated("n5", 4, (3, 273, 273))], RAFT_KINDS, ALL)
    assert alone["anomalies"]["event-leader-incomplete"][0]["cut"] == [273, 273]
