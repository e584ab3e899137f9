"""Coverage from the node log lines added for issue 27's escape classes: candidacies,
refused votes and reads, monotonic stamps, and logs kept outside the data directory.

Each detector meets its situation and a near miss differing in one respect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checker.situations import SITUATIONS, Observed, observed_from
from harness.core.events import EVENT_KINDS, NodeEvent
from harness.core.history import Op
from harness.dbs.nodelog_events import NodeLogEvents, node_log_files, parse_node_log_line
from harness.run.coverage import collect_events, local_boot_id

S = 1_000_000_000
KINDS = NodeLogEvents().event_kinds()


def s(t: float) -> int:
    return round(t * S)


def ev(node: str, kind: str, t: float, **kw: Any) -> NodeEvent:
    return NodeEvent(node, kind, time=s(t), **kw)


def observed(events: list[NodeEvent], kinds: frozenset[str] = KINDS) -> Observed:
    ops = [Op("invoke", 0, "write", 1, node="n1", time=0), Op("ok", 0, "write", 1, time=1)]
    return observed_from(ops, events=events, event_kinds=kinds, nodes=("n1", "n2", "n3"))


def hits(name: str, obs: Observed) -> list[float]:
    [sit] = [x for x in SITUATIONS if x.name == name]
    return [t / S for t in sorted(sit.detect(obs)) if t >= obs.load_start]


def test_the_new_lines_parse() -> None:
    e = parse_node_log_line("n1", "INFO event=candidacy term=5 end=9 end_term=4 time=1.5 mono=7.25")
    assert e is not None and (e.kind, e.term, e.candidate, e.mono_s) == ("candidacy", 5, "n1", 7.25)
    e = parse_node_log_line(
        "n2",
        "INFO event=vote-refused term=5 candidate=n3 why=REJECT_ALREADY_VOTED my_term=5 "
        "voted=n1 time=2 mono=8",
    )
    assert e is not None and (e.kind, e.term, e.candidate, e.why) == (
        "vote-refused", 5, "n3", "REJECT_ALREADY_VOTED"
    )  # fmt: skip
    e = parse_node_log_line(
        "n1", "INFO event=read-refused why=confirm-failed code=NOT_LEADER term=5 role=leader time=3"
    )
    assert e is not None and (e.kind, e.why, e.role, e.mono_s) == (
        "read-refused", "confirm-failed", "leader", None  # an older node: no mono
    )  # fmt: skip
    e = parse_node_log_line("n1", "INFO event=start id=n1 term=2 boot=abc-1 time=1 mono=2")
    assert e is not None and (e.kind, e.boot) == ("start", "abc-1")
    assert set(KINDS) <= set(EVENT_KINDS)


def test_concurrent_candidates_from_candidacies_even_when_nobody_voted() -> None:
    """n2's candidacy got no vote at all, not even its own (its log was behind): only
    its own line shows it."""
    events = [ev("n1", "candidacy", 1.0, term=3, candidate="n1"),
              ev("n1", "vote", 1.0, term=3, candidate="n1"),
              ev("n2", "candidacy", 1.2, term=3, candidate="n2")]  # fmt: skip
    assert hits("concurrent-candidates", observed(events)) == [1.2]
    assert hits("concurrent-candidates", observed(events, frozenset({"vote"}))) == []
    near = [*events[:2], ev("n2", "candidacy", 1.2, term=4, candidate="n2")]
    assert hits("concurrent-candidates", observed(near)) == []


def test_voter_asked_twice_by_refusal_or_by_a_second_grant() -> None:
    voted = [ev("n3", "vote", 1.0, term=3, candidate="n1")]
    refused = ev("n3", "vote-refused", 1.1, term=3, candidate="n2", why="REJECT_ALREADY_VOTED")
    assert hits("voter-asked-twice", observed([*voted, refused])) == [1.1]
    double = ev("n3", "vote", 1.2, term=3, candidate="n2")  # the double-voting voter
    assert hits("voter-asked-twice", observed([*voted, double])) == [1.2]
    # near misses: another term, a refusal on the log check, the same candidate again
    other_term = ev("n3", "vote-refused", 1.1, term=4, candidate="n2", why="REJECT_ALREADY_VOTED")
    log_check = ev("n3", "vote-refused", 1.1, term=3, candidate="n2",
                   why="REJECT_SMALL_LEDGER_END_INDEX")  # fmt: skip
    again = ev("n3", "vote-refused", 1.1, term=3, candidate="n1", why="REJECT_ALREADY_VOTED")
    for miss in (other_term, log_check, again):
        assert hits("voter-asked-twice", observed([*voted, miss])) == [], miss
    [sit] = [x for x in SITUATIONS if x.name == "voter-asked-twice"]
    assert sit.missing(frozenset({"history", "events:vote"})) is not None


def test_read_refused_by_an_unconfirmed_leader_only() -> None:
    events = [
        ev("n1", "read-refused", 2.0, term=3, why="confirm-failed", role="leader"),
        ev("n2", "read-refused", 2.1, term=3, why="not-leader", role="follower"),
        ev("n1", "read-refused", 2.5, term=3, why="deposed", role="candidate"),
        ev("n1", "read-refused", 2.6, term=3, why="not-ready", role="leader"),
    ]
    assert hits("read-refused-by-leader", observed(events)) == [2.0, 2.5]


def _write_log(run: Path, node: str, name: str, lines: list[str]) -> None:
    d = run / "nodes" / node
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("".join(line + "\n" for line in lines))


def test_monotonic_stamps_place_events_exactly_on_this_kernel(tmp_path: Path) -> None:
    """n1 shares our kernel: its lines are placed by ``mono`` whatever its wall clock said
    (its clock was 30 s off and no clock fault recorded it). n2 booted elsewhere: its wall
    stamps are used."""
    run = tmp_path / "20261126T120000.000000Z"
    origin, origin_mono = 1_800_000_000 * S, 500 * S
    boot = local_boot_id() or "this-kernel"
    wall = lambda t: f"{(origin + s(t) + s(30)) / S:.6f}"  # noqa: E731
    _write_log(run, "n1", "node.log", [
        f"INFO event=start id=n1 term=1 boot={boot} time={wall(1)} mono={500 + 1:.6f}",
        f"ROLE term=2 role=leader leader=n1 time={wall(4)} mono={500 + 4.25:.6f}",
    ])  # fmt: skip
    _write_log(run, "n2", "node.log", [
        f"INFO event=start id=n2 term=1 boot=another-kernel time={(origin + s(1)) / S} mono=9",
        f"ROLE term=2 role=follower leader=n1 time={(origin + s(5)) / S} mono=13",
    ])  # fmt: skip
    events, _, why = collect_events(NodeLogEvents(), run, origin, [], (), origin_mono)
    assert why is None
    if local_boot_id() is not None:
        assert [(e.node, e.time) for e in events] == [
            ("n1", s(1)), ("n1", s(4.25)), ("n2", s(1)), ("n2", s(5))
        ]  # fmt: skip
    # without the monotonic origin (a stored run re-analysed), wall stamps for everyone
    events, _, _ = collect_events(NodeLogEvents(), run, origin, [])
    assert [e.time for e in events if e.node == "n1"] == [s(31), s(34)]


def test_old_members_logs_are_read_first_in_generation_order(tmp_path: Path) -> None:
    names = ["stdout.log", "node.log", "node.n3.1.log", "node.n3.log", "node.n3.2.log"]
    files = [tmp_path / n for n in names]
    assert [p.name for p in node_log_files(files)] == [
        "node.n3.log", "node.n3.1.log", "node.n3.2.log", "node.log"
    ]  # fmt: skip
    run = tmp_path / "20261126T120000.000000Z"
    _write_log(run, "n3", "node.n3.log", ["ROLE term=2 role=leader leader=n3 time=1"])
    _write_log(run, "n3", "node.log", ["ROLE term=5 role=follower leader=n1 time=2"])
    events, _, _ = collect_events(NodeLogEvents(), run, 0, [])
    assert [e.term for e in events] == [2, 5]
