"""``jsonl_to_parquet`` (the Spark engine's JSONL input) writes what ``write_parquet(iter_jsonl())``
writes, and fails on the same lines with the same words."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from checker.synth import ANOMALIES, write_history
from harness.core import parquet
from harness.core.errors import HistoryError
from harness.core.history import iter_jsonl, jsonl_to_parquet, jsonl_to_parquet_parts, write_parquet
from harness.core.jsonl import line_spans


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


# Log reads whose entries the reader may hand to Arrow (harness.core.parquet._TRIPLES), and
# lines where cutting the entries out would change what the record says: each must come out
# as json.loads reads it.
_ENTRY_VALUES = [
    {"entries": [[1, 2, "p1"], [2, 2, None], [3, 3, 7], [4, 3, True]], "committed": 3},
    {"entries": [[5, 1, "a,b"], [6, 1, "c]]"]], "committed": 6},  # comma, brackets: refused
    {"entries": [[7, 1.5, "p"], [8, 2, "é"]]},  # a float, non-ASCII: refused
    {"entries": [[9, 1, 2, 3], [10, 1, 2]]},  # an item of four: refused (and left out)
    {"entries": [[2**70, 1, "big"], [-1, -0, 0]]},  # beyond int64; -0 decodes to 0
    {"x": "]] [[", "entries": [[11, 1, "q"]], "end": 11, "final": True},
    {"x": {"entries": [[12, 1, "nested"]]}, "entries": 3},  # not value.entries
    {"entries": [[13, 1, "first"]], "y": '\u00e9"entries":[]'},  # an escape on the line
    {"entries": [[14, 1, "p14"]], "config": {"voters": ["n1", "n2"], "index": 3}},
    {"entries": []},
    {"entries": [[15, 2, "p15"]] * 3, "committed": None},
]


def _read_line(i: int, value: object) -> str:
    return json.dumps(
        {
            "index": i,
            "time": i,
            "type": "ok",
            "process": 1,
            "f": "read",
            "key": None,
            "value": value,
        },
        separators=(",", ":"),
    )


def test_entries_cut_out_read_as_json_does(tmp_path: Path) -> None:
    src = tmp_path / "h.jsonl"
    lines = [_read_line(i, v) for i, v in enumerate(_ENTRY_VALUES)]
    dup = _read_line(len(lines), {"entries": [[1, 1, "a"]]})
    lines.append(dup[:-1] + ',"value":{"entries":[[2,2,"b"]]}}')  # a repeated key: last wins
    lines.append(
        '{"index":99,"type":"ok","process":1,"f":"read","value":{"entries":[[1,2,3]]},"entries":[[4,5,6]]}'
    )
    text = "\n".join(lines * 3) + "\n" + _read_line(500, {"entries": [[1, 1, "torn"]]})[:-2]
    src.write_text(text, encoding="utf-8")
    for batch in (2, 700):  # Arrow's entries and Python's mixed in one batch, and not
        write_parquet(iter_jsonl(src), tmp_path / "a.parquet", batch=batch)
        assert jsonl_to_parquet(src, tmp_path / "b.parquet", batch=batch) == 3 * len(lines)
        want, got = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
        assert got.equals(want)
    assert want.column("v_entries")[0].as_py()[0] == {"index": 1, "term": "2", "payload": '"p1"'}


def test_columnar_history_from_jsonl_matches_parquet(tmp_path: Path) -> None:
    from harness.core.parquet import ColumnarHistory

    src = tmp_path / "h.jsonl"
    write_history(src, 4000, workload="append", seed=5)
    write_parquet(iter_jsonl(src), tmp_path / "h.parquet")
    a = ColumnarHistory.from_jsonl(src)
    b = ColumnarHistory.read(tmp_path / "h.parquet")
    assert a is not None and b is not None
    assert a.table.equals(b.table)
    # the entries streamed from its parts are the Parquet file's, row for row
    import numpy as np
    import pyarrow as pa

    every = np.arange(len(a))
    spilled = pa.concat_arrays([e for _, e in a.entries(every, batch=500)])
    stored = pa.concat_arrays([e for _, e in b.entries(every, batch=500)])
    assert spilled.equals(stored)
    assert spilled.equals(
        pq.read_table(tmp_path / "h.parquet").column("v_entries").combine_chunks().take(b.rows)
    )


def test_columnar_history_from_jsonl_parts_matches_parquet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Converted in three parts, the columns and the streamed entries are the whole file's."""
    import numpy as np

    from harness.core.parquet import ColumnarHistory

    src = tmp_path / "h.jsonl"
    write_history(src, 4000, workload="append", seed=6)
    write_parquet(iter_jsonl(src), tmp_path / "h.parquet")
    monkeypatch.setattr(parquet, "PARALLEL_BYTES", 2)
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    a = ColumnarHistory.from_jsonl(src)
    b = ColumnarHistory.read(tmp_path / "h.parquet")
    assert a is not None and b is not None and a.parts is not None
    assert len(a.parts.files) == 3
    assert a.table.equals(b.table)
    every = np.arange(len(a))
    got = pa.concat_arrays([e for _, e in a.entries(every, batch=300)])
    assert got.equals(pa.concat_arrays([e for _, e in b.entries(every, batch=300)]))
    kept = a.parts.tmp.name
    del a
    import gc

    gc.collect()
    assert not Path(kept).exists()  # the parts go with the history


