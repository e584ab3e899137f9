"""Coverage (issue 27): every situation's detector on small crafted runs, the results block,
the summary line, the zoo's table and one real lab run.

Each detector is shown its situation and a near miss that differs in one respect (a
different term, an op that closed a moment earlier, a restart in between), so a
detector that fires on too little fails as surely as one that never fires.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from checker.situations import SITUATIONS, Observed, coverage, observed_from
from harness.core.events import NodeEvent, ReportsEvents
from harness.core.history import HistoryWriter, Op
from harness.dbs.nodelog_events import NodeLogEvents, parse_node_log_line
from harness.run.coverage import collect_events, origin_from_dir, run_coverage
from harness.run.summary import verdict_line
from harness.zoo.summary import RunRecord, coverage_table, never_reached, render_coverage

S = 1_000_000_000
NODES3 = ("n1", "n2", "n3")
ALL_KINDS = NodeLogEvents().event_kinds()


def s(t: float) -> int:
    return round(t * S)


class H:
    """A tiny history builder: client ops, nemesis ops and samples at times in seconds."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._p = 0
        # The campaign's window opens at the first client op: open it at once.
        self.op("write", 0.0, 0.01, "n1", value=0)

    def op(
        self,
        f: str,
        t0: float,
        t1: float | None,
        node: str,
        *,
        typ: str = "ok",
        value: Any = None,
        done_node: str | None = None,
        out: Any = None,
    ) -> H:
        p = self._p
        self._p += 1
        self.ops.append(Op("invoke", p, f, value, node=node, time=s(t0)))
        if t1 is not None:
            result = value if out is None else out
            self.ops.append(Op(typ, p, f, result, node=done_node or node, time=s(t1)))
        return self

    def nem(self, f: str, t: float, value: Any, done: Any, dt: float = 0.05) -> H:
        self.ops.append(Op("invoke", "nemesis", f, value, time=s(t)))
        self.ops.append(Op("info", "nemesis", f, done, time=s(t + dt)))
        return self

    def sample(self, node: str, t: float, **v: Any) -> H:
        p = 1_000_000 + NODES3.index(node) if node in NODES3 else 1_000_099
        self.ops.append(Op("invoke", p, "sample", None, node=node, time=s(t) - 1000))
        self.ops.append(Op("ok", p, "sample", v, node=node, time=s(t)))
        return self

    def observed(
        self,
        events: Sequence[NodeEvent] = (),
        kinds: frozenset[str] = frozenset(),
        nodes: Sequence[str] = NODES3,
    ) -> Observed:
        ops = sorted(self.ops, key=lambda o: o.time)
        return observed_from(ops, events=events, event_kinds=kinds, nodes=nodes, election_s=1.0)


def ev(node: str, kind: str, t: float, **kw: Any) -> NodeEvent:
    return NodeEvent(node, kind, time=s(t), **kw)


def role(node: str, t: float, term: int, r: str, leader: str | None = None) -> NodeEvent:
    return ev(node, "role", t, term=term, role=r, leader=leader)


def vote(voter: str, t: float, term: int, cand: str) -> NodeEvent:
    return ev(voter, "vote", t, term=term, candidate=cand)


def hits(name: str, obs: Observed) -> list[float]:
    """The situation's occurrences, in seconds, as the coverage counts them."""
    [sit] = [x for x in SITUATIONS if x.name == name]
    return [t / S for t in sorted(sit.detect(obs)) if t >= obs.load_start]


def leader_then_successor(extra: Iterable[NodeEvent] = ()) -> list[NodeEvent]:
    """n1 leads term 1 from 0.5 s; n2 leads term 2 from 2 s; n1 learns it at 3 s."""
    return [
        role("n1", 0.4, 1, "candidate"),
        role("n1", 0.5, 1, "leader", "n1"),
        role("n2", 1.8, 2, "candidate"),
        role("n2", 2.0, 2, "leader", "n2"),
        role("n1", 3.0, 2, "follower", "n2"),
        *extra,
    ]


# ---------------------------------------------------------------- every detector


