"""What only the Spark engine does: inputs from files, capped evidence with totals, quiet startup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checker.local import check_local
from checker.synth import generate
from harness.errors import HistoryError
from harness.history import Op, write_jsonl

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark() -> Any:
    from checker.spark_session import get_session

    return get_session()


def test_store_directory_with_jsonl_agrees_with_local(spark: Any, tmp_path: Path) -> None:
    """JSONL is streamed to Parquet first (Parquet paths: see the cluster test and the bench)."""
    from checker.spark_engine import check_spark

    kinds = ["duplicate-payload", "committed-regress"]
    ops = list(generate(900, workload="append", anomaly=kinds, seed=6))
    write_jsonl(ops, tmp_path / "history.jsonl")
    local = check_local(ops)
    res = check_spark(tmp_path)          # a store directory holding history.jsonl
    assert res["engine"] == "spark"
    assert res["valid"] is False
    assert res["anomalies"] == local["anomalies"]
    assert set(res["anomalies"]) == set(kinds)


def test_examples_are_capped_with_true_totals(spark: Any) -> None:
    """Every ok append acked at a bogus term: 60 lost acks, 20 examples, the total counted."""
    from checker.spark_engine import CAP, check_spark

    ops: list[Op] = []
    for i in range(60):
        ops.append(Op("invoke", i % 5, "append", {"payload": f"x{i}"}))
        ops.append(Op("ok", i % 5, "append", {"payload": f"x{i}", "index": i, "term": 9}))
    entries = [[i, 1, f"x{i}"] for i in range(60)]
    ops.append(Op("invoke", 99, "read", {"from": 0, "to": 59, "final": True}))
    ops.append(Op("ok", 99, "read", {"entries": entries, "committed": 59}))
    ops = [op.replace(index=i, time=i) for i, op in enumerate(ops)]
    local = check_local(ops)
    res = check_spark(ops)
    ls = res["checkers"]["log-safety"]
    assert len(ls["anomalies"]["lost-ack"]) == CAP
    assert ls["stats"]["anomaly_counts"]["lost-ack"] == 60
    assert ls["anomalies"] == local["checkers"]["log-safety"]["anomalies"]
    assert ls["anomalies"]["lost-ack"][0]["found"] == [1, "x0"]


def test_unreadable_source_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    from checker.spark_engine import check_spark

    with pytest.raises(HistoryError, match="no such file"):
        check_spark(tmp_path / "missing.parquet")
    bad = tmp_path / "h.jsonl"
    bad.write_text('{"index": 0, "type": "invoke", "process": 1, "f": "append"}\nnot json\n')
    with pytest.raises(HistoryError, match="h.jsonl:2"):
        check_spark(bad)
