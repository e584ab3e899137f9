"""schedule.json and its replay: extraction from a recorded history, role resolution and the
recorded schedule are pure; one quick real run checks a replay lands the recorded faults."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from harness.core.op import NEMESIS, Op
from harness.run.replay import Overrides, replay_spec
from harness.run.schedule_file import (
    LeaderTracker,
    extract_schedule,
    fault_nodes,
    partition_role,
    role_of,
)
from nemesis.recorded import (
    Event,
    RecordedSchedule,
    aim_leader,
    aim_roles,
    events_of,
    swap_nodes,
)
from nemesis.schedules import Retry

NODES = ["n1", "n2", "n3", "n4", "n5"]
S = 1_000_000_000


def test_role_of_relates_a_node_set_to_the_leader():
    assert role_of(["n3"], NODES, "n3") == "leader"
    assert role_of(["n1"], NODES, "n3") == "one-follower"
    assert role_of(["n1", "n3"], NODES, "n3") == "minority+leader"
    assert role_of(["n1", "n2"], NODES, "n3") == "minority-followers"
    assert role_of(["n1", "n2", "n3"], NODES, "n3") == "majority+leader"
    assert role_of(["n1", "n2", "n4"], NODES, "n3") == "majority-followers"
    assert role_of(NODES, NODES, "n3") == "all"
    assert role_of(["n1", "n2"], NODES, None) == "minority"
    assert role_of([], NODES, "n1") == "none"


def test_partition_role_is_where_the_cut_leaves_the_leader():
    alone = {"n3": ["n1", "n2", "n4", "n5"], **{n: ["n3"] for n in NODES if n != "n3"}}
    assert partition_role(alone, NODES, "n3") == "leader-isolated"
    assert partition_role(alone, NODES, "n1") == "leader-in-majority"
    halves = {
        "n1": ["n3", "n4", "n5"],
        "n2": ["n3", "n4", "n5"],
        "n3": ["n1", "n2"],
        "n4": ["n1", "n2"],
        "n5": ["n1", "n2"],
    }
    assert partition_role(halves, NODES, "n2") == "leader-in-minority"
    assert partition_role(halves, NODES, None) == "cut"


def test_leader_tracker_trusts_recent_samples_and_the_highest_term():
    t = LeaderTracker()
    sample = lambda time, node, role, term: Op(  # noqa: E731
        type="ok",
        process=1_000_000,
        f="sample",
        time=time,
        node=node,
        value={"role": role, "term": term},
    )
    t.feed(sample(1 * S, "n1", "leader", 1))
    assert t.leader(2 * S) == "n1"
    t.feed(sample(3 * S, "n2", "leader", 2))  # n1 isolated, has not noticed yet
    assert t.leader(3 * S) == "n2"
    assert t.leader(10 * S) is None  # every sample stale: nobody known to lead


def nem(t: float, typ: str, f: str, value: Any) -> Op:
    return Op(type=typ, process=NEMESIS, f=f, value=value, time=int(t * S))


def recorded_history() -> list[Op]:
    samples = [
        Op(
            type="ok",
            process=1_000_000 + i,
            f="sample",
            node=n,
            time=int(t * S),
            value={"role": "leader" if n == "n2" else "follower", "term": 1},
        )
        for t in (0.5, 6.5)
        for i, n in enumerate(NODES)
    ]
    return [
        Op(type="invoke", process=0, f="append", value={"payload": "a"}, time=0),
        *samples[:5],
        nem(2.0, "invoke", "start-kill", {"target": "leader"}),
        nem(2.3, "info", "start-kill", {"target": "leader", "nodes": ["n2"], "killed": ["n2"]}),
        nem(5.0, "invoke", "stop-kill", None),
        nem(5.2, "info", "stop-kill", {"nodes": ["n2"]}),
        *samples[5:],
        nem(7.0, "invoke", "start-pause", {"target": "minority", "nodes": ["n4", "n5"]}),
        nem(
            7.1,
            "info",
            "start-pause",
            {"target": "minority", "nodes": ["n4", "n5"], "paused": ["n4", "n5"]},
        ),
        nem(20.2, "invoke", "stop-pause", None),  # the final heal
        nem(20.3, "info", "stop-pause", {"nodes": ["n4", "n5"]}),
    ]


SPEC = {
    "name": "t",
    "nodes": NODES,
    "time_limit": 20.0,
    "rate": 50.0,
    "seed": 3,
    "nemesis": ["kill", "pause"],
    "nemesis_interval": 3.0,
    "db": "dledger",
    "workload": "append",
    "bug": "ack-before-quorum",
    "options": {},
}


def test_schedule_extraction_from_a_recorded_history():
    doc = extract_schedule(recorded_history(), SPEC)
    assert doc["version"] == 1 and doc["spec"]["bug"] == "ack-before-quorum"
    kill, pause = doc["faults"]
    assert (kill["kind"], kill["offset_s"], kill["duration_s"]) == ("kill", 2.0, 3.0)
    assert kill["healed_by"] == "stop" and kill["stop"]["offset_s"] == 5.0
    assert kill["nodes"] == ["n2"] and kill["target"] == "leader" and kill["role"] == "leader"
    assert kill["aim"] == "role"
    assert pause["role"] == "minority-followers" and pause["leader"] == "n2"
    # Stopped only by the final heal: no stop to replay, the heal ends it.
    assert pause["healed_by"] == "final" and pause["stop"] is None
    assert pause["duration_s"] == 13.2


def test_a_cut_short_history_still_gives_a_schedule():
    ops = recorded_history()[:-3]  # the harness died while the pause was in force
    doc = extract_schedule(ops, SPEC)
    assert [f["kind"] for f in doc["faults"]] == ["kill", "pause"]
    assert doc["faults"][1]["healed_by"] == "none" and doc["faults"][1]["duration_s"] is None


def test_fault_nodes_prefers_what_the_nemesis_did():
    assert fault_nodes({"target": "leader"}, {"nodes": ["n3"]}) == ["n3"]
    assert fault_nodes({"grudge": {"n1": ["n2"]}}, {"healed": []}) == ["n1", "n2"]


def test_swap_moves_a_fault_from_the_old_leader_to_the_new_one():
    v = {"target": "minority", "nodes": ["n1", "n2"], "grudge": {"n2": ["n3"], "n3": ["n2"]}}
    assert swap_nodes(v, "n2", "n4") == {
        "target": "minority",
        "nodes": ["n1", "n4"],
        "grudge": {"n4": ["n3"], "n3": ["n4"]},
    }
    assert swap_nodes(v, "n2", "n2") == v


def test_aim_leader_keeps_a_permutation_that_maps_the_recorded_leader_to_todays():
    m: dict[str, str] = {}
    aim_leader(m, "n2", "n5")
    assert m == {"n2": "n5", "n5": "n2"}
    aim_leader(m, "n3", "n2")  # later, n3 led in the recording and n2 leads now
    assert m["n3"] == "n2" and sorted(m.values()) == sorted(m)
    aim_leader(m, "n3", "n2")  # already so: unchanged
    assert m["n3"] == "n2"


def test_a_fault_recorded_while_nobody_led_follows_the_earlier_renaming():
    """Figure 8: the majority killed around leader n2, then (nobody leading) n2's side
    paused: in a replay where n4 leads, the pause must hit n4's side, not the killed n2."""
    events = [
        Event(0.5, "start-kill", {"nodes": ["n1", "n3", "n4"]}, leader="n2"),
        Event(2.0, "start-pause", {"nodes": ["n2", "n5"]}, leader=None),
    ]
    ctx = Ctx(history=Clock(0.0), db=FakeDB(["n4"]))
    sched = RecordedSchedule(events, rng=random.Random(0))
    ops = []
    for _ in events:
        wait, planned = sched.next(ctx)
        ctx.history.t += wait
        ops.append(planned(ctx))
    assert ops[0].value["nodes"] == ["n1", "n3", "n2"]
    assert ops[1].value["nodes"] == ["n4", "n5"]