def test_concurrent_candidates_from_votes_fires_once_per_term() -> None:
    events = [vote("n1", 1.0, 3, "n1"), vote("n2", 1.1, 3, "n2"), vote("n3", 1.2, 3, "n1")]
    assert hits("concurrent-candidates", H().observed(events, ALL_KINDS)) == [1.1]
    near = [vote("n1", 1.0, 3, "n1"), vote("n2", 1.1, 4, "n2"), vote("n3", 1.2, 3, "n1")]
    assert hits("concurrent-candidates", H().observed(near, ALL_KINDS)) == []


def test_concurrent_candidates_from_samples_when_the_db_logs_nothing() -> None:
    h = H().sample("n1", 1.0, role="candidate", term=2).sample("n2", 1.2, role="candidate", term=2)
    assert hits("concurrent-candidates", h.observed()) == [1.2]
    near = H().sample("n1", 1.0, role="candidate", term=2)
    near.sample("n2", 1.2, role="candidate", term=3)
    assert hits("concurrent-candidates", near.observed()) == []


def test_split_vote_needs_outside_votes_for_two_candidates() -> None:
    base = [vote("n1", 1.0, 3, "n1"), vote("n2", 1.0, 3, "n2"), vote("n3", 1.1, 3, "n1")]
    assert hits("split-vote", H().observed(base, ALL_KINDS)) == []  # n2 had only its own
    split = [*base, vote("n4", 1.3, 3, "n2")]
    assert hits("split-vote", H().observed(split, ALL_KINDS, nodes=("n1", "n2", "n3", "n4"))) == [
        1.3
    ]


def test_leaderless_term_longer_than_e() -> None:
    quick = [role("n1", 1.0, 2, "candidate"), role("n1", 1.5, 2, "leader", "n1")]
    assert hits("leaderless-term", H().observed(quick, ALL_KINDS)) == []
    slow = [role("n1", 1.0, 2, "candidate"), role("n1", 2.5, 2, "leader", "n1")]
    assert hits("leaderless-term", H().observed(slow, ALL_KINDS)) == [2.0]
    # A term left for a higher one after E without a leader counts too.
    bumped = [role("n1", 1.0, 2, "candidate"), role("n2", 2.2, 3, "candidate")]
    bumped.append(role("n2", 2.3, 3, "leader", "n2"))
    assert hits("leaderless-term", H().observed(bumped, ALL_KINDS)) == [2.0]


def test_deposed_leader_with_an_op_in_flight_or_a_sticky_client() -> None:
    events = leader_then_successor()
    in_flight = H().op("write", 1.0, 3.5, "n1", typ="info")
    assert hits("deposed-leader-with-clients", in_flight.observed(events, ALL_KINDS)) == [2.0]
    sticky = H().op("read", 2.5, 2.6, "n1", typ="fail")
    assert hits("deposed-leader-with-clients", sticky.observed(events, ALL_KINDS)) == [2.0]
    near = H().op("write", 1.0, 1.5, "n1").op("read", 3.5, 3.6, "n1", typ="fail")
    assert hits("deposed-leader-with-clients", near.observed(events, ALL_KINDS)) == []


def test_read_from_non_leader_only_when_surely_not_leading() -> None:
    events = leader_then_successor()
    stale = H().op("read", 2.5, 2.6, "n1", value={"from": 0}, out={"entries": []})
    assert hits("read-from-non-leader", stale.observed(events, ALL_KINDS)) == [2.6]
    # Open across the deposition: it may have been served while n1 still led.
    straddles = H().op("read", 1.9, 2.1, "n1", value={"from": 0}, out={"entries": []})
    assert hits("read-from-non-leader", straddles.observed(events, ALL_KINDS)) == []
    # A final read is a follower's local read by design.
    final = H().op("read", 2.5, 2.6, "n1", value={"final": True}, out={"entries": []})
    assert hits("read-from-non-leader", final.observed(events, ALL_KINDS)) == []


