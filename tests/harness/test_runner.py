"""The runner's plumbing with a null client, a no-op DB and a recording nemesis.

Pure logic of the run (phases, pacing, process ids, timeouts, interrupts and the
cleanup that must follow them): no hosts needed. The real thing against a lab is
in test_campaign.py.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from harness.control.memory import MemoryRemote
from harness.core.errors import ConfigError
from harness.core.history import Op, read_jsonl, validate_history
from harness.core.remote import Host
from harness.core.spec import TestSpec as Spec
from harness.core.workload import Workload
from harness.dbs.null import NullDB
from harness.run import analysis as analysis_mod
from harness.run.runner import RunOptions, run_test
from workloads.null import CountingGenerator, NullClient

HOSTS = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in range(1, 4)]
FAST = dict(check=False, progress=False, recovery_s=0.0, join_timeout_s=3.0)


class RecordingDB(NullDB):
    def __init__(self, fail_on: str | None = None):
        self.calls: list[tuple[str, str]] = []
        self.fail_on = fail_on

    def setup(self, ctx, node):
        self.calls.append(("setup", node))
        if node == self.fail_on:
            raise RuntimeError(f"cannot install on {node}")
        super().setup(ctx, node)

    def teardown(self, ctx, node):
        self.calls.append(("teardown", node))


class Schedule:
    def __init__(self, ops, delay):
        self.ops = list(ops)
        self.delay = delay

    def next(self, ctx):
        if not self.ops:
            return None
        return self.delay, self.ops.pop(0)


class RecordingNemesis:
    def __init__(self, on_invoke=None):
        self.events: list[str] = []
        self.on_invoke = on_invoke

    def setup(self, ctx):
        self.events.append("setup")

    def invoke(self, ctx, op):
        self.events.append(op.f)
        if self.on_invoke:
            self.on_invoke(op)
        return op.complete("info", value=op.value)

    def teardown(self, ctx):
        self.events.append("teardown")


class Package:
    def __init__(self, nemesis, ops=(), final=(), delay=0.2):
        self.nemesis = nemesis
        self.schedule = Schedule(ops, delay)
        self.final_ops = list(final)


class FinalReads:
    """One read per node, then done."""

    def __init__(self):
        self.left: set[str] | None = None

    def op(self, ctx):
        if self.left is None:
            self.left = set(ctx.nodes)
        if ctx.node not in self.left:
            return None
        self.left.discard(ctx.node)
        return Op(type="invoke", process=ctx.process, f="read", value={"from": 0}, node=ctx.node)

    def update(self, ctx, event):
        pass


def nem(f, value=None):
    return Op(type="invoke", process="nemesis", f=f, value=value)


def spec(**kw):
    base = dict(
        name="plumbing",
        nodes=tuple(h.name for h in HOSTS),
        time_limit=1.0,
        concurrency=3,
        rate=100.0,
        seed=7,
    )
    base.update(kw)
    return Spec(**base)


def go(tmp_path, *, db=None, client=None, package=None, final=True, opts=None, **kw):
    wl = Workload(
        name="null",
        client=client or NullClient(),
        generator=CountingGenerator(),
        final_generator=FinalReads() if final else None,
    )
    return run_test(
        spec(**kw),
        HOSTS,
        store_root=tmp_path,
        db=db or RecordingDB(),
        workload=wl,
        nemesis_package=package or Package(RecordingNemesis()),
        options=RunOptions(**{**FAST, **(opts or {})}),
        connect_fn=MemoryRemote,
    )


def test_phases_history_and_store(tmp_path):
    db = RecordingDB()
    nemesis = RecordingNemesis()
    pkg = Package(
        nemesis,
        ops=[nem("start-partition", "halves"), nem("stop-partition")],
        final=[nem("heal")],
        delay=0.2,
    )
    res = go(tmp_path, db=db, package=pkg, time_limit=1.5, rate=100.0)
    assert not res.interrupted, res.reason
    ops = read_jsonl(res.store_dir / "history.jsonl")
    validate_history(ops)
    assert [o.index for o in ops] == list(range(len(ops)))
    # Pacing: about rate * time_limit client ops (generous bounds for a busy machine).
    appends = [o for o in ops if o.f == "append" and o.type == "ok"]
    assert 60 <= len(appends) <= 200
    # Nemesis: setup, both scheduled faults, the heal, teardown, in that order.
    assert nemesis.events == ["setup", "start-partition", "stop-partition", "heal", "teardown"]
    nops = [o for o in ops if o.process == "nemesis"]
    assert [(o.type, o.f) for o in nops] == [
        ("invoke", "start-partition"),
        ("info", "start-partition"),
        ("invoke", "stop-partition"),
        ("info", "stop-partition"),
        ("invoke", "heal"),
        ("info", "heal"),
    ]
    # Final reads: one per node, after the heal, from processes never used before.
    reads = [o for o in ops if o.f == "read" and o.type == "invoke"]
    assert sorted(o.node for o in reads) == ["n1", "n2", "n3"]
    heal_at = max(o.index for o in nops)
    assert all(o.index > heal_at for o in reads)
    pool_procs = {o.process for o in appends}
    assert not pool_procs & {o.process for o in reads}
    # Workers are bound to nodes round-robin.
    assert {o.node for o in appends} == {"n1", "n2", "n3"}
    # DB lifecycle on every node, teardown after setup.
    assert sorted(n for c, n in db.calls if c == "setup") == ["n1", "n2", "n3"]
    assert sorted(n for c, n in db.calls if c == "teardown") == ["n1", "n2", "n3"]
    # Store layout.
    for name in ("test.json", "history.jsonl", "history.parquet", "results.json", "splitbrain.log"):
        assert (res.store_dir / name).exists(), name
    assert (tmp_path / "plumbing" / "latest").resolve() == res.store_dir.resolve()
    results = json.loads((res.store_dir / "results.json").read_text())
    assert results["valid"] == "unknown" and results["run"]["ok"] == len(appends) + 3
    test = json.loads((res.store_dir / "test.json").read_text())
    assert test["nodes"] == ["n1", "n2", "n3"] and test["seed"] == 7
    assert "phase: final-reads" in (res.store_dir / "splitbrain.log").read_text()


def test_checker_verdict_sets_exit_code(tmp_path, monkeypatch):
    monkeypatch.setattr(
        analysis_mod,
        "check_stored",
        lambda store, wl, engine, timeout=None: {
            "valid": False,
            "checkers": {},
            "anomalies": {"lost-ack": [1]},
        },
    )
    res = go(tmp_path, opts={"check": True}, time_limit=0.3)
    assert res.valid is False and res.exit_code == 1
    monkeypatch.setattr(
        analysis_mod,
        "check_stored",
        lambda store, wl, engine, timeout=None: {"valid": True, "checkers": {}, "anomalies": {}},
    )
    assert go(tmp_path, opts={"check": True}, time_limit=0.3).exit_code == 0


def test_sigterm_mid_fault_heals_and_records_interrupted(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    db = RecordingDB()
    nemesis = RecordingNemesis(
        on_invoke=lambda op: op.f == "start-partition" and os.kill(os.getpid(), signal.SIGTERM)
    )
    pkg = Package(nemesis, ops=[nem("start-partition", "halves")], final=[nem("heal")], delay=0.2)
    res = go(tmp_path, db=db, package=pkg, time_limit=30.0)
    assert res.interrupted and "SIGTERM" in res.reason
    assert res.exit_code == 2
    assert nemesis.events[-1] == "teardown"
    assert sorted(n for c, n in db.calls if c == "teardown") == ["n1", "n2", "n3"]
    ops = read_jsonl(res.store_dir / "history.jsonl")
    validate_history(ops)
    assert any(o.f == "start-partition" and o.type == "info" for o in ops)
    results = json.loads((res.store_dir / "results.json").read_text())
    assert results["valid"] == "unknown" and results["interrupted"] is True
    assert "SIGTERM" in results["reason"]
    # The handler was restored: SIGTERM is back to what it was.
    assert signal.getsignal(signal.SIGTERM) == before


def test_setup_failure_still_tears_down(tmp_path):
    db = RecordingDB(fail_on="n2")
    nemesis = RecordingNemesis()
    res = go(tmp_path, db=db, package=Package(nemesis))
    assert res.interrupted and "cannot install on n2" in res.reason
    assert nemesis.events == ["setup", "teardown"]
    assert sorted(n for c, n in db.calls if c == "teardown") == ["n1", "n2", "n3"]
    assert json.loads((res.store_dir / "results.json").read_text())["valid"] == "unknown"


def test_hung_client_op_becomes_info_and_process_moves_on(tmp_path):
    hang = threading.Event()

    class Hangs(NullClient):
        def invoke(self, ctx, op):
            if op.process == 0 and op.value["payload"] == "p1":
                hang.wait(10)
            return op.complete("ok", op.value)

    try:
        res = go(
            tmp_path,
            client=Hangs(),
            final=False,
            time_limit=1.5,
            concurrency=2,
            rate=50.0,
            opts={"client_timeout": 0.3},
        )
    finally:
        hang.set()
    ops = read_jsonl(res.store_dir / "history.jsonl")
    validate_history(ops)
    timed_out = [o for o in ops if o.type == "info" and o.process == 0]
    assert len(timed_out) == 1 and "timeout" in timed_out[0].error
    # The slot carried on under process 0 + concurrency; 0 never invoked again.
    assert any(o.process == 2 and o.type == "ok" for o in ops)
    assert not [o for o in ops if o.process == 0 and o.index > timed_out[0].index]


def test_info_gives_a_fresh_process(tmp_path):
    class Flaky(NullClient):
        def invoke(self, ctx, op):
            return op.complete("info" if op.value["payload"] in ("p1", "p2") else "ok", op.value)

    res = go(tmp_path, client=Flaky(), final=False, time_limit=0.5, concurrency=2, rate=40.0)
    ops = read_jsonl(res.store_dir / "history.jsonl")
    validate_history(ops)  # raises if a process invoked again after info
    assert {o.process for o in ops if o.type == "invoke"} >= {2, 3}


def test_unknown_nodes_are_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="n9"):
        run_test(
            spec(nodes=("n1", "n9")),
            HOSTS,
            store_root=tmp_path,
            db=RecordingDB(),
            workload=Workload(name="x", client=NullClient(), generator=CountingGenerator()),
            connect_fn=MemoryRemote,
        )


# --- the CLI edge and the status line (pure parts) -----------------------------------


def test_cli_without_a_lab_says_run_lab_up(tmp_path):
    from click.testing import CliRunner

    from harness.cli.run import run

    r = CliRunner().invoke(
        run, ["--lab", f"nolab{os.getpid()}", "--store", str(tmp_path)], standalone_mode=False
    )
    assert r.exception is not None
    assert "splitbrain lab up" in str(r.exception)


def test_cli_rejects_two_inventories_and_bad_options(tmp_path):
    import subprocess
    import sys

    exe = [sys.executable, "-m", "harness.cli", "run", "--store", str(tmp_path)]
    out = subprocess.run(
        exe + ["--nodes-file", "a.yaml", "--vagrant", "."],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3 and "choose one inventory" in out.stderr
    assert "Traceback" not in out.stderr
    out = subprocess.run(
        exe + ["--db-option", "novalue"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 3 and "KEY=VALUE" in out.stderr
    out = subprocess.run(exe + ["--bug", "nosuch"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "unknown bug 'nosuch'" in out.stderr


def test_cli_helpers():
    from harness.cli.run import parse_kv, parse_nemesis
    from harness.core.verdict import worst_exit_code as worst_exit

    assert parse_nemesis("partition, kill,clock") == ("partition", "kill", "clock")
    assert parse_nemesis("none") == () and parse_nemesis("") == ()
    assert parse_kv(["a=1", "b=0.5", "c=true", "d-e=x"], option="-o") == {
        "a": 1,
        "b": 0.5,
        "c": True,
        "d_e": "x",
    }
    assert worst_exit([0, 2, 0]) == 2 and worst_exit([0, 1, 2]) == 1 and worst_exit([0]) == 0


def test_counters_track_faults_in_force():
    from harness.run.progress import Counters

    c = Counters()
    c.record(
        Op(
            type="info",
            process="nemesis",
            f="start-kill",
            value={"target": "leader", "nodes": ["n1"]},
        )
    )
    c.record(Op(type="info", process="nemesis", f="start-partition", value={"shape": "halves"}))
    c.record(Op(type="ok", process=1, f="append"))
    c.record(Op(type="info", process=2, f="append"))
    assert c.snapshot()["faults"] == ["kill (target=leader, nodes=n1)", "partition (shape=halves)"]
    c.record(Op(type="info", process="nemesis", f="stop-kill"))
    snap = c.snapshot()
    assert snap["faults"] == ["partition (shape=halves)"]
    assert (snap["ok"], snap["info"]) == (1, 1)


def test_null_client_throughput_is_recorded_fast(tmp_path):
    from harness.bench.recording import measure

    out = measure(HOSTS, null=True, seconds=2.0, concurrency=5, store_root=str(tmp_path))
    assert out["fail"] == 0 and out["info"] == 0
    # The target is 5,000 ops/s (see `splitbrain bench harness`); this machine is
    # shared with other test runs, so the test only guards against a collapse.
    assert out["ops_per_s"] > 1500, out


def test_dledger_ports_and_command_line():
    import random as _random

    from harness.core.spec import RunContext
    from harness.dbs import get_db
    from harness.dbs.dledger import node_ports

    assert node_ports({"n1": "10.0.0.1", "n2": "10.0.0.2"}, 9000, 9001) == {
        "n1": (9000, 9001),
        "n2": (9000, 9001),
    }
    # Several nodes on one address (a nodes file pointing at one machine): spread out.
    assert node_ports({"a": "h", "b": "h"}, 9000, 9001) == {"a": (9000, 9001), "b": (9010, 9011)}

    db = get_db("dledger", {"root": "/srv/sb", "heartbeat_ms": 100})
    hosts = {h.name: h for h in HOSTS}
    ctx = RunContext(
        spec=spec(bug="ack-before-quorum"),
        hosts=hosts,
        remotes={},
        db=db,
        history=None,
        rng=_random.Random(0),
        store_dir="",
    )
    cmd = db._command(ctx, "n2", "/usr/bin/python3")
    assert "--id n2" in cmd and "--bug ack-before-quorum" in cmd and "--heartbeat-ms 100" in cmd
    assert "--peers n1=127.0.0.1:9000,n2=127.0.0.2:9000,n3=127.0.0.3:9000" in cmd
    assert "--data-dir /srv/sb/plumbing/n2/data" in cmd and "--client-port 9001" in cmd
    # libfaketime's cond-wait "fix" makes every GIL hand-off 5-15 ms: off for the node.
    assert "FAKETIME_FORCE_MONOTONIC_FIX=0" in cmd.split(" -m node_impl")[0]
    assert db.client_addrs(ctx)["n3"] == ("127.0.0.3", 9001)
    with pytest.raises(ConfigError, match="db"):
        get_db("nosuch", {})
    # A misspelt option names itself, the DB and the known keys (not a TypeError's text).
    with pytest.raises(ConfigError, match=r"unknown db dledger option 'colour'; known: mode, root"):
        get_db("dledger", {"colour": "red"})


class BuildingDB(RecordingDB):
    """A DB that resolves its programs (the Java DBs' ResolvesArtifacts)."""

    def resolve_artifacts(self):
        self.calls.append(("resolve", None))
        return {"program": "x", "artifacts": [{"coordinate": "g:a:1", "sha256": "ab" * 32}]}


def test_resolved_artifacts_are_recorded_before_any_host_is_reached(tmp_path):
    db = BuildingDB()
    res = go(tmp_path, db=db, time_limit=0.3)
    test = json.loads((res.store_dir / "test.json").read_text())
    assert test["artifacts"]["artifacts"][0]["coordinate"] == "g:a:1"
    assert db.calls[0] == ("resolve", None)
    assert [c for c, _ in db.calls].count("resolve") == 1


class FailingBuildDB(RecordingDB):
    def resolve_artifacts(self):
        from harness.core.errors import ConfigError

        raise ConfigError("dledger 9.9 is not served", field="version")


def test_an_artifact_that_does_not_resolve_stops_the_run_before_setup(tmp_path):
    from harness.core.errors import ConfigError

    db = FailingBuildDB()
    with pytest.raises(ConfigError, match="not served"):
        go(tmp_path, db=db, time_limit=0.3)
    assert db.calls == []


def test_versions_are_a_list_each_run_on_its_own_release():
    import click

    from harness.cli.run import _with_version, parse_versions, version_table

    assert parse_versions(None, {}) == []
    assert parse_versions("3.5.21, 3.6.6", {}) == ["3.5.21", "3.6.6"]
    for bad, opts in (("", {}), ("3.6.6,3.6.6", {}), ("3.6.6", {"version": "3.5.0"})):
        with pytest.raises(click.BadParameter):
            parse_versions(bad, opts)
    s = spec(options={"db": {"root": "/x"}, "keys": 3})
    v = _with_version(s, {"root": "/x"}, "3.6.6", suffix=True)
    assert v.name == "plumbing-3.6.6" and v.options["db"] == {"root": "/x", "version": "3.6.6"}
    assert v.options["keys"] == 3 and s.options["db"] == {"root": "/x"}
    assert _with_version(s, {}, "3.6.6", suffix=False).name == "plumbing"
    rows = version_table(
        [
            {
                "name": "t-3.6.6 seed=7",
                "version": "3.6.6",
                "results": {
                    "valid": False,
                    "run": {"ok": 5, "fail": 1, "info": 0},
                    "anomalies": {"lost-ack": [], "stale-read": []},
                },
            }
        ]
    )
    assert rows[1] == "versions: 3.6.6  7  INVALID  5/1/0  lost-ack,stale-read"


def test_cli_versions_of_a_db_without_versions_is_refused_before_any_host(tmp_path):
    import subprocess
    import sys

    exe = [sys.executable, "-m", "harness.cli", "run", "--store", str(tmp_path), "--db", "null"]
    out = subprocess.run(
        exe + ["-w", "null", "--versions", "1,2", "--lab", "nolab"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3 and "version" in out.stderr and "lab up" not in out.stderr