@dataclass
class Clock:
    t: float = 0.0

    def now(self) -> int:
        return int(self.t * S)


@dataclass
class FakeDB:
    leaders: list[str] = field(default_factory=list)

    def primaries(self, ctx: Any) -> list[str]:
        return list(self.leaders)


@dataclass
class Ctx:
    history: Clock
    db: FakeDB
    nodes: list[str] = field(default_factory=lambda: list(NODES))
    rng: random.Random = field(default_factory=lambda: random.Random(1))


def test_recorded_schedule_lands_at_the_offsets_and_aims_at_the_leader_now():
    doc = extract_schedule(recorded_history(), SPEC)
    events = events_of(doc["faults"], time_limit=20.0)
    assert [(e.offset_s, e.f) for e in events] == [
        (2.0, "start-kill"),
        (5.0, "stop-kill"),
        (7.0, "start-pause"),
    ]
    ctx = Ctx(history=Clock(100.0), db=FakeDB(["n5"]))
    sched = RecordedSchedule(events, rng=random.Random(0))
    wait, planned = sched.next(ctx)
    assert wait == 2.0
    ctx.history.t += wait
    op = planned(ctx)
    assert op.f == "start-kill" and op.value == {"target": "leader"}  # the nemesis resolves it
    wait, planned = sched.next(ctx)
    assert abs(wait - 3.0) < 1e-9
    ctx.history.t += wait + 0.5  # the kill took a while: the next wait is absolute
    assert planned(ctx).f == "stop-kill"
    wait, planned = sched.next(ctx)
    assert abs(wait - 1.5) < 1e-9
    ctx.history.t += wait
    # Recorded with n2 leading; n5 leads now: the pause of two followers must not hit n5.
    op = planned(ctx)
    assert op.value["nodes"] == ["n4", "n2"] and "n5" not in op.value["nodes"]
    assert sched.next(ctx) is None


