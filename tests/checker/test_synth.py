"""Synthetic histories say what they are: valid ones pass, planted anomalies are found."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from checker.local import check_local
from checker.synth import ANOMALIES, LOG_ANOMALIES, gen_history, generate, records
from harness.history import read_history, validate_history


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


def test_stream_is_deterministic_and_lazy() -> None:
    a = records(10_000_000, seed=3)
    first = [next(a) for _ in range(50)]   # a 10M stream yields at once: nothing is prebuilt
    b = records(10_000_000, seed=3)
    assert first == [next(b) for _ in range(50)]
    assert list(records(500, seed=3)) == list(records(500, seed=3))
    assert list(records(500, seed=3)) != list(records(500, seed=4))


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_gen_history_command(tmp_path, suffix: str) -> None:
    out = tmp_path / f"h{suffix}"
    r = CliRunner().invoke(gen_history, ["--ops", "2e3", "--anomaly", "lost-ack", "--seed", "7",
                                         "--out", str(out)])
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
    r = CliRunner().invoke(gen_history, ["--ops", "100", "--workload", "register",
                                         "--anomaly", "lost-ack", "--out", str(tmp_path / "h.jsonl")])
    assert r.exit_code != 0 and "needs the append or mixed workload" in r.output
