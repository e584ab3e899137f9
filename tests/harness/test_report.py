"""The report: the numbers behind the plots, and a page that names what failed."""

from __future__ import annotations

import itertools
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


def _payload(page: str) -> dict:
    """The JSON document a report page embeds for its script."""
    start = page.index('<script type="application/json" id="report-data">') + len(
        '<script type="application/json" id="report-data">'
    )
    return json.loads(page[start : page.index("</script>", start)])


def test_write_report_renders_one_self_contained_page(tmp_path):
    with HistoryWriter(tmp_path / "history.jsonl") as w:
        for op in _hist():
            w.append(op.replace(index=-1))
    (tmp_path / "test.json").write_text(json.dumps({"name": "demo", "nemesis": ["partition"]}))
    (tmp_path / "results.json").write_text(
        json.dumps(
            {
                "valid": False,
                "checkers": {
                    "log-safety": {
                        "valid": False,
                        "anomalies": {"lost-ack": [{"indexes": [7], "payload": "2-0"}]},
                        "stats": {
                            "appends": {"ok": 2, "info": 1},
                            "anomaly_counts": {"lost-ack": 9},
                        },
                    }
                },
                "anomalies": {"lost-ack": [{"indexes": [7], "payload": "2-0"}]},
            }
        )
    )
    page = write_report(tmp_path).read_text()
    assert "INVALID" in page and "lost-ack" in page
    # Self-contained: no external script, style or image, and no PNG written.
    assert "<script src" not in page and "<link" not in page and "<img" not in page
    assert "http://" not in page and "https://" not in page
    assert not list(tmp_path.glob("*.png"))
    # Checker results as tables, not a JSON dump.
    assert "<th>stats · appends · ok</th><td>2</td>" in page
    assert '{"valid"' not in page.split('id="report-data"')[0]
    data = _payload(page)
    ops = data["ops"]
    assert ops["n"] == 4  # three appends and the open final read; the sample is not a lane op
    assert data["anomalies"][0]["count"] == 9 and data["anomalies"][0]["exact"]
    assert data["faults"][0][:3] == ["partition", 1_000_000, 3_100_000]
    assert data["states"]["n1"]["role"] == [data["roles"].index("leader")]
    cited = data["named"]["ops"][data["named"]["by"]["7"]]
    assert (cited["i"], cited["c"], cited["in"]) == (6, 7, '{"payload":"2-0"}')


def test_op_columns_are_compact_and_pack_processes_into_worker_lanes():
    from harness.report.data import OpColumns, pair_stream

    ops = [
        Op("invoke", 0, "read", None, key="a", time=1_000),
        Op("info", 0, "read", None, key="a", error="timeout", time=5_000),
        Op("invoke", 1, "write", 3, key="b", time=2_000),
        Op("invoke", 5, "write", 4, key="b", time=6_000),  # p0's worker, now p5
        Op("ok", 1, "write", 3, key="b", time=7_000),
        Op("fail", 5, "write", 4, key="b", error="NOT_LEADER", time=8_000),
        Op("invoke", 6, "read", None, key="a", time=9_000),
    ]
    ops = [op.replace(index=i) for i, op in enumerate(ops)]
    cols = OpColumns()
    for c in pair_stream(ops):
        cols.add(c)
    js = cols.to_json()
    assert js["n"] == 4
    lanes = js["lanes"]
    # p0 timed out at 5 µs; p5 started after that on the same lane; p1 overlapped: its own.
    assert len(lanes) == 3 and lanes[0].startswith("p0, p5")
    starts = list(itertools.accumulate(js["start"]))
    assert sorted(starts) == [1, 2, 6, 9]
    assert js["errors"] == ["timeout", "NOT_LEADER"]
    by_start = dict(zip(starts, js["dur"], strict=True))
    assert by_start[1] == 4 and by_start[9] == -1  # -1: never completed
    capped = OpColumns(max_ops=1)
    for c in pair_stream(ops):
        capped.add(c, force=c.invoke.index == 3)
    assert len(capped) == 2 and capped.dropped == 2  # the first op, and the named one


def test_node_states_keep_only_changes():
    from harness.report.data import NodeStates

    st = NodeStates()
    sample = {"role": "leader", "term": 2, "leader": "n1", "incarnation": 1}
    for t in range(1, 100):
        st.add(Op("ok", 9, "sample", sample, node="n1", time=t * 1_000))
    st.add(Op("info", 9, "sample", None, node="n1", error="timeout", time=200_000))
    st.add(Op("ok", 9, "sample", {**sample, "incarnation": 2}, node="n1", time=300_000))
    assert st.rows["n1"] == [
        (1, "leader", 2, "n1"),
        (200, "unreachable", None, None),
        (300, "leader", 2, "n1"),
    ]


def test_named_indexes_gather_anomalies_notes_and_the_counterexample():
    from harness.report.data import named_indexes

    results = {
        "anomalies": {"lost-ack": [{"indexes": [3]}]},
        "checkers": {
            "log-safety": {"notes": {"regress": [{"indexes": [5, 6]}]}},
            "linearizable": {"counterexample": {"key": "k", "window": [9, 10]}},
        },
    }
    assert named_indexes(results) == {3, 5, 6, 9, 10}


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


