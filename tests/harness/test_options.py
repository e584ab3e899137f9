"""Typed options per role, one client timeout, and the plugin contract's smaller pieces.

Pure unit tests (no lab): the parsing and the messages, what each role receives, the
defaults of the declared classes against the DB constructors they feed, the summary's
true counts, and the libfaketime opt-out's command rewriting.
"""

from __future__ import annotations

import inspect
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import harness.api as api
from harness.control.memory import MemoryRemote
from harness.core.errors import ConfigError, RemoteError
from harness.core.history import Op
from harness.core.remote import Host
from harness.core.spec import DEFAULT_CLIENT_TIMEOUT, TestSpec
from harness.dbs import get_db
from harness.dbs.builtin import DLedgerOptions, EtcdOptions, RedisOptions
from harness.dbs.null import NullDB
from harness.run.analysis import faults_not_drawn
from harness.run.preload import WithoutPreload
from harness.run.progress import Counters
from harness.run.roles import checker_options, prepare
from harness.run.runner import RunOptions, run_test
from harness.run.summary import anomaly_totals, verdict_line
from workloads import get_workload

SPLITBRAIN = str(Path(sys.executable).with_name("splitbrain"))
SEEN: list[Any] = []


def raw_factory(options: Any) -> Any:
    """A plugin workload that declares no options: it keeps getting the mapping as given."""
    SEEN.append(options)
    return get_workload("null", {})


def test_a_misspelt_workload_option_names_the_key_the_role_and_the_known_keys() -> None:
    with pytest.raises(ConfigError) as e:
        get_workload("append", {"read_fractoin": 0.9})
    msg = str(e.value)
    assert "unknown workload append option 'read_fractoin'" in msg
    assert "known: " in msg and "read_fraction" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="unknown db etcd option 'prot'; known: root, peer_port"):
        get_db("etcd", {"prot": 1})
    with pytest.raises(ConfigError, match="'read_fraction' must be at most 1.0"):
        get_workload("append", {"read_fraction": "1.5"})
    # strings from the command line are coerced as the field says
    wl = get_workload("queue", {"topics": "2", "pull_fraction": "0.5"})
    gen: Any = wl.generator
    assert {t for t, _ in gen.targets} == {"t0", "t1"} and gen.pull_fraction == 0.5


class InformingDB(NullDB):
    """A plugin DB that documents a loss window, declared on the DB object itself."""

    def checker_options(self) -> dict[str, dict[str, Any]]:
        return {"log-safety": {"ha": {"sync": True}}}


def informing_db(options: Any) -> InformingDB:
    return InformingDB()


def test_a_plugin_db_declares_what_the_checker_must_know() -> None:
    spec = TestSpec(
        name="t",
        nodes=("n1",),
        db="tests.harness.test_options:informing_db",
        workload="append",
        options={"sampler": False},
    )
    opts = checker_options(spec)
    assert opts["options"] == {"log-safety": {"ha": {"sync": True}}}
    assert opts["checks"] == ["log-safety", "transfer", "upgrade-phases"]
    assert opts["model"] is None
    # the built-in null DB declares nothing: nothing is merged
    assert checker_options(TestSpec(name="t", nodes=("n1",), db="null"))["options"] == {}


def test_the_workload_gets_only_its_own_options_and_a_plugin_without_a_class_the_mapping() -> None:
    spec = TestSpec(
        name="t",
        nodes=("n1",),
        db="null",
        workload="tests.harness.test_options:raw_factory",
        options={
            "anything": 1,
            "db": {"leave_running": True},
            "client_timeout": 2.0,
            "zoo_profiles": ["x"],
            "nemesis": {"targets": "one"},
        },
    )
    SEEN.clear()
    prepare(spec)
    assert SEEN == [{"anything": 1}]  # no db, nemesis, client timeout or zoo record
    assert spec.client_timeout == 2.0 and spec.db_options == {"leave_running": True}


def test_mode_ha_options_are_checked_against_the_mode() -> None:
    with pytest.raises(ConfigError, match="'sync' applies to mode ha"):
        get_db("dledger", {"sync": True})
    assert get_db("dledger", {"mode": "ha", "sync": "true"}).sync is True  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="must be one of dledger, ha, broker"):
        get_db("dledger", {"mode": "raft"})