def test_a_leadership_lost_from_the_node_log_is_filled_in_from_the_samples() -> None:
    """A disk fault can roll back node.log: n1's lines for its first term-3 leadership are
    gone, its later term-3 leadership (after a restart) is logged. Reads n1 answered in
    the lost leadership are not "answered by a non-leader": the samples saw it lead."""
    h = H().op("read", 2.0, 2.1, "n1", value={"from": 0}, out={"entries": []})
    h.sample("n1", 1.0, role="leader", term=3, leader="n1")
    h.sample("n1", 2.5, role="leader", term=3, leader="n1")
    h.nem("start-kill", 3.0, {}, {"nodes": ["n1"], "killed": ["n1"]})
    events = [ev("n1", "start", 4.0, term=3), role("n1", 4.5, 3, "leader", "n1")]
    assert hits("read-from-non-leader", h.observed(events, ALL_KINDS)) == []
    # Without the samples' word, the same read is one.
    bare = H().op("read", 2.0, 2.1, "n1", value={"from": 0}, out={"entries": []})
    assert hits("read-from-non-leader", bare.observed(events, ALL_KINDS)) == [2.1]


def test_read_to_deposed_leader_before_it_learned() -> None:
    events = leader_then_successor()
    sent = H().op("read", 2.5, 2.9, "n1", typ="fail")
    assert hits("read-to-deposed-leader", sent.observed(events, ALL_KINDS)) == [2.5]
    after = H().op("read", 3.5, 3.6, "n1", typ="fail")  # n1 already follows n2
    assert hits("read-to-deposed-leader", after.observed(events, ALL_KINDS)) == []


def _paused_leader(ack_at: float) -> H:
    h = H().op("write", 0.5, 0.9, "n1")  # n1 acks: the leader, as far as the history says
    h.nem("start-pause", 1.0, {"target": "leader"}, {"nodes": ["n1"], "paused": ["n1"]})
    h.op("write", ack_at - 0.2, ack_at, "n2")
    h.nem("stop-pause", 3.0, None, {"nodes": ["n1"]})
    return h


def test_resumed_after_successor_commit_from_history_alone() -> None:
    assert hits("resumed-after-successor-commit", _paused_leader(2.0).observed()) == [3.05]
    assert hits("resumed-after-successor-commit", _paused_leader(3.5).observed()) == []


def test_resumed_after_successor_commit_needs_the_paused_node_to_lead() -> None:
    events = [role("n2", 0.3, 1, "leader", "n2"), role("n1", 0.3, 1, "follower", "n2")]
    # With roles, n1 (a follower) is not the leader despite the history's last ack.
    assert (
        hits("resumed-after-successor-commit", _paused_leader(2.0).observed(events, ALL_KINDS))
        == []
    )


def test_kill_with_ops_in_flight() -> None:
    def run(op_node: str, closes: float | None) -> list[float]:
        h = H().op("write", 0.9, closes, op_node, typ="info")
        h.nem("start-kill", 1.0, {"target": "one"}, {"nodes": ["n1"], "killed": ["n1"]})
        return hits("kill-with-ops-in-flight", h.observed())

    assert run("n1", 3.0) == [1.0]
    assert run("n1", None) == [1.0]  # never completed: still open
    assert run("n1", 0.95) == []  # answered before the kill
    assert run("n2", 3.0) == []  # open, but to another node


def test_whole_cluster_restart_needs_every_node_down_at_once() -> None:
    def kill(h: H, t: float, nodes: list[str]) -> None:
        h.nem("start-kill", t, {"nodes": nodes}, {"nodes": nodes, "killed": nodes})

    h = H()
    kill(h, 1.0, ["n1", "n2"])
    kill(h, 2.0, ["n3"])
    h.nem("stop-kill", 3.0, None, {"nodes": list(NODES3)})
    assert hits("whole-cluster-restart", h.observed()) == [2.05]
    near = H()
    kill(near, 1.0, ["n1", "n2"])
    near.nem("stop-kill", 1.5, None, {"nodes": ["n1", "n2"]})
    kill(near, 2.0, ["n3"])
    assert hits("whole-cluster-restart", near.observed()) == []


