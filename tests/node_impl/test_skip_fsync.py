"""The seeded bug ``skip-fsync``: every write reaches the OS, no sync ever does.

Only a power cut (a guest's page cache lost) can tell it from the correct node,
so the unit test looks at the system calls instead: with ``os.fsync`` and
``os.fdatasync`` counted, the correct node syncs the log, term.json,
checkpoint.json and the directories they live in before it can ack or vote;
the buggy one writes the same bytes to the OS and syncs nothing.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import pytest

from node_impl.bugs import BUGS, parse_bugs
from node_impl.config import parse_args
from node_impl.node import Node
from node_impl.store import LogStore


class SyncCounter:
    """Counts syncs per kind of target (a file in the data dir, or a directory)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        real_fsync, real_fdatasync = os.fsync, os.fdatasync

        def what(fd: int) -> str:
            target = os.readlink(f"/proc/self/fd/{fd}")
            return "dir" if os.path.isdir(target) else os.path.basename(target)

        def fsync(fd: int) -> None:
            self.calls[f"fsync {what(fd)}"] += 1
            real_fsync(fd)

        def fdatasync(fd: int) -> None:
            self.calls[f"fdatasync {what(fd)}"] += 1
            real_fdatasync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fdatasync)


def _node(tmp_path: Path, bug: str | None) -> Node:
    argv = ["--id", "n1", "--peers", "n1=127.0.0.1:1,n2=127.0.0.1:2,n3=127.0.0.1:3"]
    argv += ["--data-dir", str(tmp_path / "fresh" / "data")]
    if bug:
        argv += ["--bug", bug]
    return Node(parse_args(argv))


def _exercise(node: Node) -> None:
    """What precedes an ack or a vote: the term saved, entries appended and flushed."""
    node.term, node.voted_for = 3, "n2"
    node.persist_term()
    for i in range(5):
        node.store.append_leader(3, f"e{i}".encode())
    asyncio.run(node.flush())  # the follower's path to SUCCESS (R2)
    node.store.append_leader(3, b"more")
    node.store.flush()  # the leader's group commit
    node.checkpoint.save(4)


def test_registered_and_distinct_from_no_fsync() -> None:
    assert "skip-fsync" in BUGS and "power" in BUGS["skip-fsync"]
    assert parse_bugs("skip-fsync").skip_fsync and not parse_bugs("skip-fsync").no_fsync


def test_correct_node_syncs_log_state_files_and_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = SyncCounter(monkeypatch)
    node = _node(tmp_path, None)
    creation = Counter(sc.calls)
    assert creation["fsync dir"] >= 2, creation  # data dir and its parent: data.log's entry
    _exercise(node)
    c = sc.calls
    assert c["fdatasync data.log"] >= 2, c  # one per flush
    assert c["fsync term.json.tmp"] == 1, c
    assert c["fsync checkpoint.json.tmp"] == 1, c
    assert c["fsync dir"] >= creation["fsync dir"] + 2, c  # each rename made durable
    assert node.store.durable_end == node.store.end_index == 5
    node.store.close()


def test_skip_fsync_writes_to_the_os_and_never_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = SyncCounter(monkeypatch)
    node = _node(tmp_path, "skip-fsync")
    _exercise(node)
    assert sum(sc.calls.values()) == 0, sc.calls
    # Yet nothing waits in the process: a kill -9 now loses nothing.
    data = Path(node.cfg.data_dir)
    assert os.path.getsize(data / "data.log") == node.store.data_length > 0
    assert node.store.durable_end == node.store.end_index == 5  # acked as durable
    assert '"votedFor": "n2"' in (data / "term.json").read_text()
    assert "4" in (data / "checkpoint.json").read_text()
    node.store.close()
    assert sum(sc.calls.values()) == 0, sc.calls  # not even on close
    reopened = LogStore(data, fsync=False)
    assert reopened.end_index == 5  # what the OS holds is a valid log
    reopened.close()
