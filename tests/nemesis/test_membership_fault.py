"""The membership fault without a cluster: its draw, its registration, its variants and heal
against an in-memory Reconfigurable DB, and the membership motifs."""

from __future__ import annotations

import random
import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from harness.core.db import Members, Reconfigurable, TransfersLeadership
from harness.core.errors import NemesisError
from harness.core.fault import Draw
from harness.core.history import NEMESIS, Op
from nemesis import registry
from nemesis.membership import MEMBERSHIP, VARIANTS, MembershipNemesis, draw_membership, usable
from nemesis.motifs import (
    MEMBERSHIP_MOTIF_KINDS,
    MEMBERSHIP_MOTIFS,
    MOTIFS,
    motif_steps,
)
from nemesis.package import build_package

NODES = ["n1", "n2", "n3", "n4", "n5"]


def _draw(seed: int, nodes: list[str] = NODES, **kw: Any) -> dict[str, Any]:
    d = Draw(rng=random.Random(seed), nodes=list(nodes), leader_ok=True, interval=2.5)
    for k, v in kw.items():
        setattr(d, k, v)
    return draw_membership(d)


def test_every_variant_is_drawn_the_race_most_and_a_seed_replays() -> None:
    seen = Counter(_draw(s)["variant"] for s in range(300))
    assert set(seen) == set(VARIANTS)
    assert seen["race"] == max(seen.values())
    assert _draw(7) == _draw(7)
    assert any(_draw(7) != _draw(s) for s in range(8, 14))


def test_a_draw_ranks_every_node_and_holds_for_part_of_the_interval() -> None:
    for s in range(50):
        v = _draw(s)
        assert sorted(v["order"]) == NODES
        assert 0.6 * 2.5 <= v["hold"] <= 1.0 * 2.5
        if v["variant"] == "partitioned":
            assert v["leader_side"] in ("majority", "minority")


def test_aliases_select_one_variant_and_small_clusters_lose_the_ones_they_cannot_play() -> None:
    assert {_draw(s, variants=("transfer",))["variant"] for s in range(20)} == {"transfer"}
    three = {_draw(s, nodes=NODES[:3])["variant"] for s in range(200)}
    assert "race" not in three and "double" not in three and "remove-add" in three
    assert not usable("remove-add", 2) and usable("race", 4) and not usable("race", 3)
    no_leader = Draw(rng=random.Random(1), nodes=NODES, leader_ok=False, interval=2.5)
    assert {draw_membership(no_leader)["variant"] for _ in range(50)} <= {"remove-add", "double"}
    with pytest.raises(NemesisError, match="would do nothing on 2 nodes"):
        MEMBERSHIP.check_usable(("race", "double"), 2)


def test_registered_healed_after_kills_and_before_lulls_with_a_journal_kind() -> None:
    reg = registry.registry()
    assert reg.by_name["membership-race"] is reg.faults["membership"]
    order = reg.heal_order
    assert order.index("partition") < order.index("kill") < order.index("membership")
    assert order.index("membership") < order.index("lull")
    assert "membership" in reg.journal
    pkg = build_package(["membership", "partition", "kill"], interval=2.5, rng=random.Random(3))
    assert [op.f for op in pkg.final_ops][-1] == "stop-membership"


class FakeCluster:
    """An in-memory Reconfigurable DB: a voter map, a leader, and a log of what was asked."""

    def __init__(self, nodes: list[str], leader: str = "n1") -> None:
        self.nodes = list(nodes)
        self.voters = {n: n for n in nodes}
        self.lead = leader
        self.gen: Counter[str] = Counter()
        self.running = set(nodes)
        self.asked: list[tuple[str, str]] = []

    def primaries(self, ctx: Any) -> list[str]:
        return [self.lead] if self.lead in self.voters else []

    def members(self, ctx: Any, via: str | None = None) -> Members:
        if via is not None and via not in self.running:
            raise NemesisError(f"{via}: connection refused")
        lead = self.lead if self.lead in self.voters else None
        return Members(voters=dict(self.voters), leader=lead, asked=via or lead)

    def remove_member(
        self, ctx: Any, node: str, *, via: str | None = None, wait: bool = True
    ) -> Members:
        self.asked.append(("remove", node))
        self.voters.pop(node, None)
        if node == self.lead:
            self.lead = next(iter(self.voters))
        if wait:
            self.running.discard(node)
        return self.members(ctx)

    def add_member(self, ctx: Any, node: str) -> Members:
        self.asked.append(("add", node))
        if node in self.voters:
            raise NemesisError(f"{node} is already a voter")
        self.gen[node] += 1
        self.voters[node] = f"{node}.{self.gen[node]}"
        self.running.add(node)
        return self.members(ctx)

    def transfer_leader(self, ctx: Any, node: str) -> dict[str, Any]:
        self.asked.append(("transfer", node))
        self.lead = node
        return {"code": "SUCCESS", "leader": node}

    def kill(self, ctx: Any, node: str) -> None:
        self.running.discard(node)

    def start(self, ctx: Any, node: str) -> None:
        self.running.add(node)


