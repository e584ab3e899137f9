"""The history contract: round trips, torn tails, and errors that say where."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.errors import HistoryError
from harness.core.history import (
    HistoryWriter,
    Op,
    pair_ops,
    read_history,
    read_jsonl,
    read_parquet,
    validate_history,
    write_parquet,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)

ops_strategy = st.lists(
    st.builds(
        Op,
        type=st.sampled_from(["invoke", "ok", "fail", "info"]),
        process=st.integers(0, 50) | st.just("nemesis"),
        f=st.sampled_from(["read", "write", "cas", "append", "sample", "start-partition"]),
        value=json_values,
        key=st.none() | st.text(min_size=1, max_size=4),
        time=st.integers(1, 2**62),
        node=st.none() | st.sampled_from(["n1", "n2"]),
        error=st.none() | st.text(max_size=10),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(ops=ops_strategy)
def test_jsonl_and_parquet_round_trip(tmp_path_factory, ops):
    d = tmp_path_factory.mktemp("h")
    with HistoryWriter(d / "history.jsonl") as w:
        written = [w.append(op) for op in ops]
    assert [op.index for op in written] == list(range(len(ops)))
    back = read_jsonl(d / "history.jsonl")
    assert back == written
    write_parquet(back, d / "history.parquet")
    assert read_parquet(d / "history.parquet") == written


def test_writer_stamps_monotonic_time(tmp_path):
    with HistoryWriter(tmp_path / "h.jsonl") as w:
        a = w.append(Op("invoke", 0, "read"))
        b = w.append(Op("ok", 0, "read", value=3))
    assert 0 < a.time <= b.time


def test_torn_last_line_is_skipped_and_writer_resumes(tmp_path, caplog):
    p = tmp_path / "history.jsonl"
    with HistoryWriter(p) as w:
        w.append(Op("invoke", 0, "write", value=1))
        w.append(Op("ok", 0, "write", value=1))
    with open(p, "a") as fh:
        fh.write('{"index": 2, "time": 5, "type": "inv')  # a harness killed mid-write
    ops = read_jsonl(p)
    assert [o.index for o in ops] == [0, 1]
    assert "torn" in caplog.text
    # Reopening continues numbering after the last good record and cuts the torn bytes.
    with HistoryWriter(p) as w:
        c = w.append(Op("invoke", 1, "read"))
    assert c.index == 2
    assert [o.index for o in read_jsonl(p)] == [0, 1, 2]


def test_killed_writer_process_leaves_a_readable_prefix(tmp_path):
    p = tmp_path / "history.jsonl"
    code = (
        "import os, sys\n"
        "from harness.core.history import HistoryWriter, Op\n"
        f"w = HistoryWriter({str(p)!r})\n"
        "for i in range(100):\n"
        "    w.append(Op('invoke', i, 'write', value=i))\n"
        "os.kill(os.getpid(), 9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == -9
    ops = read_jsonl(p)
    assert [o.value for o in ops] == list(range(100))


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ({"index": 0, "type": "done", "process": 1, "f": "read"}, "type"),
        ({"index": 0, "type": "ok", "process": 1.5, "f": "read"}, "process"),
        ({"index": 0, "type": "ok", "f": "read"}, "process"),
        ({"index": 0, "type": "ok", "process": 1, "f": ""}, "f"),
        ({"index": 0, "type": "ok", "process": 1, "f": "read", "time": "noon"}, "time"),
        ({"index": 0, "type": "ok", "process": 1, "f": "read", "key": 7}, "key"),
    ],
)
def test_malformed_record_names_file_line_and_field(tmp_path, line, field):
    p = tmp_path / "h.jsonl"
    good = {"index": 0, "type": "invoke", "process": 1, "f": "read"}
    p.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(HistoryError) as e:
        read_jsonl(p)
    assert e.value.line == 2 and e.value.field == field
    assert f"{p}:2:" in str(e.value)


def test_bad_json_in_the_middle_is_an_error_not_a_torn_tail(tmp_path):
    p = tmp_path / "h.jsonl"
    p.write_text(
        '{"index":0,"type":"invoke","process":1,"f":"read"}\n{oops\n'
        '{"index":1,"type":"ok","process":1,"f":"read"}\n'
    )
    with pytest.raises(HistoryError, match=r":2: not valid JSON"):
        read_jsonl(p)


def test_pairing_rejects_double_invoke_and_orphans():
    ok = [Op("invoke", 1, "read", index=0), Op("ok", 1, "read", index=1)]
    assert pair_ops(ok) == {0: 1}
    with pytest.raises(HistoryError, match="invoked again"):
        pair_ops([Op("invoke", 1, "read", index=0), Op("invoke", 1, "read", index=1)])
    with pytest.raises(HistoryError, match="no invocation"):
        pair_ops([Op("ok", 1, "read", index=0)])
    with pytest.raises(HistoryError, match="differs"):
        pair_ops([Op("invoke", 1, "read", index=0), Op("ok", 1, "write", index=1)])


def test_process_cannot_invoke_after_info():
    ops = [
        Op("invoke", 1, "write", index=0),
        Op("info", 1, "write", index=1),
        Op("invoke", 1, "read", index=2),
        Op("ok", 1, "read", index=3),
    ]
    with pytest.raises(HistoryError, match="after an info"):
        validate_history(ops)
    validate_history(ops[:2] + [Op("invoke", 2, "read", index=2), Op("ok", 2, "read", index=3)])


def test_read_history_dispatch_and_errors(tmp_path):
    with pytest.raises(HistoryError, match="no such file"):
        read_history(tmp_path / "missing.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(HistoryError, match="unknown history format"):
        read_history(tmp_path / "x.csv")
    with pytest.raises(HistoryError, match="no history"):
        read_history(tmp_path)
    with HistoryWriter(tmp_path / "history.jsonl") as w:
        w.append(Op("invoke", 0, "read"))
    assert len(read_history(tmp_path)) == 1
    assert os.path.exists(tmp_path / "history.jsonl")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,"a":2}',
        b"[123456789012345678901234567890, -9223372036854775809, 18446744073709551615]",
        b"[9223372036854775807, -9223372036854775808, 0.1, 2.5e-3, -0]",
        b"[1e400, NaN, -Infinity]",
        b'["\\ud800", "\\u00e9", "\xc3\xa9"]',
        b'  {"entries": [[1, 2, "p"]], "x": null}  \n',
    ],
)
def test_a_line_decodes_to_what_the_standard_parser_gives(raw: bytes) -> None:
    """The fast parser, when present, never changes a value: integers beyond int64 stay
    exact, and what it refuses (NaN, 1e400, lone surrogates) the standard one decodes."""
    import json

    from harness.core.jsonl import json_line

    got, want = json_line(raw), json.loads(raw.decode())
    assert repr(got) == repr(want)  # ints stay ints (exact), nan and inf as json gives them


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            b"{oops",
            "not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        ),
        (b"[1]x", "not valid JSON (Extra data at column 4)"),
        (b'["\xff"]', "not valid UTF-8 (byte 0xff at column 3)"),
    ],
)
def test_a_bad_line_is_worded_by_the_standard_parser(raw: bytes, reason: str) -> None:
    from harness.core.jsonl import json_line

    with pytest.raises(ValueError) as e:
        json_line(raw)
    assert str(e.value) == reason
