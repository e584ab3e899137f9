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