def _ctx(db: Any) -> Any:
    return SimpleNamespace(
        nodes=list(NODES), db=db, rng=random.Random(0), journal=None, stop=threading.Event()
    )


def _op(f: str, value: Any = None) -> Op:
    return Op(type="invoke", process=NEMESIS, f=f, value=value)


def _start(nem: MembershipNemesis, ctx: Any, variant: str, **extra: Any) -> Op:
    value = {"variant": variant, "order": ["n3", "n1", "n4", "n2", "n5"], "hold": 0.01, **extra}
    return nem.invoke(ctx, _op("start-membership", value))


def test_the_fake_declares_the_capability() -> None:
    assert isinstance(FakeCluster(NODES), Reconfigurable)
    assert isinstance(FakeCluster(NODES), TransfersLeadership)


def test_a_db_without_the_capability_is_refused_at_setup_naming_it() -> None:
    class Plain:
        def setup(self, ctx: Any, node: str) -> None: ...

    with pytest.raises(NemesisError, match="Plain cannot"):
        MembershipNemesis().setup(_ctx(Plain()))


def test_remove_add_records_the_change_and_the_configuration_after_it() -> None:
    db = FakeCluster(NODES)
    nem = MembershipNemesis()
    done = _start(nem, _ctx(db), "remove-add")
    assert done.type == "info" and done.error is None
    changes = done.value["changes"]
    # the first follower of the ranking (n1 leads), removed then added back wiped
    assert [(c["op"], c["node"], c["ok"]) for c in changes] == [
        ("remove", "n3", True),
        ("add", "n3", True),
    ]
    assert changes[0]["id"] == "n3" and "n3" not in changes[0]["members"]["voters"]
    assert changes[1]["id"] == "n3.1" and changes[1]["members"]["voters"]["n3"] == "n3.1"
    assert done.value["members"]["voters"]["n3"] == "n3.1" and done.value["out"] == []


def test_remove_leader_stays_out_until_the_heal_restores_every_node() -> None:
    db = FakeCluster(NODES)
    nem = MembershipNemesis()
    ctx = _ctx(db)
    done = _start(nem, ctx, "remove-leader")
    assert done.value["leader"] == "n1" and done.value["out"] == ["n1"]
    assert "n1" not in db.voters and "n1" not in db.running
    healed = nem.invoke(ctx, _op("stop-membership"))
    assert healed.value["restored"] is True and healed.error is None
    assert set(healed.value["members"]["voters"]) == set(NODES)
    assert [c["node"] for c in healed.value["changes"]] == ["n1"]
    assert db.voters["n1"] == "n1.1" and nem.out == set()


def test_double_sends_the_second_removal_before_waiting_for_the_first() -> None:
    db = FakeCluster(NODES)
    nem = MembershipNemesis()
    done = _start(nem, _ctx(db), "double")
    assert [c["op"] for c in done.value["changes"]] == ["remove-request", "remove", "remove"]
    assert [c["node"] for c in done.value["changes"]] == ["n3", "n4", "n3"]
    assert sorted(done.value["out"]) == ["n3", "n4"]


def test_transfer_makes_a_follower_lag_by_a_kill_without_partitions_then_hands_over() -> None:
    db = FakeCluster(NODES)
    nem = MembershipNemesis()
    done = _start(nem, _ctx(db), "transfer")
    assert done.value["target"] == "n3" and done.value["lag"] == "kill"
    assert db.asked == [("transfer", "n3")] and db.lead == "n3" and "n3" in db.running
    assert done.value["changes"][0]["result"]["code"] == "SUCCESS"
    # asked once the restarted target followed the leader; no promise declared, none recorded
    assert isinstance(done.value["back_s"], float) and "promise" not in done.value


