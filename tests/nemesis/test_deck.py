"""The default campaign's deck: what a DB and its hosts can take, decided from declarations."""

from __future__ import annotations

import random
from typing import Any

import pytest

from harness.core.errors import ConfigError
from harness.core.remote import Host
from nemesis.deck import Deck, deck_for, deck_record, script_faults
from nemesis.profiles import PROFILES, SCRIPTS, ProfileSchedule, aim_without_leader
from nemesis.schedules import Retry, start


def _hosts(n: int = 5, **extras: Any) -> list[Host]:
    base = {"fuse": True, "faketime_file": "/tmp/sb-none.rc"}
    return [
        Host(name=f"n{i}", address=f"127.0.0.{10 + i}", extras={**base, **extras})
        for i in range(1, n + 1)
    ]


class _PartitionOnly:
    """A DB that declares nothing but setup and teardown (no kill, pause, leader, disk)."""

    def setup(self, ctx: Any, node: str) -> None: ...

    def teardown(self, ctx: Any, node: str) -> None: ...


class _KillableWithLeader(_PartitionOnly):
    def kill(self, ctx: Any, node: str) -> None: ...

    def start(self, ctx: Any, node: str) -> None: ...

    def primaries(self, ctx: Any) -> list[str]:
        return []


class _OutsideFaketime(_KillableWithLeader):
    runs_under_faketime = False


def test_a_script_plays_the_fault_kinds_its_own_steps_start() -> None:
    assert script_faults("crash", 5) == ("kill",)
    assert script_faults("lease", 5) == ("clock", "partition")
    assert script_faults("bridge", 5) == ("partition",)
    assert set(script_faults("disk", 5)) >= {"lose-unfsynced", "torn-write", "corrupt"}
    assert script_faults("reconfig-race", 5) == ("membership",)


def test_the_reference_node_on_a_lab_takes_every_script() -> None:
    from harness.dbs import get_db

    deck = deck_for(get_db("dledger", {}), _hosts())
    assert set(deck.scripts) == set(SCRIPTS) and not deck.left_out and not deck.notes
    assert {"membership", "lose-unfsynced", "clock", "pause", "lull"} <= set(deck.faults)


def test_scripts_needing_what_the_db_lacks_are_left_out_with_the_reason() -> None:
    deck = deck_for(_KillableWithLeader(), _hosts())
    assert "bridge" in deck.scripts and "crash" in deck.scripts  # partition, kill
    assert "pause" not in deck.faults and "membership" not in deck.faults
    assert "Pausable" in deck.left_out["stopped-leader"]
    assert "HasFootprint" in deck.left_out["disk"]
    assert "Reconfigurable" in deck.left_out["reconfig-race"]
    assert "left out: " in deck.describe() and "stopped-leader (" in deck.describe()


def test_hosts_without_declared_fuse_play_the_disk_script_without_its_power_cuts() -> None:
    from harness.dbs import get_db

    deck = deck_for(get_db("dledger", {}), _hosts(fuse=False))
    assert "disk" in deck.scripts and "disk" not in deck.left_out
    assert set(deck.dropped["disk"]) == {"lose-unfsynced", "torn-write"}
    torn = deck.dropped["disk"]["torn-write"]
    assert "FUSE" in torn and "n1" in torn
    assert "corrupt" in deck.faults and "lose-unfsynced" not in deck.faults


def test_clock_scripts_are_left_out_for_a_db_outside_libfaketime_on_faketime_hosts() -> None:
    deck = deck_for(_OutsideFaketime(), _hosts())
    assert "lease" in deck.left_out and "clock-split" in deck.left_out
    assert "libfaketime" in deck.left_out["lease"] and "clock" not in deck.faults


