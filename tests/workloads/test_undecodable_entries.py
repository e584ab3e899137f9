"""A log entry whose body the node cannot read reaches the history as what it is: its bytes,
not a NOOP and not an append with no payload (so log safety can ask who proposed it)."""

from __future__ import annotations

from checker.log_safety import check_log_safety
from harness.core.op import Op
from node_impl.kv import body_append, entry_view
from node_impl.store import MAGIC_NOOP, MAGIC_NORMAL, Entry
from workloads.append import log_entries


def entry(index: int, body: bytes, magic: int = MAGIC_NORMAL) -> Entry:
    return Entry(index, 1, magic, 0, len(body), 0, 0, body)


def test_a_padded_body_is_shown_as_undecodable_bytes_and_a_whole_one_as_its_payload() -> None:
    whole = body_append("3-7")
    padded = whole[:5] + b"\0" * (len(whole) - 5)  # a torn record kept, zero-padded
    views = [
        entry_view(entry(1, whole)),
        entry_view(entry(2, padded)),
        entry_view(entry(3, b"", MAGIC_NOOP)),
    ]
    assert views[0] == [1, 1, "append", "3-7"]
    assert views[1] == [2, 1, "undecodable", padded.hex()]
    assert views[2] == [3, 1, "noop", None]
    assert log_entries({"entries": views}) == [
        [1, 1, "3-7"],
        [2, 1, {"undecodable": padded.hex()}],
        [3, 1, None],
    ]


def test_log_safety_flags_it_committed_and_not_a_noop() -> None:
    padded = (body_append("3-8")[:4] + b"\0" * 20).hex()
    ops = [
        Op(type="invoke", process=0, f="append", value={"payload": "3-7"}, index=0),
        Op(
            type="ok",
            process=0,
            f="append",
            value={"payload": "3-7", "index": 1, "term": 1},
            index=1,
        ),
        Op(type="invoke", process=0, f="read", value={"from": 0, "to": 9, "final": True}, index=2),
        Op(
            type="ok",
            process=0,
            f="read",
            index=3,
            value={
                "entries": [[1, 1, "3-7"], [2, 1, {"undecodable": padded}], [3, 1, None]],
                "committed": 3,
            },
        ),
    ]
    res = check_log_safety(ops)
    assert res["valid"] is False
    assert res["anomalies"] == {
        "unproposed-committed": [{"index": 2, "payload": {"undecodable": padded}, "indexes": [3]}]
    }
