"""The local engine's log safety from each way a history reaches it: ops in memory
(:func:`checker.local.check_local`, which :func:`checker.log_safety.check_log_safety`
writes as Parquet), the Parquet a run writes and the live JSONL (read in parallel parts):
the same results.json, byte for byte, on generated histories with planted anomalies,
hand-made edge cases and mode ha. What each anomaly means is checker.log_anomalies'; the
examples are pinned in tests/checker/test_log_safety.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checker.local import check_local, check_local_columns
from checker.log_safety import check_log_safety, check_log_safety_columns
from checker.synth import LOG_ANOMALIES, generate
from harness.core.jsonl import write_jsonl
from harness.core.op import Op
from harness.core.paired import PairedHistory, pair_arrays, pair_positions
from harness.core.parquet import ColumnarHistory, write_parquet

pytest.importorskip("pyarrow")


def _same(ops: list[Op], tmp_path: Path, opts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The local engine's result over ``ops``, asserted equal to its result from the
    Parquet a run writes and from the live JSONL."""
    old = check_local(ops, opts=opts)
    old.pop("elapsed_s")
    write_parquet(ops, tmp_path / "h.parquet")
    write_jsonl(ops, tmp_path / "h.jsonl")
    for path in (tmp_path / "h.parquet", tmp_path / "h.jsonl"):
        new = check_local_columns(path, opts=opts)
        assert new is not None, f"the columnar path declined a log history ({path.suffix})"
        new.pop("elapsed_s")
        assert json.dumps(new, sort_keys=True) == json.dumps(old, sort_keys=True), path.suffix
    return old


@pytest.mark.parametrize("kind", LOG_ANOMALIES)
def test_each_planted_anomaly_same_result(kind: str, tmp_path: Path) -> None:
    res = _same(list(generate(1500, workload="append", anomaly=kind, seed=7)), tmp_path)
    assert kind in res["anomalies"]


def test_every_anomaly_at_once_and_valid(tmp_path: Path) -> None:
    res = _same(list(generate(2500, workload="append", anomaly=LOG_ANOMALIES, seed=3)), tmp_path)
    assert set(LOG_ANOMALIES) <= set(res["anomalies"])
    assert _same(list(generate(2000, workload="append", seed=5)), tmp_path)["valid"] is True


def test_ha_async_loss_window(tmp_path: Path) -> None:
    ops = list(generate(800, workload="append", anomaly="lost-ack", seed=24))
    res = _same(ops, tmp_path, {"options": {"log-safety": {"ha": {"sync": False}}}})
    assert "loss-window" in res["checkers"]["log-safety"]["notes"]


def _op(i: int, typ: str, p: int, f: str, value: Any, node: str = "n1") -> Op:
    return Op(type=typ, process=p, f=f, value=value, index=i, time=i, node=node)


def test_edge_values(tmp_path: Path) -> None:
    """Committed absent, null and non-integer; a final read cut short (reach); object
    payloads; a fail with a null payload; an ack without payload or term; samples with
    odd fields; a keyed read (not a log read)."""
    ops: list[Op] = []

    def pair(p: int, f: str, inv: Any, typ: str, out: Any, node: str = "n1") -> None:
        ops.append(_op(len(ops), "invoke", p, f, inv, node))
        ops.append(_op(len(ops), typ, p, f, out, node))

    pair(0, "append", {"payload": {"b": 1, "a": [2]}}, "ok", {"index": 1, "term": 1})
    pair(0, "append", {"payload": "x"}, "ok", {"payload": "x", "index": 2})
    pair(0, "append", {"payload": None}, "fail", None)
    pair(0, "append", {"payload": "y"}, "fail", None)
    pair(0, "append", {"payload": "z"}, "ok", {"payload": "z", "index": 9, "term": 1})
    pair(1, "read", {"from": 0}, "ok", {"entries": [[1, 1, {"a": [2], "b": 1}], [2, 1, "y"]]})
    pair(1, "read", {"from": 0}, "ok", {"entries": [[1, 2, "q"]], "committed": None})
    pair(1, "read", {"from": 0}, "ok", {"entries": [[2, 1, "x"]], "committed": "2"})
    pair(1, "read", {"final": True}, "ok", {"entries": [[1, 1, "w"], [2, 1, "y"]], "end": 5})
    pair(2, "sample", None, "ok", {"committed": 5, "end": 3, "term": 2, "role": "leader"})
    pair(2, "sample", None, "ok", {"committed": True, "term": 1.5, "incarnation": [1]})
    pair(3, "sample", None, "ok", {"committed": 4, "term": 2, "role": "leader", "incarnation": 2})
    pair(3, "sample", None, "ok", {"committed": 1, "term": 1, "incarnation": 3}, node="n2")
    ops.append(_op(len(ops), "invoke", 4, "append", {"payload": "open"}))
    res = _same(ops, tmp_path)
    assert res["valid"] is False
    assert {"divergent-committed", "failed-append-present"} <= set(res["anomalies"])