class _NoDataFiles(_KillableWithLeader):
    """Killable, with a footprint, but no ``data_files`` (as Redis, NATS, a YAML DB):
    ``corrupt`` has nothing to aim at, the lazy-fs faults do."""

    root = "/tmp/sb-none"

    def node_dir(self, ctx: Any, node: str) -> str:
        return f"{self.root}/{node}"

    def pidfiles(self, ctx: Any, node: str) -> list[str]:
        return []

    def ports(self, ctx: Any, node: str) -> list[int]:
        return []


def test_a_db_without_data_files_keeps_the_disk_script_less_corrupt_and_is_told_why() -> None:
    deck = deck_for(_NoDataFiles(), _hosts(), ("disk", "crash"))
    assert deck.scripts == ("disk", "crash") and not deck.left_out
    dropped = deck.dropped["disk"]
    assert list(dropped) == ["corrupt", "kill"]  # the refused kind first, then what served it
    assert "data_files" in dropped["corrupt"] and "_NoDataFiles" in dropped["corrupt"]
    assert "corrupt" in dropped["kill"]
    assert deck.faults == ("kill", "lose-unfsynced", "torn-write")  # crash still kills
    assert "disk without corrupt (corrupt needs a DB that declares" in deck.describe()
    assert Deck.from_json(deck.to_json()) == deck
    rec = deck_record(deck.to_json(), ["disk"])
    assert rec["dropped"] == {"disk": dropped} and rec["not_played"] == ["crash"]
    from harness.run.summary import verdict_line

    line = verdict_line({"valid": True, "run": {"ok": 1, "deck": rec}})
    assert "fault scripts played without some faults: disk (no corrupt, kill)" in line


def test_the_runner_plays_the_disk_script_without_what_its_deck_dropped() -> None:
    from harness.core.spec import TestSpec
    from harness.run.runner import build_package_for
    from nemesis.profiles import profile_steps

    deck = deck_for(_NoDataFiles(), _hosts(), ("disk",))
    spec = TestSpec(name="t", nodes=_Ctx.nodes, nemesis=deck.faults, seed=4,
                    options={"deck": deck.to_json()})  # fmt: skip
    schedule = build_package_for(spec).schedule
    played: list[str] = []
    while (got := schedule.next(_Ctx())) is not None:  # type: ignore[arg-type]
        op = got[1]
        assert not callable(op)  # the disk script's values are all drawn up front
        played.append(op.f)
        assert len(played) < 50
    assert played == [
        "start-lose-unfsynced", "stop-lose-unfsynced", "start-torn-write", "stop-torn-write"
    ]  # fmt: skip
    # what is kept is the whole script's steps less the dropped kinds', draws and all
    whole = profile_steps("disk", _Ctx.nodes, random.Random(1), 2.5)
    kept = profile_steps("disk", _Ctx.nodes, random.Random(1), 2.5, drop=("corrupt", "kill"))
    assert kept == [s for s in whole if s.f.split("-", 1)[1] not in ("corrupt", "kill")]
    assert len(kept) == 4 < len(whole)


def test_a_script_whose_every_part_is_refused_is_still_left_out_whole() -> None:
    deck = deck_for(_NoDataFiles(), _hosts(fuse=False), ("disk", "crash"))
    assert deck.scripts == ("crash",) and "disk" not in deck.dropped
    why = deck.left_out["disk"]
    assert "FUSE" in why and "data_files" in why  # each distinct reason, once
    assert why.count("FUSE") == 2  # lose-unfsynced and torn-write name their hosts
    assert deck.faults == ("kill",)


def test_a_script_not_made_of_parts_is_left_out_whole_by_one_refusal() -> None:
    deck = deck_for(_OutsideFaketime(), _hosts(), ("lease", "bridge"))
    assert deck.scripts == ("bridge",) and not deck.dropped  # lease is no leader partition
    assert "libfaketime" in deck.left_out["lease"]


def test_a_script_part_holds_only_kinds_the_script_plays_and_each_kind_once() -> None:
    from nemesis.profiles import SCRIPT_PARTS

    for name, parts in SCRIPT_PARTS.items():
        kinds = [k for p in parts for k in p]
        assert len(kinds) == len(set(kinds)), name
        assert set(kinds) <= set(script_faults(name, 5)), name