def _odd_history(src: Path) -> None:
    """A generated history with log reads, odd values, a blank line and a torn tail."""
    write_history(src, 4000, workload="mixed", anomaly=ANOMALIES, seed=5)
    with open(src, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"index": 90_000, "type": "invoke", "process": 3, "f": "x"}) + "\n")
        fh.write("\n")
        fh.write('{"index": 1')


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_parts_hold_the_records_of_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: int
) -> None:
    src = tmp_path / "h.jsonl"
    _odd_history(src)
    monkeypatch.setattr(parquet, "PARALLEL_BYTES", 2)  # split whatever the size
    jsonl_to_parquet(src, tmp_path / "whole.parquet")
    (tmp_path / "parts").mkdir()
    files = jsonl_to_parquet_parts(src, tmp_path / "parts", workers=parts)
    assert len(files) == parts
    got = pa.concat_tables([pq.read_table(f) for f in files])
    assert got.equals(pq.read_table(tmp_path / "whole.parquet"))


def test_a_part_names_the_files_line_and_the_first_bad_part_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Line numbers count from the file's start in every part; with bad lines in two parts
    the error is the first one's, as reading the whole file finds it first."""
    good = '{"index": %d, "type": "invoke", "process": 1, "f": "read"}\n'
    lines = [good % i for i in range(3000)]
    lines[1700] = "not json\n"
    lines[2600] = "[1, 2]\n"
    src = tmp_path / "h.jsonl"
    src.write_text("".join(lines))
    monkeypatch.setattr(parquet, "PARALLEL_BYTES", 2)
    spans = line_spans(src, 3)
    assert spans[0][1] < sum(map(len, lines[:1700]))  # line 1701 is not in the first span
    with pytest.raises(HistoryError) as want:
        jsonl_to_parquet(src, tmp_path / "whole.parquet")
    with pytest.raises(HistoryError) as got:
        jsonl_to_parquet_parts(src, tmp_path, workers=3)
    assert "h.jsonl:1701" in str(got.value)
    assert str(got.value) == str(want.value)


def test_line_spans_cut_at_line_starts(tmp_path: Path) -> None:
    src = tmp_path / "h.jsonl"
    src.write_bytes(b"a" * 100 + b"\n" + b"b\n" * 50 + b"c" * 300 + b"\n")
    data = src.read_bytes()
    for parts in range(1, 9):
        spans = line_spans(src, parts)
        assert spans[0][0] == 0 and spans[-1][1] == len(data)
        assert all(a < b for a, b in spans)
        assert all(x[1] == y[0] for x, y in zip(spans, spans[1:], strict=False))
        assert all(data[a - 1 : a] == b"\n" for a, _ in spans[1:])
        assert len(spans) <= parts
    assert line_spans(tmp_path / "h.jsonl", 1) == [(0, len(data))]


def test_parts_from_a_script_without_a_main_guard(tmp_path: Path) -> None:
    """The converters are their own interpreters: a user's script that converts at import
    time (no ``if __name__ == "__main__"``) is not run again by them."""
    import subprocess
    import sys

    src = tmp_path / "h.jsonl"
    write_history(src, 2000, workload="append", seed=3)
    script = tmp_path / "convert.py"
    script.write_text(
        "from harness.core import parquet\n"
        "parquet.PARALLEL_BYTES = 2\n"
        f"files = parquet.jsonl_to_parquet_parts({str(src)!r}, {str(tmp_path)!r}, workers=2)\n"
        "print(len(files))\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["2"]
    got = pa.concat_tables([pq.read_table(tmp_path / f"part-{k}.parquet") for k in range(2)])
    jsonl_to_parquet(src, tmp_path / "whole.parquet")
    assert got.equals(pq.read_table(tmp_path / "whole.parquet"))


def test_a_worker_that_dies_without_a_word_is_named(tmp_path: Path) -> None:
    """A worker that cannot even leave its exception (here: no directory for its part)
    gives an error naming the file and the span, not a silent or partial conversion."""
    src = tmp_path / "h.jsonl"
    write_history(src, 500, workload="append", seed=3)
    spans = line_spans(src, 2)
    names = [tmp_path / "part-0.parquet", tmp_path / "gone" / "part-1.parquet"]
    with pytest.raises(HistoryError, match=r"h\.jsonl: converting bytes \d+ to the end failed"):
        parquet._run_span_workers(src, [spans[0], (spans[1][0], -1)], names, True)
