"""The report: the numbers behind the plots, and a page that names what failed."""

from __future__ import annotations

import json

from harness.core.history import HistoryWriter, Op
from harness.report.data import (
    committed_series,
    completed_ops,
    failing_focus,
    fault_periods,
    throughput,
    timeline,
)
from harness.report.html import write_report

S = 1_000_000_000


def _hist() -> list[Op]:
    """Two appenders, a partition from 1 s to 3 s, samples, one lost ack."""
    ops = [
        Op("invoke", 0, "append", {"payload": "0-0"}, time=int(0.1 * S)),
        Op("ok", 0, "append", {"payload": "0-0", "index": 1, "term": 1}, time=int(0.2 * S)),
        Op("invoke", "nemesis", "start-partition", {"grudge": {"n1": ["n2"]}}, time=1 * S),
        Op("info", "nemesis", "start-partition", {"grudge": {"n1": ["n2"]}}, time=int(1.1 * S)),
        Op("invoke", 1, "append", {"payload": "1-0"}, time=int(1.5 * S)),
        Op("info", 1, "append", None, error="timeout", time=int(2.5 * S)),
        Op("invoke", 2, "append", {"payload": "2-0"}, time=int(1.6 * S)),
        Op("ok", 2, "append", {"payload": "2-0", "index": 2, "term": 1}, time=int(1.7 * S)),
        Op("invoke", 1000000, "sample", None, node="n1", time=int(1.8 * S)),
        Op(
            "ok",
            1000000,
            "sample",
            {
                "role": "leader",
                "term": 1,
                "committed": 2,
                "end": 2,
                "begin": 0,
                "leader": "n1",
                "incarnation": 7,
            },
            node="n1",
            time=int(1.9 * S),
        ),
        Op("invoke", "nemesis", "stop-partition", None, time=3 * S),
        Op("info", "nemesis", "stop-partition", None, time=int(3.1 * S)),
        Op("invoke", 3, "read", {"from": 0, "to": 5, "final": True}, time=4 * S),
    ]
    return [op.replace(index=i) for i, op in enumerate(ops)]


def test_pairs_latency_and_open_ops():
    done = completed_ops(_hist())
    assert [c.invoke.f for c in done] == ["append", "append", "append", "sample", "read"]
    assert done[0].latency_ns == int(0.1 * S)
    assert done[1].type == "info"
    assert done[-1].completion is None and done[-1].type == "info"


def test_fault_periods_and_unclosed_faults():
    ops = _hist()
    [p] = fault_periods(ops)
    assert (p.kind, p.start, p.end) == ("partition", 1 * S, int(3.1 * S))
    unclosed = fault_periods(ops[:5])
    assert unclosed[0].end == ops[4].time


def test_throughput_buckets_and_committed_series():
    tp = throughput(completed_ops(_hist()))
    assert tp[("append", "ok")] == {0: 1, 1: 1}
    assert tp[("append", "info")] == {2: 1}
    assert committed_series(_hist()) == {"n1": [(int(1.9 * S), 2)]}


def test_focus_highlights_the_named_ops():
    results = {"valid": False, "anomalies": {"lost-ack": [{"indexes": [7], "payload": "2-0"}]}}
    focus = failing_focus(_hist(), results)
    assert focus is not None and focus.title == "lost-ack"
    lanes, t0, t1 = timeline(focus)
    hot = [c.invoke.index for lane in lanes for c, h in lane.bars if h]
    assert hot == [6]
    assert t0 < t1
    assert failing_focus(_hist(), {"valid": True, "anomalies": {}}) is None


def test_focus_on_a_failing_key():
    ops = [
        Op("invoke", 0, "write", 1, key="k3", time=1),
        Op("ok", 0, "write", 1, key="k3", time=5),
        Op("invoke", 1, "read", None, key="k3", time=6),
        Op("ok", 1, "read", 2, key="k3", time=9),
        Op("invoke", 2, "read", None, key="k4", time=6),
        Op("ok", 2, "read", None, key="k4", time=9),
    ]
    ops = [op.replace(index=i) for i, op in enumerate(ops)]
    results = {
        "valid": False,
        "checkers": {
            "linearizable": {"valid": False, "counterexample": {"key": "k3", "window": [2, 3]}}
        },
    }
    focus = failing_focus(ops, results)
    assert focus is not None and focus.key == "k3"
    assert {c.invoke.key for c in focus.ops} == {"k3"}
    assert focus.highlight == {2, 3}