def test_a_db_without_a_leader_gets_a_note_and_nothing_left_only_for_that() -> None:
    deck = deck_for(_PartitionOnly(), _hosts())
    assert deck.scripts == ("lease", "bridge", "clock-split")  # partitions and clocks only
    assert any("HasPrimaries" in n for n in deck.notes)


def test_nothing_playable_is_an_error_naming_the_reasons() -> None:
    with pytest.raises(
        ConfigError, match=r"no fault script .*\(crash: kill needs a DB that declares Killable"
    ):
        deck_for(_PartitionOnly(), _hosts(), scripts=["crash"])


def test_a_recorded_deck_round_trips_and_a_run_says_what_it_played() -> None:
    deck = Deck(("lease", "crash", "bridge"), ("clock", "kill", "partition"), {"disk": "why"})
    assert Deck.from_json(deck.to_json()) == deck
    rec = deck_record(deck.to_json(), ["crash", "lease", "crash"])
    assert rec == {
        "played": ["crash", "lease"],
        "not_played": ["bridge"],
        "left_out": {"disk": "why"},
        "dropped": {},
    }
    with pytest.raises(ConfigError, match="deck"):
        Deck.from_json({"faults": []})


def test_leader_aimed_steps_hit_a_seeded_node_when_the_db_cannot_say() -> None:
    nodes = ["n1", "n2", "n3"]
    kill = aim_without_leader(start(0, "kill", {"target": "leader"}), nodes, random.Random(1))
    assert isinstance(kill.value, dict)
    assert kill.value["target"] == "one" and kill.value["nodes"][0] in nodes
    assert "no leader" in kill.value["aimed"]
    cut = aim_without_leader(start(0, "partition", {"shape": "leader"}), nodes, random.Random(1))
    assert isinstance(cut.value, dict)
    grudge = cut.value["grudge"]
    alone = [n for n in nodes if len(grudge.get(n, [])) == 2]
    assert len(alone) == 1  # one node cut off from both others
    built = aim_without_leader(start(0, "pause", lambda ctx: {"target": "leader"}), nodes,
                               random.Random(1))  # fmt: skip
    assert callable(built.value) and built.value(None)["target"] == "one"  # type: ignore[arg-type,index]
    waiting = aim_without_leader(start(0, "pause", lambda ctx: Retry(0.1)), nodes, random.Random(1))
    assert isinstance(waiting.value(None), Retry)  # type: ignore[misc,operator,arg-type]
    ready = {"target": "leader", "nodes": ["n2"]}
    assert aim_without_leader(start(0, "kill", ready), nodes, random.Random(1)).value == ready


class _Ctx:
    nodes = ("n1", "n2", "n3", "n4", "n5")
    db = _KillableWithLeader()


def test_one_pass_plays_every_script_once_then_ends_the_schedule() -> None:
    sch = ProfileSchedule(PROFILES, hold=2.5, rng=random.Random(3), shuffle=True, passes=1)
    assert sch.ends_load
    steps = 0
    while sch.next(_Ctx()) is not None:  # type: ignore[arg-type]
        steps += 1
        assert steps < 500
    assert sorted(sch.played) == sorted(PROFILES) and sch.next(_Ctx()) is None  # type: ignore[arg-type]
    cycling = ProfileSchedule(PROFILES, hold=2.5, rng=random.Random(3))
    assert not cycling.ends_load


def test_a_mode_that_cannot_change_membership_declares_it_and_loses_those_scripts() -> None:
    from harness.dbs import get_db

    deck = deck_for(get_db("dledger", {"mode": "ha"}), _hosts())
    assert "cannot change its membership" in deck.left_out["reconfig-race"]
    assert "membership" not in deck.faults and "crash" in deck.scripts
