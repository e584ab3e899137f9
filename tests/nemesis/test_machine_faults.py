"""The logic of the faults that need a VM, with a fake hypervisor and in-memory remotes.

What is real here: the fault journal on disk, its replay, the cleanup's wake-up
of guests. What is fake: the :class:`Machine` (a state variable) and the SSH
side (a :class:`MemoryRemote` that refuses commands while its guest is off).
The same paths run on real qemu guests in tests/harness/test_vm_faults.py.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from harness.control.memory import Command, MemoryRemote
from harness.core.errors import ConfigError, NemesisError, RemoteCommandError
from harness.core.history import HistoryWriter, Op
from harness.core.remote import Host
from harness.core.spec import RunContext, TestSpec
from harness.run import cleanup, leftovers
from nemesis import journal as jr
from nemesis.clock import ClockNemesis, RealClock
from nemesis.netem import NetemNemesis, netem_args
from nemesis.package import build_package, check_hosts, parse_faults
from nemesis.power import PowerNemesis, VmPauseNemesis
from nemesis.process import KillNemesis
from nemesis.schedules import heal_ops
from nemesis.undo_journal import replay

NODES = ["n1", "n2", "n3"]


class FakeMachine:
    """A guest's power state; every call logged, with the journal's content at that moment."""

    def __init__(self, name: str, journal_dir: Path | None = None) -> None:
        self.name = name
        self.st = "running"
        self.calls: list[str] = []
        self.journal_dir = journal_dir
        self.journaled_at_cut: list[str] = []

    def _journal(self) -> list[str]:
        if self.journal_dir is None:
            return []
        return [e.kind for e in jr.HostJournal(Host(self.name, "x"), self.journal_dir).entries()]

    def power_cut(self) -> None:
        self.calls.append("power_cut")
        self.journaled_at_cut = self._journal()
        self.st = "off"

    def power_on(self) -> None:
        self.calls.append("power_on")
        self.st = "running"

    def suspend(self) -> None:
        self.calls.append("suspend")
        self.journaled_at_cut = self._journal()
        self.st = "paused"

    def resume(self) -> None:
        self.calls.append("resume")
        self.st = "running"

    def state(self) -> str:
        return self.st


def guest(name: str, machine: FakeMachine | None) -> MemoryRemote:
    """A remote whose commands fail while its machine is not running (no sshd to answer)."""
    host = Host(name=name, address=f"127.92.0.{11 + NODES.index(name)}", machine=machine)

    def handler(c: Command) -> Any:
        if machine is not None and machine.st != "running":
            return (255, "", "ssh: connect to host: No route to host")
        return None

    return MemoryRemote(host, handler)


class FakeDB:
    """Killable, with a footprint: the power nemesis restarts it and clears stale pid files."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.killed: list[str] = []
        self.ready_waits = 0

    def wait_ready(self, ctx: RunContext) -> None:
        self.ready_waits += 1

    def setup(self, ctx: RunContext, node: str) -> None: ...
    def teardown(self, ctx: RunContext, node: str) -> None: ...

    def kill(self, ctx: RunContext, node: str) -> None:
        self.killed.append(node)

    def start(self, ctx: RunContext, node: str) -> None:
        self.started.append(node)

    def root(self, ctx: RunContext) -> str:
        return "/var/lib/splitbrain/run"

    def node_dir(self, ctx: RunContext, node: str) -> str:
        return f"/var/lib/splitbrain/run/t/{node}"

    def pidfiles(self, ctx: RunContext, node: str) -> list[str]:
        return [f"/var/lib/splitbrain/run/t/{node}/node.pid"]

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        return [9000]


def make_ctx(tmp_path: Path, *, machines: bool = True, db: Any = None) -> RunContext:
    tmp_path.mkdir(parents=True, exist_ok=True)
    jdir = tmp_path / "journal"
    remotes = {n: guest(n, FakeMachine(n, jdir / n) if machines else None) for n in NODES}
    ctx = RunContext(
        spec=TestSpec(name="t", nodes=tuple(NODES)),
        hosts={n: r.host for n, r in remotes.items()},
        remotes=dict(remotes),  # type: ignore[arg-type]
        db=db if db is not None else FakeDB(),
        history=HistoryWriter(tmp_path / "history.jsonl"),
        rng=random.Random(7),
        store_dir=str(tmp_path),
    )
    journal = jr.RunJournal({})
    journal.hosts = {n: jr.HostJournal(ctx.hosts[n], jdir / n) for n in NODES}
    ctx.journal = journal
    return ctx


def machine(ctx: RunContext, node: str) -> FakeMachine:
    m = ctx.hosts[node].machine
    assert isinstance(m, FakeMachine)
    return m