def _defaults(fn: Any) -> dict[str, Any]:
    return {
        n: p.default
        for n, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def test_declared_db_defaults_are_the_constructors_defaults() -> None:
    """The options class feeds every field to the constructor: a drifted default would
    silently change what an option-less run does."""
    from harness.dbs.dledger import DLedgerDB
    from harness.dbs.etcd import EtcdDB
    from harness.dbs.ha import HADB
    from harness.dbs.redis import RedisDB
    from harness.dbs.rolling import RollingUpgradeDB

    for cls, ctor in ((DLedgerOptions, DLedgerDB), (EtcdOptions, EtcdDB), (RedisOptions, RedisDB)):
        for name, default in _defaults(ctor.__init__).items():
            assert getattr(cls(), name) == default, (cls.__name__, name)
    assert DLedgerOptions().master == _defaults(HADB.__init__)["master"]
    assert DLedgerOptions().switch_timeout == _defaults(RollingUpgradeDB.__init__)["switch_timeout"]


def test_one_client_timeout_with_one_default() -> None:
    assert TestSpec(name="t", nodes=("n1",)).client_timeout == DEFAULT_CLIENT_TIMEOUT == 5.0
    with pytest.raises(ConfigError, match="client_timeout"):
        prepare(
            TestSpec(
                name="t", nodes=("n1",), db="null", workload="null", options={"client_timeout": -1}
            )
        )
    # The workload option of old is refused with the way to say it now.
    out = subprocess.run(
        [
            SPLITBRAIN,
            "run",
            "-w",
            "null",
            "--db",
            "null",
            "--workload-option",
            "client_timeout=2",
            "--nodes-file",
            "/nonexistent",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "--client-timeout" in out.stderr


@pytest.mark.parametrize(
    ("flag", "value", "expect"),
    [
        (
            "--workload-option",
            "read_fractoin=0.9",
            "unknown workload append option 'read_fractoin'",
        ),
        ("--db-option", "colour=red", "unknown db dledger option 'colour'"),
    ],
)
def test_cli_rejects_a_misspelt_option_before_touching_any_lab(
    flag: str, value: str, expect: str
) -> None:
    # The lab named does not exist: reaching it would fail with a lab error instead.
    out = subprocess.run(
        [SPLITBRAIN, "run", "-w", "append", flag, value, "--lab", "no-such-lab-xyz"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3, out.stderr
    assert expect in out.stderr and "known:" in out.stderr
    assert "no-such-lab-xyz" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_summary_counts_every_anomaly_not_the_examples_kept() -> None:
    results = {
        "valid": False,
        "checkers": {"queue": {"valid": False, "stats": {"anomaly_counts": {"queue-lost": 262}}}},
        "anomalies": {"queue-lost": [{"i": i} for i in range(20)], "other": [1, 2]},
        "run": {"ok": 3, "fail": 1, "info": 0, "faults_not_drawn": ["clock"]},
    }
    assert anomaly_totals(results) == {"queue-lost": 262, "other": 2}
    line = verdict_line(results)
    assert "queue-lost (262)" in line and "other (2)" in line
    assert "ops ok/fail/info: 3/1/0" in line and "faults never injected: clock" in line


def test_faults_not_drawn_and_client_only_counts() -> None:
    assert faults_not_drawn(["partition", "kill", "clock"], {"partition", "clock"}) == ["kill"]
    # an alias counts as drawn when its fault's kind started
    assert faults_not_drawn(["partition-leader"], {"partition"}) == []
    c = Counters()
    c.record(Op(type="ok", process=1_000_000, f="sample", value={}), extra=True)
    c.record(Op(type="ok", process=0, f="append", value={}))
    c.record(Op(type="info", process="nemesis", f="start-kill", value={"nodes": ["n1"]}))
    assert (c.ok, c.extra, c.started_faults) == (1, 1, {"kill"})


def test_a_db_that_opts_out_of_libfaketime_gets_commands_without_the_preload(
    tmp_path: Path,
) -> None:
    made: list[MemoryRemote] = []

    def connect(h: Host) -> MemoryRemote:
        made.append(MemoryRemote(h))
        return made[-1]

    class Jvm(NullDB):
        runs_under_faketime = False

        def setup(self, ctx: Any, node: str) -> None:
            ctx.remotes[node].run("java -version")
            ctx.remotes[node].start_daemon("java -jar x.jar", pidfile="/p", logfile="/l")

    hosts = [Host(name="n1", address="127.0.0.1", extras={"faketime_file": "/x/faketime"})]
    spec = TestSpec(name="jvm", nodes=("n1",), db="null", workload="null", time_limit=0.2)
    res = run_test(
        spec,
        hosts,
        store_root=tmp_path,
        db=Jvm(),
        connect_fn=connect,
        options=RunOptions(check=False, progress=False, recovery_s=0.0),
    )
    assert not res.interrupted, res.reason
    assert [c.cmd for c in made[0].commands] == ["unset LD_PRELOAD; java -version"]
    assert made[0].daemons == {} or all(
        cmd.startswith("env -u LD_PRELOAD ") for _, cmd in made[0].daemons.values()
    )
    # A host without libfaketime is left alone; so is every host of a DB that did not opt out.
    plain = MemoryRemote(Host(name="n2", address="127.0.0.2"))
    assert not isinstance(WithoutPreload(plain).inner, WithoutPreload)
    assert api.runs_under_faketime(NullDB()) and not api.runs_under_faketime(Jvm())


def test_api_exports_what_a_plugin_needs_and_the_helpers_work() -> None:
    for name in (
        "HasFootprint",
        "InformsChecker",
        "option",
        "declares_options",
        "node_dir",
        "wait_for_port",
        "kill_daemon",
        "address",
        "client_timeout",
    ):
        assert name in api.__all__, name
    host = Host(name="n1", address="127.0.0.1", extras={"lab": "lab7"})
    ctx: Any = type("Ctx", (), {"hosts": {"n1": host}, "nodes": ["n1"], "addresses": {}})()
    assert api.node_dir(ctx, "n1", "/srv/x/") == "/srv/x/lab7/n1"
    ctx.addresses.update(api.host_addresses(ctx, 7500))
    assert api.address(ctx, "n1") == ("127.0.0.1", 7500)
    with pytest.raises(ConfigError, match="no 'monitor' address for node 'n1'"):
        api.address(ctx, "n1", "monitor")
    r = MemoryRemote(host)
    r.start_daemon("sleep 100", pidfile="/p", logfile="/l")
    api.kill_daemon(r, "/p")
    assert not r.daemon_running("/p")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        api.wait_for_port("127.0.0.1", port, timeout=1.0)
    assert not api.port_open("127.0.0.1", port)
    with pytest.raises(RemoteError, match="never: not after 0.1 s"):
        api.wait_until(lambda: False, timeout=0.1, what="never", interval=0.02)