@pytest.mark.parametrize("bad", [False, True])
def test_unproposed_committed_same_result(tmp_path: Path, bad: bool) -> None:
    """The planted unproposed-committed histories (checker.planted): what must pass and,
    with ``bad``, what must be caught, read alike from Parquet's JSON text."""
    from checker.planted import _unproposed

    res = _same(_unproposed(bad=bad), tmp_path)
    found = res["checkers"]["log-safety"]["anomalies"].get("unproposed-committed", [])
    assert [e["index"] for e in found] == ([10, 11, 12] if bad else [])


def unproposed_edges() -> tuple[list[Op], list[Op]]:
    """Histories for unproposed-committed's edges (the Spark tests use them too): system
    entries told apart by their text (``"kind"`` after scalars, after a nested value, only
    nested, inside a string), two unproposed payloads at one index, JSON types the
    canonical text keeps apart (the acked number 7 is not the string "7" nor 7.0); and
    the history's first read alone, before any ok append (nothing judged)."""
    ops: list[Op] = []

    def pair(p: int, f: str, inv: Any, typ: str, out: Any) -> None:
        ops.append(_op(len(ops), "invoke", p, f, inv))
        ops.append(_op(len(ops), typ, p, f, out))

    pair(1, "read", {"from": 0}, "ok", {"entries": [[1, 1, {"undecodable": "00"}]]})
    none_acked = list(ops)
    pair(0, "append", {"payload": 7}, "ok", {"payload": 7, "index": 1, "term": 1})
    pair(0, "append", {"payload": "s"}, "ok", {"index": 2, "term": 1})
    log = [
        [2, 1, "s"],
        [3, 1, {"a": 1, "b": 'x,"kind":', "kind": "kv"}],
        [4, 1, {"a": {"n": [1, 2]}, "kind": "config"}],
        [5, 1, {"a": {"kind": "x"}}],
        [6, 1, {"a": '"kind":1'}],
        [7, 1, "7"],
        [8, 1, 7.0],
        [9, 1, [1, {"kind": 1}]],
    ]
    pair(1, "read", {"from": 0, "final": True}, "ok", {"entries": log, "committed": 9})
    pair(2, "read", {"from": 0}, "ok", {"entries": [[9, 2, "other"], [5, 1, {"a": {"kind": "x"}}]]})
    return none_acked, ops


def test_unproposed_committed_edges_same_result(tmp_path: Path) -> None:
    none_acked, ops = unproposed_edges()
    assert _same(none_acked, tmp_path)["valid"] is True
    res = _same(ops, tmp_path)
    found = res["checkers"]["log-safety"]["anomalies"]["unproposed-committed"]
    assert sorted(e["index"] for e in found) == [1, 5, 6, 7, 8, 9]
    assert next(e for e in found if e["index"] == 9)["payload"] == "other"


