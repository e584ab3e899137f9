"""Synthetic histories say what they are: valid ones pass, planted anomalies are found."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from checker.local import check_local
from checker.synth import (
    _TORN,
    ANOMALIES,
    LOG_ANOMALIES,
    generate,
    records,
    write_history,
)
from harness.cli.gen_history import gen_history
from harness.core.history import Op, read_history, validate_history, write_parquet


@pytest.mark.parametrize("workload", ["append", "register", "mixed"])
def test_valid_histories_pass(workload: str) -> None:
    ops = list(generate(3000, workload=workload, seed=5))
    validate_history(ops)
    res = check_local(ops)
    assert res["valid"] is True, res["anomalies"]
    if workload != "register":
        stats = res["checkers"]["log-safety"]["stats"]
        assert stats["final_reads"] > 0 and stats["appends"]["ok"] > 100 and stats["samples"] > 100


@pytest.mark.parametrize("anomaly", ANOMALIES)
def test_each_planted_anomaly_is_found(anomaly: str) -> None:
    workload = "append" if anomaly in LOG_ANOMALIES else "register"
    res = check_local(list(generate(2000, workload=workload, anomaly=anomaly, seed=1)))
    assert res["valid"] is False
    assert set(res["anomalies"]) == {anomaly}


def test_all_anomalies_at_once() -> None:
    res = check_local(list(generate(3000, workload="mixed", anomaly=ANOMALIES, seed=2)))
    assert set(res["anomalies"]) == set(ANOMALIES)


def test_unproposed_committed_is_a_torn_record_every_read_shows() -> None:
    """The plant is what the reference node reports for a torn record a recovery kept:
    one log index, the same on every node (no divergence), acked by nobody (no lost ack)."""
    res = check_local(list(generate(2000, workload="append", anomaly="unproposed-committed")))
    (ex,) = res["anomalies"]["unproposed-committed"]
    assert ex["payload"] == json.loads(_TORN)
    assert len(ex["indexes"]) >= 5  # the final reads of every node, at least


def test_stream_is_deterministic_and_lazy() -> None:
    a = records(10_000_000, seed=3)
    first = [next(a) for _ in range(50)]  # a 10M stream yields at once: nothing is prebuilt
    b = records(10_000_000, seed=3)
    assert first == [next(b) for _ in range(50)]
    assert list(records(500, seed=3)) == list(records(500, seed=3))
    assert list(records(500, seed=3)) != list(records(500, seed=4))


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_gen_history_command(tmp_path, suffix: str) -> None:
    out = tmp_path / f"h{suffix}"
    r = CliRunner().invoke(
        gen_history, ["--ops", "2e3", "--anomaly", "lost-ack", "--seed", "7", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    ops = read_history(out)
    assert ops == list(generate(2000, anomaly="lost-ack", seed=7))
    assert [o.index for o in ops] == list(range(len(ops)))
    if suffix == ".parquet":
        assert pq.ParquetFile(str(out)).metadata.num_rows == len(ops)
    else:
        json.loads(out.read_text().splitlines()[0])
    assert check_local(ops)["valid"] is False


def test_gen_history_rejects_bad_input(tmp_path) -> None:
    r = CliRunner().invoke(gen_history, ["--ops", "100", "--out", str(tmp_path / "h.csv")])
    assert r.exit_code != 0 and "must end in .jsonl or .parquet" in r.output
    r = CliRunner().invoke(
        gen_history,
        [
            "--ops",
            "100",
            "--workload",
            "register",
            "--anomaly",
            "lost-ack",
            "--out",
            str(tmp_path / "h.jsonl"),
        ],
    )
    assert r.exit_code != 0 and "needs the append or mixed workload" in r.output


def test_synth_parquet_equals_write_parquet(tmp_path) -> None:
    """The vectorised writer (entries from the log's arrays, patched payloads) writes the very
    columns, typed ones included, that write_parquet makes from the same ops."""
    kinds = [
        "lost-ack",
        "divergent-committed",
        "duplicate-payload",
        "append-order",
        "failed-append-present",
        "unproposed-committed",
        "nonlinearizable",
    ]
    write_history(tmp_path / "a.parquet", 3000, workload="mixed", anomaly=kinds, seed=7, batch=700)
    ops = list(generate(3000, workload="mixed", anomaly=kinds, seed=7))
    write_parquet(ops, tmp_path / "b.parquet")
    a, b = (pq.read_table(tmp_path / n) for n in ("a.parquet", "b.parquet"))
    assert a.schema == b.schema
    for name in a.column_names:
        assert a.column(name).to_pylist() == b.column(name).to_pylist(), name
    ents = [e for row in a.column("v_entries").to_pylist() if row for e in row]
    assert {_TORN, "null"} <= {e["payload"] for e in ents}


def test_typed_columns_keep_json_text(tmp_path) -> None:
    """Scalars as compact JSON text (a string "1" is not the number 1), keys sorted; entries
    without an integer index are left out; null lists where there is no entry list."""
    vals = [
        {"payload": "1", "index": 3, "term": 2},
        {"payload": 1, "term": {"b": 1, "a": [True, None]}},
        {
            "entries": [
                [0, 1, "1"],
                [1, 1, 1],
                [True, 1, "x"],
                [2.0, 1, "x"],
                [3, 1],
                [4, 1, None],
            ],
            "committed": 4,
            "final": True,
        },
        {"entries": "not a list"},
        [1, 2],
        None,
        "s",
        5,
        False,
    ]
    ops = [Op("ok", 1, "read", v, index=i) for i, v in enumerate(vals)]
    write_parquet(ops, tmp_path / "h.parquet")
    rows = pq.read_table(tmp_path / "h.parquet").to_pylist()
    assert [r["v_kind"] for r in rows] == ["object"] * 4 + [
        "array",
        "null",
        "string",
        "number",
        "boolean",
    ]
    assert (rows[0]["v_payload"], rows[0]["v_index"], rows[0]["v_term"]) == ('"1"', "3", "2")
    assert (rows[1]["v_payload"], rows[1]["v_index"]) == ("1", None)
    assert rows[1]["v_term"] == '{"a":[true,null],"b":1}'
    assert rows[2]["v_entries"] == [
        {"index": 0, "term": "1", "payload": '"1"'},
        {"index": 1, "term": "1", "payload": "1"},
        {"index": 4, "term": "1", "payload": "null"},
    ]
    assert (rows[2]["v_committed"], rows[2]["v_final"]) == ("4", "true")
    assert [r["v_entries"] for r in rows[3:]] == [None] * 6
    assert read_history(tmp_path / "h.parquet") == ops


@pytest.mark.parametrize("anomaly", [None, "nonlinearizable"])
def test_register_keys_and_key_window(tmp_path, anomaly: str | None) -> None:
    """``--keys``/``--key-window``: every key is used, concurrent ops share keys, and the
    stream is valid (or fails on exactly one key) whichever file it is written to."""
    out = tmp_path / "h.jsonl"
    args = [
        "--ops",
        "4e3",
        "--workload",
        "register",
        "--keys",
        "50",
        "--key-window",
        "4",
        "--seed",
        "2",
        "--out",
        str(out),
    ]
    r = CliRunner().invoke(gen_history, args + (["--anomaly", anomaly] if anomaly else []))
    assert r.exit_code == 0, r.output
    ops = read_history(out)
    assert ops == list(
        generate(4000, workload="register", anomaly=anomaly, seed=2, keys=50, key_window=4)
    )
    assert {o.key for o in ops} == {f"k{i}" for i in range(50)}
    open_keys: dict[int, str] = {}
    overlaps = 0
    for o in ops:
        if o.type == "invoke":
            overlaps += o.key in open_keys.values()
            open_keys[o.process] = o.key  # type: ignore[index]
        else:
            open_keys.pop(o.process, None)  # type: ignore[arg-type]
    assert overlaps > 100
    res = check_local(ops)
    assert res["valid"] is (anomaly is None)
    if anomaly:
        assert len(res["checkers"]["linearizable"]["failures"]) == 1
