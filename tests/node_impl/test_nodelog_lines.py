"""The node.log lines coverage reads (issue 27), written by the real node code.

A node is built (not started: no sockets) and its vote and read handlers are called
directly; the lines it writes are then parsed by the harness's own parser, so a line
renamed on one side and not the other fails here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness.dbs.nodelog_events import parse_node_log_line
from node_impl.config import parse_args
from node_impl.node import Node
from node_impl.nodelog import NodeLog, boot_id

PEERS = "n1=127.0.0.1:1,n2=127.0.0.1:2,n3=127.0.0.1:3"


def _node(tmp_path: Path) -> Node:
    argv = ["--id", "n1", "--peers", PEERS, "--data-dir", str(tmp_path / "data")]
    return Node(parse_args([*argv, "--log-file", str(tmp_path / "node.log")]))


def _events(path: Path) -> list:
    out = [parse_node_log_line("n1", line) for line in path.read_text().splitlines()]
    return [e for e in out if e is not None]


def _ask(node: Node, term: int, cand: str) -> str:
    msg = {"type": "vote", "term": term, "candidate": cand, "ledgerEndIndex": -1,
           "ledgerEndTerm": -1}  # fmt: skip
    return str(node.elector.handle_vote(msg)["result"])


def test_log_file_lives_where_it_is_told_and_defaults_to_the_data_dir(tmp_path: Path) -> None:
    base = ["--id", "n1", "--peers", PEERS, "--data-dir", str(tmp_path / "d")]
    assert parse_args(base).log_path == tmp_path / "d" / "node.log"
    assert parse_args([*base, "--log-file", str(tmp_path / "x.log")]).log_path == (
        tmp_path / "x.log"
    )
    node = _node(tmp_path)
    node.log.info("hello")
    node.log.close()
    assert "event=hello" in (tmp_path / "node.log").read_text()
    assert not (tmp_path / "data" / "node.log").exists()


def test_every_line_carries_a_monotonic_stamp(tmp_path: Path) -> None:
    log = NodeLog(tmp_path / "sub" / "node.log")  # the parent is made
    log.role(3, "leader", "n1")
    log.close()
    [line] = (tmp_path / "sub" / "node.log").read_text().splitlines()
    e = parse_node_log_line("n1", line)
    assert e is not None and e.mono_s is not None and e.wall_s is not None
    assert abs(e.mono_s - __import__("time").monotonic()) < 60
    assert boot_id() is None or len(boot_id() or "") > 8


def test_a_second_candidate_of_a_term_is_refused_and_both_asks_are_logged(
    tmp_path: Path,
) -> None:
    node = _node(tmp_path)
    node.term = 4
    assert _ask(node, 4, "n2") == "ACCEPT"
    assert _ask(node, 4, "n3") == "REJECT_ALREADY_VOTED"
    assert _ask(node, 4, "n3") == "REJECT_ALREADY_VOTED"  # re-asked: one line, not two
    assert _ask(node, 3, "n3") == "REJECT_EXPIRED_VOTE_TERM"
    node.log.close()
    got = [(e.kind, e.term, e.candidate, e.why) for e in _events(tmp_path / "node.log")]
    assert got == [
        ("vote", 4, "n2", None),
        ("vote-refused", 4, "n3", "REJECT_ALREADY_VOTED"),
        ("vote-refused", 3, "n3", "REJECT_EXPIRED_VOTE_TERM"),
    ]


def test_a_candidacy_is_logged_once_per_term(tmp_path: Path) -> None:
    """The vote round itself, with no peers reachable (no links): the candidate's own
    line comes before its own vote."""
    node = _node(tmp_path)
    node.term = 7

    async def rounds() -> None:
        node.elector.handle_vote  # noqa: B018 (the elector exists before start)
        await node.elector._vote_round(7)
        await node.elector._vote_round(7)

    asyncio.run(asyncio.wait_for(rounds(), 10))
    node.log.close()
    got = [(e.kind, e.term, e.candidate) for e in _events(tmp_path / "node.log")]
    assert got[:2] == [("candidacy", 7, "n1"), ("vote", 7, "n1")]
    assert [g for g in got if g[0] == "candidacy"] == [("candidacy", 7, "n1")]


def test_reads_refused_by_a_non_leader_are_logged_once_per_role(tmp_path: Path) -> None:
    node = _node(tmp_path)

    async def reads() -> list[object]:
        return [await node.read_view(False) for _ in range(3)]

    assert asyncio.run(reads()) == ["NOT_LEADER"] * 3
    node.log.close()
    refused = [e for e in _events(tmp_path / "node.log") if e.kind == "read-refused"]
    assert [(e.why, e.role) for e in refused] == [("not-leader", "candidate")]


def test_a_node_that_follows_a_leader_refuses_another_candidate_of_its_term(
    tmp_path: Path,
) -> None:
    """Following a leader is a vote for it: a node that joined term 2 by a heartbeat (no
    vote of its own) must not elect a second leader of term 2 once its leader is quiet."""
    node = _node(tmp_path)
    node.adopt_term(2)
    assert node.voted_for is None
    hb = {"type": "heartbeat", "term": 2, "leader": "n2", "rid": 1}
    assert node.elector.handle_heartbeat(hb)["code"] == "SUCCESS"
    assert node.voted_for == "n2" and node.term_store.load() == (2, "n2")
    node.become_candidate(2, need_increase=False)  # its leader fell silent: same term
    assert _ask(node, 2, "n3") in ("REJECT_ALREADY_VOTED", "REJECT_ALREADY_HAS_LEADER")
    assert _ask(node, 2, "n2") == "ACCEPT"
