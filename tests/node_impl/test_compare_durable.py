"""R2 for COMPARE: a follower answers SUCCESS only for an entry it has made durable.

The leader counts a COMPARE SUCCESS as the follower holding the entry
(``raise_mark``), so an entry matched from the page cache and then lost to a power
cut was counted towards a commit it no longer backed (found by the lazy fs: a zoo
run of the correct node lost an acknowledged write; docs/disk-faults.md). These
tests drive a real node's EntryHandler with a real store on disk; the one fake is
the failing flush, standing in for the EIO a dead disk returns.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest

from node_impl.config import parse_args
from node_impl.kv import body_append
from node_impl.node import Node
from node_impl.store import Entry, LogStore

TERM = 3


def _leader_entries(d: Path, n: int = 3) -> list[Entry]:
    s = LogStore(d)
    es = [s.append_leader(TERM, body_append(f"0-{i}")) for i in range(n)]
    s.flush()
    s.close()
    return es


def _follower(d: Path) -> Node:
    argv = ["--id", "n1", "--peers", "n1=127.0.0.1:1,n2=127.0.0.1:2,n3=127.0.0.1:3"]
    node = Node(parse_args([*argv, "--data-dir", str(d)]))
    node.term = TERM
    node.become_follower("n2", None)
    node._apply_wanted = asyncio.Event()  # what Node.run sets up; the applier is not run
    return node


def _compare(node: Node, e: Entry, commit: int) -> dict[str, Any]:
    """One COMPARE from the leader n2, through the handler's own entry point and queue."""
    replies: list[dict[str, Any]] = []
    msg = {
        "type": "push",
        "kind": "COMPARE",
        "term": TERM,
        "leader": "n2",
        "rid": 1,
        "commitIndex": commit,
        "entries": [e.to_wire()],
    }
    node.handler.handle_push(msg, replies.append)
    while node.handler._control:
        node.handler._do_control(node.handler._control.popleft())
    assert len(replies) == 1
    return replies[0]


@pytest.fixture
def entries(tmp_path: Path) -> list[Entry]:
    return _leader_entries(tmp_path / "leader")


def test_compare_makes_a_written_entry_durable_before_success(
    tmp_path: Path, entries: list[Entry]
) -> None:
    node = _follower(tmp_path / "f")
    for e in entries:
        node.store.append_follower(e)  # written, not flushed: what a held push leaves
    assert node.store.durable_end == -1
    before = (tmp_path / "f" / "data.log").stat().st_size
    resp = _compare(node, entries[-1], commit=2)
    assert resp["code"] == "SUCCESS" and resp["index"] == 2
    assert node.store.durable_end == 2
    assert (tmp_path / "f" / "data.log").stat().st_size > before  # on disk now
    assert node.handler.match_index == 2 and node.committed == 2
    node.store.close()


def test_compare_refuses_an_entry_it_cannot_make_durable(
    tmp_path: Path, entries: list[Entry], monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _follower(tmp_path / "f")
    for e in entries:
        node.store.append_follower(e)

    def dead_disk() -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(node.store, "flush", dead_disk)
    resp = _compare(node, entries[-1], commit=2)
    assert resp["code"] == "INCONSISTENT_STATE"
    assert node.handler.match_index == -1  # nothing counted as matching
    assert node.committed == -1  # and the leader's commit index not taken
    monkeypatch.undo()
    node.store.close()


def test_compare_of_a_durable_entry_needs_no_flush(
    tmp_path: Path, entries: list[Entry], monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _follower(tmp_path / "f")
    for e in entries:
        node.store.append_follower(e)
    node.store.flush()
    calls: list[int] = []
    real = node.store.flush

    def counted() -> int:
        calls.append(1)
        return real()

    monkeypatch.setattr(node.store, "flush", counted)
    assert _compare(node, entries[1], commit=1)["code"] == "SUCCESS"
    assert calls == []
    # a different entry at a durable index is still a mismatch
    other = _leader_entries(tmp_path / "other", n=2)[1]
    other = Entry(1, TERM, other.magic, entries[1].pos, other.size, 0, 0, b"x")
    assert _compare(node, other, commit=1)["code"] == "INCONSISTENT_STATE"
    monkeypatch.undo()
    node.store.close()
