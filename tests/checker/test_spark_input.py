"""What the Spark engine reads on its driver before any job: the client records' f names
and the fault records (checker.spark.input.faults_and_fs)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from checker.spark.input import faults_and_fs
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