def test_a_disk_fault_on_every_node_is_a_whole_cluster_restart() -> None:
    """lose-unfsynced SIGKILLs the chosen nodes before their lazy fs loses power."""
    all3 = list(NODES3)
    h = H().nem("start-lose-unfsynced", 1.0, {"target": "all"}, {"nodes": all3, "records": {}})
    h.nem("stop-lose-unfsynced", 2.0, None, {"nodes": all3})
    assert hits("whole-cluster-restart", h.observed()) == [1.05]
    two = H().nem("start-torn-write", 1.0, {}, {"nodes": ["n1", "n2"], "records": {}})
    assert hits("whole-cluster-restart", two.observed()) == []


def test_follower_truncation_from_events() -> None:
    events = [ev("n2", "truncate", 1.5, index=7)]
    assert hits("follower-truncation", H().observed(events, ALL_KINDS)) == [1.5]
    assert hits("follower-truncation", H().observed([], ALL_KINDS)) == []


def test_follower_truncation_from_history_and_samples() -> None:
    def reads(second: list[Any]) -> H:
        h = H().op("read", 1.0, 1.1, "n1", value={}, out={"entries": [[5, 1, "a"]]})
        return h.op("read", 2.0, 2.1, "n2", value={}, out={"entries": [second]})

    assert hits("follower-truncation", reads([5, 2, "b"]).observed()) == [2.1]
    assert hits("follower-truncation", reads([5, 1, "a"]).observed()) == []
    dropped = H().sample("n2", 1.0, end=9, incarnation=1).sample("n2", 2.0, end=6, incarnation=1)
    assert hits("follower-truncation", dropped.observed()) == [2.0]
    restarted = H().sample("n2", 1.0, end=9, incarnation=1)
    restarted.sample("n2", 2.0, end=6, incarnation=2)  # a torn tail trimmed at restart
    assert hits("follower-truncation", restarted.observed()) == []


def _partition(minority_end: int, node: str = "n1") -> H:
    grudge = {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}
    h = H().nem("start-partition", 1.0, {"shape": "leader"}, {"grudge": grudge})
    h.sample(node, 1.5, role="leader", term=1, end=minority_end, committed=8)
    h.sample("n1", 0.5, role="leader", term=1, end=12, committed=8)  # before: not counted
    return h.nem("stop-partition", 2.0, None, {"healed": list(NODES3)})


def test_healed_partition_with_uncommitted_minority_entries() -> None:
    assert hits("healed-minority-uncommitted", _partition(10).observed()) == [2.05]
    assert hits("healed-minority-uncommitted", _partition(8).observed()) == []
    # The majority side holding uncommitted entries is ordinary replication.
    assert hits("healed-minority-uncommitted", _partition(10, node="n2").observed()) == []


def test_clock_jump_on_the_leader_only() -> None:
    events = [role("n1", 0.5, 1, "leader", "n1"), role("n2", 0.5, 1, "follower", "n1")]

    def jump(node: str) -> list[float]:
        v = {"mode": "bump", "nodes": [node], "offset_ms": 500}
        h = H().nem("start-clock", 1.0, v, {**v, "offsets_ms": {node: 500.0}})
        return hits("clock-jump-on-leader", h.observed(events, ALL_KINDS))

    assert jump("n1") == [1.05]
    assert jump("n2") == []


def test_every_situation_has_a_test_here() -> None:
    """A new situation must come with its detector's tests (the list above)."""
    tested = {
        "concurrent-candidates", "split-vote", "leaderless-term",
        "deposed-leader-with-clients", "read-from-non-leader", "read-to-deposed-leader",
        "resumed-after-successor-commit", "kill-with-ops-in-flight", "whole-cluster-restart",
        "follower-truncation", "healed-minority-uncommitted", "clock-jump-on-leader",
        # tests/harness/test_coverage_events.py
        "voter-asked-twice", "read-refused-by-leader",
    }  # fmt: skip
    assert {x.name for x in SITUATIONS} == tested
    assert all(x.doc and x.title and x.needs for x in SITUATIONS)


# ---------------------------------------------------------------- the block


