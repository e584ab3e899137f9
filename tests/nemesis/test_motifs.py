"""Fault motifs: generic scripts that heal what they break, replay by seed, and draw as a deck."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from harness.core.errors import ConfigError
from harness.zoo.targets import DEFAULT_CAMPAIGN, build_zoo_package
from nemesis.motifs import MOTIF_KINDS, MOTIFS, motif_steps
from nemesis.profiles import PROFILES, SCRIPTS, ProfileSchedule
from nemesis.schedules import Step

NODES = ["n1", "n2", "n3", "n4", "n5"]


class _Ctx:
    nodes = NODES
    db = None


class _LeaderDB:
    def __init__(self, lead: str) -> None:
        self.lead = lead

    def primaries(self, ctx: object) -> list[str]:
        return [self.lead]


class _LedCtx:
    """n3 leads: what a builder sees when its step lands."""

    nodes = NODES
    db = _LeaderDB("n3")


class _Led1Ctx(_LedCtx):
    """n1 leads: a new leader elected since an earlier step landed."""

    db = _LeaderDB("n1")


def _value(s: Step) -> Any:
    return s.value(_LedCtx()) if callable(s.value) else s.value  # type: ignore[arg-type]


def _fs(steps: list[Step]) -> list[str]:
    return [s.f for s in steps]


@pytest.mark.parametrize("name", MOTIFS)
@pytest.mark.parametrize("seed", range(12))
def test_every_motif_heals_what_it_breaks_with_stock_fault_kinds(name: str, seed: int) -> None:
    steps = motif_steps(name, NODES, random.Random(seed), 2.5)
    fs = _fs(steps)
    assert steps and all(s.wait >= 0 for s in steps)
    kinds = {f.split("-", 1)[1] for f in fs}
    assert kinds <= MOTIF_KINDS, (name, fs)
    for kind in kinds:
        starts = [i for i, f in enumerate(fs) if f == f"start-{kind}"]
        stops = [i for i, f in enumerate(fs) if f == f"stop-{kind}"]
        assert starts and stops, (name, fs)
        # Every start is healed by a later stop, and the last word on each kind is a stop.
        assert max(stops) > max(starts), (name, fs)
        assert len(stops) >= len(starts), (name, fs)
    for s in steps:
        if s.f.startswith("start-"):
            v = _value(s)
            assert isinstance(v, dict)
            if s.f != "start-partition":
                assert v.get("target") == "leader" or set(v["nodes"]) <= set(NODES)
            elif v["shape"] != "leader":
                assert set(v["grudge"]) == set(NODES)


@pytest.mark.parametrize("name", MOTIFS)
def test_motifs_replay_by_seed(name: str) -> None:
    def run(seed: int) -> list[tuple[float, str, Any]]:
        # builders are compared by what they build when they land
        return [
            (s.wait, s.f, _value(s)) for s in motif_steps(name, NODES, random.Random(seed), 2.5)
        ]

    assert run(3) == run(3)
    assert any(run(3) != run(s) for s in range(4, 10))


def test_restart_all_kills_every_node_and_starts_them_at_once() -> None:
    steps = motif_steps("restart-all", NODES, random.Random(1), 2.5)
    assert _fs(steps) == ["start-kill", "stop-kill"]
    assert isinstance(steps[0].value, dict) and steps[0].value["nodes"] == NODES
    assert steps[1].wait < 1.0


def test_elections_variants_make_every_follower_time_out_together() -> None:
    seen: dict[str, list[Step]] = {}
    for seed in range(40):
        steps = motif_steps("elections", NODES, random.Random(seed), 2.5)
        seen[str(_fs(steps))] = steps
    assert len(seen) == 3, list(seen)
    for steps in seen.values():
        first = steps[0]
        if first.f == "start-partition":  # cut off from all at once, then that node killed
            assert _fs(steps) == ["start-partition", "start-kill", "stop-partition", "stop-kill"]
            assert steps[2].wait == 0.0
            cut = _value(first)
            assert cut["isolated"] == "n3" and cut["grudge"]["n3"] == ["n1", "n2", "n4", "n5"]
            # the kill lands on the node cut off, even if another leads by then
            assert steps[1].value(_Led1Ctx())["nodes"] == ["n3"]  # type: ignore[operator]
            continue
        assert isinstance(first.value, dict)
        if first.f == "start-pause":  # every node, past twice the 1 s election timeout
            assert first.value["nodes"] == NODES and steps[1].f == "stop-pause"
            assert steps[1].wait > 2.0
        else:
            assert first.f == "start-kill" and first.value["target"] == "leader"


def test_stopped_leader_outlasts_an_election_but_not_a_client_timeout() -> None:
    variants = set()
    for seed in range(20):
        steps = motif_steps("stopped-leader", NODES, random.Random(seed), 2.5)
        fs = _fs(steps)
        variants.add(len(fs))
        paused = _value(steps[0])
        assert paused["target"] == "leader"
        asleep = sum(s.wait for s in steps[1 : fs.index("stop-pause") + 1])
        assert 2.0 < asleep < 5.0  # E is 1 s, the clients' timeout 5 s
        if fs == ["start-pause", "stop-pause"]:
            continue
        # alone: the sleeper (the leader when the pause landed) is cut off from every peer
        assert fs == ["start-pause", "start-partition", "stop-pause", "stop-partition"]
        assert paused["nodes"] == ["n3"]
        grudge = _value(steps[1])["grudge"]
        assert grudge["n3"] == ["n1", "n2", "n4", "n5"] and grudge["n1"] == ["n3"]
    assert variants == {2, 4}


def test_deposed_crash_kills_and_restarts_the_cut_off_leader_before_healing() -> None:
    shapes = set()
    for seed in range(16):
        steps = motif_steps("deposed-crash", NODES, random.Random(seed), 2.5)
        assert _fs(steps) == ["start-partition", "start-kill", "stop-kill", "stop-partition"]
        cut = _value(steps[0])
        shapes.add(cut["shape"])
        assert cut["isolated"] == "n3"
        if cut["shape"] == "leader":
            assert cut["grudge"]["n3"] == ["n1", "n2", "n4", "n5"]
        else:
            # a minority: the leader and one follower, who still hear each other
            [mate] = cut["with"]
            assert mate != "n3" and mate not in cut["grudge"]["n3"]
            assert sorted(cut["grudge"]["n3"]) == sorted(set(NODES) - {"n3", mate})
            assert sorted(cut["grudge"][mate]) == sorted(cut["grudge"]["n3"])
            assert steps[1].wait >= 5.0  # held longer: clients read from it meanwhile
        # the kill names the node cut off though n1 leads by the time it lands
        assert steps[1].value(_Led1Ctx())["nodes"] == ["n3"]  # type: ignore[operator]
        # long enough for the others to elect (E = 1 s, up to 2E) and commit
        assert steps[1].wait >= 2.5
        assert steps[3].wait > 0  # restarted while still cut off
    assert shapes == {"leader", "leader-minority"}
    # three nodes have no minority to share: always alone
    for seed in range(8):
        steps = motif_steps("deposed-crash", NODES[:3], random.Random(seed), 2.5)
        assert _value(steps[0])["shape"] == "leader"


def test_rolling_restarts_every_node_once_one_at_a_time() -> None:
    steps = motif_steps("rolling", NODES, random.Random(2), 2.5)
    assert _fs(steps) == ["start-kill", "stop-kill"] * len(NODES)
    killed = [n for s in steps if isinstance(s.value, dict) for n in s.value["nodes"]]
    assert sorted(killed) == NODES and len(killed) == len(NODES)


def test_overlap_holds_a_partition_a_kill_and_a_pause_at_once() -> None:
    for seed in range(20):
        steps = motif_steps("overlap", NODES, random.Random(seed), 2.5)
        fs = _fs(steps)
        assert fs[0] == "start-partition"
        assert set(fs[1:3]) == {"start-kill", "start-pause"}
        assert set(fs[3:]) == {"stop-partition", "stop-kill", "stop-pause"}
        victims = [s.value["nodes"][0] for s in steps[1:3] if isinstance(s.value, dict)]
        assert len(set(victims)) == 2


def test_clock_split_jumps_clocks_inside_a_partition() -> None:
    offsets = []
    for seed in range(20):
        steps = motif_steps("clock-split", NODES, random.Random(seed), 2.5)
        fs = _fs(steps)
        assert fs[:2] == ["start-partition", "start-clock"]
        assert set(fs[2:]) == {"stop-partition", "stop-clock"}
        clock = steps[1].value
        assert isinstance(clock, dict) and clock["mode"] == "bump" and clock["nodes"]
        offsets.append(clock["offset_ms"])
    assert min(offsets) < -2000 and max(offsets) > 2000


def test_unknown_motif_or_too_few_nodes_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown fault motif 'nope'"):
        motif_steps("nope", NODES, random.Random(0), 2.5)
    with pytest.raises(ConfigError, match="at least 2 nodes"):
        motif_steps("rolling", ["n1"], random.Random(0), 2.5)


def _played(seed: int, n: int) -> tuple[list[str], list[tuple[float, str, Any]]]:
    sch = ProfileSchedule(SCRIPTS, hold=2.5, rng=random.Random(seed), shuffle=True)
    ops = []
    while len(sch.played) <= n:
        nxt = sch.next(_Ctx())  # type: ignore[arg-type]
        assert nxt is not None
        wait, op = nxt
        if not callable(op):
            ops.append((wait, op.f, op.value))
    return sch.played[:n], ops


def test_the_deck_plays_every_script_once_per_pass_in_a_seeded_order() -> None:
    n = len(SCRIPTS)
    played, ops = _played(7, 2 * n)
    assert sorted(played[:n]) == sorted(SCRIPTS) == sorted(played[n:])
    assert played[:n] != list(SCRIPTS) and played[:n] != played[n:]
    again, ops_again = _played(7, 2 * n)
    assert again == played and ops_again == ops
    assert _played(8, n)[0] != played[:n]


def test_unshuffled_schedules_still_cycle_in_order() -> None:
    sch = ProfileSchedule(PROFILES, hold=2.5, rng=random.Random(0))
    while len(sch.played) < 2 * len(PROFILES) + 1:
        sch.next(_Ctx())  # type: ignore[arg-type]
    assert sch.played[: 2 * len(PROFILES)] == list(PROFILES) * 2


def test_unknown_script_is_refused_when_the_schedule_is_built() -> None:
    with pytest.raises(ConfigError, match="unknown fault profile"):
        ProfileSchedule(["lease", "nope"], hold=2.5, rng=random.Random(0))


def test_default_campaign_draws_profiles_and_motifs_and_its_package_heals_every_kind() -> None:
    from harness.core.remote import Host

    hosts = [Host(name=f"n{i}", address="127.0.0.1", extras={"fuse": True}) for i in range(5)]
    assert DEFAULT_CAMPAIGN.deck and DEFAULT_CAMPAIGN.shuffle and not DEFAULT_CAMPAIGN.profiles
    pkg = build_zoo_package(DEFAULT_CAMPAIGN, hosts, 11)
    assert isinstance(pkg.schedule, ProfileSchedule)
    assert set(pkg.schedule.profiles) == set(SCRIPTS)  # the reference node takes every one
    healed = Counter(op.f for op in pkg.final_ops)
    for kind in MOTIF_KINDS:
        assert healed[f"stop-{kind}"] == 1, pkg.final_ops
    assert isinstance(pkg.schedule, ProfileSchedule) and pkg.schedule.shuffle
