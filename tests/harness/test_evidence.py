"""harness/run/evidence.py: ok ops before, during and after fault windows, and the floor."""

from __future__ import annotations

from typing import Any

from harness.core.op import Op
from harness.core.periods import Span
from harness.run.evidence import Floor, apply_floor, evidence, fault_windows

S = 1_000_000_000


def ok(t_s: float, f: str = "read", process: int | str = 0) -> Op:
    return Op(type="ok", process=process, f=f, time=int(t_s * S))


def span(kind: str, a: float, b: float) -> Span:
    return Span(kind=kind, start=int(a * S), end=int(b * S))


FLOORS = {"w": Floor(before=2, during_per_s=1.0, after=3)}


def test_overlapping_spans_are_one_window() -> None:
    wins = fault_windows([span("kill", 5, 8), span("partition", 7, 10), span("pause", 20, 21)])
    assert [(a / S, b / S, k) for a, b, k in wins] == [
        (5, 10, ["kill", "partition"]), (20, 21, ["pause"])
    ]  # fmt: skip


def test_ok_client_ops_are_counted_per_window_and_samplers_and_faults_are_not() -> None:
    ops = [ok(1), ok(2), ok(3, f="sample"), ok(6), ok(7, process="nemesis"), ok(12), ok(22)]
    ops.append(Op(type="fail", process=1, f="read", time=9 * S))
    ev = evidence(ops, [span("kill", 5, 10), span("pause", 20, 21)], workload="w", floors=FLOORS)
    assert ev["ok"] == {"before": 2, "during": 1, "after": 1, "all": 5}
    w1, w2 = ev["windows"]
    assert (w1["ok_before"], w1["ok_during"], w1["ok_after"]) == (2, 1, 1)
    assert (w2["ok_before"], w2["ok_during"], w2["ok_after"]) == (1, 0, 1)
    assert ev["fault_s"] == 6.0
    # 6 s under faults needs 6 ok ops; 1 after needs 3
    assert ev["short"] == {"during": {"ok": 1, "floor": 6}, "after": {"ok": 1, "floor": 3}}


def test_below_the_floor_a_valid_verdict_is_unknown_and_an_invalid_one_stands() -> None:
    ev = evidence([ok(1)], [span("kill", 5, 10)], workload="w", floors=FLOORS)
    results: dict[str, Any] = {"valid": True}
    apply_floor(results, ev)
    assert results["valid"] == "unknown" and "too little evidence" in results["reason"]
    bad = {"valid": False}
    apply_floor(bad, ev)
    assert bad == {"valid": False}


def test_enough_evidence_or_no_floor_leaves_the_verdict() -> None:
    ops = [ok(t) for t in (1, 2, *range(5, 11), 11, 12, 13)]
    ev = evidence(ops, [span("kill", 5, 10)], workload="w", floors=FLOORS)
    assert ev["short"] == {}
    results = {"valid": True}
    apply_floor(results, ev)
    assert results == {"valid": True}
    unfloored = evidence([ok(1)], [span("kill", 5, 10)], workload="other", floors=FLOORS)
    assert "short" not in unfloored and unfloored["ok"]["during"] == 0


def test_a_run_without_faults_is_held_to_before_only() -> None:
    ev = evidence([ok(1), ok(2)], [], workload="w", floors=FLOORS)
    assert ev["ok"]["before"] == 2 and ev["short"] == {} and ev["windows"] == []


def test_the_before_floor_needs_clients_running_before_the_first_fault() -> None:
    """The deck may open its first fault a fraction of a second after the first client
    op; at load 28 a correct run's first ok came after it (seed 7301): that part is then
    not floored, and the windows and the final reads still are."""
    late = [Op(type="invoke", process=0, f="read", time=int(4.7 * S))]
    late += [ok(t) for t in (5.2, *range(6, 11), 11, 12, 13)]
    ev = evidence(late, [span("kill", 5, 10)], workload="w", floors=FLOORS)
    assert ev["ok"]["before"] == 0 and ev["clients_before_s"] == 0.3
    assert ev["short"] == {} and ev["floor"]["need"]["before"] == 0
    # two seconds of clients before it and still nothing: the cluster did not serve
    early = [Op(type="invoke", process=0, f="read", time=int(2.5 * S)), *late]
    ev = evidence(early, [span("kill", 5, 10)], workload="w", floors=FLOORS)
    assert ev["short"] == {"before": {"ok": 0, "floor": 2}}
    # and too little in the windows is still too little, however late the clients began
    thin = evidence(late[:3], [span("kill", 5, 10)], workload="w", floors=FLOORS)
    assert set(thin["short"]) == {"during", "after"}


def test_the_verdict_line_names_configuration_evidence_and_why_unreached() -> None:
    from harness.run.summary import verdict_line

    results = {
        "valid": True,
        "run": {"ok": 5, "fail": 0, "info": 0},
        "evidence": {
            "ok": {"before": 3, "during": 40, "after": 25},
            "windows": [{}, {}],
            "configuration": {"read_mode": "follower"},
        },
        "coverage": {
            "clock-jump-on-leader": {"count": 0},
            "why_unreached": {"clock-jump-on-leader": "time ran out before its scripts played"},
        },
    }
    line = verdict_line(results)
    assert "configuration: read_mode=follower" in line
    assert "ok ops before/during/after 2 fault windows: 3/40/25" in line
    assert "clock jump during a lease (time ran out before its scripts played)" in line