def test_coverage_block_separates_unobservable_from_not_reached() -> None:
    h = H()
    h.nem("start-kill", 1.0, {}, {"nodes": ["n1"], "killed": ["n1"]})
    cov = coverage(h.observed())  # history only: no samples, no events
    blind = cov["unobservable"]
    for name in ("concurrent-candidates", "split-vote", "leaderless-term",
                 "read-from-non-leader", "healed-minority-uncommitted"):  # fmt: skip
        assert name in blind and name not in cov, name
        assert "samples" in blind[name] or "events" in blind[name]
    assert cov["kill-with-ops-in-flight"] == {"count": 0, "first_s": None}
    assert cov["whole-cluster-restart"] == {"count": 0, "first_s": None}
    assert cov["sources"] == ["history"]
    # With the node events, all but what only the samples' end/committed show.
    full = coverage(h.observed([], ALL_KINDS))
    assert set(full["unobservable"]) == {"healed-minority-uncommitted"}
    assert full["concurrent-candidates"] == {"count": 0, "first_s": None}


def test_situations_before_the_first_client_op_are_not_the_campaigns() -> None:
    h = H()
    h.ops[:] = [op for op in h.ops if op.process != 0]  # drop the opening write
    h.op("write", 5.0, 5.1, "n1")
    early = [vote("n1", 1.0, 1, "n1"), vote("n2", 1.0, 1, "n2")]  # the start-up election
    assert coverage(h.observed(early, ALL_KINDS))["concurrent-candidates"]["count"] == 0
    late = [vote("n1", 6.0, 2, "n1"), vote("n2", 6.5, 2, "n2")]
    assert coverage(h.observed(late, ALL_KINDS))["concurrent-candidates"] == {
        "count": 1,
        "first_s": 6.5,
    }


def test_summary_line_names_never_reached_and_unobservable_apart() -> None:
    results = {
        "valid": True,
        "run": {"ok": 1, "fail": 0, "info": 0},
        "coverage": {
            "concurrent-candidates": {"count": 0, "first_s": None},
            "kill-with-ops-in-flight": {"count": 2, "first_s": 3.0},
            "unobservable": {"split-vote": "needs events:vote"},
        },
    }
    line = verdict_line(results)
    assert "never reached: concurrent candidates" in line
    assert "not observable with this DB: split vote" in line
    assert "kill with acks" not in line
    assert "never reached" not in verdict_line({"valid": True})


def test_a_situation_the_db_rules_out_is_not_called_never_reached_but_still_counts() -> None:
    """``by_design`` (the DB's ``unreachable_situations``): not reaching it is what a
    correct DB does, so the run, the report and the zoo do not list it as missed; a run
    that does reach it (a stale read on the reference node) still says so."""
    from harness.report.data import coverage_rows

    why = "reads are answered only by a confirmed leader"
    cov: dict[str, Any] = {
        "read-from-non-leader": {"count": 0, "first_s": None},
        "concurrent-candidates": {"count": 0, "first_s": None},
        "unobservable": {},
        "by_design": {"read-from-non-leader": why},
    }
    line = verdict_line({"valid": True, "run": {"ok": 1, "fail": 0, "info": 0}, "coverage": cov})
    assert "never reached: concurrent candidates" in line
    assert "read answered by a non-leader" not in line
    rows = {r["name"]: r for r in coverage_rows({"coverage": cov})}
    assert rows["read-from-non-leader"]["state"] == "by design"
    assert rows["read-from-non-leader"]["why"] == why
    assert rows["concurrent-candidates"]["state"] == "not reached"
    zoo = {r.name: r for r in coverage_table([_record(cov), _record(cov, 1)])}
    assert zoo["read-from-non-leader"].state == "by design"
    assert "read answered by a non-leader" not in never_reached(list(zoo.values()))
    assert why in render_coverage(list(zoo.values()))
    reached = {**cov, "read-from-non-leader": {"count": 3, "first_s": 12.0}}
    assert {r["name"]: r for r in coverage_rows({"coverage": reached})}["read-from-non-leader"][
        "state"
    ] == "reached"
    # one run of a DB that does not rule it out: the zoo calls it never reached again
    other = {k: v for k, v in cov.items() if k != "by_design"}
    mixed = {r.name: r for r in coverage_table([_record(cov), _record(other, 1)])}
    assert mixed["read-from-non-leader"].state == "NEVER REACHED"


