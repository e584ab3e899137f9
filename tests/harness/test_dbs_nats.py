"""The built-in DBs nats and etcd: which release runs (built, Debian's, or the fallback),
and a real nats-server cluster of the default release on the lab.

The unit tests replace only the build function (no Go runs); the lab test starts the
newest nats-server from the harness's Go cache, which ``scripts/setup.sh`` fills (it
builds it there, once, when the cache does not hold it).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from harness.core.errors import ConfigError, LabError
from harness.core.options import parse_options
from harness.core.spec import RunContext
from harness.core.spec import TestSpec as Spec
from harness.dbs import etcd as etcd_mod
from harness.dbs import nats as nats_mod
from harness.dbs.etcd import EtcdDB, hosts_release
from harness.dbs.nats import NatsDB, NatsOptions, buildable, factory


def _no_build(*_: Any) -> Any:
    raise LabError("Go is not installed: apt-get install golang, or put go on PATH")


# --- which release runs ------------------------------------------------------------


def test_nats_releases_are_checked_before_any_build() -> None:
    assert buildable("2.15.2") == "v2.15.2"
    assert buildable("v2.9.10") == "v2.9.10"
    for bad in ("1.4.1", "2.1.9", "3.0.0"):
        with pytest.raises(ConfigError, match="only 2.2 and newer") as e:
            NatsDB(version=bad)
        assert e.value.field == "version"
    with pytest.raises(ConfigError) as e:
        factory({"version": "latest"})
    assert e.value.field == "version"
    with pytest.raises(ConfigError, match="monitor_port"):
        parse_options(NatsOptions, {"monitor": "1"}, role="db nats")


def test_nats_default_falls_back_to_debian_only_when_unbuildable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    debian = tmp_path / "nats-server"
    debian.write_text("")
    monkeypatch.setattr(nats_mod, "DEBIAN_BINARY", str(debian))
    monkeypatch.setattr(nats_mod, "build_nats", _no_build)
    art = NatsDB().resolve_artifacts()
    assert art["version"] == "debian" and art["binary"] == str(debian)
    assert (
        "2.15.2 could not be built" in art["fallback"] and "Go is not installed" in art["fallback"]
    )
    with pytest.raises(LabError):  # a release named by the user never falls back
        NatsDB(version="2.11.10").resolve_artifacts()
    debian.unlink()  # no Debian binary either: the build's own error
    with pytest.raises(LabError):
        NatsDB().resolve_artifacts()


def test_nats_debian_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nats_mod, "build_nats", lambda v: pytest.fail(f"built {v}"))
    art = NatsDB(version="debian").resolve_artifacts()
    assert (art["version"], art["binary"]) == ("debian", "/usr/sbin/nats-server")
    assert "fallback" not in art


def test_nats_default_workload_names_the_plugin_when_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.core import plugins

    monkeypatch.setattr(plugins, "names", lambda kind: ["append"])
    with pytest.raises(ConfigError, match="pip install ./examples/nats"):
        NatsDB().default_workload()
    monkeypatch.setattr(plugins, "names", lambda kind: ["append", "nats-stream"])
    assert NatsDB().default_workload().name == "nats-stream"


def test_etcd_default_is_the_newest_build_and_debian_stays_reachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def fake_build(version: str) -> Any:
        asked.append(version)
        raise ConfigError("offline", field="build")

    monkeypatch.setattr(etcd_mod, "build_etcd", fake_build)
    art = EtcdDB().resolve_artifacts()
    assert asked == ["3.7.3"]  # the default asked for the newest
    assert art["source"] == "the hosts' package" and "3.7.3 could not be built" in art["fallback"]
    with pytest.raises(ConfigError, match="offline"):
        EtcdDB(version="3.6.16").resolve_artifacts()
    assert asked == ["3.7.3", "3.6.16"]
    for v in ("debian", "3.4", "3.4.23"):
        assert hosts_release(v)
        assert EtcdDB(version=v).resolve_artifacts()["version"] == v
    assert asked == ["3.7.3", "3.6.16"]  # the hosts' etcd built nothing
    assert not hosts_release("3.5.0") and not hosts_release(None)
    with pytest.raises(ConfigError, match="3.5 and newer") as e:
        EtcdDB(version="3.3.27")
    assert e.value.field == "version"


# --- a real cluster of the default release ----------------------------------------


def _ctx(lab: Any, remotes: dict, db: Any) -> RunContext:
    hosts = {h.name: h for h in lab.hosts()[:3]}
    spec = Spec(name=f"nats-{os.getpid()}", nodes=tuple(hosts), db="nats")
    ctx = RunContext(
        spec=spec,
        hosts=hosts,
        remotes={n: remotes[n] for n in hosts},
        db=db,
        history=None,  # type: ignore[arg-type]
        rng=random.Random(0),
        store_dir="/nonexistent",
    )
    ctx.addresses.update(db.addresses(ctx))
    return ctx


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed")
def test_newest_nats_server_forms_a_cluster_survives_a_kill_and_leaves_nothing(
    lab: Any, remotes: dict
) -> None:
    db = NatsDB(ready_timeout=60)
    art = db.resolve_artifacts()  # from the cache setup.sh filled
    assert art["version"] == "v2.15.2" and "fallback" not in art
    binary = next(a for a in art["artifacts"] if a["file"] == "nats-server")
    assert len(binary["sha256"]) == 64
    ctx = _ctx(lab, remotes, db)
    try:
        with ThreadPoolExecutor(3) as ex:
            list(ex.map(lambda n: db.setup(ctx, n), ctx.nodes))
        db.wait_ready(ctx)
        first = ctx.nodes[0]
        ver = ctx.remotes[first].run(f"{db._bins[first]} --version").stdout
        assert "v2.15.2" in ver
        [meta] = db.primaries(ctx)  # no stream yet: the JetStream meta leader
        db.kill(ctx, meta)
        assert not ctx.remotes[meta].daemon_running(f"{db.node_dir(ctx, meta)}/pid")
        deadline = time.monotonic() + 30
        while not [n for n in db.primaries(ctx) if n != meta]:
            assert time.monotonic() < deadline, "no new meta leader within 30 s"
            time.sleep(0.3)
        db.start(ctx, meta)
        report = db.wait_converged(ctx, time.monotonic() + 60)
        assert report.converged, report.why
    finally:
        for n in ctx.nodes:
            db.teardown(ctx, n)
    for n in ctx.nodes:
        r = ctx.remotes[n]
        assert not r.run(f"test -e {db.node_dir(ctx, n)}", check=False).ok
        left = r.run("pgrep -a nats-server", check=False).stdout
        assert not left.strip(), f"nats-server left running on {n}: {left}"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed")
@pytest.mark.parametrize("version", ["2.9.10", "2.11.10"])
def test_older_nats_releases_are_built_and_run(version: str) -> None:
    program = nats_mod.build_nats(version)
    out = subprocess.run(
        [program.binary("nats-server"), "--version"], capture_output=True, text=True, check=True
    )
    assert f"v{version}" in out.stdout