def entries(ctx: RunContext, node: str) -> list[str]:
    assert isinstance(ctx.journal, jr.RunJournal)
    return [e.kind for e in ctx.journal.hosts[node].entries()]


def op(f: str, value: Any = None) -> Op:
    return Op(type="invoke", process="nemesis", f=f, value=value)


# ----------------------------------------------------------------------- power


def test_power_cuts_several_guests_journaled_first_then_boots_and_restarts(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    kill = KillNemesis()
    nem = PowerNemesis(boot_timeout=5)
    nem.killed_by = kill
    nem.setup(ctx)
    kill.setup(ctx)
    done = nem.invoke(ctx, op("start-power", {"nodes": ["n1", "n3"]}))
    assert done.type == "info" and done.error is None
    assert done.value["cut"] == ["n1", "n3"]
    for n in ("n1", "n3"):
        assert machine(ctx, n).calls == ["power_cut"]
        assert machine(ctx, n).journaled_at_cut == ["power"]  # on disk before the cut
        assert entries(ctx, n) == ["power"]
    assert machine(ctx, "n2").calls == [] and entries(ctx, "n2") == []
    kill.dead.add("n1")  # killed before the cut: the boot restarts it, stop-kill must not
    healed = nem.invoke(ctx, op("stop-power"))
    assert healed.error is None, healed.error
    assert healed.value["nodes"] == ["n1", "n3"] and healed.value["restarted"] == ["n1", "n3"]
    assert sorted(ctx.db.started) == ["n1", "n3"]  # type: ignore[attr-defined]
    assert ctx.db.ready_waits == 1 and healed.value["ready_s"] >= 0  # type: ignore[attr-defined]
    assert kill.dead == set()
    for n in ("n1", "n3"):
        assert machine(ctx, n).calls == ["power_cut", "power_on"]
        assert entries(ctx, n) == []
        cmds = [c.cmd for c in ctx.remotes[n].commands]  # type: ignore[attr-defined]
        stale = f"rm -f /var/lib/splitbrain/run/t/{n}/node.pid; true"
        assert stale in cmds, cmds  # a pid from before the boot names another process now
    assert nem.invoke(ctx, op("stop-power")).value["nodes"] == []  # idempotent


def test_power_teardown_boots_what_is_off(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    nem = PowerNemesis(boot_timeout=5)
    nem.setup(ctx)
    nem.invoke(ctx, op("start-power", {"target": "all"}))
    assert all(machine(ctx, n).st == "off" for n in NODES)
    nem.teardown(ctx)
    assert all(machine(ctx, n).st == "running" for n in NODES)
    assert all(entries(ctx, n) == [] for n in NODES)


def test_power_on_a_guest_that_never_answers_is_an_error_in_the_completion(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    m = machine(ctx, "n2")
    m.power_on = lambda: m.calls.append("power_on")  # type: ignore[method-assign]  # stays off
    nem = PowerNemesis(boot_timeout=0.5)
    nem.setup(ctx)
    nem.invoke(ctx, op("start-power", {"nodes": ["n2"]}))
    t0 = time.monotonic()
    healed = nem.invoke(ctx, op("stop-power"))
    assert time.monotonic() - t0 < 10
    assert healed.error and "n2" in healed.error and "no SSH login" in healed.error
    assert entries(ctx, "n2") == ["power"]  # still in force: the journal keeps it


@pytest.mark.parametrize("fault", ["power", "vm-pause"])
def test_machine_faults_on_hosts_without_machines_name_the_hosts(tmp_path, fault) -> None:
    ctx = make_ctx(tmp_path, machines=False)
    with pytest.raises(ConfigError, match=rf"{fault}.*n1, n2, n3"):
        check_hosts([fault, "partition"], list(ctx.hosts.values()))
    nem = PowerNemesis() if fault == "power" else VmPauseNemesis()
    with pytest.raises(ConfigError, match="n1, n2, n3"):
        nem.setup(ctx)
    check_hosts(["partition", "kill"], list(ctx.hosts.values()))  # others need no machine


def test_power_needs_a_restartable_db(tmp_path) -> None:
    ctx = make_ctx(tmp_path, db=object())
    with pytest.raises(NemesisError, match="Killable"):
        PowerNemesis().setup(ctx)


def test_vm_pause_suspends_and_resumes_whole_guests(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    nem = VmPauseNemesis()
    nem.setup(ctx)
    done = nem.invoke(ctx, op("start-vm-pause", {"nodes": ["n2"]}))
    assert done.value["paused"] == ["n2"] and machine(ctx, "n2").st == "paused"
    assert machine(ctx, "n2").journaled_at_cut == ["vm-pause"]
    assert nem.invoke(ctx, op("stop-vm-pause")).value["nodes"] == ["n2"]
    assert machine(ctx, "n2").st == "running" and entries(ctx, "n2") == []
    nem.invoke(ctx, op("start-vm-pause", {"nodes": ["n1", "n3"]}))
    nem.teardown(ctx)
    assert [machine(ctx, n).st for n in NODES] == ["running"] * 3


# ----------------------------------------------------- after a killed harness


def test_replay_powers_on_and_resumes_what_a_dead_harness_left(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    PowerNemesis().invoke(ctx, op("start-power", {"nodes": ["n1"]}))
    VmPauseNemesis().invoke(ctx, op("start-vm-pause", {"nodes": ["n2"]}))
    # The harness dies here: no teardown. A later command replays the journal.
    assert isinstance(ctx.journal, jr.RunJournal)
    problems = replay(ctx.journal.hosts.values(), ctx.remotes)
    assert problems == {}
    assert [machine(ctx, n).st for n in NODES] == ["running"] * 3
    assert all(entries(ctx, n) == [] for n in NODES)


def test_replay_without_the_machine_keeps_the_entry_and_says_why(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    PowerNemesis().invoke(ctx, op("start-power", {"nodes": ["n1"]}))
    assert isinstance(ctx.journal, jr.RunJournal)
    bare = {n: guest(n, None) for n in NODES}  # e.g. hosts from a nodes file
    problems = replay(ctx.journal.hosts.values(), bare)  # type: ignore[arg-type]
    assert "n1" in problems and "VM lab" in problems["n1"][0]
    assert entries(ctx, "n1") == ["power"]


def test_cleanup_wakes_guests_off_or_paused_without_a_journal(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    machine(ctx, "n1").st, machine(ctx, "n3").st = "off", "paused"
    hosts = list(ctx.hosts.values())
    down = {lo.host: lo.detail for h in hosts for lo in leftovers.local_leftovers(h)}
    assert down == {"n1": "guest is off", "n3": "guest is paused"}
    # A scan does not try SSH on a guest that is off: it reports the guest.
    found = leftovers.scan_host(ctx.remotes["n1"], with_journal=False)
    assert [lo.kind for lo in found] == ["machine"]
    assert ctx.remotes["n1"].commands == []  # type: ignore[attr-defined]
    assert cleanup.cure_local(hosts, ctx.remotes) == ["n1", "n3"]
    assert [machine(ctx, n).st for n in NODES] == ["running"] * 3


# ----------------------------------------------------------------- real clock


def clock_remote(offset_s: float, machine_: FakeMachine | None) -> MemoryRemote:
    """A guest whose ``date`` runs ``offset_s`` ahead of us, and records every shift."""
    state = {"offset": offset_s}
    host = Host(name="n1", address="127.92.0.11", machine=machine_)

    def handler(c: Command) -> Any:
        if c.cmd == "date +%s.%N":
            return f"{time.time() + state['offset']:.9f}\n"
        if "clock_settime" in c.cmd:
            state["offset"] += float(c.cmd.split()[-1]) / 1000.0
        return None

    r = MemoryRemote(host, handler)
    r.state = state  # type: ignore[attr-defined]
    return r


def test_real_clock_is_chosen_on_vm_hosts_even_at_loopback_addresses(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    ctx.hosts["n1"].extras["faketime_file"] = "/tmp/ft"  # ignored: a VM has its own clock
    assert isinstance(ClockNemesis()._clock(ctx, "n1"), RealClock)
    bare = make_ctx(tmp_path / "bare", machines=False)
    with pytest.raises(NemesisError, match="shares this machine's clock"):
        ClockNemesis()._clock(bare, "n1")


def test_real_clock_bump_stops_time_sync_and_reset_steps_back_and_restarts_it() -> None:
    r = clock_remote(0.0, FakeMachine("n1"))
    clock = RealClock(r)  # type: ignore[arg-type]
    clock.set_offset(5000.0, 0.0)
    assert abs(r.state["offset"] - 5.0) < 1e-9  # type: ignore[attr-defined]
    bump = r.commands[-1].cmd
    assert "systemctl stop" in bump and "splitbrain-timesync" in bump
    clock.set_offset(4000.0, 5000.0)
    assert abs(r.state["offset"] - 4.0) < 1e-9  # type: ignore[attr-defined]
    measured = clock.reset(4000.0)
    assert abs(measured) < 50  # stepped back by what was applied before measuring
    assert abs(r.state["offset"]) < 0.05  # type: ignore[attr-defined]
    assert "systemctl start" in r.commands[-1].cmd


def test_real_clock_reset_without_knowing_the_offset_measures_it() -> None:
    r = clock_remote(-300.0, FakeMachine("n1"))  # what a killed harness left
    measured = RealClock(r).reset()  # type: ignore[arg-type]
    assert abs(measured + 300_000) < 100
    assert abs(r.state["offset"]) < 0.1  # type: ignore[attr-defined]


def test_real_clock_strobe_is_a_guest_daemon_that_ends_at_its_base() -> None:
    r = clock_remote(0.0, FakeMachine("n1"))
    RealClock(r).strobe(0.0, 100.0, 10.0, 2.0)  # type: ignore[arg-type]
    ((pid, cmd),) = r.daemons.values()
    assert cmd.endswith("/tmp/splitbrain-strobe.py 100.0 10.0 100")
    script = next(c.stdin for c in r.commands if c.stdin)
    assert isinstance(script, str)
    compile(script, "strobe", "exec")  # valid Python for the guest's python3
    assert "pthread_sigmask" in script and "flip(-delta, False)" in script


# ----------------------------------------------------------------- netem, package


def test_netem_args_for_duplication_and_reordering() -> None:
    assert netem_args(None, None, 0.2, None) == "duplicate 20%"
    assert netem_args(None, None, None, (0.25, 20.0)) == "delay 20ms reorder 25%"
    assert netem_args(0.1, (50.0, 10.0), 0.05, (0.5, 20.0)) == (
        "delay 50ms 10ms reorder 50% loss 10% duplicate 5%"
    )


def _tc(ok: bool):
    def handler(c: Command) -> Any:
        if c.cmd.startswith("ip -o route get"):
            return "127.92.0.12 dev eth0 src 127.92.0.11 \n"
        if c.cmd.startswith("tc qdisc add"):
            return (0, "", "") if ok else (2, "", "Error: Specified qdisc kind is unknown.")
        return None

    return handler


def test_netem_on_a_vm_without_netem_is_an_error_not_a_fallback(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    for r in ctx.remotes.values():
        r.handler = _tc(False)  # type: ignore[attr-defined]
    with pytest.raises(NemesisError, match="qdisc kind is unknown.*sch_netem"):
        NetemNemesis(("loss",)).setup(ctx)
    bare = make_ctx(tmp_path / "bare", machines=False)
    for r in bare.remotes.values():
        r.handler = _tc(False)  # type: ignore[attr-defined]
    with pytest.raises(NemesisError, match="duplicate need tc netem"):
        NetemNemesis(("duplicate",)).setup(bare)


def test_duplicate_and_reorder_become_one_netem_qdisc_and_heal(tmp_path) -> None:
    ctx = make_ctx(tmp_path)
    for r in ctx.remotes.values():
        r.handler = _tc(True)  # type: ignore[attr-defined]
    nem = NetemNemesis(("duplicate", "reorder"))
    nem.setup(ctx)
    nem.invoke(ctx, op("start-duplicate", {"nodes": ["n1"], "probability": 0.2}))
    nem.invoke(ctx, op("start-reorder", {"nodes": ["n1"], "probability": 0.5, "delay_ms": 10}))
    cmds = [c.cmd for c in ctx.remotes["n1"].commands]  # type: ignore[attr-defined]
    assert "tc qdisc replace dev eth0 root netem delay 10ms reorder 50% duplicate 20%" in cmds
    assert entries(ctx, "n1") == ["netem"]
    nem.invoke(ctx, op("stop-reorder"))
    assert entries(ctx, "n1") == ["netem"]  # duplicate still active
    nem.invoke(ctx, op("stop-duplicate"))
    assert entries(ctx, "n1") == []
    assert "tc qdisc del dev eth0 root 2>/dev/null; true" in [
        c.cmd
        for c in ctx.remotes["n1"].commands  # type: ignore[attr-defined]
    ]


def test_package_knows_the_machine_faults_and_heals_guests_first() -> None:
    kinds, _ = parse_faults(["power", "vm-pause", "duplicate", "reorder", "partition"])
    assert kinds == ["power", "vm-pause", "duplicate", "reorder", "partition"]
    assert [o.f for o in heal_ops(kinds)][:3] == ["stop-vm-pause", "stop-power", "stop-partition"]
    pkg = build_package(
        ["power"], interval=1.0, rng=random.Random(1), targets="majority,all", max_ops=4
    )
    assert pkg.nemesis.fs() == {"start-power", "stop-power"}

    class Ctx:
        nodes = NODES
        db = None

    fs = []
    while (step := pkg.schedule.next(Ctx())) is not None:
        planned = step[1]
        assert isinstance(planned, Op)
        fs.append(planned.f)
        if planned.f == "start-power":
            assert len(planned.value["nodes"]) >= 2
    assert fs == ["start-power", "stop-power", "start-power", "stop-power"]


def test_remote_error_type_for_refused_commands() -> None:
    r = guest("n1", FakeMachine("n1"))
    r.host.machine.st = "off"  # type: ignore[union-attr]
    with pytest.raises(RemoteCommandError):
        r.run("true")