def test_the_declaration_is_validated_and_the_reference_node_makes_it_per_mode() -> None:
    from harness.core.db import unreachable_situations
    from harness.core.errors import ConfigError
    from harness.dbs.dledger import DLedgerDB

    assert set(unreachable_situations(DLedgerDB())) == {"read-from-non-leader"}
    assert set(unreachable_situations(DLedgerDB(read_mode="index"))) == {"read-from-non-leader"}
    assert unreachable_situations(DLedgerDB(extra_args="--mode ha")) == {}
    assert "own term" in unreachable_situations(DLedgerDB(read_mode="log"))["read-from-non-leader"]
    # followers answer reads too (docs/follower-reads.md): reached by design
    assert unreachable_situations(DLedgerDB(read_mode="follower")) == {}
    assert unreachable_situations(object()) == {}

    class Bad:
        unreachable_situations = ["read-from-non-leader"]

    with pytest.raises(ConfigError, match="Bad.unreachable_situations must map"):
        unreachable_situations(Bad())


# ---------------------------------------------------------------- node logs


def test_the_reference_node_log_lines_become_events() -> None:
    lines = {
        "ROLE term=3 role=candidate leader=- time=100.5": ("role", 3, "candidate", None),
        "ROLE term=3 role=leader leader=n1 time=100.6": ("role", 3, "leader", "n1"),
        "INFO event=vote term=3 candidate=n2 time=100.7": ("vote", 3, None, None),
        "INFO event=truncated at=41 old_end=44 new_end=40 term=3 leader=n2 time=101": (
            "truncate",
            3,
            None,
            None,
        ),
        "INFO event=start id=n1 incarnation=5 term=2 votedFor=- time=99": ("start", 2, None, None),
    }
    for line, (kind, term, r, leader) in lines.items():
        e = parse_node_log_line("n1", line)
        assert e is not None and (e.kind, e.term, e.role, e.leader) == (kind, term, r, leader)
    assert parse_node_log_line("n1", "INFO event=vote term=3 candidate=n2 time=1").candidate == "n2"  # type: ignore[union-attr]
    assert parse_node_log_line("n1", "INFO event=truncated at=41 time=1").index == 41  # type: ignore[union-attr]
    for other in ("INFO event=truncate-peer peer=n2 index=0 term=1 time=1",
                  "ROLE term=2 role=master leader=n1 time=1", "SAFETY check=x time=1", "",
                  "ROLE term=x"):  # fmt: skip
        e = parse_node_log_line("n1", other)
        assert e is None or e.term is None, other
    assert isinstance(NodeLogEvents(), ReportsEvents)


def test_events_are_placed_on_the_history_clock_and_clock_faults_undone(tmp_path: Path) -> None:
    run = tmp_path / "20261126T120000.000000Z"
    (run / "nodes" / "n1").mkdir(parents=True)
    origin = 1_800_000_000 * S
    # n1's clock was bumped +5 s from 10 s to 20 s: its line at (history) 12 s says 17 s.
    (run / "nodes" / "n1" / "node.log").write_text(
        f"ROLE term=1 role=leader leader=n1 time={(origin + s(5)) / S:.6f}\n"
        f"ROLE term=2 role=follower leader=n2 time={(origin + s(17)) / S:.6f}\n"
    )
    (run / "nodes" / "n1" / "stdout.log").write_text("ROLE term=9 role=leader leader=n1 time=1\n")
    v = {"mode": "bump", "nodes": ["n1"], "offset_ms": 5000}
    nem = [
        Op("info", "nemesis", "start-clock", {**v, "offsets_ms": {"n1": 5000.0}}, time=s(10)),
        Op("info", "nemesis", "stop-clock", {"mode": "reset"}, time=s(20)),
    ]
    events, kinds, why = collect_events(NodeLogEvents(), run, origin, nem)
    assert why is None and kinds == ALL_KINDS
    assert [(e.term, e.time) for e in events] == [(1, s(5)), (2, s(12))]
    none, _, why = collect_events(object(), run, origin, nem)
    assert none == [] and why is not None and "does not report" in why


