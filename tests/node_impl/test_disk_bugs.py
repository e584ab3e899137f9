"""The seeded bugs only disk faults find: ``skip-crc``, ``trust-torn-tail``, ``trust-term-file``.

Each test crafts the damaged file a disk fault leaves (with the corruption
operations of ``harness/control/disk/corrupt.py``, the ones a ``corrupt`` fault
runs), then shows the correct node's recovery cutting or repairing it and the
buggy node's recovery keeping it.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from harness.control.disk import corrupt
from node_impl.bugs import BUGS, parse_bugs
from node_impl.config import parse_args
from node_impl.node import Node
from node_impl.store import (
    HEADER_SIZE,
    UNKNOWN_VOTE,
    Entry,
    LogStore,
    TermStore,
    encode_body,
    reconcile_term,
)

DISK_BUGS = ("skip-crc", "trust-torn-tail", "trust-term-file")


def _node(data: Path, bug: str | None) -> Node:
    argv = ["--id", "n1", "--peers", "n1=127.0.0.1:1,n2=127.0.0.1:2,n3=127.0.0.1:3"]
    argv += ["--data-dir", str(data)]
    if bug:
        argv += ["--bug", bug]
    return Node(parse_args(argv))


def _log(d: Path, terms: list[int]) -> list[Entry]:
    s = LogStore(d)
    es = [
        s.append_leader(t, encode_body({"op": "append", "p": f"payload-{i}".encode() * 4}))
        for i, t in enumerate(terms)
    ]
    s.flush()
    s.close()
    return es


def test_registered_and_listed() -> None:
    from node_impl.cli import node

    out = CliRunner().invoke(node, ["--list-bugs"]).output
    for name in DISK_BUGS:
        assert name in BUGS and parse_bugs(name).names == [name]
        assert any(ln.startswith(name + " ") for ln in out.splitlines()), out


# ---------------------------------------------------------------------- skip-crc


def test_skip_crc_keeps_a_flipped_body(tmp_path: Path) -> None:
    es = _log(tmp_path / "data", [1, 1, 2, 2, 2])
    bad = es[2]
    rec = corrupt.bitflip(
        str(tmp_path / "data" / "data.log"),
        bits=3,
        seed=5,
        offset=bad.pos + HEADER_SIZE,
        length=len(bad.body),
    )
    assert len(rec["bits"]) == 3
    correct = _node(tmp_path / "data", None)
    assert correct.store.end_index == 1  # cut at the first entry failing its bodyCrc
    correct.store.close()
    # the correct recovery cut the file: damage it again for the buggy node
    es = _log(tmp_path / "b", [1, 1, 2, 2, 2])
    corrupt.bitflip(
        str(tmp_path / "b" / "data.log"),
        bits=3,
        seed=5,
        offset=es[2].pos + HEADER_SIZE,
        length=len(es[2].body),
    )
    buggy = _node(tmp_path / "b", "skip-crc")
    assert buggy.store.end_index == 4  # every entry kept
    got = buggy.store.get(2)  # and served, though no client wrote it
    assert got.body != es[2].body and len(got.body) == len(es[2].body)
    buggy.store.close()


def test_skip_crc_still_cuts_a_broken_header(tmp_path: Path) -> None:
    es = _log(tmp_path, [1, 1, 1])
    # entry 0's index field over entry 1's: a header that no longer follows
    rec = corrupt.copy_chunk(str(tmp_path / "data.log"), src=8, dst=es[1].pos + 8, length=8)
    assert rec["changed"] == 1 and rec["length"] == 8
    s = LogStore(tmp_path, verify_crc=False)
    assert s.end_index == 0  # magic/size/index checks remain
    s.close()


# ---------------------------------------------------------------------- trust-torn-tail


def test_torn_tail_cut_by_the_correct_node_kept_by_the_buggy_one(tmp_path: Path) -> None:
    for bug, d in ((None, tmp_path / "ok"), ("trust-torn-tail", tmp_path / "bug")):
        es = _log(d, [1, 1, 2])
        last = es[-1]
        size = last.pos + last.size
        rec = corrupt.truncate(str(d / "data.log"), drop=7)  # a torn write of the last record
        assert rec["new_size"] == size - 7
        node = _node(d, bug)
        if bug is None:
            assert node.store.end_index == 1
            assert (d / "data.log").stat().st_size == last.pos
        else:
            assert node.store.end_index == 2
            kept = node.store.get(2)
            assert kept.body == last.body[:-7] + b"\0" * 7  # not what was written
            assert (d / "data.log").stat().st_size == size
        node.store.close()


def test_trust_torn_tail_keeps_a_different_last_record_only(tmp_path: Path) -> None:
    es = _log(tmp_path, [1, 1, 1, 1])
    path = str(tmp_path / "data.log")
    last = es[-1]
    corrupt.bitflip(path, bits=1, seed=1, offset=last.pos + HEADER_SIZE, length=4)
    s = LogStore(tmp_path, trust_torn_tail=True)
    assert s.end_index == 3 and s.get(3).body != last.body  # the last one: kept
    s.close()
    s = LogStore(tmp_path)  # re-stamped: the correct node cannot tell any more
    assert s.end_index == 3
    s.close()
    # A bad record that is not the last still ends the log, even with the bug.
    es = _log(tmp_path / "mid", [1, 1, 1, 1])
    corrupt.bitflip(
        str(tmp_path / "mid" / "data.log"), bits=1, seed=1, offset=es[1].pos + HEADER_SIZE
    )
    s = LogStore(tmp_path / "mid", trust_torn_tail=True)
    assert s.end_index == 0
    s.close()


def test_a_tear_inside_the_header_is_cut_even_with_the_bug(tmp_path: Path) -> None:
    es = _log(tmp_path, [1, 1])
    corrupt.truncate(str(tmp_path / "data.log"), drop=es[-1].size - 10)
    s = LogStore(tmp_path, trust_torn_tail=True)
    assert s.end_index == 0
    s.close()


# ---------------------------------------------------------------------- trust-term-file


def test_reconcile_term() -> None:
    assert reconcile_term(3, None, 5) == (5, UNKNOWN_VOTE)
    assert reconcile_term(5, "n2", 5) == (5, "n2")
    assert reconcile_term(7, None, 5) == (7, None)
    assert reconcile_term(0, None, -1) == (0, None)  # empty log, no file


def _rolled_back_term_file(d: Path) -> dict:
    """term.json restored to an older copy after the node voted in term 5 and took entries."""
    ts = TermStore(d)
    ts.save(3, None)
    rec = corrupt.snapshot(str(d / "term.json"), str(d.parent / "term.json.snap"))
    ts.save(5, "n2")  # voted for n2 in term 5; n2 won and replicated
    _log(d, [1, 3, 5, 5])
    back = corrupt.rollback(str(d / "term.json"), rec["snapshot"])
    assert back["sha256_after"] == rec["sha256"] != back["sha256_before"]
    return back


def _double_vote_attempt(node: Node) -> list[str]:
    """A second candidate of term 5 asks, is told NOT_READY, and asks again."""
    results = []
    for _ in range(2):
        ans = node.elector.handle_vote(
            {"type": "vote", "term": 5, "candidate": "n3", "ledgerEndIndex": 3, "ledgerEndTerm": 5}
        )
        results.append(ans["result"])
        if node.elector.need_increase:  # what the candidate loop does on its next tick
            node.elector.need_increase = False
            node.next_term()
    return results


def test_correct_node_repairs_a_rolled_back_term_file(tmp_path: Path) -> None:
    d = tmp_path / "data"
    _rolled_back_term_file(d)
    node = _node(d, None)
    assert (node.term, node.voted_for) == (5, UNKNOWN_VOTE)
    assert json.loads((d / "term.json").read_text()) == {"term": 5, "votedFor": UNKNOWN_VOTE}
    assert "ACCEPT" not in _double_vote_attempt(node)
    own = node.elector.handle_vote(
        {"type": "vote", "term": 5, "candidate": "n1", "ledgerEndIndex": 3, "ledgerEndTerm": 5},
        from_self=True,
    )
    assert own["result"] == "REJECT_ALREADY_VOTED"  # cannot become a second leader of 5
    node.store.close()


def test_trust_term_file_votes_twice_in_a_term(tmp_path: Path) -> None:
    d = tmp_path / "data"
    _rolled_back_term_file(d)
    node = _node(d, "trust-term-file")
    assert (node.term, node.voted_for) == (3, None)
    assert _double_vote_attempt(node) == ["REJECT_TERM_NOT_READY", "ACCEPT"]
    assert (node.term, node.voted_for) == (5, "n3")  # n2 already had this node's vote in 5
    node.store.close()