def test_transfer_waits_for_the_restarted_target_and_records_the_declared_promise() -> None:
    """The transfer is asked only once the target answers and names the leader (a process
    still starting cannot take a TimeoutNow, so every DB would keep its leader), and a
    DB declaring ``transfer_hands_over`` gets its promise recorded for the checker."""

    class Slow(FakeCluster):
        transfer_hands_over = True

        def __init__(self, nodes: list[str]) -> None:
            super().__init__(nodes)
            self.asks = 0

        def members(self, ctx: Any, via: str | None = None) -> Members:
            if via is not None:
                self.asks += 1
                if self.asks < 4:  # starting, then up but following no one yet
                    if self.asks < 2:
                        raise NemesisError(f"{via}: connection refused")
                    return Members(voters=dict(self.voters), leader=None, asked=via)
            return super().members(ctx, via)

    db = Slow(NODES)
    done = _start(MembershipNemesis(), _ctx(db), "transfer")
    assert db.asks == 4 and done.value["back_s"] >= 0.1  # three polls 0.05 s apart
    assert done.value["promise"] == "hands-over"
    assert db.asked == [("transfer", "n3")]


@pytest.mark.parametrize("variant", ["partitioned", "race"])
def test_cutting_variants_without_the_partition_fault_say_so_and_change_nothing(
    variant: str,
) -> None:
    db = FakeCluster(NODES)
    done = _start(MembershipNemesis(), _ctx(db), variant)
    assert "needs the partition fault" in (done.error or "")
    assert db.asked == [] and done.value["changes"] == []


def test_a_failed_change_is_recorded_with_the_configuration_seen_after_it() -> None:
    db = FakeCluster(NODES)
    nem = MembershipNemesis()
    ctx = _ctx(db)
    db.voters["n3"] = "n3.7"  # already back: the add is refused
    nem.out = {"n3"}
    changes: list[dict[str, Any]] = []
    ok = nem._add(ctx, changes, "n3")
    assert not ok and changes[0]["ok"] is False and "already a voter" in changes[0]["error"]
    assert changes[0]["members"]["voters"]["n3"] == "n3.7"


@pytest.mark.parametrize("name", MEMBERSHIP_MOTIFS)
@pytest.mark.parametrize("seed", range(8))
def test_membership_motifs_heal_what_they_start_and_replay(name: str, seed: int) -> None:
    steps = motif_steps(name, NODES, random.Random(seed), 2.5)
    fs = [s.f for s in steps]
    kinds = {f.split("-", 1)[1] for f in fs}
    assert kinds <= MEMBERSHIP_MOTIF_KINDS
    for kind in kinds:
        assert max(i for i, f in enumerate(fs) if f == f"stop-{kind}") > max(
            i for i, f in enumerate(fs) if f == f"start-{kind}"
        )
    change = next(s.value for s in steps if s.f == "start-membership")
    assert isinstance(change, dict) and sorted(change["order"]) == NODES
    again = motif_steps(name, NODES, random.Random(seed), 2.5)
    assert [(s.wait, s.f, s.value) for s in again] == [(s.wait, s.f, s.value) for s in steps]
    if name == "reconfig-partition":
        assert fs.index("start-partition") < fs.index("start-membership")
        assert fs.index("start-membership") < fs.index("stop-partition")


class _Leading:
    """A DB that reports its leader and nothing more."""

    def primaries(self, ctx: Any) -> list[str]:
        return ["n1"]


def test_the_deck_adds_membership_motifs_only_for_a_reconfigurable_db() -> None:
    from harness.core.remote import Host
    from nemesis.deck import deck_for

    hosts = [Host(name=n, address="127.0.0.1") for n in NODES]
    kept = deck_for(FakeCluster(NODES), hosts, MOTIFS + MEMBERSHIP_MOTIFS)
    assert set(MEMBERSHIP_MOTIFS) <= set(kept.scripts)
    refused = deck_for(_Leading(), hosts, MOTIFS + MEMBERSHIP_MOTIFS)
    assert set(MEMBERSHIP_MOTIFS) <= set(refused.left_out)
    assert "Reconfigurable" in refused.left_out["reconfig-race"]


