"""The role scripts (nemesis/role_motifs.py): which roles and pairs a DB's roles give, the
steps each script plays, whom each fault hits when it lands (roles asked again then), and
the deck adding them only for a DB that declares ``HasRoles``."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from harness.core.remote import Host
from harness.core.roles import HasRoles, roles_now
from nemesis.deck import deck_for, script_faults
from nemesis.profiles import ProfileSchedule
from nemesis.role_motifs import FALLBACK, NO_ROLES, ROLE_MOTIFS, role_steps
from nemesis.schedules import Step
from nemesis.targets import pick_in_role, role_aims

NODES = ["n1", "n2", "n3", "n4", "n5"]
# RocketMQ's controller mode on five hosts: three name servers with embedded controllers
ROCKET = {
    "controller-leader": ["n1"],
    "controller": ["n1", "n2", "n3"],
    "master": ["n4"],
    "slave": ["n5"],
    "namesrv": ["n1", "n2", "n3"],
}


class RolesDB:
    """Roles that can be changed between draws (a master moving)."""

    def __init__(self, roles: dict[str, list[str]]) -> None:
        self.now = roles
        self.asked = 0

    def setup(self, ctx: Any, node: str) -> None: ...

    def teardown(self, ctx: Any, node: str) -> None: ...

    def roles(self, ctx: Any) -> dict[str, list[str]]:
        self.asked += 1
        return self.now

    # killable and pausable, so the deck's kill and pause faults take it
    def kill(self, ctx: Any, node: str) -> None: ...

    def start(self, ctx: Any, node: str) -> None: ...

    def pause(self, ctx: Any, node: str) -> None: ...

    def resume(self, ctx: Any, node: str) -> None: ...


class PlainDB:
    def setup(self, ctx: Any, node: str) -> None: ...

    def teardown(self, ctx: Any, node: str) -> None: ...

    def kill(self, ctx: Any, node: str) -> None: ...

    def start(self, ctx: Any, node: str) -> None: ...

    def pause(self, ctx: Any, node: str) -> None: ...

    def resume(self, ctx: Any, node: str) -> None: ...


def _ctx(db: object) -> Any:
    return SimpleNamespace(db=db, nodes=list(NODES))


def _land(step: Step, ctx: Any) -> dict[str, Any]:
    """The value a step's builder gives when the fault lands."""
    assert callable(step.value), step
    got = step.value(ctx)
    assert isinstance(got, dict), got
    return got


def test_aims_dedupe_equal_roles_and_skip_nested_pairs() -> None:
    singles, pairs = role_aims(ROCKET)
    # the embedded controllers' name servers are the controllers again: one aim
    assert singles == ["controller-leader", "controller", "master", "slave"]
    assert ("controller-leader", "master") in pairs and ("master", "slave") in pairs
    assert ("controller-leader", "controller") not in pairs  # the leader is a controller
    assert len(pairs) == 5
    # nobody is master right now: the role stays, found when the fault lands
    assert role_aims({"master": [], "slave": ["n2"]}) == (
        ["master", "slave"],
        [("master", "slave")],
    )
    rng = random.Random(1)
    assert pick_in_role(["n4", "n5"], rng, avoid=["n4"]) == "n5"
    assert pick_in_role([], rng) is None


def test_roles_now_keeps_the_runs_nodes_in_order_and_survives_a_failure() -> None:
    db = RolesDB({"master": ["n9", "n3"], "slave": ["n5", "n2"]})
    assert isinstance(db, HasRoles) and not isinstance(PlainDB(), HasRoles)
    assert roles_now(db, _ctx(db)) == {"master": ["n3"], "slave": ["n2", "n5"]}

    class Broken(RolesDB):
        def roles(self, ctx: Any) -> dict[str, list[str]]:
            raise OSError("gateway down")

    assert roles_now(Broken({}), _ctx(None)) == {}
    assert roles_now(PlainDB(), _ctx(None)) == {}