def test_a_stamp_a_clock_fault_made_ambiguous_is_settled_by_the_samples_terms(
    tmp_path: Path,
) -> None:
    """n4's clock ran 16 s behind from 50 s to 62 s. Its line stamped 36.6 s (term 4
    leader) could be real 36.6 s or real 52.6 s; its previous line is from 31 s, so the
    order alone says 36.6 s, but the samples had n4 in term 3 until 52 s: 52.6 s."""
    run = tmp_path / "20261126T120000.000000Z"
    (run / "nodes" / "n4").mkdir(parents=True)
    origin = 1_800_000_000 * S
    (run / "nodes" / "n4" / "node.log").write_text(
        f"ROLE term=3 role=follower leader=n1 time={(origin + s(31)) / S:.6f}\n"
        f"ROLE term=4 role=leader leader=n4 time={(origin + s(36.6)) / S:.6f}\n"
    )
    v = {"mode": "bump", "nodes": ["n4"], "offset_ms": -16000}
    nem = [
        Op("info", "nemesis", "start-clock", {**v, "offsets_ms": {"n4": -16000.0}}, time=s(50)),
        Op("info", "nemesis", "stop-clock", {"mode": "reset"}, time=s(62)),
    ]
    samples = [
        Op("ok", 1, "sample", {"role": "follower", "term": 3}, node="n4", time=s(t))
        for t in (32, 40, 48, 51.9)
    ]
    samples.append(Op("ok", 1, "sample", {"role": "leader", "term": 4}, node="n4", time=s(53)))
    events, _, _ = collect_events(NodeLogEvents(), run, origin, nem, samples)
    assert [(e.term, e.time) for e in events] == [(3, s(31)), (4, s(52.6))]
    # Without the samples, the order rule alone takes the earlier reading.
    events, _, _ = collect_events(NodeLogEvents(), run, origin, nem)
    assert [(e.term, e.time) for e in events] == [(3, s(31)), (4, s(36.6))]


# ---------------------------------------------------------------- the zoo


def _record(cov: dict[str, Any] | None, run: int = 0) -> RunRecord:
    return RunRecord(bug=None, run=run, seed=run, valid=True, coverage=cov)


def test_zoo_coverage_table_over_runs() -> None:
    a = {
        "concurrent-candidates": {"count": 2, "first_s": 10.0},
        "kill-with-ops-in-flight": {"count": 0, "first_s": None},
        "unobservable": {"split-vote": "needs events:vote"},
    }
    b = {
        "concurrent-candidates": {"count": 0, "first_s": None},
        "kill-with-ops-in-flight": {"count": 0, "first_s": None},
        "unobservable": {"split-vote": "needs events:vote"},
    }
    rows = {r.name: r for r in coverage_table([_record(a), _record(b, 1), _record(None, 2)])}
    cc = rows["concurrent-candidates"]
    assert (cc.runs, cc.observable, cc.reached, cc.count, cc.median_first_s) == (2, 2, 1, 2, 10.0)
    assert cc.state == "reached"
    assert rows["kill-with-ops-in-flight"].state == "NEVER REACHED"
    assert rows["split-vote"].state == "unobservable"
    missed = never_reached(list(rows.values()))
    assert "kill with acks in flight" in missed and "split vote" not in missed
    text = render_coverage(list(rows.values()))
    assert "concurrent candidates" in text and "1/2" in text and "needs events:vote" in text


# ---------------------------------------------------------------- a stored run