def test_write_report_from_parquet_reads_the_cited_values_and_the_failing_key(tmp_path):
    from harness.core.history import write_parquet

    ops = []
    for i in range(300):
        key = "k1" if i % 2 else "k2"
        ops.append(Op("invoke", i % 5, "write", i, key=key, time=i * 10_000_000))
        ops.append(Op("ok", i % 5, "write", i, key=key, time=i * 10_000_000 + 5_000_000))
    ops = [op.replace(index=i) for i, op in enumerate(ops)]
    write_parquet(ops, tmp_path / "history.parquet", batch=64)
    cex = {"key": "k1", "window": [302, 303], "op": {}, "state": 0, "why": "w"}
    (tmp_path / "results.json").write_text(
        json.dumps(
            {
                "valid": False,
                "checkers": {"linearizable": {"valid": False, "counterexample": cex}},
                "anomalies": {"nonlinearizable": [{"key": "k1", "indexes": [302, 303]}]},
            }
        )
    )
    data = _payload(write_report(tmp_path).read_text())
    assert data["meta"]["focusKey"] == "k1"
    assert data["ops"]["n"] == 300 and data["ops"]["keys"] == ["k2", "k1"]
    # The first pass leaves a Parquet history's values undecoded; the cited ops get theirs.
    cited = data["named"]["ops"][data["named"]["by"]["303"]]
    assert (cited["i"], cited["in"], cited["out"]) == (302, "151", "151")


def test_node_log_lines_are_placed_on_the_history_clock(tmp_path):
    from tests.harness.test_report_page import make_explained_run

    run = make_explained_run(tmp_path / "store")
    data = _payload(write_report(run).read_text())
    meta = data["meta"]
    assert meta["origin"]["method"].startswith("splitbrain.log: 2 logged fault")
    assert meta["origin"]["spread_ms"] < 5
    [lost] = [g for g in data["anomalies"] if g["kind"] == "lost-ack"]
    assert lost["count"] == 57 and len(lost["examples"]) == 1
    window = data["logs"]["windows"][lost["examples"][0]["log"]]
    texts = {node: [line[2] for line in lines] for node, lines in window.items()}
    assert any("became leader" in t for t in texts["n1"])
    assert not any("long before" in t for t in texts["n1"])
    # n2's clock was set back 5 s: its line, stamped 5 s early, is moved back and marked.
    [shifted] = [line for line in window["n2"] if "clock-moved" in line[2]]
    # Within 2 ms: the log's stamps are whole milliseconds, written just after the append.
    assert shifted[3] == -5000.0 and abs(shifted[0] - 4_600) <= 2


def test_line_epoch_reads_the_common_stamps():
    from harness.report.nodelogs import line_epoch

    assert line_epoch("ROLE term=1 role=leader time=1795700884.25") == 1795700884.25
    assert line_epoch('{"level":"info","ts":"2026-11-26T13:48:02.5Z","msg":"x"}') == (1795700882.5)
    assert line_epoch("2026-11-26T14:48:02.250+01:00 started") == 1795700882.25
    assert line_epoch("no stamp here") is None


def test_page_digest_memory_is_the_compact_columns_not_the_history():
    """40k client ops streamed through: what is held is ~tens of bytes per op, not the ops."""
    import tracemalloc

    from harness.report.data import NodeStates, OpColumns, digest

    def ops():
        i = 0
        for k in range(40_000):
            p, t = k % 10, k * 1_000_000
            yield Op("invoke", p, "append", {"payload": str(k)}, node="n1", time=t, index=i)
            yield Op("ok", p, "append", {"payload": str(k)}, node="n1", time=t + 5, index=i + 1)
            i += 2
            if k % 50 == 0:
                s = {"role": "leader", "term": k // 8_000, "committed": k}
                yield Op("invoke", 99, "sample", None, node="n2", time=t + 6, index=i)
                yield Op("ok", 99, "sample", s, node="n2", time=t + 7, index=i + 1)
                i += 2

    tracemalloc.start()
    try:
        cols, states = OpColumns(), NodeStates()
        d = digest(ops(), cap=3_000, columns=cols, states=states, named={10, 11})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(cols) == 40_000 and len(states.rows["n2"]) == 5
    assert set(d.named_pairs) == {10} and set(d.named_ops) == {10, 11}
    # The ten columns take ~60 bytes per op; 40k ops held as Op pairs would be >20 MB.
    assert peak < 6_000_000, peak


def test_a_hostile_value_cannot_break_out_of_the_page(tmp_path):
    """Payloads and error texts are the system's, not ours: they must stay text."""
    bad = "</script><script>window.pwned=1</script><!--"
    with HistoryWriter(tmp_path / "history.jsonl") as w:
        w.append(Op("invoke", 0, "append", {"payload": bad}, time=1))
        w.append(Op("fail", 0, "append", {"payload": bad}, error=bad, time=2))
    (tmp_path / "results.json").write_text(
        json.dumps({"valid": False, "anomalies": {bad: [{"indexes": [1], "why": bad}]}})
    )
    page = write_report(tmp_path).read_text()
    assert page.count("</script>") == 2  # the data's end and the program's end
    assert "<!--" not in page and "window.pwned" in page
    data = _payload(page)
    assert data["anomalies"][0]["kind"] == bad and data["ops"]["errors"] == [bad]