def test_recorded_schedule_waits_for_a_leader_then_uses_the_recorded_nodes():
    ev = Event(1.0, "start-pause", {"target": "one", "nodes": ["n1"]}, leader="n2")
    ctx = Ctx(history=Clock(0.0), db=FakeDB([]))
    sched = RecordedSchedule([ev], rng=random.Random(0), leader_wait_s=1.0)
    wait, planned = sched.next(ctx)
    ctx.history.t += wait
    assert planned(ctx) is None  # nobody leads yet: put off
    assert isinstance(sched.aim(ctx, ev), Retry)
    ctx.history.t += 2.0
    wait, planned = sched.next(ctx)
    assert wait > 0
    op = planned(ctx)
    assert op is not None and op.value["nodes"] == ["n1"]


def test_aim_roles_moves_each_node_hit_onto_a_holder_of_its_role_now():
    mapping: dict[str, str] = {}
    # recorded: n1 hit as controller-leader, n4 as master; now n2 leads the controllers and
    # n5 is the master
    aim_roles(mapping, {"n1": "controller-leader", "n4": "master"},
              {"controller-leader": ["n2"], "master": ["n5"], "slave": ["n4"]})  # fmt: skip
    assert mapping.get("n1", "n1") == "n2" and mapping.get("n4", "n4") == "n5"
    assert sorted(mapping.get(n, n) for n in NODES) == sorted(NODES)  # still a permutation
    # an image that still holds its role stays; a role nobody holds keeps the image
    before = dict(mapping)
    aim_roles(mapping, {"n1": "controller-leader", "n3": "master"},
              {"controller-leader": ["n2", "n3"], "master": []})  # fmt: skip
    assert mapping == before
    # two nodes hit for one role never land on one holder
    mapping = {}
    aim_roles(mapping, {"n1": "controller", "n2": "controller"},
              {"controller": ["n3", "n4", "n5"]})  # fmt: skip
    assert {mapping["n1"], mapping["n2"]} <= {"n3", "n4", "n5"}
    assert mapping["n1"] != mapping["n2"]


@dataclass
class RolesFakeDB(FakeDB):
    now_roles: dict[str, list[str]] = field(default_factory=dict)

    def roles(self, ctx: Any) -> dict[str, list[str]]:
        return self.now_roles


