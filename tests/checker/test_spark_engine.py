"""What only the Spark engine does: inputs from files, capped evidence with totals, quiet startup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from checker.local import check_local
from checker.synth import generate
from harness.core.errors import HistoryError
from harness.core.history import PARQUET_COLUMNS, Op, write_jsonl, write_parquet
from tests.checker.test_log_safety_fast import unproposed_edges
from tests.checker.test_results import lost_ack_history, restart_history

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark() -> Any:
    from checker.spark.session import get_session

    return get_session()


def test_store_directory_with_jsonl_agrees_with_local(spark: Any, tmp_path: Path) -> None:
    """JSONL is streamed to Parquet first (Parquet paths: see the cluster test and the bench)."""
    from checker.spark import check_spark

    kinds = ["duplicate-payload", "committed-regress"]
    ops = list(generate(900, workload="append", anomaly=kinds, seed=6))
    write_jsonl(ops, tmp_path / "history.jsonl")
    local = check_local(ops)
    res = check_spark(tmp_path)  # a store directory holding history.jsonl
    assert res["engine"] == "spark"
    assert res["valid"] is False
    assert res["anomalies"] == local["anomalies"]
    assert set(res["anomalies"]) == set(kinds)


def test_examples_are_capped_with_true_totals(spark: Any) -> None:
    """Every ok append acked at a bogus term: 60 lost acks, 20 examples, the total counted."""
    from checker.results import CAP
    from checker.spark import check_spark

    ops = lost_ack_history(60)
    local = check_local(ops)
    res = check_spark(ops)
    ls = res["checkers"]["log-safety"]
    assert len(ls["anomalies"]["lost-ack"]) == CAP
    assert ls["stats"]["anomaly_counts"]["lost-ack"] == 60
    assert ls["anomalies"] == local["checkers"]["log-safety"]["anomalies"]
    assert ls["anomalies"]["lost-ack"][0]["found"] == [1, "x0"]


@pytest.mark.parametrize("case", ["restarts", "async-ha"])
def test_both_engines_cap_notes_alike(spark: Any, case: str) -> None:
    """Notes are capped as anomalies are, by the one shared pipeline: the same first
    CAP notes from both engines (the Spark engine used to be the only one capping)."""
    from checker.results import CAP
    from checker.spark import check_spark

    if case == "restarts":
        ops, opts, kind = restart_history(CAP + 10), {}, "committed-regress-restart"
    else:
        ops, opts, kind = (
            lost_ack_history(3 * CAP),
            {"options": {"log-safety": {"ha": {"sync": False}}}},
            "loss-window",
        )
    local = check_local(ops, opts=opts)
    res = check_spark(ops, opts=opts)
    lo, sp = local["checkers"]["log-safety"], res["checkers"]["log-safety"]
    assert len(lo["notes"][kind]) == len(sp["notes"][kind]) == CAP
    assert sp["notes"] == lo["notes"]
    assert sp["stats"] == lo["stats"]
    assert sp["valid"] == lo["valid"] and res["anomalies"] == local["anomalies"]


def test_unreadable_source_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    from checker.spark import check_spark

    with pytest.raises(HistoryError, match="no such file"):
        check_spark(tmp_path / "missing.parquet")
    bad = tmp_path / "h.jsonl"
    bad.write_text('{"index": 0, "type": "invoke", "process": 1, "f": "append"}\nnot json\n')
    with pytest.raises(HistoryError, match="h.jsonl:2"):
        check_spark(bad)


def _second_pass_history() -> list[Op]:
    """Anomalies the Spark engine finishes in a second pass, each in a shape that needs it.

    A read disagrees with the final log on 30 indexes, all first seen by that one
    read (ties beyond the cap of 20); one (index, term, payload) is acked twice and
    lost; three fail appends share a payload that a read shows; the acked string
    "7" sits in the final log as the number 7; payload x3 is committed twice. The 30
    disagreeing payloads (and the number 7) nobody proposed: unproposed-committed at
    those 30 indexes, tied beyond the cap as well.
    """
    ops: list[Op] = []
    for i in range(40):
        p = "7" if i == 5 else f"x{i}"
        ops += [
            Op("invoke", i % 4, "append", {"payload": p}),
            Op("ok", i % 4, "append", {"payload": p, "index": i, "term": 1}),
        ]
    for proc in (4, 5):
        ops += [
            Op("invoke", proc, "append", {"payload": "twice"}),
            Op("ok", proc, "append", {"payload": "twice", "index": 50, "term": 1}),
        ]
    for proc in (6, 7, 8):
        ops += [
            Op("invoke", proc, "append", {"payload": "zombie"}),
            Op("fail", proc, "append", {"payload": "zombie"}, error="not-leader"),
        ]
    good = [[i, 1, "7" if i == 5 else f"x{i}"] for i in range(40)]
    other = [[i, 2, f"y{i}"] if i < 30 else e for i, e in enumerate(good)]
    ops += [
        Op("invoke", 20, "read", {"from": 0, "to": 41}),
        Op(
            "ok",
            20,
            "read",
            {"entries": other + [[40, 1, "zombie"], [41, 1, "zombie"]], "committed": 41},
        ),
        Op("invoke", 21, "read", {"from": 0, "to": 40}),
        Op("ok", 21, "read", {"entries": good + [[40, 1, "zombie"]], "committed": 40}),
    ]
    final = [[5, 1, 7] if e[0] == 5 else e for e in good] + [[45, 1, "x3"]]
    for proc in (30, 31):
        ops += [
            Op("invoke", proc, "read", {"from": 0, "to": 45, "final": True}),
            Op("ok", proc, "read", {"entries": final, "committed": 45}),
        ]
    return [op.replace(index=i, time=i) for i, op in enumerate(ops)]


@pytest.mark.parametrize("columns", ["typed", "value-only"])
def test_second_pass_evidence_matches_local(spark: Any, tmp_path: Path, columns: str) -> None:
    from checker.spark import check_spark

    ops = _second_pass_history()
    local = check_local(ops)
    ls = local["checkers"]["log-safety"]
    assert ls["stats"]["anomaly_counts"] == {
        "divergent-committed": 30,
        "lost-ack": 3,
        "failed-append-present": 3,
        "duplicate-payload": 2,
        "unproposed-committed": 30,
        "append-order": 1,
    }
    assert ls["anomalies"]["lost-ack"][0]["found"] == [1, 7]
    path = tmp_path / "h.parquet"
    write_parquet(ops, path)
    if columns == "value-only":  # as written before the typed columns existed
        pq.write_table(pq.read_table(path, columns=list(PARQUET_COLUMNS)), path)
    res = check_spark(str(path))
    sp = res["checkers"]["log-safety"]
    assert sp["anomalies"] == ls["anomalies"]
    assert sp["stats"] == ls["stats"]


@pytest.mark.parametrize("case", ["planted", "planted-clean", "edges", "none-acked"])
def test_unproposed_committed_matches_local(spark: Any, case: str) -> None:
    """Caught (a torn record, a string and an object nobody appended) and let pass (what
    some append carried whatever its outcome, NOOPs, system entries, past ``committed``,
    below the lowest ack, before any ack): the very examples and stats of the local engine."""
    from checker.planted import _unproposed
    from checker.spark import check_spark

    none_acked, edges = unproposed_edges()
    ops = {
        "planted": _unproposed(bad=True),
        "planted-clean": _unproposed(bad=False),
        "edges": edges,
        "none-acked": none_acked,
    }[case]
    local = check_local(ops)["checkers"]["log-safety"]
    sp = check_spark(ops)["checkers"]["log-safety"]
    assert ("unproposed-committed" in local["anomalies"]) is (case in ("planted", "edges"))
    assert sp["anomalies"] == local["anomalies"]
    assert sp["stats"] == local["stats"]


def test_unproposed_committed_examples_are_capped_with_true_totals(spark: Any) -> None:
    """More unproposed indexes than the cap, first seen by different reads: the same
    first CAP examples and the true total from both engines."""
    from checker.results import CAP
    from checker.spark import check_spark

    n = CAP + 15
    ops = [
        Op("invoke", 0, "append", {"payload": "a"}),
        Op("ok", 0, "append", {"payload": "a", "index": 0, "term": 1}),
    ]
    for i in range(n):  # read i shows the torn record at i + 1 (and, later, at i)
        torn = [[j, 1, {"undecodable": f"{j:04x}"}] for j in range(max(1, i), i + 2)]
        ops += [
            Op("invoke", 10 + i, "read", {"from": 0, "to": i + 1}),
            Op("ok", 10 + i, "read", {"entries": [[0, 1, "a"], *torn], "committed": i + 1}),
        ]
    ops = [op.replace(index=k, time=k) for k, op in enumerate(ops)]
    local = check_local(ops)["checkers"]["log-safety"]
    sp = check_spark(ops)["checkers"]["log-safety"]
    assert len(local["anomalies"]["unproposed-committed"]) == CAP
    assert local["stats"]["anomaly_counts"]["unproposed-committed"] == n
    assert sp["anomalies"] == local["anomalies"]
    assert sp["stats"] == local["stats"]
