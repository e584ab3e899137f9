"""``--db zookeeper``: the pure parts (versions, zoo.cfg, srvr parsing, the declared
capabilities) and one short real run on the lab against ZooKeeper's own jar from Maven
Central (the first build fetches it; later runs use the cache and fetch nothing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.core.db import (
    Addressable,
    Converges,
    HasDefaultWorkload,
    HasFootprint,
    HasLogFiles,
    HasPrimaries,
    Killable,
    Pausable,
    Reconfigurable,
    ResolvesArtifacts,
    WaitsReady,
    runs_under_faketime,
)
from harness.core.errors import ConfigError
from harness.dbs.zookeeper import (
    NEWEST,
    ZooKeeperDB,
    check_version,
    factory,
    parse_srvr,
    zoo_cfg,
)
from nemesis.membership import MEMBERSHIP

ROOT = Path(__file__).resolve().parents[2]


def test_versions_are_3_8_or_3_9() -> None:
    assert check_version(NEWEST) == (3, 9, 5)
    assert check_version("3.8.4") == (3, 8, 4)
    with pytest.raises(ConfigError, match="only 3.8.x and 3.9.x"):
        check_version("3.7.2")
    with pytest.raises(ConfigError, match="x.y.z"):
        check_version("3.9.5; rm -rf /")
    with pytest.raises(ConfigError, match="version"):
        factory({"version": "4.0"})
    with pytest.raises(ConfigError, match="absolute"):
        factory({"root": "relative"})
    with pytest.raises(ConfigError, match="unknown"):
        factory({"flavour": "x"})


def test_zoo_cfg_names_every_server_and_syncs() -> None:
    cfg = zoo_cfg(
        servers={1: "10.0.0.1", 2: "10.0.0.2", 3: "10.0.0.3"},
        data_dir="/d/n2/data",
        address="10.0.0.2",
        client_port=2181,
        quorum_port=2888,
        election_port=3888,
        tick_ms=500,
        force_sync=True,
    )
    lines = cfg.splitlines()
    assert "server.3=10.0.0.3:2888:3888" in lines
    assert "clientPortAddress=10.0.0.2" in lines and "dataDir=/d/n2/data" in lines
    assert "forceSync=yes" in lines and "tickTime=500" in lines
    assert any(ln.startswith("4lw.commands.whitelist=") and "srvr" in ln for ln in lines)


def test_srvr_answers_parsed_and_a_non_serving_one_is_none() -> None:
    text = (
        "Zookeeper version: 3.9.5\nLatency min/avg/max: 0/0.1/3\nZxid: 0x200000007\nMode: leader\n"
    )
    assert parse_srvr(text) == {"mode": "leader", "zxid": 0x200000007, "epoch": 2}
    assert parse_srvr("This ZooKeeper instance is not currently serving requests\n") is None
    assert parse_srvr("") is None


def test_capabilities_and_what_is_refused() -> None:
    db = factory({})
    assert isinstance(db, ZooKeeperDB)
    for cap in (Killable, Pausable, HasPrimaries, HasLogFiles, WaitsReady, Addressable,
                HasFootprint, HasDefaultWorkload, ResolvesArtifacts, Converges):  # fmt: skip
        assert isinstance(db, cap), cap.__name__
    assert not isinstance(db, Reconfigurable)
    assert "not yet" in (MEMBERSHIP.why_not(db, []) or "")
    assert runs_under_faketime(db) is False
    choice = db.default_workload()
    # registers, and no samplers: their values are the reference node's, not ZooKeeper's
    assert choice.name == "register" and choice.options["sampler"] is False
    assert db.data_files.log == ("version-2/log.*",)


# --- the real system on the lab ----------------------------------------------------


def _no_java_build() -> str | None:
    """Why the real system cannot be built here (the first run builds it with Maven)."""
    for tool in ("mvn", "java"):
        if shutil.which(tool) is None:
            return f"no {tool} on this machine"
    return None


@pytest.mark.integration
@pytest.mark.lab
def test_zookeeper_register_with_kills_on_the_lab(lab: Any, tmp_path: Path) -> None:
    """A short real run: a 3-server ensemble of ZooKeeper's own jar, a kill, the register
    workload through the gateway. The verdict must be a real one with acknowledged writes,
    and test.json must name the ZooKeeper jar that ran with its checksum."""
    why = _no_java_build()
    if why:
        pytest.skip(why)
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--nodes", "3",
         "--db", "zookeeper", "--nemesis", "kill", "--nemesis-interval", "3",
         "--time-limit", "8", "--no-progress", "--store", str(store), "--seed", "5"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    runs = sorted(p for p in store.glob("*/*") if p.is_dir() and not p.is_symlink())
    assert runs, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = runs[-1]
    results = json.loads((run / "results.json").read_text())
    test = json.loads((run / "test.json").read_text())
    assert proc.returncode == 0, (proc.returncode, results.get("run"), proc.stderr[-1500:])
    assert results["valid"] is True
    hist = [json.loads(ln) for ln in (run / "history.jsonl").open()]
    writes = [o for o in hist if o["type"] == "ok" and o["f"] in ("write", "cas")]
    reads = [o for o in hist if o["type"] == "ok" and o["f"] == "read"]
    assert len(writes) > 10 and reads, (len(writes), len(reads))
    art = test["artifacts"]
    assert art["zookeeper"] == NEWEST
    jars = {a["coordinate"]: a["sha256"] for a in art["artifacts"]}
    assert len(jars[f"org.apache.zookeeper:zookeeper:{NEWEST}"]) == 64


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_zookeeper_watch_with_kills_on_the_lab(lab: Any, tmp_path: Path) -> None:
    """A short real run of the watch workload's ZooKeeper client (publishes, multis,
    persistent watches) on a 3-server ensemble with kills: the subscription checker must
    reach a verdict (something delivered) judging exactly what ZooKeeper promises, and it
    must hold (a kill loses nothing that was fsynced)."""
    why = _no_java_build()
    if why:
        pytest.skip(why)
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--nodes", "3",
         "--db", "zookeeper", "-w", "watch", "--workload-option", "client=zookeeper",
         "--nemesis", "kill", "--nemesis-interval", "3", "--time-limit", "20",
         "--no-progress", "--store", str(store), "--seed", "7"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    runs = sorted(p for p in store.glob("*/*") if p.is_dir() and not p.is_symlink())
    assert runs, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads((runs[-1] / "results.json").read_text())
    sub = results["checkers"]["subscription"]
    assert proc.returncode == 0, (proc.returncode, results.get("anomalies"), proc.stderr[-1500:])
    assert sub["valid"] is True, sub.get("anomalies")
    stats = sub["stats"]
    assert stats["declared"] == ["ordered", "final_state"] and stats["scope"] == "stream"
    assert stats["deliveries"] > 0 and stats["ops"]["publish"]["ok"] > 0, stats
