"""``--db kafka``: the pure parts (versions, roles, server.properties, the declared loss window
and what the deck is refused), and one short real run on the lab against Kafka's own jars from
Maven Central in KRaft mode (the first build fetches them; later runs use the cache)."""

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
    InformsChecker,
    Killable,
    Pausable,
    Reconfigurable,
    ResolvesArtifacts,
    WaitsReady,
)
from harness.core.errors import ConfigError
from harness.core.remote import Host
from harness.dbs.kafka import (
    NEWEST,
    KafkaDB,
    check_version,
    factory,
    loss_window,
    roles,
    server_properties,
    subscription_promises,
)
from nemesis.disk import CORRUPT, LOSE_UNFSYNCED, TORN_WRITE
from nemesis.membership import MEMBERSHIP

ROOT = Path(__file__).resolve().parents[2]
FIVE = ["n1", "n2", "n3", "n4", "n5"]


def test_versions_are_4x_and_bad_options_are_named() -> None:
    assert check_version(NEWEST) == (4, 4, 0)
    with pytest.raises(ConfigError, match="only 4.x"):
        check_version("3.9.1")
    with pytest.raises(ConfigError, match="x.y.z"):
        check_version("4.4")
    with pytest.raises(ConfigError, match="min_insync"):
        factory({"min_insync": 4, "replication": 3})
    with pytest.raises(ConfigError, match="delivery_timeout_ms"):
        factory({"delivery_timeout_ms": 100, "request_timeout_ms": 3000})
    with pytest.raises(ConfigError):
        factory({"acks": "0"})
    with pytest.raises(ConfigError):
        factory({"mode": "zookeeper"})


def test_roles_combined_and_separate() -> None:
    assert roles(FIVE, 3, "combined") == {
        "n1": "broker,controller", "n2": "broker,controller", "n3": "broker,controller",
        "n4": "broker", "n5": "broker",
    }  # fmt: skip
    assert list(roles(FIVE, 1, "separate").values()) == ["controller", *["broker"] * 4]
    with pytest.raises(ConfigError, match="controllers=6"):
        roles(FIVE, 6, "combined")


def _props(role: str, **kw: Any) -> dict[str, str]:
    args: dict[str, Any] = dict(
        node_id=2, role=role, address="10.0.0.2", voters={1: "10.0.0.1", 2: "10.0.0.2"},
        broker_port=9092, controller_port=9093, data_dir="/d/n2/data", rack="n2", brokers=5,
        replication=3, min_insync=2, unclean=False, flush_messages=None,
    )  # fmt: skip
    args.update(kw)
    text = server_properties(**args)
    return dict(ln.split("=", 1) for ln in text.splitlines())


def test_server_properties_by_role() -> None:
    combined = _props("broker,controller")
    assert combined["controller.quorum.voters"] == "1@10.0.0.1:9093,2@10.0.0.2:9093"
    assert combined["listeners"] == "PLAINTEXT://10.0.0.2:9092,CONTROLLER://10.0.0.2:9093"
    assert combined["min.insync.replicas"] == "2"
    assert combined["unclean.leader.election.enable"] == "false"
    assert combined["broker.rack"] == "n2" and "RackAware" in combined["replica.selector.class"]
    assert "log.flush.interval.messages" not in combined
    controller = _props("controller")
    assert controller["listeners"] == "CONTROLLER://10.0.0.2:9093"
    assert "inter.broker.listener.name" not in controller  # a broker-only key
    assert _props("broker", flush_messages=1)["log.flush.interval.messages"] == "1"


def test_loss_window_follows_acks_and_unclean() -> None:
    assert loss_window("all", False) is None
    assert "acks=1" in (loss_window("1", False) or "")
    assert "unclean" in (loss_window("all", True) or "")
    assert factory({}).checker_options() == {}
    window = factory({"acks": "1"}).checker_options()["queue"]["loss_window"]
    assert window.startswith("acks=1")


def test_the_watch_promises_follow_the_loss_window() -> None:
    """What a lost acknowledged record breaks is not declared under a window (the queue
    checker's notes, for a checker without notes); no transactions without acks=all and
    idempotence, so nothing atomic to judge; the defaults take nothing away."""
    assert subscription_promises("all", False, True) == {}
    lost = {"no_gap": False, "resumable": False, "final_state": False, "atomic": False}
    assert subscription_promises("1", False, True) == lost
    assert subscription_promises("all", True, True) == lost
    assert subscription_promises("all", False, False) == {"atomic": False}
    assert factory({"unclean": True}).checker_options()["subscription"] == lost
    assert "subscription" not in factory({}).checker_options()


def test_capabilities_and_what_is_refused() -> None:
    db = factory({})
    assert isinstance(db, KafkaDB)
    for cap in (Killable, Pausable, HasPrimaries, HasLogFiles, WaitsReady, Addressable,
                HasFootprint, HasDefaultWorkload, ResolvesArtifacts, InformsChecker,
                Converges):  # fmt: skip
        assert isinstance(db, cap), cap.__name__
    assert not isinstance(db, Reconfigurable)
    fuse = [Host(name="n1", address="127.0.0.1", extras={"fuse": True})]
    assert "not yet" in (MEMBERSHIP.why_not(db, fuse) or "")
    for lazy in (LOSE_UNFSYNCED, TORN_WRITE):
        assert "page caches" in (lazy.why_not(db, fuse) or "")
        assert lazy.why_not(factory({"flush_messages": 1}), fuse) is None
    assert CORRUPT.why_not(db, fuse) is None  # its data files are declared
    choice = db.default_workload()
    assert choice.name == "queue" and choice.options["queues"] == 4
    assert choice.client_timeout and choice.client_timeout * 1000 > 8000  # > delivery timeout
    assert len(db.cluster_id) == 22 and db.cluster_id != factory({}).cluster_id


# --- the real system on the lab ----------------------------------------------------


def _no_java_build() -> str | None:
    """Why the real system cannot be built here (the first run builds it with Maven)."""
    for tool in ("mvn", "java"):
        if shutil.which(tool) is None:
            return f"no {tool} on this machine"
    return None


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_kafka_queue_with_kills_on_the_lab(lab: Any, tmp_path: Path) -> None:
    """A short real run: five KRaft nodes (three combined controllers) of Kafka's own jars,
    kills, the queue workload through the gateway. Acknowledged sends must be found by the
    final drains of every node, the verdict a real one, test.json naming the jar that ran."""
    why = _no_java_build()
    if why:
        pytest.skip(why)
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--db", "kafka",
         "--nemesis", "kill", "--nemesis-interval", "5", "--time-limit", "20",
         "--no-progress", "--store", str(store), "--seed", "3"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    runs = sorted(p for p in store.glob("*/*") if p.is_dir() and not p.is_symlink())
    assert runs, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = runs[-1]
    results = json.loads((run / "results.json").read_text())
    test = json.loads((run / "test.json").read_text())
    assert proc.returncode == 0, (proc.returncode, results.get("run"), proc.stderr[-1500:])
    assert results["valid"] is True
    stats = results["checkers"]["queue"]["stats"]
    assert stats["sends"]["ok"] > 20, stats
    assert stats["final_nodes"] == FIVE, stats
    assert stats["final_messages"] >= stats["sends"]["ok"], stats
    art = test["artifacts"]
    assert art["kafka"] == NEWEST and art["loss_window"] is None
    jars = {a["coordinate"]: a["sha256"] for a in art["artifacts"]}
    assert len(jars[f"org.apache.kafka:kafka_2.13:{NEWEST}"]) == 64
