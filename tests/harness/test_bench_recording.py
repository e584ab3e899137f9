"""``splitbrain bench harness``'s own arithmetic: stamping skew and the writer baselines."""

from __future__ import annotations

from harness.bench.recording import measure, stamp_skew, writer_baselines
from harness.core.history import Op
from harness.core.remote import Host


def test_stamp_skew_is_the_delay_between_an_answer_and_its_stamp():
    ops = [
        Op(type="ok", process=p, f="append", value={"answered_ns": t - d}, time=t)
        for p, t, d in ((0, 1_000_000, 0), (1, 2_000_000, 500_000), (0, 3_000_000, 0))
    ]
    ops.append(Op(type="invoke", process=0, f="append", value={"answered_ns": 0}, time=9))
    skew = stamp_skew(ops)
    assert skew["max"] == 0.5 and skew["p50"] == 0.0 and skew["workers"] == 2
    assert skew["worker_median_spread"] == 0.5
    assert stamp_skew([]) == {}


def test_the_null_run_reports_its_skew_and_the_baselines_run(tmp_path):
    hosts = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in (1, 2, 3)]
    out = measure(hosts, null=True, seconds=1.0, concurrency=4, store_root=str(tmp_path))
    skew = out["stamp_skew_ms"]
    assert skew["workers"] == 4 and 0 <= skew["p50"] <= skew["p99"] <= skew["max"]
    base = writer_baselines(str(tmp_path), n=2000, rounds=1)
    assert base["writer_appends_per_s"] > 0 and base["buffered_writer_appends_per_s"] > 0
    assert not list(tmp_path.glob("baseline-*"))


def test_the_recorder_baselines_time_both_designs_on_threads(tmp_path):
    from harness.bench.recording import recorder_baselines

    base = recorder_baselines(str(tmp_path), threads=3, seconds=0.2, rounds=1)
    for name in ("threads_writer", "threads_one_lock"):
        got = base[name]
        assert got["ops_per_s"] > 0
        assert 0 <= got["stamp_p50_ms"] <= got["stamp_p99_ms"] <= got["stamp_max_ms"]
    assert not list(tmp_path.glob("baseline-*"))
