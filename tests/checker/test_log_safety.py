"""Each log-safety anomaly: a small history that has it and a near twin that does not,
read out of the checker's result (:func:`checker.log_safety.check_log_safety`)."""

from __future__ import annotations

from typing import Any

from checker import log_safety as ls
from checker.log_anomalies import NOTES
from harness.core.history import Op


def found(ops: list[Op], kind: str, **kw: Any) -> list[dict[str, Any]]:
    """The examples of one anomaly (or note) kind in the result over ``ops``; ``[]`` when
    the kind was not found."""
    res = ls.check_log_safety(ops, **kw)
    return list(res["notes" if kind in NOTES else "anomalies"].get(kind, []))


class H:
    """Builds a history in order, assigning indexes; terse like Elle's fixtures."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, type: str, process: Any, f: str, value: Any = None, **kw: Any) -> int:
        idx = len(self.ops)
        self.ops.append(Op(type=type, process=process, f=f, value=value, index=idx, **kw))
        return idx

    def sample(
        self,
        node: str,
        *,
        committed: int = 0,
        end: int = 10,
        term: int = 1,
        role: str = "follower",
        inc: int = 1,
    ) -> int:
        self.add("invoke", 99, "sample", None, node=node)
        return self.add(
            "ok",
            99,
            "sample",
            {
                "role": role,
                "term": term,
                "leader": None,
                "begin": 0,
                "end": end,
                "committed": committed,
                "incarnation": inc,
            },
            node=node,
        )

    def append(
        self, p: int, payload: str, result: str = "ok", index: int | None = None, term: int = 1
    ) -> tuple[int, int]:
        i = self.add("invoke", p, "append", {"payload": payload})
        v = {"payload": payload, "index": index, "term": term} if result == "ok" else None
        return i, self.add(result, p, "append", v)

    def read(
        self,
        p: int,
        entries: list[list[Any]],
        *,
        committed: int | None = None,
        final: bool = False,
        end: int | None = None,
    ) -> int:
        inv = {"from": 0, "to": 100}
        if final:
            inv["final"] = True
        self.add("invoke", p, "read", inv)
        v: dict[str, Any] = {"entries": entries}
        if committed is not None:
            v["committed"] = committed
        if end is not None:
            v["end"] = end
        return self.add("ok", p, "read", v)


def test_committed_regress_positive_and_negative() -> None:
    h = H()
    a = h.sample("n1", committed=5)
    h.sample("n1", committed=5)
    b = h.sample("n1", committed=3)
    h.sample("n1", committed=2)  # same (node, inc): reported once
    h.sample("n2", committed=1)  # another node, lower: fine
    assert found(h.ops, "committed-regress") == [
        {"node": "n1", "incarnation": 1, "from": 5, "to": 3, "indexes": [a, b]}
    ]
    ok = H()
    ok.sample("n1", committed=1)
    ok.sample("n1", committed=4)
    ok.sample("n1", committed=2, inc=2)  # restart: a note, not a violation
    assert found(ok.ops, "committed-regress") == []
    notes = found(ok.ops, "committed-regress-restart")
    assert [n["indexes"] for n in notes] == [[3, 5]] and notes[0]["previous_incarnation"] == 1
    res = ls.check_log_safety(ok.ops)
    assert res["valid"] is True and "committed-regress-restart" in res["notes"]


def test_committed_beyond_end() -> None:
    h = H()
    h.sample("n1", committed=4, end=4)
    bad = h.sample("n2", committed=6, end=5)
    assert found(h.ops, "committed-beyond-end") == [
        {"node": "n2", "incarnation": 1, "committed": 6, "end": 5, "indexes": [bad]}
    ]
    assert found(h.ops[:2], "committed-beyond-end") == []


def test_two_leaders_in_term() -> None:
    h = H()
    a = h.sample("n1", role="leader", term=3)
    h.sample("n1", role="leader", term=3)
    b = h.sample("n2", role="leader", term=3)
    h.sample("n3", role="leader", term=4)
    h.sample("n3", role="candidate", term=3)
    assert found(h.ops, "two-leaders-in-term") == [
        {"term": 3, "nodes": ["n1", "n2"], "indexes": [a, b]}
    ]
    assert found(h.ops[:4], "two-leaders-in-term") == []


def test_term_regress_across_incarnations() -> None:
    h = H()
    a = h.sample("n1", term=4, inc=1)
    b = h.sample("n1", term=2, inc=2)
    h.sample("n2", term=1)
    assert found(h.ops, "term-regress") == [
        {"node": "n1", "incarnation": 2, "from": 4, "to": 2, "indexes": [a, b]}
    ]
    assert found(h.ops[:2], "term-regress") == []


def test_divergent_committed_respects_committed_bound() -> None:
    h = H()
    r1 = h.read(1, [[1, 1, "a"], [2, 1, "b"]], committed=2)
    r2 = h.read(2, [[1, 1, "a"], [2, 2, "c"]], committed=1)  # index 2 not committed: fine
    assert found(h.ops, "divergent-committed") == []
    r3 = h.read(3, [[1, 1, "a"], [2, 2, None]])  # NOOP counts here
    assert found(h.ops, "divergent-committed") == [
        {"index": 2, "values": [[1, "b"], [2, None]], "indexes": [r1, r3]}
    ]
    assert r2 not in found(h.ops, "divergent-committed")[0]["indexes"]


def test_lost_ack_unknown_without_final_reads() -> None:
    h = H()
    _, c1 = h.append(1, "p1", index=1)
    _, c2 = h.append(2, "p2", index=2)
    res = ls.check_log_safety(h.ops)
    assert res["valid"] == "unknown" and res["unknown"] == ["lost-ack"]
    h.read(3, [[1, 1, "p1"], [2, 1, "x"]], final=True)
    assert found(h.ops, "lost-ack") == [
        {"payload": "p2", "index": 2, "term": 1, "found": [1, "x"], "indexes": [c2]}
    ]
    good = H()
    good.append(1, "p1", index=1)
    good.read(3, [[1, 1, "p1"]], final=True)
    good.read(4, [], final=False)
    assert found(good.ops, "lost-ack") == [] and ls.check_log_safety(good.ops)["valid"] is True


def test_lost_ack_missing_index_and_uncommitted() -> None:
    h = H()
    _, c = h.append(1, "p1", index=2)
    h.read(3, [[1, 1, "q"], [2, 1, "p1"]], committed=1, final=True)  # p1 present but not committed
    assert found(h.ops, "lost-ack")[0]["found"] is None
    assert found(h.ops, "lost-ack")[0]["indexes"] == [c]


def test_final_reads_cut_short_judge_only_what_they_reached() -> None:
    """A final phase that ran out of time (millions of entries) read a prefix of each
    log: acks past it were never looked for, so they are unknown, not lost."""
    h = H()
    h.append(1, "p1", index=1)
    _, c2 = h.append(2, "p2", index=2)
    h.append(3, "p3", index=5)
    h.append(4, "p4", index=6)
    h.read(5, [[1, 1, "p1"], [2, 1, "x"], [3, 1, "q"]], final=True, end=9)  # chunk 1-3 of 9
    assert found(h.ops, "lost-ack") == [
        {"payload": "p2", "index": 2, "term": 1, "found": [1, "x"], "indexes": [c2]}
    ]
    assert ls.check_log_safety(h.ops)["stats"]["lost_ack_unjudged"] == 2
    res = ls.check_log_safety(h.ops)
    assert res["valid"] is False and res["stats"]["lost_ack_unjudged"] == 2
    short = H()
    short.append(1, "p1", index=1)
    short.append(2, "p2", index=7)
    short.read(3, [[1, 1, "p1"]], final=True, end=9)
    res = ls.check_log_safety(short.ops)
    assert res["valid"] == "unknown" and res["unknown"] == ["lost-ack"], res
    # another node's read got to its end (a shorter log): p2 is judged, and lost
    short.read(4, [[1, 1, "p1"], [2, 1, "y"]], final=True, end=2)
    assert ls.check_log_safety(short.ops)["stats"]["lost_ack_unjudged"] == 0
    assert [x["payload"] for x in found(short.ops, "lost-ack")] == ["p2"]


def test_failed_append_present() -> None:
    h = H()
    _, fc = h.append(1, "p1", result="fail")
    h.append(2, "p2", result="info")
    r = h.read(3, [[1, 1, "p2"], [2, 1, "p1"]])
    assert found(h.ops, "failed-append-present") == [
        {"payload": "p1", "index": 2, "indexes": [fc, r]}
    ]
    h2 = H()
    h2.append(1, "p1", result="fail")
    h2.read(3, [[1, 1, "p2"], [2, 1, "p1"]], committed=1)
    assert found(h2.ops, "failed-append-present") == []


def test_duplicate_payload() -> None:
    h = H()
    r1 = h.read(1, [[1, 1, "a"], [2, 1, None], [3, 1, None]])
    r2 = h.read(2, [[5, 2, "a"]])
    assert found(h.ops, "duplicate-payload") == [
        {"payload": "a", "log_indexes": [1, 5], "indexes": [r1, r2]}
    ]
    assert found(h.ops[:2], "duplicate-payload") == []  # NOOPs at 2 and 3 are no duplicate


def test_append_order() -> None:
    h = H()
    _, ca = h.append(1, "a", index=5)
    _, cx = h.append(3, "x", index=7)
    _, cb = h.append(2, "b", index=6)  # invoked after a (5) and x (7) were acked: 6 <= 7
    assert found(h.ops, "append-order") == [{"a_index": 7, "b_index": 6, "indexes": [cx, cb]}]
    assert ca < cx
    # concurrent appends may land in any order
    c = H()
    c.add("invoke", 1, "append", {"payload": "a"})
    c.add("invoke", 2, "append", {"payload": "b"})
    c.add("ok", 1, "append", {"payload": "a", "index": 9, "term": 1})
    c.add("ok", 2, "append", {"payload": "b", "index": 8, "term": 1})
    assert found(c.ops, "append-order") == []


def test_check_log_safety_collects_kinds() -> None:
    h = H()
    h.append(1, "p", result="fail")
    h.read(2, [[1, 1, "p"]], final=True)
    res = ls.check_log_safety(h.ops)
    assert res["valid"] is False
    assert set(res["anomalies"]) == {"failed-append-present"}
    assert res["stats"]["appends"] == {"ok": 0, "fail": 1, "info": 0}


TORN = {"undecodable": "7b227061796c6f6164223a2270000000"}  # '{"payload":"p' zero-padded


def test_unproposed_committed_catches_a_torn_record_and_an_unknown_payload() -> None:
    h = H()
    h.append(1, "p1", index=1)
    h.append(2, "p2", index=2)
    r1 = h.read(3, [[1, 1, "p1"], [2, 1, "p2"], [3, 1, TORN], [4, 1, "nobody"]], final=True)
    r2 = h.read(4, [[3, 1, TORN]], committed=3)
    assert found(h.ops, "unproposed-committed") == [  # in the order of their indexes
        {"index": 4, "payload": "nobody", "indexes": [r1]},
        {"index": 3, "payload": TORN, "indexes": [r1, r2]},
    ]
    res = ls.check_log_safety(h.ops)
    assert res["valid"] is False and set(res["anomalies"]) == {"unproposed-committed"}
    # two unproposed payloads at one index (divergent too): one example, the smaller payload
    r3 = h.read(5, [[3, 2, "zz"]])
    assert found(h.ops, "unproposed-committed")[1] == {
        "index": 3,
        "payload": "zz",  # '"zz"' sorts before '{"undecodable":...}'
        "indexes": [r1, r2, r3],
    }


def test_unproposed_committed_lets_proposed_and_system_entries_pass() -> None:
    """Whatever some append carried (failed, info, never completed), NOOPs, system
    entries, entries above ``committed`` and below the lowest ack are not flagged."""
    h = H()
    h.add("invoke", 9, "append", {"payload": "old"})  # never completed
    h.append(1, "p1", index=3)
    h.append(2, "failed", result="fail")
    h.append(3, "unknown", result="info")
    h.add("invoke", 4, "append", {"payload": {"b": 1, "a": [1, {"kind": 0}]}})
    h.add("ok", 4, "append", {"payload": {"b": 1, "a": [1, {"kind": 0}]}, "index": 4, "term": 1})
    entries: list[list[Any]] = [
        [1, 1, "from-before-the-run"],  # below the lowest acked index, 3
        [2, 1, None],
        [3, 1, "p1"],
        [4, 1, {"a": [1, {"kind": 0}], "b": 1}],  # the same payload, keys in another order
        [5, 1, "failed"],
        [6, 1, "unknown"],
        [7, 1, "old"],
        [8, 1, {"at": 8, "kind": "kv-write", "op": {"key": "k0", "value": 3}}],
        [9, 1, {"at": {"n": 9}, "kind": "config", "op": None}],
        [10, 1, "uncommitted"],
    ]
    h.read(5, entries, committed=9, final=True)
    assert found(h.ops, "unproposed-committed") == []
    assert set(ls.check_log_safety(h.ops)["anomalies"]) == {"failed-append-present"}
    # "kind" only in a nested object is no system entry
    h.read(6, [[9, 1, {"op": {"kind": "kv-write"}}]])
    assert [e["index"] for e in found(h.ops, "unproposed-committed")] == [9]


def test_unproposed_committed_judges_nothing_without_an_ok_append() -> None:
    h = H()
    h.append(1, "p1", result="info")
    h.read(2, [[1, 1, TORN]], final=True)
    assert found(h.ops, "unproposed-committed") == []
    h.append(3, "p3", index=1, term=9)  # an ack at index 1 (its term aside) opens index 1
    assert [e["index"] for e in found(h.ops, "unproposed-committed")] == [1]


def test_a_candidates_lost_term_sets_no_floor_only_where_the_db_declares_it() -> None:
    from checker.log_safety import check_log_safety
    from harness.core.op import Op

    def sample(i: int, term: int, role: str, inc: int) -> list[Op]:
        v = {"role": role, "term": term, "incarnation": inc, "committed": 0, "end": 0}
        return [
            Op(type="invoke", process=9, f="sample", index=2 * i, time=2 * i, node="n1"),
            Op(type="ok", process=9, f="sample", value=v, index=2 * i + 1, time=2 * i + 1,
               node="n1"),
        ]  # fmt: skip

    ops = [
        *sample(0, 3, "follower", 1),
        *sample(1, 4, "candidate", 1),
        *sample(2, 3, "follower", 2),
    ]
    assert [a["from"] for a in found(ops, "term-regress")] == [4]
    assert found(ops, "term-regress", settled_terms_only=True) == []
    below = [*ops, *sample(3, 2, "follower", 3)]  # below a term it followed in: still judged
    assert [a["to"] for a in found(below, "term-regress", settled_terms_only=True)] == [2]
    res = check_log_safety(ops, settled_terms_only=True)
    assert "term-regress" not in res["anomalies"]
    assert "term-regress" in check_log_safety(ops)["anomalies"]


def test_an_error_states_unsaved_term_sets_no_floor_either() -> None:
    from harness.core.op import Op

    ops = []
    for i, (term, role) in enumerate(((12, "follower"), (13, "error"), (12, "follower"))):
        v = {"role": role, "term": term, "incarnation": i}
        ops += [
            Op(type="invoke", process=9, f="sample", index=2 * i, time=2 * i, node="n1"),
            Op(type="ok", process=9, f="sample", value=v, index=2 * i + 1, time=2 * i + 1,
               node="n1"),
        ]  # fmt: skip
    assert found(ops, "term-regress") and not found(ops, "term-regress", settled_terms_only=True)


def test_values_python_equates_are_told_apart_as_json() -> None:
    """Terms and payloads compare as canonical JSON text (checker.log_anomalies: Equality),
    on both engines. The Op path removed in issue 45 compared Python values here, so it
    found no lost ack for ``true`` held as ``1`` (while calling that ``1`` unproposed), a
    failed ``1.0`` present as ``1``, and ``1`` beside ``true`` a duplicate."""
    from checker.planted import _json_types

    res = ls.check_log_safety(_json_types())
    assert res["anomalies"] == {
        "lost-ack": [
            {"payload": True, "index": 1, "term": 1, "found": [1, 1], "indexes": [1]},
            {"payload": "a", "index": 2, "term": 1, "found": [1.0, "a"], "indexes": [3]},
        ],
        "unproposed-committed": [{"index": 1, "payload": 1, "indexes": [9]}],
    }
    assert res["anomalies"]["lost-ack"][1]["found"][0].__class__ is float


def test_records_sharing_an_index_are_a_malformed_history() -> None:
    import pytest

    from harness.core.errors import HistoryError

    h = H()
    h.append(1, "p1", index=1)
    h.ops.append(h.ops[0].replace(process=2))  # a second invocation at index 0
    with pytest.raises(HistoryError, match="share this history index"):
        ls.check_log_safety(h.ops)


def test_an_ack_beyond_int64_is_not_judged_rather_than_called_lost() -> None:
    """The columns hold log indexes as 64-bit integers: such an ack cannot be looked up."""
    h = H()
    h.append(1, "p1", index=1)
    h.append(2, "big", index=2**64)
    h.read(3, [[1, 1, "p1"]], final=True)
    res = ls.check_log_safety(h.ops)
    assert res["valid"] == "unknown" and res["unknown"] == ["lost-ack"]
    assert res["stats"]["lost_ack_unjudged"] == 1 and res["stats"]["appends"]["ok"] == 2