def test_examples_one_read_proves_are_listed_by_their_other_fields() -> None:
    """One read proves every example of a kind (equal ``indexes``): they are listed by
    their fields (checker.log_anomalies.tie_key), log indexes by value, so a capped list
    keeps the lowest ones, as the Spark engine does. The Arrow group-by order they were
    built in put index 10 after 16."""
    from checker.log_anomalies import by_indexes

    n = 40
    ops = [
        Op("invoke", 0, "append", {"payload": "a"}),
        Op("ok", 0, "append", {"payload": "a", "index": 0, "term": 1}),
        Op("invoke", 1, "read", {"from": 0}),
        Op("ok", 1, "read", {"entries": [[0, 1, "a"]] + [[i, 1, f"y{i}"] for i in range(1, n)]}),
    ]
    res = check_log_safety([op.replace(index=i, time=i) for i, op in enumerate(ops)])
    found = res["anomalies"]["unproposed-committed"]
    assert [e["index"] for e in found] == list(range(1, n))
    tied = [
        {"payload": p, "log_indexes": li, "indexes": [3]}
        for p, li in (("b", [2, 10]), ("a", [2, 10]), (7, [2, 9]), ("7", [2, 9]))
    ]
    assert by_indexes(tied) == [tied[2], tied[3], tied[1], tied[0]]
    assert by_indexes([{"index": 2, "indexes": [4]}, {"index": 10, "indexes": [3, 5]}]) == [
        {"index": 10, "indexes": [3, 5]},
        {"index": 2, "indexes": [4]},
    ]


def test_function_level_agreement(tmp_path: Path) -> None:
    """Without the engine in between: ops, and the columns of their Parquet file."""
    ops = list(generate(1200, workload="append", anomaly=("lost-ack", "append-order"), seed=2))
    path = tmp_path / "h.parquet"
    write_parquet(ops, path)
    cols = ColumnarHistory.read(path)
    assert cols is not None
    assert check_log_safety_columns(cols) == check_log_safety(PairedHistory.of(ops))


@pytest.mark.parametrize(
    "records",
    [
        [(0, "invoke", "a"), (0, "invoke", "a")],  # double invoke
        [(0, "ok", "a")],  # orphan completion
        [(0, "invoke", "a"), (0, "ok", "b")],  # another f
        [(0, "invoke", "a"), (0, "info", "a"), (0, "invoke", "a")],  # reuse after info
    ],
)
def test_pair_arrays_rejects_what_pairing_rejects(records: list[tuple[int, str, str]]) -> None:
    import numpy as np

    procs = np.array([p for p, _, _ in records])
    types = [t for _, t, _ in records]
    fs = np.array([0 if f == "a" else 1 for _, _, f in records])
    got = pair_arrays(
        procs,
        np.array([t == "invoke" for t in types]),
        np.array([t == "info" for t in types]),
        fs,
        strict=True,
    )
    assert got is None


def test_pair_arrays_pairs_as_pair_positions() -> None:
    import numpy as np

    ops = list(generate(600, workload="append", seed=9))
    got = pair_arrays(
        np.array([op.process for op in ops]),
        np.array([op.type == "invoke" for op in ops]),
        np.array([op.type == "info" for op in ops]),
        np.array([hash(op.f) for op in ops]),
        strict=True,
    )
    assert got is not None
    want = sorted(pair_positions(ops, strict=True).items())
    assert [(int(i), None if c < 0 else int(c)) for i, c in zip(*got, strict=True)] == want


def test_malformed_history_falls_back(tmp_path: Path) -> None:
    """A double invoke: the columnar path declines, so pairing the ops raises its exact
    error."""
    from checker.dispatch import check_history
    from harness.core.errors import HistoryError

    ops = [_op(0, "invoke", 0, "append", {"payload": 1}), _op(1, "invoke", 0, "append", {})]
    write_parquet(ops, tmp_path / "h.parquet")
    write_jsonl(ops, tmp_path / "h.jsonl")
    for path in (tmp_path / "h.parquet", tmp_path / "h.jsonl"):
        assert check_local_columns(path) is None
        with pytest.raises(HistoryError, match="invoked again"):
            check_history(path)
