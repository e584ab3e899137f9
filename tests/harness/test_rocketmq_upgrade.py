"""The rolling upgrade of a RocketMQ master/slave group to the DLedger commitlog
(harness/dbs/rocketmq_upgrade.py): the pure parts here, the real upgrade on the lab (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checker.upgrade_phases import acked_by_phase
from harness.core.db import Upgradable
from harness.core.errors import ConfigError
from harness.core.history import Op
from harness.dbs.rocketmq import RocketMQDB
from harness.dbs.rocketmq_factory import factory
from harness.dbs.rocketmq_upgrade import RocketMQUpgradeDB, divided_offset
from nemesis.upgrade import next_step
from tests.workloads.conftest import make_ctx

ROOT = Path(__file__).resolve().parents[2]
NODES = {f"n{i}": (f"10.0.0.{i}", 1) for i in range(1, 6)}


def test_upgrade_to_makes_the_db_upgradable_only_from_master_slave() -> None:
    db = factory({"mode": "master-slave", "upgrade_to": "dledger"})
    assert isinstance(db, RocketMQUpgradeDB) and isinstance(db, Upgradable)
    assert not isinstance(factory({"mode": "master-slave"}), Upgradable)
    with pytest.raises(ConfigError, match="upgrade_to"):
        factory({"mode": "dledger", "upgrade_to": "dledger"})


def test_a_switched_broker_gets_the_dledger_conf_of_the_whole_group(tmp_path: Path) -> None:
    db = factory({"mode": "master-slave", "upgrade_to": "dledger"})
    assert isinstance(db, RocketMQUpgradeDB)
    ctx = make_ctx(tmp_path, NODES)
    before = dict(line.split("=", 1) for line in db._conf(ctx, "n3").splitlines())
    assert before["enableDLegerCommitLog"] == "false" and before["brokerRole"] == "SLAVE"
    db.switched.add("n3")
    kv = dict(line.split("=", 1) for line in db._conf(ctx, "n3").splitlines())
    assert kv["enableDLegerCommitLog"] == "true"
    assert kv["dLegerSelfId"] == "n1"  # n2..n5 are peers n0..n3
    assert kv["dLegerPeers"].count(";") == 3 and "n0-10.0.0.2:10913" in kv["dLegerPeers"]
    # a broker's footprint covers its ports in both modes; the name server is never switched
    assert db.ports(ctx, "n3") == [10911, 10912, 10913]
    assert db.upgraded(ctx) == frozenset({"n1", "n3"})
    assert RocketMQDB.runs_dledger(db, ctx, "n3") is False  # the base class: mode dledger only


def test_the_nemesis_seals_then_switches_slaves_then_the_master() -> None:
    """The statuses this DB reports drive nemesis/upgrade.py's order: seal the master, a
    slave once it holds the sealed end, the master last."""
    nodes = ["n1", "n2", "n3", "n4", "n5"]

    def st(offset: int, sealed: bool = False, role: str = "slave") -> dict[str, Any]:
        return {"mode": "ha", "role": role, "offset": offset, "sealed": sealed, "leader": "n2"}

    sts: dict[str, dict | None] = {"n2": st(900, role="master"), "n3": st(900), "n4": st(800)}
    sts["n5"] = None
    assert next_step(nodes, frozenset({"n1"}), sts).action == "seal"
    sts["n2"] = st(900, sealed=True, role="master")
    assert next_step(nodes, frozenset({"n1"}), sts) == next_step(nodes, frozenset({"n1"}), sts)
    step = next_step(nodes, frozenset({"n1"}), sts)
    assert (step.action, step.node) == ("switch", "n3")
    assert next_step(nodes, frozenset({"n1", "n3"}), sts).action == "wait"  # n4 behind
    step = next_step(nodes, frozenset({"n1", "n3", "n4", "n5"}), sts)
    assert (step.action, step.node) == ("switch", "n2")


def test_divided_offset_is_the_stores_own_line() -> None:
    log = (
        "INFO main - Recover old commitlog needWriteMagicCode=true pos=5120 "
        "file=/d/commitlog/00000000000000000000 dividedCommitlogOffset=16777216\n"
        "INFO main - Will set the initial commitlog offset=16777216 for dledger\n"
    )
    assert divided_offset(log) == 16777216
    assert divided_offset("nothing here") is None


def _send(p: int, t0: int, t1: int, body: str, queue: int = 0) -> list[Op]:
    v = {"topic": "t0", "queue": queue, "body": body}
    return [
        Op(type="invoke", process=p, f="send", value=v, time=t0),
        Op(type="ok", process=p, f="send", value={**v, "offset": 1, "queue_offset": 0}, time=t1),
    ]


def test_acked_by_phase_counts_and_finds_the_lost() -> None:
    nem = "nemesis"
    ops = [
        *_send(0, 1, 2, "a"),
        Op(type="invoke", process=nem, f="start-upgrade", time=10),
        *_send(1, 9, 11, "b"),  # in flight across the seal: during
        Op(type="info", process=nem, f="start-upgrade", value={"remaining": ["n2"]}, time=20),
        *_send(2, 21, 22, "c"),
        Op(type="info", process=nem, f="start-upgrade", value={"remaining": []}, time=30),
        *_send(3, 31, 32, "d"),
        *_send(4, 33, 34, "e", queue=1),
    ]
    final = {"topic": "t0", "queue": 0, "offset": 0, "max": 200, "final": True}
    ops += [
        Op(type="invoke", process=5, f="pull", value=final, time=40),
        Op(
            type="ok",
            process=5,
            f="pull",
            value={**final, "messages": [[0, 1, "a"], [1, 2, "b"], [2, 3, "c"], [3, 4, "d"]]},
            time=41,
        ),
    ]
    out = acked_by_phase(ops)
    assert out["phases"] == {
        "before": {"acked": 1, "lost": 0},
        "during": {"acked": 2, "lost": 0},
        "after": {"acked": 2, "lost": 1},  # e: queue 1 was never drained
    }
    assert (out["upgrade_started"], out["upgrade_done"]) == (10, 30)


@pytest.mark.slow
@pytest.mark.lab
def test_rocketmq_master_slave_upgraded_to_dledger_under_load_on_the_lab(
    lab: Any, tmp_path: Path
) -> None:
    """The real upgrade: RocketMQ 5.3.3's master and three slaves take sends, the upgrade
    seals the master and switches one broker per step to the DLedger commitlog while the load
    runs. Every broker must be switched, sends must be acked before and after the switch,
    and every acked one must be in the final drains (the queue checker's verdict)."""
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--db", "rocketmq",
         "--db-option", "mode=master-slave", "--db-option", "upgrade_to=dledger",
         "--nemesis", "upgrade", "--time-limit", "150", "--no-progress", "--store", str(store),
         "--seed", "5"],
        capture_output=True, text=True, timeout=1500, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    runs = sorted(p for p in store.glob("*/*") if p.is_dir() and not p.is_symlink())
    assert runs, proc.stdout[-2000:] + proc.stderr[-2000:]
    check_upgrade_run(runs[-1], proc.returncode)


def check_upgrade_run(run: Path, returncode: int) -> dict[str, Any]:
    """What an upgrade run must show (also run by hand on a run made on another lab):
    VALID, every broker switched, sends acked before and after the switch, and none of any
    phase missing from the final drains. Returns the phase counts."""
    results = json.loads((run / "results.json").read_text())
    assert returncode == 0, (returncode, results.get("run"), results.get("checkers"))
    assert results["valid"] is True
    ops = [Op(**{k: v for k, v in json.loads(ln).items() if k != "index"}) for ln in
           (run / "history.jsonl").open()]  # fmt: skip
    phases = acked_by_phase(ops)
    assert phases["upgrade_done"] is not None, phases
    counts = phases["phases"]
    assert counts["before"]["acked"] > 0 and counts["after"]["acked"] > 0, counts
    assert all(c["lost"] == 0 for c in counts.values()), counts
    test = json.loads((run / "test.json").read_text())
    assert test["artifacts"]["upgrade_to"] == "dledger"
    # the verdict names them: the upgrade-phases checker ran on the same history
    recheck = run / "recheck.json"
    judged = json.loads(recheck.read_text()) if recheck.exists() else results
    assert judged["checkers"]["upgrade-phases"]["stats"]["phases"] == counts
    return phases