def test_write_report_renders_a_page_with_plots(tmp_path):
    with HistoryWriter(tmp_path / "history.jsonl") as w:
        for op in _hist():
            w.append(op.replace(index=-1))
    (tmp_path / "test.json").write_text(json.dumps({"name": "demo", "nemesis": ["partition"]}))
    (tmp_path / "results.json").write_text(
        json.dumps(
            {
                "valid": False,
                "checkers": {"log-safety": {"valid": False}},
                "anomalies": {"lost-ack": [{"indexes": [7], "payload": "2-0"}]},
            }
        )
    )
    out = write_report(tmp_path)
    page = out.read_text()
    assert "INVALID" in page and "lost-ack" in page and "partition" in page
    assert 'class="bar ok hot"' in page
    for png in ("latency.png", "throughput.png", "committed.png"):
        assert (tmp_path / png).stat().st_size > 1000
        assert png in page


def test_downsample_bounds_points_and_keeps_every_stretch_extremes():
    from harness.report.data import downsample

    pts = [(float(i), 1.0 + (i % 7)) for i in range(100_000)]
    pts[54_321] = (54_321.0, 5_000.0)  # one slow op in the middle
    pts[77_777] = (77_777.0, 0.01)  # one very fast one
    out = downsample(pts, 3_000)
    assert len(out) <= 3_000
    assert (54_321.0, 5_000.0) in out and (77_777.0, 0.01) in out
    assert [x for x, _ in out] == sorted(x for x, _ in out)
    assert out[0] == pts[0]
    assert downsample(pts[:10], 3_000) == pts[:10]


def test_pair_stream_holds_only_open_ops_and_agrees_with_completed_ops():
    from harness.report.data import pair_stream

    ops = _hist()
    streamed = list(pair_stream(iter(ops)))
    # Completion order: p0's append, p1's info, p2's append, the sample, then the open read.
    assert [c.invoke.index for c in streamed] == [0, 4, 6, 8, 12]
    assert streamed[-1].completion is None
    assert sorted(streamed, key=lambda c: c.start) == completed_ops(ops)


def test_envelope_bounds_memory_and_keeps_first_and_extremes():
    from harness.report.data import Envelope, downsample

    pts = [(float(i), 1.0 + (i % 7)) for i in range(200_000)]
    pts[123_456] = (123_456.0, 9_000.0)
    pts[5] = (5.0, 0.001)
    env = Envelope(3_000)
    for x, y in pts:
        env.add(x, y)
        assert len(env._runs) <= 3_000  # never more than cap runs held at once
    out = env.points()
    assert env.n == 200_000 and len(out) <= 3_000
    assert (123_456.0, 9_000.0) in out and (5.0, 0.001) in out and out[0] == pts[0]
    assert [x for x, _ in out] == sorted(x for x, _ in out)
    small = Envelope(3_000)
    for x, y in pts[:3_000]:
        small.add(x, y)
    assert small.points() == downsample(pts[:3_000], 3_000) == pts[:3_000]