def test_linger_removes_a_follower_while_writes_are_held_and_leaves_it_running() -> None:
    from harness.core.traffic import WriteGate

    class Watched(FakeCluster):
        def remove_member(
            self, ctx: Any, node: str, *, via: str | None = None, wait: bool = True
        ) -> Members:
            self.held_at_removal = ctx.writes.lull
            return super().remove_member(ctx, node, via=via, wait=wait)

    db = Watched(NODES)
    nem = MembershipNemesis()
    ctx: Any = SimpleNamespace(**vars(_ctx(db)), writes=WriteGate())
    done = _start(nem, ctx, "linger")
    assert db.held_at_removal and not ctx.writes.lull  # held for the removal, then let go
    assert done.value["target"] == "n3" and done.value["writes"] == "held"
    assert [(c["op"], c["node"], c["ok"]) for c in done.value["changes"]] == [
        ("remove-request", "n3", True)
    ]
    assert done.value["committed"] and done.value["removed_led"] is False
    assert "n3" in db.running and "n3" not in db.voters and done.value["out"] == ["n3"]
    healed = nem.invoke(ctx, _op("stop-membership"))
    assert healed.value["restored"] and db.voters["n3"] == "n3.1"


class TransferOnly:
    """A DB that hands over leadership but cannot change its members (DLedger 0.x)."""

    def __init__(self, nodes: list[str]) -> None:
        self.lead = "n1"
        self.running = set(nodes)
        self.asked: list[tuple[str, str]] = []
        self.seen_asks = 0

    def setup(self, ctx: Any, node: str) -> None: ...

    def teardown(self, ctx: Any, node: str) -> None: ...

    def primaries(self, ctx: Any) -> list[str]:
        return [self.lead]

    def leader_seen_by(self, ctx: Any, node: str) -> str | None:
        self.seen_asks += 1
        return self.lead if node in self.running and self.seen_asks > 1 else None

    def transfer_leader(self, ctx: Any, node: str) -> dict[str, Any]:
        self.asked.append(("transfer", node))
        self.lead = node
        return {"from": "n1", "leader": node, "outcome": "handed-over"}

    def kill(self, ctx: Any, node: str) -> None:
        self.running.discard(node)

    def start(self, ctx: Any, node: str) -> None:
        self.running.add(node)


def test_a_db_that_only_transfers_plays_the_transfer_whatever_was_drawn() -> None:
    db = TransferOnly(NODES)
    assert isinstance(db, TransfersLeadership) and not isinstance(db, Reconfigurable)
    assert MEMBERSHIP.why_not(db, []) is None
    nem = MembershipNemesis()
    ctx = _ctx(db)
    nem.setup(ctx)
    done = _start(nem, ctx, "remove-add")
    assert done.error is None, done.error
    assert done.value["variant"] == "transfer" and done.value["drawn"] == "remove-add"
    assert done.value["lag"] == "kill" and done.value["target"] == "n3"
    assert db.asked == [("transfer", "n3")] and "n3" in db.running
    assert db.seen_asks >= 2 and isinstance(done.value["back_s"], float)
    assert done.value["changes"][0]["result"]["outcome"] == "handed-over"
    healed = nem.invoke(ctx, _op("stop-membership"))
    assert healed.error is None and healed.value["restored"] is True


def test_the_deck_plays_only_the_transfer_motif_for_a_db_that_only_transfers() -> None:
    from harness.core.remote import Host
    from nemesis.deck import deck_for

    hosts = [Host(name=n, address="127.0.0.1") for n in NODES]
    deck = deck_for(TransferOnly(NODES), hosts, MOTIFS + MEMBERSHIP_MOTIFS)
    assert "reconfig-transfer" in deck.scripts and "membership" in deck.faults
    for name in ("reconfig-partition", "reconfig-race", "reconfig-linger"):
        assert "Reconfigurable" in deck.left_out[name], deck.left_out
    refused = deck_for(_Leading(), hosts, MOTIFS + MEMBERSHIP_MOTIFS)
    assert "TransfersLeadership" in refused.left_out["reconfig-transfer"]
