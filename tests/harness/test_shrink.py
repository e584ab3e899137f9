"""Shrinking a red run: ddmin and the candidate judging are pure (a fake oracle stands in
for the runs); the full demonstration on a lab is ``slow``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.run.replay import Outcome, reproduces, summarize
from harness.run.shrink import (
    Exhausted,
    Ledger,
    ShrinkSettings,
    candidate_time_limit,
    ddmin,
    judge,
)


def test_ddmin_finds_the_one_fault_that_matters():
    calls: list[list[int]] = []

    def fails(xs):
        calls.append(list(xs))
        return 7 in xs

    assert ddmin(list(range(12)), fails) == [7]
    assert len(calls) < 12 * 2  # fewer tests than trying every single removal twice


def test_ddmin_keeps_a_pair_that_fails_only_together_in_order():
    assert ddmin(list(range(10)), lambda xs: 2 in xs and 8 in xs) == [2, 8]


def test_ddmin_result_is_one_minimal():
    """Removing any single item of the answer makes it pass (the ddmin guarantee)."""

    def fails(xs):
        s = set(xs)
        return {1, 4} <= s or {3, 5, 9} <= s

    got = ddmin(list(range(10)), fails)
    assert fails(got)
    for i in range(len(got)):
        assert not fails(got[:i] + got[i + 1 :])


def test_ddmin_drops_everything_when_no_fault_is_needed():
    assert ddmin([1, 2, 3], lambda xs: True) == []


def test_ddmin_stops_with_the_smallest_so_far_when_the_budget_runs_out():
    budget = [3]

    def fails(xs):
        if budget[0] == 0:
            raise Exhausted()
        budget[0] -= 1
        return 5 in xs

    got = ddmin(list(range(8)), fails)
    assert 5 in got and len(got) < 8


def o(verdict, *kinds):
    return Outcome(verdict=verdict, kinds=tuple(kinds), store_dir="x", seconds=1.0)


def test_judge_needs_half_of_the_runs_invalid_with_an_original_kind():
    expected = ["lost-ack"]
    assert judge([o("INVALID", "lost-ack")], expected)
    assert not judge([o("VALID")], expected)
    # INVALID, but with another anomaly: not the same failure.
    assert not judge([o("INVALID", "duplicate")], expected)
    assert judge([o("INVALID", "lost-ack", "x"), o("VALID")], expected)
    assert not judge([o("INVALID", "lost-ack"), o("VALID"), o("UNKNOWN")], expected)
    assert not judge([], expected)
    assert reproduces(o("INVALID", "anything"), [])  # no kinds recorded: any INVALID


def test_summary_counts_reproductions_and_kinds():
    s = summarize(
        [o("INVALID", "lost-ack"), o("VALID"), o("INVALID", "lost-ack", "gap")], ["lost-ack"]
    )
    assert s["reproduced"] == 2 and s["runs"] == 3
    assert s["verdicts"] == ["INVALID", "VALID", "INVALID"]
    assert s["kinds"] == {"lost-ack": 2, "gap": 1}


def test_candidate_time_limit_ends_after_the_last_fault_and_its_recovery():
    faults = [
        {"offset_s": 2.0, "duration_s": 3.0, "healed_by": "stop"},
        {"offset_s": 10.0, "duration_s": 4.0, "healed_by": "stop"},
    ]
    assert candidate_time_limit(faults, original=60, hold=3, recovery_s=5) == 19.0
    # A fault only the final heal ended counts as lasting one hold.
    tail = [{"offset_s": 50.0, "duration_s": 9.7, "healed_by": "final"}]
    assert candidate_time_limit(tail, original=60, hold=3, recovery_s=5) == 58.0
    assert candidate_time_limit(tail, original=55, hold=3, recovery_s=5) == 55.0
    assert candidate_time_limit([], original=60, hold=3, recovery_s=1) == 5.0


def test_ledger_resumes_only_with_the_same_settings(tmp_path: Path):
    path = tmp_path / "shrunk" / "ledger.jsonl"
    one = Ledger(path, ShrinkSettings(runs_per_candidate=1))
    one.append({"key": "k1", "outcomes": [o("INVALID", "a").to_json()], "seconds": 30.0})
    with path.open("a") as f:
        f.write('{"key": "torn')  # a kill mid-write
    again = Ledger(path, ShrinkSettings(runs_per_candidate=1))
    assert set(again.entries) == {"k1"} and again.seconds == 30.0 and again.runs == 1
    other = Ledger(path, ShrinkSettings(runs_per_candidate=3))
    assert other.entries == {}
    assert json.loads(path.read_text().splitlines()[0])["settings"]["runs_per_candidate"] == 1


def test_a_resumed_search_asks_nothing_it_already_asked():
    """ddmin is deterministic given its answers, so a cache of them resumes it exactly."""
    asked: list[tuple[int, ...]] = []
    cache: dict[tuple[int, ...], bool] = {}

    def oracle(stop_after: int):
        def fails(xs):
            key = tuple(xs)
            if key in cache:
                return cache[key]
            if len(asked) >= stop_after:
                raise Exhausted()
            asked.append(key)
            cache[key] = 3 in xs and 6 in xs
            return cache[key]

        return fails

    ddmin(list(range(9)), oracle(4))  # interrupted after 4 real runs
    first = list(asked)
    assert ddmin(list(range(9)), oracle(100)) == [3, 6]
    assert asked[: len(first)] == first and len(set(asked)) == len(asked)


@pytest.mark.slow
def test_shrink_a_red_ack_before_quorum_run(lab, tmp_path):
    """The issue's demonstration: a red run shrinks to at most 3 faults that fail again in
    at least 3 of 5 fresh runs, and pass 3 of 3 against the fixed node."""
    from harness.core.spec import TestSpec
    from harness.run.options import RunOptions
    from harness.run.replay import Overrides, replay
    from harness.run.runner import run_test
    from harness.run.schedule_file import load_schedule
    from harness.run.shrink import shrink

    hosts = lab.hosts()
    red = None
    for seed in range(2601, 2606):
        spec = TestSpec(
            name="abq",
            nodes=tuple(h.name for h in hosts),
            workload="append",
            nemesis=("partition", "kill", "clock", "pause"),
            nemesis_interval=3.0,
            time_limit=60.0,
            rate=50.0,
            seed=seed,
            bug="ack-before-quorum",
        )
        r = run_test(spec, hosts, store_root=tmp_path, options=RunOptions(progress=False))
        if r.results["valid"] is False:
            red = r
            break
    assert red is not None, "no red run in 5 tries"
    out = shrink(
        red.store_dir,
        hosts,
        settings=ShrinkSettings(runs_per_candidate=1),
        budget_s=40 * 60,
        fresh_runs=5,
        echo=lambda s: None,
    )
    assert out["faults_after"] <= 3 and out["reproduced"] >= 3
    doc = load_schedule(Path(out["schedule"]))
    fixed = replay(doc, hosts, times=3, over=Overrides(bug="none"), store_root=tmp_path)
    assert [x.verdict for x in fixed] == ["VALID"] * 3
