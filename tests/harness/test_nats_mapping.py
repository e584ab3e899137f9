"""examples/nats: JetStream acks and reads as append-log history ops, judged by the real checks.

Pure: no server and no nats-py (the plugin imports it only when it talks to a
server). The mapped histories go through splitbrain's own log-safety checker,
so these tests fail if the mapping stops feeding it what it needs.
"""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from checker.log_safety import check_log_safety
from harness.api import PENDING, GenContext, Op

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "nats"))

from splitbrain_nats.generator import FinalReads, StreamGen  # noqa: E402
from splitbrain_nats.mapping import (  # noqa: E402
    STREAM,
    appended,
    entries,
    final_read_value,
    meta_leader,
    publish_failed,
    read_value,
    replicas_converged,
    stream_detail,
    stream_leader,
)
from splitbrain_nats.store import (  # noqa: E402
    IndexFormatError,
    block_index,
    block_messages,
    blocks_messages,
    live_messages,
)


class History:
    """Ops numbered as the runner would number them."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, op: Op) -> Op:
        op = op.replace(index=len(self.ops), time=len(self.ops))
        self.ops.append(op)
        return op

    def append(self, process: int, payload: str, seq: int | None, *, kind: str = "") -> None:
        inv = self.add(Op(type="invoke", process=process, f="append", value={"payload": payload}))
        if seq is not None:
            self.add(appended(inv, {"stream": STREAM, "seq": seq}))
        else:
            self.add(publish_failed(inv, kind, "test"))  # type: ignore[arg-type]

    def final_read(self, process: int, node: str, msgs: list[tuple[int, str]], end: int) -> None:
        value = {"from": 1, "to": end, "final": True, "local": True}
        inv = self.add(Op(type="invoke", process=process, f="read", value=value, node=node))
        body = [(s, p.encode()) for s, p in msgs]
        self.add(inv.complete("ok", final_read_value(body, end=end)))


def test_an_ack_becomes_an_ok_append_at_the_stream_sequence() -> None:
    inv = Op(type="invoke", process=3, f="append", value={"payload": "3-0"}, node="n2")
    ok = appended(inv, {"stream": STREAM, "seq": 42, "duplicate": False})
    assert (ok.type, ok.value, ok.node) == (
        "ok",
        {"payload": "3-0", "index": 42, "term": None},
        "n2",
    )
    assert appended(inv, {"stream": STREAM, "seq": 42, "duplicate": True}).value["duplicate"]


@pytest.mark.parametrize(
    "ack", [{"stream": "OTHER", "seq": 1}, {"stream": STREAM}, {"stream": STREAM, "seq": True}]
)
def test_an_ack_that_names_no_sequence_of_our_stream_is_info(ack: dict[str, Any]) -> None:
    inv = Op(type="invoke", process=0, f="append", value={"payload": "0-0"})
    assert appended(inv, ack).type == "info"


@pytest.mark.parametrize(
    ("kind", "type_"),
    [
        ("no-responders", "fail"),
        ("not-connected", "fail"),
        ("timeout", "info"),
        ("api-error", "info"),
        ("connection", "info"),
    ],
)
def test_only_errors_that_prove_nothing_was_stored_are_fail(kind: str, type_: str) -> None:
    inv = Op(type="invoke", process=0, f="append", value={"payload": "0-0"})
    done = publish_failed(inv, kind, "detail")  # type: ignore[arg-type]
    assert done.type == type_ and done.error == f"{kind}: detail" and done.value == inv.value


def test_read_entries_are_ordered_by_sequence_with_a_null_term() -> None:
    msgs = [(3, b"c"), (1, b"a"), (2, b"\xff"), (1, b"again"), (9, b"late")]
    assert entries(msgs, upto=3) == [[1, None, "a"], [2, None, repr(b"\xff")], [3, None, "c"]]
    assert read_value([(1, b"a")], upto=5) == {"entries": [[1, None, "a"]], "committed": None}
    assert final_read_value([(1, b"a"), (2, b"b")], end=1)["entries"] == [[1, None, "a"]]
    chunk = final_read_value([(s, b"x") for s in range(1, 9)], end=7, frm=3, to=5)
    assert [e[0] for e in chunk["entries"]] == [3, 4, 5] and chunk["end"] == chunk["committed"] == 7
    assert final_read_value([], end=None) == {
        "entries": [],
        "committed": None,
        "end": None,
        "replica": False,
    }


def test_a_clean_mapped_history_is_valid_for_the_append_log_checks() -> None:
    h = History()
    h.append(0, "0-0", 1)
    h.append(1, "1-1", 2)
    h.append(0, "0-2", None, kind="no-responders")
    for i, node in enumerate(["n1", "n2", "n3"]):
        h.final_read(10 + i, node, [(1, "0-0"), (2, "1-1")], end=2)
    result = check_log_safety(h.ops)
    assert result["valid"] is True, result["anomalies"]
    assert result["stats"]["appends"] == {"ok": 2, "fail": 1, "info": 0}
    assert result["stats"]["final_reads"] == 3


def test_an_acked_message_missing_from_every_final_read_is_lost() -> None:
    h = History()
    h.append(0, "0-0", 1)
    h.append(1, "1-1", 2)
    h.final_read(10, "n1", [(1, "0-0")], end=1)
    result = check_log_safety(h.ops)
    assert result["valid"] is False
    assert [e["payload"] for e in result["anomalies"]["lost-ack"]] == ["1-1"]


def test_replicas_disagreeing_on_a_sequence_diverge_and_a_refused_publish_present_is_caught() -> (
    None
):
    h = History()
    h.append(0, "0-0", 1)
    h.append(1, "1-1", None, kind="no-responders")
    h.final_read(10, "n1", [(1, "0-0"), (2, "1-1")], end=2)
    h.final_read(11, "n2", [(1, "0-0"), (2, "0-0")], end=2)
    anomalies = check_log_safety(h.ops)["anomalies"]
    assert anomalies["divergent-committed"][0]["index"] == 2
    assert anomalies["failed-append-present"][0]["payload"] == "1-1"
    assert anomalies["duplicate-payload"][0]["payload"] == "0-0"


def test_acks_out_of_real_time_order_are_reordered() -> None:
    h = History()
    h.append(0, "0-0", 5)
    h.append(1, "1-1", 3)  # invoked after 0-0 was acked, yet placed before it
    assert "append-order" in check_log_safety(h.ops)["anomalies"]


def _ctx(process: int, node: str, nodes: list[str], lull: bool = False) -> GenContext:
    return GenContext(0, process, process, node, random.Random(1), nodes, lull)


def test_final_reads_walk_every_node_in_chunks_until_past_its_end() -> None:
    gen = FinalReads(chunk=2, attempts=2)
    nodes = ["n1", "n2"]
    seen: list[tuple[str | None, int, int]] = []
    for _ in range(20):
        op = gen.op(_ctx(7, "n1", nodes))
        if op is None:
            break
        assert op is not PENDING and op.value["final"] is True
        seen.append((op.node, op.value["from"], op.value["to"]))
        if op.node == "n2" and op.value["from"] == 1:
            gen.update(_ctx(7, "n1", nodes), op.complete("info", op.value))
            continue  # n2 fails once, then answers
        end = 3 if op.node == "n1" else 1
        gen.update(_ctx(7, "n1", nodes), op.complete("ok", final_read_value([], end=end)))
    assert seen == [("n1", 1, 2), ("n1", 3, 4), ("n2", 1, 2), ("n2", 1, 2)]


def test_final_reads_give_up_a_node_after_failures_and_wait_for_reads_in_flight() -> None:
    gen = FinalReads(chunk=10, attempts=2)
    a = gen.op(_ctx(1, "n1", ["n1"]))
    assert gen.op(_ctx(2, "n1", ["n1"])) is PENDING
    gen.update(_ctx(1, "n1", ["n1"]), a.complete("fail", a.value))
    b = gen.op(_ctx(2, "n1", ["n1"]))
    gen.update(_ctx(2, "n1", ["n1"]), b.complete("fail", b.value))
    assert gen.op(_ctx(3, "n1", ["n1"])) is None


def test_publishes_have_unique_payloads_and_reads_cover_the_acked_tail() -> None:
    gen = StreamGen(read_fraction=0.0, chunk=5)
    ops = [gen.op(_ctx(p % 3, "n1", ["n1"])) for p in range(6)]
    assert len({o.value["payload"] for o in ops}) == 6
    gen.update(
        _ctx(0, "n1", ["n1"]), ops[0].complete("ok", {"payload": "x", "index": 40, "term": None})
    )
    read = gen.op(_ctx(0, "n1", ["n1"], lull=True))
    assert read.f == "read" and read.value["to"] == 40 and 36 <= read.value["from"] <= 40


def test_monitoring_report_names_this_servers_stream_state_and_leaders() -> None:
    jsz = {
        "meta_cluster": {"name": "splitbrain", "leader": "n4", "cluster_size": 5},
        "account_details": [
            {
                "name": "$G",
                "stream_detail": [
                    {
                        "name": STREAM,
                        "cluster": {"leader": "n2"},
                        "state": {"messages": 602, "first_seq": 1, "last_seq": 602},
                    },
                ],
            },
        ],
    }
    assert stream_detail(jsz)["state"]["last_seq"] == 602  # type: ignore[index]
    assert (stream_leader(jsz), meta_leader(jsz)) == ("n2", "n4")
    assert (
        stream_detail({"meta_cluster": {}}) is None
        and meta_leader({"meta_cluster": {"leader": ""}}) is None
    )


def _record(
    seq: int, body: bytes, headers: bytes = b"", subject: bytes = b"splitbrain.log"
) -> bytes:
    """One message record as nats-server 2.9 writes it into a block (checksum left zero)."""
    rest = subject + (struct.pack("<I", len(headers)) + headers if headers else b"") + body
    length = 22 + len(rest) + 8
    flag = 1 << 31 if headers else 0
    return struct.pack("<IQqH", length | flag, seq, 1_700_000_000, len(subject)) + rest + bytes(8)


def test_a_replicas_block_file_gives_its_live_messages_by_sequence() -> None:
    hdr = b"NATS/1.0\r\nNats-Msg-Id: 2-3\r\n\r\n"
    block = (
        _record(1, b"2-3", hdr)
        + _record(2, b"4-1")
        + _record(3 | 1 << 63, b"erased")  # a deleted message keeps its bytes, marked
        + _record(4, b"0-9", hdr)
    )
    assert block_messages(block) == [(1, b"2-3"), (2, b"4-1"), (4, b"0-9")]
    torn = block + _record(5, b"1-1")[:-3]  # a write cut short ends the block
    assert block_messages(torn) == block_messages(block)
    assert blocks_messages([_record(7, b"a"), _record(8, b"b")]) == [(7, b"a"), (8, b"b")]


def test_a_tombstone_of_211_and_later_is_not_a_message() -> None:
    """From 2.11 a delete may write a tombstone (sequence with bit 62): no message, and
    the records around it are still read (the head layout is 2.9's, measured on 2.15.2)."""
    block = _record(5, b"1-5") + _record(6 | 1 << 62, b"") + _record(7, b"2-7")
    assert block_messages(block) == [(5, b"1-5"), (7, b"2-7")]
    assert live_messages([(block, None)]) == ([(5, b"1-5"), (7, b"2-7")], 0)


def _jsz(node: str, leader: str, replicas: list[dict[str, Any]] | None, last: int = 40) -> dict:
    """A server's /jsz (accounts and streams) as nats-server 2.9.10 shapes it."""
    cluster: dict[str, Any] = {"name": "splitbrain", "leader": leader}
    if replicas is not None:
        cluster["replicas"] = replicas
    return {
        "server_id": node,
        "meta_cluster": {"name": "splitbrain", "leader": "n1", "cluster_size": 3},
        "account_details": [
            {
                "name": "$G",
                "stream_detail": [
                    {
                        "name": STREAM,
                        "cluster": cluster,
                        "state": {"messages": last, "first_seq": 1, "last_seq": last},
                    }
                ],
            }
        ],
    }


def _peer(name: str, *, current: bool = True, lag: int = 0, offline: bool = False) -> dict:
    p: dict[str, Any] = {"name": name, "current": current, "active": 1000, "peer": name.upper()}
    if lag:
        p["lag"] = lag  # omitted when 0, as the server does (omitempty)
    if offline:
        p["offline"] = True
    return p


def test_replicas_converge_when_the_leader_reports_every_replica_current_with_lag_0() -> None:
    views = {
        "n1": _jsz("n1", "n2", [_peer("n1", current=False, lag=9)]),  # a follower's stale list
        "n2": _jsz("n2", "n2", [_peer("n1"), _peer("n3")]),
        "n3": _jsz("n3", "n2", None),
    }
    look = replicas_converged(views)
    assert look.converged and look.why is None
    seen = look.seen["streams"][f"$G/{STREAM}"]
    assert seen["leader"] == "n2" and seen["replicas"]["n1"] == {"current": True, "lag": 0}
    assert seen["state"]["n3"] == [1, 40, 40]
    assert look.token == replicas_converged(views).token


@pytest.mark.parametrize(
    "leader_view, views_extra, off",
    [
        ([_peer("n1", lag=3), _peer("n3")], {}, "n1 lag 3"),
        ([_peer("n1", current=False), _peer("n3")], {}, "n1 not current"),
        ([_peer("n1"), _peer("n3", offline=True)], {}, "n3 offline"),
        ([_peer("n1")], {}, "the leader does not list n3"),
        ([_peer("n1"), _peer("n3")], {"n3": None}, "no /jsz answer from n3"),
        ([_peer("n1"), _peer("n3")], {"n1": _jsz("n1", "n1", [])}, "no agreed leader"),
    ],
)
def test_replicas_have_not_converged_while_the_leader_sees_one_behind(
    leader_view: list[dict[str, Any]], views_extra: dict[str, Any], off: str
) -> None:
    views: dict[str, Any] = {
        "n1": _jsz("n1", "n2", None),
        "n2": _jsz("n2", "n2", leader_view),
        "n3": _jsz("n3", "n2", None),
        **views_extra,
    }
    look = replicas_converged(views)
    assert not look.converged and off in (look.why or ""), look.why


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _idx(first: int, last: int, deleted: list[int], *, msgs: int | None = None) -> bytes:
    """A block's .idx as nats-server 2.9 writes it (writeIndexInfo: zigzag for the stamps)."""
    n = (last - first + 1 - len(deleted)) if msgs is None else msgs
    head = bytes([22, 1]) + b"".join(
        _uvarint(v) for v in (n, 1000, first, 2 * 1_700_000_000, last, 2 * 1_700_000_001)
    )
    return head + _uvarint(len(deleted)) + bytes(8) + b"".join(_uvarint(s - first) for s in deleted)


def test_a_blocks_index_removes_what_was_deleted_from_it() -> None:
    block = b"".join(_record(s, f"m{s}".encode()) for s in range(1, 7))
    idx = _idx(3, 6, [5])  # 1 and 2 gone from the head, 5 from the middle
    assert block_index(idx).first == 3 and block_index(idx).deleted == {5}
    newer = _record(7, b"m7")  # appended after the index was written: kept
    msgs, dropped = live_messages([(block + newer, idx), (_record(8, b"m8"), None)])
    assert [s for s, _ in msgs] == [3, 4, 6, 7, 8] and dropped == 3


def test_an_index_of_another_format_stops_the_read_with_a_clear_error() -> None:
    with pytest.raises(IndexFormatError, match="not nats-server 2.9's"):
        live_messages([(_record(1, b"a"), bytes([22, 2]) + bytes(20))])
    with pytest.raises(IndexFormatError, match="ends"):
        block_index(bytes([22, 1, 0x80]))