def test_coverage_block_of_a_stored_run(tmp_path: Path) -> None:
    """run_coverage reads the history and the fetched node logs of a run directory."""
    run = tmp_path / "20261126T120000.000000Z"
    (run / "nodes" / "n1").mkdir(parents=True)
    (run / "nodes" / "n2").mkdir(parents=True)
    origin = 1_800_000_000 * S
    h = H().op("write", 1.0, 1.1, "n1")
    with HistoryWriter(run / "history.jsonl") as w:
        for op in sorted(h.ops, key=lambda o: o.time):
            w.append(op)  # keeps each op's time (0 becomes "now", a few µs)
    for node, t in (("n1", 2.0), ("n2", 2.1)):
        (run / "nodes" / node / "node.log").write_text(
            f"INFO event=vote term=4 candidate={node} time={(origin + s(t)) / S:.6f}\n"
        )
    from harness.core.history import read_history

    ops = read_history(run / "history.jsonl")
    cov = run_coverage(run, ops, NodeLogEvents(), ["n1", "n2"], origin_wall_ns=origin)
    assert cov["events"] == {"count": 2, "kinds": sorted(ALL_KINDS), "origin_wall_ns": origin}
    assert cov["concurrent-candidates"]["count"] == 1
    json.dumps(cov)  # results.json must be able to hold it


# ---------------------------------------------------------------- a real run


def test_a_real_run_writes_a_coverage_block_whose_events_match_the_samples(
    lab: Any, tmp_path: Path
) -> None:
    """A short dledger run with kills: results.json holds ``coverage`` with nothing
    unobservable (the reference node reports events, the workload samples), and the node
    events sit on the history's clock: every sample that saw a leader falls inside a
    leadership the node's own log lines describe."""
    import os

    from harness.core.spec import TestSpec
    from harness.run.runner import RunOptions, run_test

    hosts = lab.hosts()
    spec = TestSpec(
        name=f"t{os.getpid()}-coverage",
        nodes=tuple(h.name for h in hosts),
        db="dledger",
        workload="append",
        nemesis=("kill",),
        time_limit=10.0,
        concurrency=4,
        rate=30.0,
        seed=27,
        nemesis_interval=2.5,
    )
    res = run_test(
        spec,
        hosts,
        store_root=tmp_path,
        options=RunOptions(progress=False, recovery_s=1.0, final_timeout_s=20.0),
    )
    assert not res.interrupted, res.reason
    stored = json.loads((res.store_dir / "results.json").read_text())
    cov = stored["coverage"]
    assert cov["unobservable"] == {}
    assert cov["events"]["count"] > 0 and "vote" in cov["events"]["kinds"]
    for sit in SITUATIONS:
        entry = cov[sit.name]
        assert isinstance(entry["count"], int)
        assert (entry["first_s"] is None) == (entry["count"] == 0)
        if entry["first_s"] is not None:
            assert 0 < entry["first_s"] < spec.time_limit + 60
    line = verdict_line(stored)
    assert set(cov["by_design"]) == {"read-from-non-leader"}  # the reference node's
    missed = [
        x.title for x in SITUATIONS if cov[x.name]["count"] == 0 and x.name not in cov["by_design"]
    ]
    assert ("never reached: " + ", ".join(missed) in line) if missed else "never" not in line
    # The events' clock: recompute from the store with the origin the run recorded (the
    # directory's name is stamped before setup, seconds early under load) and check each
    # sample that saw its node lead against the leaderships the events describe.
    from harness.core.history import read_history
    from harness.dbs.dledger import DLedgerDB

    ops = read_history(res.store_dir / "history.jsonl")
    nemesis = [op for op in ops if op.process == "nemesis"]
    events, kinds, why = collect_events(
        DLedgerDB(), res.store_dir, cov["events"]["origin_wall_ns"], nemesis
    )
    assert origin_from_dir(res.store_dir) <= cov["events"]["origin_wall_ns"]
    assert why is None
    obs = observed_from(ops, events=events, event_kinds=kinds, nodes=spec.nodes)
    leading = [
        op for op in obs.samples if isinstance(op.value, dict) and op.value.get("role") == "leader"
    ]
    assert leading, "no sample ever saw a leader"
    slack = 300_000_000  # the origin from the directory name, a sample's own latency
    wrong = [
        (op.node, op.time / S)
        for op in leading
        if not any(
            x.node == op.node and x.start - slack <= op.time <= x.end_hi + slack
            for x in obs.tenures
        )
    ]
    assert not wrong, wrong
