"""Fault profiles: scripted overlaps that heal what they break, replay by seed, and never sleep."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from harness.core.errors import ConfigError
from nemesis.profiles import PROFILES, ProfileSchedule, build_profile_package, profile_steps
from nemesis.schedules import POLL_S, Retry


class _Ctx:
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    db = None


class _LeaderDB:
    """Reports a fixed leader (or none): enough for the pure side-picking of the profiles."""

    def __init__(self, leader: str | None) -> None:
        self.leader = leader

    def primaries(self, ctx: object) -> list[str]:
        return [self.leader] if self.leader else []


class _Clock:
    """The history's clock, moved by hand: a retry's wait passes only when the test says so."""

    def __init__(self) -> None:
        self.ns = 0

    def now(self) -> int:
        return self.ns


class _LedCtx:
    nodes = _Ctx.nodes

    def __init__(self, leader: str | None) -> None:
        self.db = _LeaderDB(leader)
        self.history = _Clock()


def land(make: Any, ctx: Any) -> Any:
    """A builder's value once it is ready, the clock moved by each retry's wait, as the runner would."""
    while isinstance(v := make(ctx), Retry):
        if hasattr(ctx, "history"):
            ctx.history.ns += round(v.after * 1e9)
    return v


def test_every_profile_heals_what_it_breaks() -> None:
    for name in PROFILES:
        steps = profile_steps(name, _Ctx.nodes, random.Random(1), 2.5)
        fs = [f for _, f, _ in steps]
        assert all(w >= 0 for w, _, _ in steps)
        for kind in ("partition", "kill", "clock", "pause", "lull"):
            assert fs.count(f"start-{kind}") <= fs.count(f"stop-{kind}"), (name, fs)
            if f"start-{kind}" in fs:
                assert fs.index(f"stop-{kind}") > fs.index(f"start-{kind}"), (name, fs)
        for _, f, v in steps:
            if callable(v):
                v = v(_Ctx())
            if f == "start-partition" and v["shape"] != "leader":
                assert set(v["grudge"]) == set(_Ctx.nodes)


def _sides(grudge: dict[str, list[str]]) -> set[frozenset[str]]:
    return {frozenset([n, *(m for m in grudge if m not in grudge[n] and m != n)]) for n in grudge}


def test_rejoin_profile_restarts_the_new_leaders_last_voter_beside_the_sleepers() -> None:
    for seed in range(20):
        both = profile_steps("rejoin", _Ctx.nodes, random.Random(seed), 2.5)
        one = [
            "start-pause",
            "stop-pause",
            "start-partition",
            "start-kill",
            "stop-kill",
            "stop-partition",
        ]
        assert [f for _, f, _ in both] == one + one  # the race is run twice
        # each round picks its own sides (the second from the leader of its moment)
        steps = both[len(one) :] if seed % 2 else both[: len(one)]
        # The first step lands while n3 leads: n3 and one other sleep.
        paused = steps[0][2](_LedCtx("n3"))["nodes"]
        assert paused[0] == "n3" and len(paused) == 2
        voters = [n for n in _Ctx.nodes if n not in paused]
        new_leader = voters[seed % 3]
        cut = steps[2][2](_LedCtx(new_leader))
        victim = steps[3][2](_LedCtx(new_leader))["nodes"]
        assert len(victim) == 1 and victim[0] in voters and victim[0] != new_leader
        sides = _sides(cut["grudge"])
        assert frozenset([*paused, victim[0]]) in sides
        assert len(sides) == 2 and any(new_leader in s and len(s) == 2 for s in sides)
    # With nobody leading (or no way to ask), the profile still picks valid sides.
    steps = profile_steps("rejoin", _Ctx.nodes, random.Random(1), 2.5)
    assert len(steps[0][2](_Ctx())["nodes"]) == 2
    assert len(_sides(steps[2][2](_Ctx())["grudge"])) == 2


def test_profile_schedule_builds_leader_dependent_ops_when_they_land() -> None:
    sch = ProfileSchedule(("rejoin",), hold=2.5, rng=random.Random(3))
    wait, make = sch.next(_Ctx())
    assert callable(make) and wait >= 0
    op = make(_LedCtx("n2"))
    assert op.f == "start-pause" and op.process == "nemesis" and "n2" in op.value["nodes"]
    _, stop = sch.next(_Ctx())
    assert not callable(stop) and stop.f == "stop-pause"
    lease = profile_steps("lease", _Ctx.nodes, random.Random(2), 2.5)
    assert lease[0][1] == "start-clock" and lease[0][2]["offset_ms"] < -10_000
    assert lease[1][2] == {"shape": "leader"}
    with pytest.raises(ConfigError, match="unknown fault profile"):
        profile_steps("nope", _Ctx.nodes, random.Random(1), 2.5)


def test_profile_schedule_cycles_in_order_and_is_seeded() -> None:
    def ops(seed: int) -> list[tuple[float, str, object]]:
        sch = ProfileSchedule(PROFILES, hold=2.5, rng=random.Random(seed))
        out = []
        for _ in range(40):
            wait, op = sch.next(_Ctx())
            if callable(op):
                op = op(_Ctx())
            assert op.type == "invoke" and op.process == "nemesis"
            out.append((wait, op.f, op.value))
        return out

    a = ops(5)
    assert a == ops(5) and a != ops(6)
    first = [f for _, f, _ in a]
    n_lease = len(profile_steps("lease", _Ctx.nodes, random.Random(0), 2.5))
    assert first[0] == "start-clock" and first[n_lease] == "start-pause"
    with pytest.raises(ConfigError):
        ProfileSchedule((), hold=1.0, rng=random.Random(0))


def test_figure8_profile_stages_the_old_tail_the_lone_new_leader_and_its_comeback() -> None:
    for seed in range(10):
        steps = profile_steps("figure8", _Ctx.nodes, random.Random(seed), 0.1)
        assert [f for _, f, _ in steps] == [
            "start-kill",
            "start-lull",
            "start-pause",
            "stop-kill",
            "start-partition",
            "stop-lull",
            "start-lull",
            "stop-pause",
            "start-kill",
            "stop-partition",
            "stop-lull",
            "stop-kill",
        ]
        # The kill lands while n2 leads: a majority without n2 and one partner dies.
        majority = steps[0][2](_LedCtx("n2"))["nodes"]
        assert len(majority) == 3 and "n2" not in majority
        old = steps[2][2](_Ctx())["nodes"]
        assert sorted(old + majority) == sorted(_Ctx.nodes) and "n2" in old
        # The majority elects L; L is cut off alone.
        lone = majority[seed % 3]
        cut = land(steps[4][2], _LedCtx(lone))
        assert frozenset([lone]) in _sides(cut["grudge"])
        assert frozenset(n for n in _Ctx.nodes if n != lone) in _sides(cut["grudge"])
        # Whoever leads beside L, the old side is killed as L comes back.
        killed = land(steps[8][2], _LedCtx(old[0]))["nodes"]
        assert sorted(killed) == sorted(old)
    # Without a DB that names its leader, the profile still picks valid sides and does not wait.
    steps = profile_steps("figure8", _Ctx.nodes, random.Random(1), 2.5)
    assert len(steps[0][2](_Ctx())["nodes"]) == 3
    t0 = time.monotonic()
    assert len(_sides(steps[4][2](_Ctx())["grudge"])) == 2
    assert time.monotonic() - t0 < 1.0


def test_waiting_for_an_election_is_a_retry_on_the_history_clock_not_a_sleep() -> None:
    hold = 1.0
    steps = profile_steps("figure8", _Ctx.nodes, random.Random(4), hold)
    steps[0][2](_LedCtx("n2"))
    ctx = _LedCtx(None)  # nobody leads yet
    t0 = time.monotonic()
    answers = []
    while isinstance(v := steps[4][2](ctx), Retry):
        answers.append(v.after)
        ctx.history.ns += round(v.after * 1e9)
    assert time.monotonic() - t0 < 0.5  # no sleeping inside: the clock above is the only time
    assert answers and set(answers) == {POLL_S}
    assert len(answers) == pytest.approx(3 * hold / POLL_S, abs=1)  # gave up after 3 holds
    assert v["shape"] == "figure8-cut"
    # Step 4 lingers a moment once someone leads beside the cut node, then kills.
    lone = next(iter(s for s in _sides(v["grudge"]) if len(s) == 1))
    led = _LedCtx(next(n for n in _Ctx.nodes if n not in lone))
    assert steps[8][2](led) == Retry(hold * 0.6)
    assert steps[8][2](led)["why"] == "figure8-old-side"


def test_a_step_that_is_not_ready_comes_back_before_the_steps_after_it() -> None:
    sch = ProfileSchedule(("figure8",), hold=0.1, rng=random.Random(2))
    ctx = _LedCtx("n2")
    fs = []
    waits = []
    for _ in range(40):
        wait, planned = sch.next(ctx)
        ctx.history.ns += round(wait * 1e9)
        op = planned(ctx) if callable(planned) else planned
        waits.append(wait)
        if op is not None:
            fs.append(op.f)
        if fs == ["start-kill"]:
            ctx.db.leader = None  # the election after the kill takes a while
    # The cut waits (retries of POLL_S) but no later step overtakes it.
    assert fs[:6] == [
        "start-kill",
        "start-lull",
        "start-pause",
        "stop-kill",
        "start-partition",
        "stop-lull",
    ]
    assert POLL_S in waits


def test_without_profiles_the_stock_package_is_kept() -> None:
    pkg = build_profile_package(
        ["partition-leader", "failover"], (), interval=3.0, rng=random.Random(5), overlap=2
    )
    assert pkg.schedule.overlap == 2
    assert [op.f for op in pkg.final_ops] == ["stop-partition", "stop-failover"]
    pkg = build_profile_package(
        ["partition-leader", "kill", "lull"], ("lease",), interval=3.0, rng=random.Random(5)
    )
    assert isinstance(pkg.schedule, ProfileSchedule)
    assert [op.f for op in pkg.final_ops] == ["stop-partition", "stop-kill", "stop-lull"]