def test_role_each_aims_every_fault_at_every_role_asked_when_it_lands() -> None:
    steps = role_steps("role-each", NODES, random.Random(3), 2.5, ROCKET)
    starts = [s for s in steps if s.f.startswith("start-")]
    assert [s.f for s in starts[:3]] == ["start-kill", "start-pause", "start-partition"]
    assert len(starts) == 4 * 3 and len(steps) == 2 * len(starts)  # each healed
    db = RolesDB(dict(ROCKET))
    ctx = _ctx(db)
    # the master moved between the draw and the landing: the fault follows the role
    db.now = {**ROCKET, "master": ["n5"], "slave": ["n4"]}
    master_kill = starts[6]  # the third role, master: kill
    assert master_kill.f == "start-kill"
    value = _land(master_kill, ctx)
    assert value == {
        "nodes": ["n5"],
        "role": "master",
        "why": "role-each",
        "held": {"n5": "master"},  # what a replay aims at
    }
    cut = _land(starts[8], ctx)
    assert cut["isolated"] == "n5" and set(cut["grudge"]["n5"]) == {"n1", "n2", "n3", "n4"}
    # nobody holds the role when it lands: the node it had at the draw, said so
    db.now = {**ROCKET, "master": []}
    value = _land(master_kill, ctx)
    assert value["nodes"] == ["n4"] and "stale" in value
    # nobody at the draw either: the role is still aimed at, a seeded node when it lands
    drawn = role_steps("role-each", NODES, random.Random(3), 2.5, {**ROCKET, "master": []})
    assert len([s for s in drawn if s.f.startswith("start-")]) == 4 * 3
    value = _land(drawn[12], _ctx(RolesDB({**ROCKET, "master": []})))
    assert value["role"] == "master" and "stale" in value and len(value["nodes"]) == 1


def test_role_pairs_hit_two_nodes_together_or_cut_them_apart() -> None:
    steps = role_steps("role-pairs", NODES, random.Random(5), 2.5, ROCKET)
    starts = [s for s in steps if s.f.startswith("start-")]
    assert len(starts) == 2 * 5
    assert {s.f for s in starts[0::2]} == {"start-kill"}
    assert {s.f for s in starts[1::2]} == {"start-partition"}
    ctx = _ctx(RolesDB(dict(ROCKET)))
    first = _land(starts[0], ctx)
    assert first["roles"] == ["controller-leader", "master"] and first["nodes"] == ["n1", "n4"]
    assert first["held"] == {"n1": "controller-leader", "n4": "master"}
    cuts = [_land(s, ctx) for s in starts[1::2]]
    shapes = {c["shape"] for c in cuts}
    assert shapes <= {"roles-together", "roles-apart"} and shapes
    for c in cuts:
        a, b = c["with"]
        if c["shape"] == "roles-apart":  # the two lose each other only
            assert c["grudge"] == {a: [b], b: [a]}
        else:  # the two keep each other and lose the rest
            assert b not in c["grudge"][a] and len(c["grudge"][a]) == 3


def test_no_roles_at_the_draw_plays_stand_ins_and_says_so() -> None:
    steps = role_steps("role-pairs", NODES, random.Random(0), 2.5, {})
    value = _land(steps[0], _ctx(RolesDB({})))
    assert value["aimed"] == FALLBACK and value["nodes"][0] == "n1"
    # the kinds the deck reads without a DB are the ones a real draw plays
    assert script_faults("role-each", 5) == ("kill", "partition", "pause")
    assert script_faults("role-pairs", 5) == ("kill", "partition")


def test_the_deck_adds_role_scripts_for_a_db_with_roles_only() -> None:
    hosts = [Host(name=n, address=f"127.0.0.{i + 1}") for i, n in enumerate(NODES)]
    with_roles = deck_for(RolesDB(dict(ROCKET)), hosts)
    assert set(ROLE_MOTIFS) <= set(with_roles.scripts), with_roles.left_out
    plain = deck_for(PlainDB(), hosts)
    assert not set(ROLE_MOTIFS) & set(plain.scripts) and not set(ROLE_MOTIFS) & set(
        plain.left_out
    )  # the others' decks are unchanged
    asked = deck_for(PlainDB(), hosts, ["rolling", *ROLE_MOTIFS])
    assert asked.left_out == {"role-each": NO_ROLES, "role-pairs": NO_ROLES}


def test_the_schedule_asks_the_roles_when_it_draws_a_role_script() -> None:
    db = RolesDB(dict(ROCKET))
    sched = ProfileSchedule(["role-pairs"], hold=2.5, rng=random.Random(2))
    steps = sched.more(_ctx(db))
    assert db.asked == 1 and len(steps) == 4 * 5
