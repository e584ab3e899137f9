"""``jsonl_to_parquet`` (the Spark engine's JSONL input) writes what ``write_parquet(iter_jsonl())``
writes, and fails on the same lines with the same words."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from checker.synth import ANOMALIES, write_history
from harness.core.errors import HistoryError
from harness.core.history import iter_jsonl, jsonl_to_parquet, write_parquet


def test_same_file_as_the_op_path(tmp_path: Path) -> None:
    src = tmp_path / "h.jsonl"
    write_history(src, 3000, workload="mixed", anomaly=ANOMALIES, seed=4)
    with open(src, "a", encoding="utf-8") as fh:  # values the generator never writes
        for i, v in enumerate([True, 1.5, 'é"x', {"b": 1, "a": [None, False]}, [1, "2"], -3]):
            fh.write(
                json.dumps(
                    {
                        "index": 10_000 + i,
                        "type": "invoke",
                        "process": "nemesis",
                        "f": "kill",
                        "value": v,
                        "error": {"why": 1},
                    }
                )
                + "\n"
            )
        fh.write("\n")
        fh.write('{"index": 1')  # a torn last line: skipped by both
    write_parquet(iter_jsonl(src), tmp_path / "a.parquet", batch=700)
    assert jsonl_to_parquet(src, tmp_path / "b.parquet", batch=700) == len(list(iter_jsonl(src)))
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))


@pytest.mark.parametrize(
    "line",
    [
        '{"index": true, "type": "invoke", "process": 1, "f": "read"}',
        '{"index": 0, "type": "begin", "process": 1, "f": "read"}',
        '{"index": 0, "type": "ok", "process": false, "f": "read"}',
        '{"index": 0, "type": "ok", "process": 1, "f": ""}',
        '{"index": 0, "type": "ok", "process": 1, "f": "read", "key": 3}',
        "[1, 2]",
        '{"index": 0, "type": "ok", "process": 1, "f": "read"',
        '{"index": 0, "type": "ok", "process": 1, "f": "read", "value": "\udcff"}',
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[" * 40,
    ],
)
def test_same_errors(tmp_path: Path, line: str) -> None:
    src = tmp_path / "h.jsonl"
    src.write_bytes(
        ('{"index": 0, "type": "invoke", "process": 1, "f": "read"}\n' + line + "\n").encode(
            "utf-8", "surrogateescape"
        )
    )
    with pytest.raises(HistoryError) as want:
        write_parquet(iter_jsonl(src), tmp_path / "a.parquet")
    with pytest.raises(HistoryError) as got:
        jsonl_to_parquet(src, tmp_path / "b.parquet")
    assert str(got.value) == str(want.value)
