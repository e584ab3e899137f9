"""The schedule is pure: same seed, same faults; starts and stops alternate; targets make sense."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nemesis.grudge as g
from harness.core.errors import ConfigError, NemesisError
from nemesis.package import FAULTS, build_package, parse_faults
from nemesis.targets import resolve, resolve_leader

NODES = ["n1", "n2", "n3", "n4", "n5"]
STOCK = {
    *("partition", "partition-halves", "partition-majority", "partition-ring"),
    *("partition-bridge", "partition-leader", "partition-random", "clock", "kill", "pause"),
    *("freeze", "loss", "delay", "duplicate", "reorder", "power", "vm-pause", "failover"),
    *("lull", "upgrade"),
}
"""The faults these tests know; other registered ones (disk faults, plugins) are left out."""
FAULTS_NO_FREEZE = tuple(f for f in FAULTS if f in STOCK and f != "freeze")  # excludes pause


class LeaderDB:
    def setup(self, ctx, node): ...
    def teardown(self, ctx, node): ...
    def primaries(self, ctx):
        return ["n2"]


def ctx(db=None, nodes=NODES):
    return SimpleNamespace(nodes=list(nodes), db=db, journal=None)


def run(faults, seed, n=20, db=None, nodes=NODES, **kw):
    pkg = build_package(faults, interval=2.0, rng=random.Random(seed), **kw)
    c = ctx(db, nodes)
    return [pkg.schedule.next(c) for _ in range(n)]


def test_unknown_fault_lists_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        build_package(["partition", "meteor"], interval=1, rng=random.Random(0))
    msg = str(e.value)
    assert "'meteor'" in msg and "partition-ring" in msg and "delay" in msg


def test_bad_target_and_interval() -> None:
    with pytest.raises(ConfigError, match="'moon'"):
        build_package(["kill"], interval=1, rng=random.Random(0), targets=["one", "moon"])
    with pytest.raises(ConfigError, match="interval"):
        build_package(["kill"], interval=0, rng=random.Random(0))


def test_freeze_is_a_pause_kind_exclusive_with_pause() -> None:
    pkg = build_package(["freeze"], interval=1, rng=random.Random(0))
    assert [o.f for o in pkg.final_ops] == ["stop-pause"]
    assert type(pkg.nemesis.nemeses[0]).__name__ == "HostFreezeNemesis"
    with pytest.raises(ConfigError, match="choose one"):
        build_package(["pause", "freeze"], interval=1, rng=random.Random(0))


def test_options_from_the_command_line() -> None:
    pkg = build_package(
        ["kill", "pause"],
        interval=1,
        rng=random.Random(0),
        targets="one,all",
        kill_targets="leader",
        max_ops=3,
    )
    assert pkg.schedule.targets == {"kill": ("leader",), "pause": ("one", "all")}
    steps = [pkg.schedule.next(ctx(LeaderDB())) for _ in range(4)]
    assert steps[3] is None
    with pytest.raises(ConfigError, match="unknown nemesis option.*colour") as e:
        build_package(["kill"], interval=1, rng=random.Random(0), colour="red")
    assert "kill_targets" in str(e.value) and "overlap" in str(e.value)  # the known keys
    with pytest.raises(ConfigError, match="'moon'"):
        build_package(["kill"], interval=1, rng=random.Random(0), kill_targets="moon")


def test_parse_faults_merges_partition_shapes() -> None:
    kinds, variants = parse_faults(["partition-ring", "kill", "partition-bridge", "partition-ring"])
    assert kinds == ["partition", "kill"]
    assert variants == {"partition": ("majorities-ring", "bridge")}


def test_final_ops_heal_every_enabled_kind_network_first() -> None:
    pkg = build_package(list(FAULTS_NO_FREEZE), interval=1, rng=random.Random(0))
    assert [o.f for o in pkg.final_ops] == [
        "stop-vm-pause",
        "stop-power",
        "stop-partition",
        "stop-loss",
        "stop-delay",
        "stop-duplicate",
        "stop-reorder",
        "stop-clock",
        "stop-pause",
        "stop-kill",
        "stop-failover",
        "stop-lull",
        "stop-upgrade",
    ]
    assert all(o.process == "nemesis" and o.type == "invoke" for o in pkg.final_ops)
    assert pkg.nemesis.fs() == {
        f"{p}-{k}"
        for k in (
            "partition",
            "clock",
            "kill",
            "pause",
            "loss",
            "delay",
            "duplicate",
            "reorder",
            "power",
            "vm-pause",
            "failover",
            "lull",
            "upgrade",
        )
        for p in ("start", "stop")
    }
    assert [o.f for o in build_package(["kill"], interval=1, rng=random.Random(0)).final_ops] == [
        "stop-kill"
    ]


def test_no_faults_no_schedule() -> None:
    pkg = build_package([], interval=1, rng=random.Random(0))
    assert pkg.schedule.next(ctx()) is None and pkg.final_ops == []


@given(st.integers(0, 2**32), st.lists(st.sampled_from(FAULTS_NO_FREEZE), min_size=1, max_size=4))
def test_same_seed_same_schedule(seed: int, faults: list[str]) -> None:
    assert run(faults, seed, db=LeaderDB()) == run(faults, seed, db=LeaderDB())


@given(st.integers(0, 2**32), st.lists(st.sampled_from(FAULTS_NO_FREEZE), min_size=1, max_size=5))
def test_starts_and_stops_alternate_and_match(seed: int, faults: list[str]) -> None:
    steps = run(faults, seed, n=16, db=LeaderDB())
    fs = [op.f for _, op in steps]
    for start, stop in zip(fs[::2], fs[1::2], strict=True):
        assert start.startswith("start-") and stop == "stop-" + start.removeprefix("start-")
    assert all(1.0 <= wait <= 3.0 for wait, _ in steps)  # interval 2 s, jittered ±50%


@given(
    st.integers(0, 2**32),
    st.lists(st.sampled_from(FAULTS_NO_FREEZE), min_size=1, max_size=5),
    st.integers(1, 4),
)
def test_overlap_bounds_the_active_faults_and_every_stop_ends_an_active_one(
    seed: int, faults: list[str], overlap: int
) -> None:
    steps = run(faults, seed, n=60, db=LeaderDB(), overlap=overlap)
    kinds = set(parse_faults(faults)[0])
    active: set[str] = set()
    most = 0
    for _, op in steps:
        verb, kind = op.f.split("-", 1)
        assert kind in kinds
        if verb == "start":
            assert kind not in active, "a kind already active was started again"
            active.add(kind)
        else:
            assert kind in active, "a stop for a fault that is not active"
            active.remove(kind)
        most = max(most, len(active))
        assert len(active) <= overlap
    if overlap > 1 and len(kinds) > 1:
        assert most > 1, "faults never overlapped in 60 steps"


def test_overlap_one_is_the_plain_alternation_and_bad_values_are_refused() -> None:
    assert run(["partition", "kill", "clock"], 9) == run(
        ["partition", "kill", "clock"], 9, overlap=1
    )
    for bad in (0, -1, "two", True):
        with pytest.raises(ConfigError, match="overlap"):
            build_package(["kill"], interval=1, rng=random.Random(0), overlap=bad)
    # the command line gives strings: coerced by the schema, as every role's options are
    assert (
        build_package(["kill"], interval=1, rng=random.Random(0), overlap="2").schedule.overlap == 2
    )


@given(st.integers(0, 2**32))
def test_partition_ops_carry_symmetric_grudges_over_the_nodes(seed: int) -> None:
    for _, op in run(["partition"], seed, n=10):
        if op.f == "start-partition":
            assert op.value["shape"] != "leader"  # the DB reports no primaries
            gr = g.grudge_from_json(op.value["grudge"])
            assert set(gr) == set(NODES) and g.is_symmetric(gr)


def test_leader_targets_stay_symbolic_and_need_primaries() -> None:
    ops = [
        op
        for _, op in run(["partition-leader", "kill"], 7, n=40, db=LeaderDB(), targets=["leader"])
    ]
    starts = [op for op in ops if op.f.startswith("start-")]
    assert {op.f for op in starts} == {"start-partition", "start-kill"}
    assert all(op.value in ({"shape": "leader"}, {"target": "leader"}) for op in starts)
    with pytest.raises(NemesisError, match="primaries"):
        run(["partition-leader"], 7, n=1)


def test_fault_parameters_are_in_range() -> None:
    ops = [op for _, op in run(["clock", "loss", "delay"], 11, n=200) if op.f.startswith("start-")]
    modes = {op.value["mode"] for op in ops if op.f == "start-clock"}
    assert modes == {"bump", "strobe"}
    for op in ops:
        v = op.value
        assert set(v["nodes"]) <= set(NODES) and v["nodes"]
        if op.f == "start-loss":
            assert 0 < v["probability"] < 1
        if op.f == "start-delay":
            assert 0 <= v["jitter_ms"] <= v["delay_ms"]
        if op.f == "start-clock" and v["mode"] == "bump":
            assert 1 <= abs(v["offset_ms"]) <= 450_000


@given(st.integers(0, 2**32), st.integers(1, 9))
def test_targets_sizes(seed: int, n: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rng = random.Random(seed)
    assert len(resolve("one", nodes, rng)) == 1
    assert len(resolve("minority", nodes, rng)) == max(1, (n - 1) // 2)
    maj = resolve("majority", nodes, rng)
    assert len(maj) == n // 2 + 1 and maj == [x for x in nodes if x in maj]
    assert resolve("all", nodes, rng) == nodes
    assert 1 <= len(resolve("random", nodes, rng)) <= n


def test_resolve_errors_and_leader() -> None:
    with pytest.raises(ValueError, match="unknown target"):
        resolve("moon", NODES, random.Random(0))
    assert resolve_leader([], NODES, random.Random(0)) == []
    assert resolve_leader(["n9", "n3"], NODES, random.Random(0)) == ["n3"]


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_partition_never_draws_a_shape_that_cuts_nothing(n: int) -> None:
    """issue 25: majorities-ring on 3 nodes was drawn and recorded with an empty grudge."""
    nodes = NODES[:n]
    shapes = set()
    for seed in range(30):
        for _, op in run(["partition"], seed, n=20, db=LeaderDB(), nodes=nodes):
            if op.f == "start-partition" and op.value["shape"] != "leader":
                shapes.add(op.value["shape"])
                assert any(op.value["grudge"].values()), op.value
    expected = {s for s, k in g.MIN_NODES.items() if k <= n and s != "leader"}
    assert shapes == expected


def test_a_partition_shape_that_cannot_cut_is_refused_before_the_run() -> None:
    pkg = build_package(["partition-ring"], interval=1, rng=random.Random(0))
    with pytest.raises(NemesisError, match="majorities-ring would do nothing on 3 nodes"):
        pkg.schedule.next(ctx(nodes=NODES[:3]))
    with pytest.raises(NemesisError, match="majorities-ring would do nothing on 3 nodes"):
        pkg.nemesis.setup(ctx(nodes=NODES[:3]))  # type: ignore[arg-type]


def test_a_hand_written_shape_that_cuts_nothing_is_not_recorded_as_done() -> None:
    from harness.core.history import Op
    from nemesis.net import PartitionNemesis

    c = SimpleNamespace(nodes=NODES[:3], rng=random.Random(0), journal=None, hosts={})
    op = Op(
        type="invoke", process="nemesis", f="start-partition", value={"shape": "majorities-ring"}
    )
    done = PartitionNemesis().invoke(c, op)  # type: ignore[arg-type]
    assert done.value == {"shape": "majorities-ring", "grudge": {}}
    assert "cuts nothing on 3 nodes" in (done.error or "")


def test_heal_ops_refuse_a_kind_no_fault_registers() -> None:
    from nemesis.schedules import heal_ops

    with pytest.raises(NemesisError, match="no registered fault heals meteor"):
        heal_ops(["kill", "meteor"])


def test_hyphenated_fault_options_arrive_as_the_command_line_spells_them() -> None:
    """`--nemesis-option lose-unfsynced_targets=all` reaches the package as
    `lose_unfsynced_targets` (the CLI folds `-` into `_` in every key); both spellings
    must select the fault's own option, and a misspelt one must still be refused."""
    import random

    from harness.core.errors import ConfigError
    from nemesis.package import build_package

    for key in ("lose_unfsynced_targets", "lose-unfsynced_targets"):
        build_package(["lose-unfsynced"], interval=2, rng=random.Random(1), **{key: "all"})
    with pytest.raises(ConfigError, match="lose_unfsynced_targetz"):
        build_package(
            ["lose-unfsynced"], interval=2, rng=random.Random(1), lose_unfsynced_targetz="all"
        )


def test_a_plugin_fault_declared_rolling_is_started_first_one_step_per_node() -> None:
    """The schedule knows the upgrade by ``Fault.rolling``, not by name: a plugin's rolling
    change gets one start per node, early, alternating with the others one at a time."""
    from harness.core.fault import Fault, Selected
    from nemesis.package import Schedule

    def fault(name: str, rolling: bool) -> Fault:
        return Fault(name=name, nemesis=lambda chosen: None, heal_rank=9000, rolling=rolling)  # type: ignore[arg-type,return-value]

    faults = {"my-roll": fault("my-roll", True), "my-noise": fault("my-noise", False)}
    sched = Schedule(
        kinds=("my-noise", "my-roll"),
        faults=faults,
        selected={k: Selected() for k in faults},
        interval=1.0,
        rng=random.Random(7),
    )
    starts = []
    while len(starts) < 4 * len(NODES):
        nxt = sched.next(ctx())
        assert nxt is not None
        if nxt[1].f.startswith("start-"):
            starts.append(nxt[1].f == "start-my-roll")
    assert starts[: 2 * len(NODES)] == [True, False] * len(NODES)
    assert not any(starts[2 * len(NODES) :])  # spent: every node had its step