def test_throughput_buckets_widen_and_keep_every_completion():
    from harness.report.data import Throughput

    acc = Throughput(max_buckets=100)
    for s in range(1_000):  # 1,000 s, two completions a second
        acc.add(("append", "ok"), s * S)
        acc.add(("append", "ok"), s * S + S // 2)
    per = acc.counts[("append", "ok")]
    assert len(per) <= 100 and acc.bucket_ns == 16 * S
    assert sum(per.values()) == 2_000
    rates = acc.rates()[("append", "ok")]
    assert rates[0] == (0.0, 2.0)  # still completions per second, whatever the width
    short = Throughput(max_buckets=100)
    short.add(("read", "ok"), int(2.5 * S))
    assert short.counts == {("read", "ok"): {2: 1}} and short.bucket_ns == S


def test_digest_matches_the_in_memory_figures():
    from harness.report.data import digest, focus_request

    ops = _hist()
    results = {"valid": False, "anomalies": {"lost-ack": [{"indexes": [7]}]}}
    d = digest(iter(ops), focus=focus_request(results))
    assert d.records == len(ops) and d.end_time == ops[-1].time
    assert d.counts == {"ok": 2, "info": 2}  # the open final read counts as info
    assert d.throughput.counts == throughput(
        c for c in completed_ops(ops) if c.invoke.f != "sample"
    )
    assert d.periods() == fault_periods(ops)
    assert {n: e.points() for n, e in d.committed.items()} == {
        n: [(float(t), float(c)) for t, c in v] for n, v in committed_series(ops).items()
    }
    assert [c.invoke.index for c in d.hits] == [6]
    assert d.max_latency_ns == int(1.0 * S)  # p1's append, timed out
    assert d.latency[("append", "info")].points() == [(1.5, 1000.0)]


def test_focus_from_a_time_window_equals_the_focus_from_the_whole_history():
    """The second pass reads only the window widened by the longest latency: same focus."""
    from harness.report.data import digest, focus_request, focus_window, pair_stream, select_focus

    ops = []
    for i in range(2_000):  # 4 processes, 10 ms ops, one every 2.5 ms
        p, t = i % 4, i * 2_500_000
        ops.append(Op("invoke", p, "append", {"payload": str(i)}, time=t))
        ops.append(Op("ok", p, "append", {"payload": str(i)}, time=t + 10_000_000))
    ops.sort(key=lambda op: op.time)
    ops = [op.replace(index=i) for i, op in enumerate(ops)]
    named = [op.index for op in ops if op.type == "ok" and op.value["payload"] == "1000"]
    results = {"valid": False, "anomalies": {"lost-ack": [{"indexes": named}]}}
    whole = failing_focus(ops, results, max_ops=50)
    req = focus_request(results)
    assert req is not None and whole is not None
    d = digest(iter(ops), focus=req)
    window = focus_window(d.hits)
    assert window is not None
    lo, hi = window[0] - d.max_latency_ns, window[1] + d.max_latency_ns
    part = [op for op in ops if lo <= op.time <= hi]
    assert len(part) < len(ops) // 4
    streamed = select_focus(req, pair_stream(part), window, max_ops=50)
    assert streamed == whole
    assert [
        c.invoke.value["payload"]
        for c in streamed.ops
        if c.invoke.index in named or (c.completion and c.completion.index in named)
    ] == ["1000"]


def test_iter_history_time_range_on_parquet_skips_row_groups(tmp_path):
    import pyarrow.parquet as pq

    from harness.core.history import iter_history, read_history, write_parquet

    ops = [
        Op("invoke", i % 3, "read", None, key="k", time=i * 1_000, index=i) for i in range(1_000)
    ]
    write_parquet(ops, tmp_path / "h.parquet", batch=100)
    assert pq.ParquetFile(tmp_path / "h.parquet").metadata.num_row_groups == 10
    got = list(iter_history(tmp_path / "h.parquet", time_range=(250_000, 420_000)))
    assert got == [op for op in ops if 250_000 <= op.time <= 420_000]
    assert list(iter_history(tmp_path / "h.parquet")) == read_history(tmp_path / "h.parquet") == ops


def test_iter_history_values_for_decodes_only_the_named_fs_and_the_nemesis(tmp_path):
    from harness.core.history import NEMESIS, iter_history, write_parquet

    ops = [
        Op("ok", 1, "read", {"entries": [[0, 1, "a"]]}, time=1, index=0),
        Op("ok", 2, "sample", {"committed": 3}, node="n1", time=2, index=1),
        Op("info", NEMESIS, "start-partition", {"n1": ["n2"]}, time=3, index=2),
    ]
    write_parquet(ops, tmp_path / "h.parquet")
    got = list(iter_history(tmp_path / "h.parquet", values_for={"sample"}))
    assert [op.value for op in got] == [None, {"committed": 3}, {"n1": ["n2"]}]
    assert [op.replace(value=None) for op in got] == [op.replace(value=None) for op in ops]


def test_write_report_from_parquet_focuses_on_the_failing_key(tmp_path):
    from harness.core.history import write_parquet

    ops = []
    for i in range(300):
        key = "k1" if i % 2 else "k2"
        ops.append(Op("invoke", i % 5, "write", i, key=key, time=i * 10_000_000))
        ops.append(Op("ok", i % 5, "write", i, key=key, time=i * 10_000_000 + 5_000_000))
    ops = [op.replace(index=i) for i, op in enumerate(ops)]
    write_parquet(ops, tmp_path / "history.parquet", batch=64)
    (tmp_path / "results.json").write_text(
        json.dumps(
            {
                "valid": False,
                "checkers": {
                    "linearizable": {
                        "valid": False,
                        "counterexample": {"key": "k1", "window": [301, 302, 303]},
                    }
                },
            }
        )
    )
    page = write_report(tmp_path).read_text()
    assert "key k1: not linearizable" in page
    # 301 is k2's: only k1's op at 302..303 is named.
    assert page.count('class="bar ok hot"') == 1 and "write 151→151" in page
    assert "write 150→150" not in page  # k2's ops stay out
    assert "write 103→103" in page and "write 199→199" in page  # k1 within 0.5 s
    assert "write 1→1<" not in page and "write 299→299" not in page  # far from the window
