"""The harness's own control link lost mid-fault (issue 43 item 1).

The pure tests check the retry's bookkeeping on a recording remote. The lab tests cut
the real SSH link to a real host (``harness/control/cut.py``: iptables in the host's
namespace, set from this machine) while a partition and a clock skew are in force on
it: a cut shorter than the heal's deadline must end healed and judged; a cut longer
than the run must end ``unknown`` naming the host and fault, with the fault still
journaled, and ``splitbrain heal`` must finish it once the link is back.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.core.history import Op, read_jsonl
from harness.core.nemesis import NemesisPackage
from harness.core.remote import CommandResult, Host
from harness.core.spec import RunContext, TestSpec
from harness.run.cleanup import retry_heals, unreachable_in
from nemesis import journal as jr

# --- pure: which failures are a lost link, and the retry's bookkeeping ----------------


def test_unreachable_in_names_only_lost_links():
    err = (
        "n1: RemoteError: n1: cannot connect to 127.0.0.1:22: refused; "
        "n2: RemoteCommandError: n2: command 'iptables -F X' exited 1: no chain; "
        "n3: RemoteCommandError: n3: command 'iptables -F X' timed out; "
        "n9: RemoteError: not a node of the run"
    )
    assert unreachable_in(err, ["n1", "n2", "n3"]) == ["n1", "n3"]
    assert unreachable_in(None, ["n1"]) == []


class _Flaky:
    """A Remote whose host answers only after ``down`` failed attempts (a cut link)."""

    def __init__(self, host: Host, down: int) -> None:
        self.host, self.down, self.cmds, self.resets = host, down, [], 0

    def run(self, cmd: str, **kw: Any) -> CommandResult:
        if self.down > 0:
            self.down -= 1
            from harness.core.errors import RemoteError

            raise RemoteError("cannot connect: refused", host=self.host.name)
        self.cmds.append(cmd)
        return CommandResult(self.host.name, cmd, 0, "", "")

    def reset(self) -> None:
        self.resets += 1


def _ctx(tmp_path: Path, remotes: dict[str, Any]) -> RunContext:
    hosts = {
        n: Host(name=n, address="127.0.0.9", extras={"lab": "x", "state_dir": str(tmp_path / n)})
        for n in remotes
    }
    from harness.core.history import HistoryWriter

    ctx = RunContext(
        spec=TestSpec(name="retry", nodes=tuple(hosts)),
        hosts=hosts,
        remotes=remotes,
        db=None,  # type: ignore[arg-type]
        history=HistoryWriter(tmp_path / "h.jsonl"),
        rng=random.Random(1),
        store_dir=str(tmp_path / "store"),
    )
    ctx.journal = jr.run_journal(ctx)
    return ctx


def test_retry_heals_until_the_link_returns_and_leaves_the_worlds_cut_alone(tmp_path):
    import harness.control.cut  # noqa: F401 - registers control-cut

    flaky = _Flaky(Host(name="n1", address="127.0.0.9"), down=2)
    ctx = _ctx(tmp_path, {"n1": flaky})
    undo = {"chain": "SPLITBRAIN", "iptables": "iptables -w 10"}
    ctx.journal.note("n1", "iptables-chain", "SPLITBRAIN", undo, "partition")
    # The cut is the world's, not the run's (no run): the retry must not lift it.
    jr.HostJournal(ctx.hosts["n1"]).record("control-cut", "ssh", {"netns": "x", "port": 22})
    slept: list[float] = []
    assert retry_heals(ctx, deadline_s=60, sleep=slept.append) == []
    assert len(slept) == 2 and flaky.resets == 2  # two refused attempts, a fresh link each
    assert any("-X SPLITBRAIN" in c for c in flaky.cmds)
    assert [e.kind for e in jr.HostJournal(ctx.hosts["n1"]).entries()] == ["control-cut"]


def test_retry_heals_gives_up_at_the_deadline_naming_host_and_fault(tmp_path):
    ctx = _ctx(tmp_path, {"n1": _Flaky(Host(name="n1", address="127.0.0.9"), down=10**9)})
    undo = {"chain": "SPLITBRAIN", "iptables": "iptables -w 10"}
    ctx.journal.note("n1", "iptables-chain", "SPLITBRAIN", undo, "partition: drops from n2")
    ctx.journal.note("n1", "faketime", "/f", {"file": "/f"}, "clock offset +500 ms")
    t0 = time.monotonic()
    lines = retry_heals(ctx, deadline_s=0.3, sleep=lambda s: time.sleep(s))
    assert time.monotonic() - t0 < 5
    assert len(lines) == 2, lines
    assert lines[0].startswith("n1: heal of iptables-chain SPLITBRAIN (partition: drops from n2)")
    assert "not confirmed within 0.3 s" in lines[0] and "refused" in lines[0]
    assert "faketime /f" in lines[1]
    kept = {e.kind for e in jr.HostJournal(ctx.hosts["n1"]).entries()}
    assert kept == {"iptables-chain", "faketime"}  # the next clean start finishes them


# --- the lab: a real cut during a real partition and clock skew ----------------------


class _Fixed:
    """A schedule of fixed faults: (wait s, op) in turn, then none."""

    def __init__(self, steps: list[tuple[float, Op]]) -> None:
        self.steps = list(steps)

    def next(self, ctx: RunContext) -> tuple[float, Op] | None:
        return self.steps.pop(0) if self.steps else None


def _inv(f: str, value: Any = None) -> Op:
    return Op(type="invoke", process="nemesis", f=f, value=value)


def _campaign(lab: Any, tmp_path: Path, tag: str, *, cut_s: float | None) -> tuple[Any, Any]:
    """A register run of 6 s: clock skew and a partition on every node from ~1.5 s; the
    first host's control link is cut (TCP resets) as soon as its partition is journaled,
    for ``cut_s`` s (None: until the test lifts it)."""
    import nemesis.grudge as g
    from harness.control.cut import ControlCut
    from harness.run.runner import RunOptions, run_test
    from nemesis.package import build_package

    hosts = lab.hosts()
    names = [h.name for h in hosts]
    base = build_package(["partition", "clock"], interval=1.0, rng=random.Random(5))
    grudge = g.grudge_to_json(g.build_shape("halves", names, random.Random(1)))
    package = NemesisPackage(
        nemesis=base.nemesis,
        schedule=_Fixed(
            [
                (1.0, _inv("start-clock", {"nodes": names, "mode": "bump", "offset_ms": 700})),
                (0.5, _inv("start-partition", {"shape": "halves", "grudge": grudge})),
            ]
        ),
        final_ops=base.final_ops,
    )
    spec = TestSpec(
        name=f"t{os.getpid()}-{tag}",
        nodes=tuple(names),
        nemesis=("partition", "clock"),
        time_limit=6.0,
        concurrency=4,
        rate=30.0,
        seed=3,
    )
    cut = ControlCut(hosts[0], seconds=cut_s, mode="reset")
    stop = threading.Event()

    since = time.time()

    def cut_when_partitioned() -> None:
        j = jr.HostJournal(hosts[0])
        while not stop.wait(0.05):
            if any(e.kind == "iptables-chain" and e.written_at >= since for e in j.entries()):
                cut.start()
                return

    watcher = threading.Thread(target=cut_when_partitioned, daemon=True)
    watcher.start()
    try:
        res = run_test(
            spec,
            hosts,
            store_root=tmp_path,
            nemesis_package=package,
            options=RunOptions(progress=False, recovery_s=1.0),
        )
    finally:
        stop.set()
        watcher.join(5)
    return res, cut


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_a_short_cut_over_the_final_heal_is_retried_until_healed(lab, tmp_path, monkeypatch):
    """The cut (8 s from the partition, ~1.5 s into a 6 s load) outlasts the load: the
    final heal and the teardown meet a refused link. Retried, the heal lands when the
    link returns; the run is judged and nothing is left behind."""
    from harness.run.leftovers import scan_hosts

    monkeypatch.setenv("SPLITBRAIN_HEAL_DEADLINE_S", "60")
    res, cut = _campaign(lab, tmp_path, "cut-short", cut_s=8.0)
    try:
        left = scan_hosts(lab.hosts())
        assert left == {h.name: [] for h in lab.hosts()}, left
        ops = list(read_jsonl(res.store_dir / "history.jsonl"))
        heals = [o for o in ops if o.f == "stop-partition" and o.type == "info"]
        assert heals and heals[0].error and "n1" in heals[0].error, heals  # refused first
        assert heals[-1].error is None, heals[-1]  # then confirmed
        assert res.results["run"].get("unconfirmed_heals") is None, res.results["run"]
        assert res.results["valid"] is True, (res.results["valid"], res.results["run"]["reason"])
        assert cut.restored.is_set()
    finally:
        cut.restore()


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_a_cut_longer_than_the_run_is_unknown_and_healed_by_the_next_heal(
    lab, tmp_path, monkeypatch
):
    from harness.run.cleanup import heal_hosts

    monkeypatch.setenv("SPLITBRAIN_HEAL_DEADLINE_S", "3")
    res, cut = _campaign(lab, tmp_path, "cut-long", cut_s=None)
    try:
        assert not cut.restored.is_set()
        assert res.results["valid"] == "unknown", res.results["valid"]
        lines = res.results["run"]["unconfirmed_heals"]
        text = " ".join(lines)
        assert "n1: heal of iptables-chain SPLITBRAIN" in text, lines
        assert "faketime" in text, lines
        assert not any(line.startswith(("n2", "n3", "n4", "n5")) for line in lines), lines
        assert "n1" in res.results["run"]["reason"]
        kept = {(e.kind, e.run) for e in jr.HostJournal(lab.hosts()[0]).entries()}
        assert ("iptables-chain", str(res.store_dir)) in kept, kept
        assert ("control-cut", None) in kept, kept
        # The link comes back; the next heal (the same steps as a clean start) finishes it.
        rep = heal_hosts(lab.hosts())
        assert rep.clean, rep.remaining()
        assert jr.HostJournal(lab.hosts()[0]).entries() == []
    finally:
        cut.restore()
        heal_hosts(lab.hosts())
