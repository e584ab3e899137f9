"""What the Spark engine reads on its driver before any job: the client records' f names
and the fault records (checker.spark.input.faults_and_fs), and the schema it hands Spark
(checker.spark.input.spark_schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from checker.local import check_local
from checker.spark.input import BASE_COLUMNS, faults_and_fs, spark_schema
from checker.spark.tuning import footer
from checker.synth import generate
from harness.core.errors import HistoryError
from harness.core.history import write_parquet
from harness.core.op import NEMESIS, Op


def _history(tmp_path: Path, batch: int) -> Path:
    ops = [
        Op(type="invoke", process=0, f="append", value={"payload": "a"}),
        Op(type="ok", process=0, f="append", value={"payload": "a", "index": 1, "term": 1}),
        Op(type="info", process=NEMESIS, f="kill", value={"nodes": ["n2"]}),
        Op(type="invoke", process=1, f="read", value=None),
        Op(type="ok", process=1, f="read", value={"entries": [[1, 1, "a"]]}),
        Op(type="invoke", process=NEMESIS, f="start-partition", value="majority"),
    ]
    path = tmp_path / "h.parquet"
    write_parquet([op.replace(index=i, time=i) for i, op in enumerate(ops)], path, batch=batch)
    return path


@pytest.mark.parametrize("batch", [2, 200_000])  # fault records in some row groups, or one
def test_fault_records_and_f_names_come_from_the_file(tmp_path: Path, batch: int) -> None:
    path = _history(tmp_path, batch)
    assert pq.ParquetFile(path).num_row_groups == (3 if batch == 2 else 1)
    faults, fs = faults_and_fs(str(path), True)
    assert fs == ["append", "read"]  # the faults' f names are not client shapes
    assert [(op.index, op.f, op.value) for op in faults] == [
        (2, "kill", {"nodes": ["n2"]}),
        (5, "start-partition", "majority"),
    ]
    assert faults_and_fs(str(path), False) == ([], ["append", "read"])


def test_a_record_without_a_process_is_neither(tmp_path: Path) -> None:
    """As in Spark's comparisons, where a null process is neither equal nor unequal."""
    t = pq.read_table(_history(tmp_path, 200_000))
    proc = t["process"].to_pylist()
    proc[0] = proc[2] = None
    t = t.set_column(t.schema.get_field_index("process"), "process", pa.array(proc, pa.string()))
    odd = tmp_path / "odd.parquet"
    pq.write_table(t, odd)
    faults, fs = faults_and_fs(str(odd), True)
    assert [op.index for op in faults] == [5] and fs == ["append", "read"]


def test_an_unreadable_file_names_itself(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(HistoryError, match="bad.parquet"):
        faults_and_fs(str(bad), True)


@pytest.fixture(scope="module")
def spark() -> Any:
    from checker.spark.session import get_session

    return get_session()


@pytest.mark.spark
def test_the_schema_from_the_footer_is_the_one_spark_reads(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine hands Spark the schema of the footer it has read, so that Spark needs
    no job to infer one; it must be the schema Spark would have inferred: for a file the
    writer made, for the parts of a converted JSONL history, and for a file from before
    the typed value columns."""
    from harness.core import parquet
    from harness.core.history import jsonl_to_parquet_parts, write_jsonl

    ops = list(generate(400, workload="mixed", seed=2))
    made = _written(tmp_path, ops)
    lines = tmp_path / "h.jsonl"
    write_jsonl(ops, lines)
    monkeypatch.setattr(parquet, "PARALLEL_BYTES", lines.stat().st_size // 2)
    parts = tmp_path / "parts"
    parts.mkdir()
    assert len(jsonl_to_parquet_parts(lines, parts, workers=2)) == 2
    old = tmp_path / "old.parquet"
    pq.write_table(pq.read_table(made, columns=list(BASE_COLUMNS)), old)
    for path in (made, parts, old):
        declared = spark_schema(footer(str(path)).schema)
        assert declared is not None
        assert declared == spark.read.parquet(str(path)).schema


@pytest.mark.spark
def test_a_column_of_another_type_leaves_the_schema_to_spark(spark: Any, tmp_path: Path) -> None:
    """A Parquet history written by another tool may hold types whose Spark reading
    differs from Arrow's (here unsigned and timestamp columns); Spark infers those, and the
    check goes on as before."""
    ops = list(generate(300, workload="append", seed=3))
    local = check_local(ops)
    t = pq.read_table(_written(tmp_path, ops))
    n = t.num_rows
    t = t.append_column("seq", pa.array(range(n), pa.uint32()))
    t = t.append_column("at", pa.array([1_700_000_000_000] * n, pa.timestamp("ms")))
    odd = tmp_path / "odd.parquet"
    pq.write_table(t, odd)
    assert spark_schema(footer(str(odd)).schema) is None
    from checker.spark import check_spark

    assert check_spark(str(odd))["valid"] == local["valid"] is True


def _written(tmp_path: Path, ops: list[Op]) -> Path:
    path = tmp_path / "w.parquet"
    write_parquet(ops, path)
    return path
