"""Failover in mode ha: who the operator promotes, and how the checker reads the result."""

from __future__ import annotations

from checker import log_safety as ls
from harness.core.history import Op
from harness.dbs import get_db
from harness.dbs.dledger import DLedgerDB
from harness.dbs.ha import HADB
from nemesis.failover import choose_new_master
from nemesis.package import build_package


def test_promotes_the_live_slave_with_the_highest_offset() -> None:
    sts = {
        "n1": {"role": "master", "offset": 900},
        "n2": {"role": "slave", "offset": 500},
        "n3": {"role": "slave", "offset": 700},
        "n4": None,
    }
    assert choose_new_master(sts, dead="n1") == "n3"
    sts["n2"]["offset"] = 700
    assert choose_new_master(sts, dead="n1") == "n2"  # ties: lowest name, deterministic
    assert choose_new_master({"n1": {"role": "master", "offset": 1}}, dead="n1") is None


def test_db_option_mode_ha_builds_hadb_and_plain_dledger_stays() -> None:
    db = get_db("dledger", {"mode": "ha", "sync": True, "root": "/tmp/x"})
    assert isinstance(db, HADB) and db.sync
    plain = get_db("dledger", {"root": "/tmp/x"})
    assert type(plain) is DLedgerDB


def test_failover_fault_is_scheduled_and_healed() -> None:
    import random

    pkg = build_package(["failover"], interval=1, rng=random.Random(0))
    assert pkg.nemesis.fs() == {"start-failover", "stop-failover"}
    assert [o.f for o in pkg.final_ops] == ["stop-failover"]


def _history() -> list[Op]:
    ops = []

    def add(type: str, p: int, f: str, v: object) -> None:
        ops.append(Op(type=type, process=p, f=f, value=v, index=len(ops)))

    add("invoke", 1, "append", {"payload": "kept"})
    add("ok", 1, "append", {"payload": "kept", "index": 0, "term": 1})
    add("invoke", 1, "append", {"payload": "lost"})
    add("ok", 1, "append", {"payload": "lost", "index": 1, "term": 1})
    # the new master's entry: a client's too (its append never heard back), or log
    # safety would call it unproposed
    add("invoke", 3, "append", {"payload": "new"})
    add("invoke", 2, "read", {"from": 0, "to": 10, "final": True})
    add("ok", 2, "read", {"entries": [[0, 1, "kept"], [1, 2, "new"]], "committed": 1})
    return ops


def test_async_loss_is_a_measured_window_sync_loss_a_violation() -> None:
    plain = ls.check_log_safety(_history())
    assert plain["valid"] is False and "lost-ack" in plain["anomalies"]
    asyn = ls.check_log_safety(_history(), ha={"sync": False})
    assert asyn["valid"] is True and len(asyn["notes"]["loss-window"]) == 1
    assert asyn["stats"]["loss_window"] == 1
    syn = ls.check_log_safety(_history(), ha={"sync": True})
    assert syn["valid"] is False and syn["anomalies"]["lost-ack"][0]["payload"] == "lost"
