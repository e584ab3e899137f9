"""The rolling upgrade's logic: which node goes next, the op's record, the schedule, the options.

Pure: a small in-memory stand-in for an Upgradable DB plays the classic group
(a master, slaves at offsets); the lab run and tests/node_impl/test_rolling_upgrade.py
do the real thing.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from harness.core.db import Upgradable
from harness.core.errors import ConfigError, NemesisError
from harness.core.history import Op
from harness.dbs import get_db
from harness.dbs.rolling import RollingUpgradeDB, upgrade_options
from nemesis.package import build_package, parse_faults
from nemesis.registry import registry
from nemesis.upgrade import Step, UpgradeNemesis, next_step

NODES = ("n1", "n2", "n3")


def ha(role: str, offset: int, *, sealed: bool = False, leader: str = "n1") -> dict:
    return {"mode": "ha", "role": role, "offset": offset, "sealed": sealed, "leader": leader}


def test_the_master_is_sealed_first() -> None:
    sts = {"n1": ha("master", 90), "n2": ha("slave", 90), "n3": ha("slave", 80)}
    assert next_step(NODES, frozenset(), sts) == Step("seal", "n1")


def test_a_slave_holding_the_whole_sealed_log_goes_next_the_lowest_name_first() -> None:
    sts = {"n1": ha("master", 90, sealed=True), "n2": ha("slave", 80), "n3": ha("slave", 90)}
    assert next_step(NODES, frozenset(), sts) == Step("switch", "n3")
    sts["n2"] = ha("slave", 90)
    assert next_step(NODES, frozenset(), sts) == Step("switch", "n2")


def test_no_slave_caught_up_means_wait_and_the_master_never_goes_before_its_slaves() -> None:
    sts: dict[str, dict | None] = {
        "n1": ha("master", 90, sealed=True),
        "n2": {"mode": "broker", "role": "follower"},
        "n3": ha("slave", 40),
    }
    step = next_step(NODES, frozenset({"n2"}), sts)
    assert step.action == "wait" and "n3" in step.why
    sts["n3"] = None  # a dead or paused slave: it may be behind, so the master waits too
    assert next_step(NODES, frozenset({"n2"}), sts).action == "wait"
    sts["n3"] = ha("slave", 90)
    assert next_step(NODES, frozenset({"n2"}), sts) == Step("switch", "n3")
    assert next_step(NODES, frozenset({"n2", "n3"}), sts) == Step("switch", "n1")
    assert next_step(NODES, frozenset(NODES), sts) == Step("done")


def test_a_silent_master_is_found_through_its_slaves_and_waited_for() -> None:
    sts = {"n1": None, "n2": ha("slave", 90), "n3": ha("slave", 90)}
    assert next_step(NODES, frozenset(), sts) == Step(
        "wait", "n1", "the ha master n1 does not answer"
    )
    last = next_step(NODES, frozenset({"n2", "n3"}), {"n1": None})
    assert last.action == "wait" and last.node == "n1"


class FakeGroup:
    """A classic group in memory: n1 the master at ``end``, slaves at their offsets."""

    def __init__(self, offsets: dict[str, int], end: int = 90) -> None:
        self.end, self.offsets = end, offsets
        self.sealed = False
        self.switched: list[str] = []
        self.fail_switch: str | None = None

    def statuses(self, ctx: Any) -> dict[str, dict | None]:
        out: dict[str, dict | None] = {}
        for n in NODES:
            if n in self.switched:
                out[n] = {"mode": "broker", "role": "follower", "dividedCommitlogOffset": self.end}
            elif n == "n1":
                out[n] = ha("master", self.end, sealed=self.sealed)
            else:
                out[n] = ha("slave", self.offsets[n])
        return out

    def upgraded(self, ctx: Any) -> frozenset[str]:
        return frozenset(self.switched)

    def seal(self, ctx: Any, node: str) -> None:
        assert node == "n1"
        self.sealed = True

    def switch(self, ctx: Any, node: str) -> int:
        self.switched.append(node)
        if node == self.fail_switch:
            raise RuntimeError("did not come back")
        return self.end


class ListJournal:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def note(self, node: str, kind: str, key: str, undo: Any, what: str = "") -> None:
        self.events.append(("note", node, kind))

    def clear(self, node: str, kind: str, key: str) -> None:
        self.events.append(("clear", node, kind))


def _ctx(db: FakeGroup) -> Any:
    return SimpleNamespace(nodes=list(NODES), db=db, journal=ListJournal(), hosts={})


def _op(f: str, value: Any = None) -> Op:
    return Op(type="invoke", process="nemesis", f=f, value=value)


def test_start_upgrade_seals_then_switches_one_node_journaled_around_the_switch() -> None:
    db = FakeGroup({"n2": 90, "n3": 90})
    assert isinstance(db, Upgradable)
    ctx = _ctx(db)
    nem = UpgradeNemesis(wait_s=0.05)
    done = nem.invoke(ctx, _op("start-upgrade", {}))
    assert done.type == "info" and done.error is None
    assert done.value == {
        "nodes": ["n2"],
        "divided": {"n2": 90},
        "upgraded": ["n2"],
        "remaining": ["n1", "n3"],
    }
    assert db.sealed and ctx.journal.events == [
        ("note", "n2", "upgrade"),
        ("clear", "n2", "upgrade"),
    ]
    mid = nem.invoke(ctx, _op("stop-upgrade"))  # mid-run: nothing is undone or done
    assert mid.value == {"nodes": [], "upgraded": ["n2"]} and db.switched == ["n2"]
    final = nem.invoke(ctx, _op("stop-upgrade", {"complete": True}))
    assert final.value["nodes"] == ["n3", "n1"] and final.value["remaining"] == []
    assert nem.invoke(ctx, _op("start-upgrade", {})).value["nodes"] == []  # nothing left


def test_a_step_that_cannot_go_ahead_changes_nothing_and_says_why() -> None:
    db = FakeGroup({"n2": 10, "n3": 20})
    out = UpgradeNemesis(wait_s=0.05).invoke(_ctx(db), _op("start-upgrade", {}))
    assert out.value["nodes"] == [] and db.switched == []
    assert out.error is not None and "nothing switched" in out.error


def test_a_failed_switch_keeps_its_journal_entry_until_teardown() -> None:
    db = FakeGroup({"n2": 90, "n3": 90})
    db.fail_switch = "n2"
    ctx = _ctx(db)
    nem = UpgradeNemesis(wait_s=0.05)
    out = nem.invoke(ctx, _op("start-upgrade", {}))
    assert out.error is not None and "n2: RuntimeError" in out.error
    assert ctx.journal.events == [("note", "n2", "upgrade")]
    nem.teardown(ctx)  # the node is a broker whatever happens; the DB teardown wipes it next
    assert ctx.journal.events[-1] == ("clear", "n2", "upgrade")


def test_the_upgrade_needs_an_upgradable_db() -> None:
    with pytest.raises(NemesisError, match="mode=broker"):
        UpgradeNemesis().setup(SimpleNamespace(db=object()))  # type: ignore[arg-type]


def test_upgrade_is_a_cluster_fault_first_until_each_node_had_a_step_completed_at_heal() -> None:
    assert "upgrade" in registry().kinds(targets="cluster") and parse_faults(["kill", "upgrade"])[
        0
    ] == [
        "kill",
        "upgrade",
    ]
    pkg = build_package(
        ["partition", "kill", "upgrade"], interval=1, rng=random.Random(3), overlap=2
    )
    ctx = SimpleNamespace(nodes=list(NODES), db=None)
    starts = []
    for _ in range(60):
        nxt = pkg.schedule.next(ctx)
        assert nxt is not None
        if nxt[1].f.startswith("start-"):
            starts.append(nxt[1].f)
    ups = [i for i, f in enumerate(starts) if f == "start-upgrade"]
    # first until each node had a step (the switch happens early, under load), then
    # never again: the rest of the run belongs to the new mode's faults (the final heal
    # completes a step that could not go ahead)
    assert ups == list(range(len(NODES)))
    assert len(starts) > 2 * len(NODES)
    one = build_package(["partition", "kill", "upgrade"], interval=1, rng=random.Random(3))
    seq = []
    while len(seq) < 2 * len(NODES):
        nxt = one.schedule.next(ctx)
        assert nxt is not None
        if nxt[1].f.startswith("start-"):
            seq.append(nxt[1].f == "start-upgrade")
    # one fault at a time: the steps alternate with other faults, which land between them
    assert seq == [True, False] * len(NODES)
    pkg = build_package(
        ["partition", "kill", "upgrade"], interval=1, rng=random.Random(3), overlap=2
    )
    final = pkg.final_ops[-1]
    assert final.f == "stop-upgrade" and final.value == {"complete": True}


def test_run_options_start_a_broker_cluster_in_mode_ha_under_the_upgrade() -> None:
    opts = upgrade_options("dledger", True, {"mode": "broker"})
    assert opts == {"mode": "broker", "upgrade_from": "ha"}
    assert upgrade_options("dledger", False, {"mode": "broker"}) == {"mode": "broker"}
    assert upgrade_options("etcd", True, {}) == {}
    db = get_db("dledger", {**opts, "root": "/tmp/x"})
    assert isinstance(db, RollingUpgradeDB) and isinstance(db, Upgradable) and db.sync
    with pytest.raises(ConfigError, match="upgrade_from"):
        get_db("dledger", {"mode": "broker", "upgrade_from": "dledger", "root": "/tmp/x"})


def test_each_mode_gets_only_its_own_seeded_bugs() -> None:
    db = RollingUpgradeDB(root="/tmp/x", bug="broker-divided-from-start")
    ctx: Any = SimpleNamespace(spec=SimpleNamespace(bug=None))
    assert db._bug_for(ctx, "n1") is None
    db.switched.add("n1")
    assert db._bug_for(ctx, "n1") == "broker-divided-from-start"
