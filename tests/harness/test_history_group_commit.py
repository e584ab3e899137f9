"""The history writer under concurrent appenders (a group commit over two locks).

Workers stamp under one lock and write under another; these tests hold the writer to
what the runner and the checkers rely on whatever thread wrote a line: the file is in
index order, times never go back along it, and a line is in the file when its
``append`` returns (a harness killed right after loses nothing it was told).
"""

from __future__ import annotations

import os
import threading

import pytest

from harness.core.errors import HistoryError
from harness.core.history import HistoryWriter, Op, read_jsonl


def test_concurrent_appends_are_in_index_order_with_times_in_order_too(tmp_path):
    path = tmp_path / "history.jsonl"
    w = HistoryWriter(path)
    unseen: list[int] = []

    def work(p: int) -> None:
        for i in range(300):
            got = w.append(Op("invoke", p, "append", value={"n": i}))
            # in the file when append returns: the file's size covers this line
            with open(path, "rb") as fh:
                if fh.read().count(b"\n") <= got.index:
                    unseen.append(got.index)

    threads = [threading.Thread(target=work, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    ops = read_jsonl(path)
    assert [o.index for o in ops] == list(range(8 * 300))
    assert all(a.time <= b.time for a, b in zip(ops, ops[1:], strict=False))
    for p in range(8):
        assert [o.value["n"] for o in ops if o.process == p] == list(range(300))
    assert not unseen


def test_an_op_that_cannot_be_encoded_uses_no_index(tmp_path):
    w = HistoryWriter(tmp_path / "h.jsonl")
    w.append(Op("invoke", 1, "write", value=1))
    bad: dict[str, object] = {}
    bad["self"] = bad  # circular: no encoder takes it
    with pytest.raises((TypeError, ValueError, RecursionError)):
        w.append(Op("ok", 1, "write", value=bad))
    assert w.append(Op("ok", 1, "write", value=1)).index == 1
    w.close()
    assert [o.index for o in read_jsonl(tmp_path / "h.jsonl")] == [0, 1]


def test_close_writes_nothing_twice_and_later_appends_raise(tmp_path):
    p = tmp_path / "h.jsonl"
    w = HistoryWriter(p)
    for i in range(5):
        w.append(Op("invoke", i, "read"))
    w.close()
    w.close()
    size = os.path.getsize(p)
    with pytest.raises(HistoryError, match="closed"):
        w.append(Op("invoke", 9, "read"))
    assert os.path.getsize(p) == size and len(read_jsonl(p)) == 5