def test_a_role_script_fault_is_replayed_on_whoever_holds_the_roles_now():
    """A recorded role-pairs kill of (controller-leader n1, master n4) replays onto today's
    holders, and a later recorded fault on n4 alone follows the renaming."""
    kill = {"nodes": ["n1", "n4"], "roles": ["controller-leader", "master"],
            "why": "role-pairs", "held": {"n1": "controller-leader", "n4": "master"}}  # fmt: skip
    events = [
        Event(1.0, "start-kill", kill),
        Event(2.0, "stop-kill", None),
        Event(3.0, "start-pause", {"target": "one", "nodes": ["n4"]}),
    ]
    db = RolesFakeDB(now_roles={"controller-leader": ["n3"], "master": ["n2"]})
    ctx = Ctx(history=Clock(0.0), db=db)  # type: ignore[arg-type]
    sched = RecordedSchedule(events, rng=random.Random(0))
    ops = []
    while (step := sched.next(ctx)) is not None:
        wait, planned = step
        ctx.history.t += wait
        ops.append(planned(ctx))
    assert ops[0].value["nodes"] == ["n3", "n2"]
    assert ops[0].value["held"] == {"n3": "controller-leader", "n2": "master"}
    assert ops[2].value["nodes"] == ["n2"]  # n4 was the master: the master now is n2


def test_replay_spec_applies_bug_none_and_db_options():
    doc = {"spec": SPEC}
    s = replay_spec(doc, Overrides(bug="none", db_options={"node_src": "/x"}), seed=9, name="r")
    assert s.bug is None and s.db_options == {"node_src": "/x"} and s.seed == 9
    s = replay_spec(doc, Overrides(time_limit=7.5, rate=10), seed=1, name="r")
    assert s.bug == "ack-before-quorum" and s.time_limit == 7.5 and s.rate == 10


def test_a_recorded_schedule_replays_onto_a_lab_run(lab, tmp_path):
    """A real run: the replayed history shows the recorded fault kinds at about their offsets."""
    from harness.run.replay import replay
    from harness.run.schedule_file import load_schedule

    spec = {
        **SPEC,
        "nodes": [h.name for h in lab.hosts()],
        "time_limit": 9.0,
        "bug": None,
        "rate": 20.0,
        "concurrency": 3,
    }
    doc = {
        "version": 1,
        "spec": spec,
        "faults": [
            {
                "id": 0,
                "kind": "kill",
                "f": "start-kill",
                "offset_s": 2.0,
                "duration_s": 2.0,
                "healed_by": "stop",
                "value": {"target": "leader"},
                "aim": "role",
                "leader": "n1",
                "stop": {"f": "stop-kill", "value": None, "offset_s": 4.0},
            },
            {
                "id": 1,
                "kind": "pause",
                "f": "start-pause",
                "offset_s": 5.5,
                "duration_s": 1.5,
                "healed_by": "stop",
                "value": {"target": "one", "nodes": ["n3"]},
                "aim": "nodes",
                "leader": None,
                "stop": {"f": "stop-pause", "value": None, "offset_s": 7.0},
            },
        ],
    }
    (out,) = replay(doc, lab.hosts(), times=1, store_root=tmp_path)
    again = load_schedule(out.store_dir)
    got = [(f["kind"], f["offset_s"], f["duration_s"]) for f in again["faults"]]
    assert [k for k, _, _ in got] == ["kill", "pause"]
    for (_, off, dur), want_off, want_dur in zip(got, (2.0, 5.5), (2.0, 1.5), strict=True):
        assert abs(off - want_off) < 1.0 and abs(dur - want_dur) < 1.0
    assert again["faults"][0]["role"] == "leader"  # the leader of the replay, whoever it was
    # The kill made the recorded leader n1 and the replay's leader swap places in the one
    # renaming the replay keeps, so the pause aimed at n3 lands on n1 when n3 was that leader.
    killed = again["faults"][0]["nodes"]
    assert again["faults"][1]["nodes"] == (["n1"] if killed == ["n3"] else ["n3"]), killed
