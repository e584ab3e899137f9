"""The transactional checker against histories with known answers (checker/txn_planted.py):
every planted class found with the cycle explained, nothing on simulated strictly
serializable histories at any level, and each level's verdict as documented."""

from __future__ import annotations

from typing import Any

import pytest

from checker.txn import LEVELS, TxnCheckOptions, check_txn, explanation, proscribed
from checker.txn_planted import plant, simulate, stale_read
from harness.core.errors import HistoryError
from harness.core.op import Op

KINDS = ("list-append", "rw-register")


def _opts(kind: str, label: str, **more: Any) -> dict[str, Any]:
    o: dict[str, Any] = {"workload": kind, **more}
    if label.endswith("-realtime"):
        o["isolation"] = "strict-serializable"
    if label.endswith("-process"):
        o["process"] = True
    return o


@pytest.mark.parametrize("kind", KINDS)
def test_every_planted_class_is_found_and_nothing_else(kind: str) -> None:
    for label, (ops, *kinds) in plant(kind).items():
        r = check_txn(ops, _opts(kind, label))
        assert r["valid"] is False, label
        assert set(r["anomalies"]) == set(kinds), (label, r["anomalies"])
        assert r["stats"]["anomaly_counts"][label.replace("-nonrepeatable", "")] == 1, label


@pytest.mark.parametrize("kind", KINDS)
def test_a_cycle_is_explained_edge_by_edge(kind: str) -> None:
    ops = plant(kind)["G-single"][0]
    r = check_txn(ops, {"workload": kind})
    (ex,) = r["anomalies"]["G-single"]
    edges = [v for k, v in ex.items() if k.startswith("edge ")]
    assert sorted(e.split(" ")[1] for e in edges) == ["-rw->", "-wr->"], edges
    assert all(len(e) <= 200 and not e.endswith("edge") for e in edges), edges
    assert ex["cycle"].startswith("T0 -rw-> T") and ex["cycle"].endswith("T0")
    assert ex["indexes"] == sorted(ex["indexes"]) and len(ex["indexes"]) == 4
    assert {t["name"] for t in ex["txns"]} == {e.split(" ")[0] for e in edges}
    assert r["counterexample_text"] == explanation("G-single", ex)
    assert r["counterexample_text"].count("\n") == 2


def test_the_claimed_level_decides_what_is_invalid() -> None:
    ops = plant("list-append")["G2-item"][0]
    for level, valid in (
        ("serializable", False),
        ("repeatable-read", False),
        ("snapshot-isolation", True),
        ("read-committed", True),
    ):
        r = check_txn(ops, {"isolation": level})
        assert r["valid"] is valid, level
        if valid:
            assert [n["kind"] for n in r["notes"]["allowed-anomaly"]] == ["G2-item"]
    # G-single (read skew) is proscribed by snapshot isolation, not by read committed
    ops = plant("list-append")["G-single"][0]
    assert check_txn(ops, {"isolation": "snapshot-isolation"})["valid"] is False
    assert check_txn(ops, {"isolation": "read-committed"})["valid"] is True
    # a read that changes within a txn (a fuzzy read) is read committed's to allow
    for kind in KINDS:
        ops = plant(kind)["G-single-nonrepeatable"][0]
        assert check_txn(ops, {"isolation": "read-committed"})["valid"] is True, kind
        r = check_txn(ops, {"isolation": "snapshot-isolation"})
        assert set(r["anomalies"]) == {"G-single"}, kind
    # data anomalies are wrong at every level
    ops = plant("list-append")["duplicate-elements"][0]
    assert check_txn(ops, {"isolation": "read-uncommitted"})["valid"] is False


def test_levels_nest_as_adya_orders_them() -> None:
    assert LEVELS["read-uncommitted"] < LEVELS["read-committed"] < LEVELS["snapshot-isolation"]
    assert LEVELS["snapshot-isolation"] < LEVELS["repeatable-read"]
    assert LEVELS["repeatable-read"] <= LEVELS["serializable"]
    strict = proscribed(TxnCheckOptions(isolation="strict-serializable"))
    assert "G-single-realtime" in strict and "G-single-realtime" not in proscribed(
        TxnCheckOptions(isolation="serializable")
    )


def test_rw_register_write_skew_under_si_is_unknown_not_valid() -> None:
    ops = plant("rw-register")["G2-item"][0]
    r = check_txn(ops, {"isolation": "snapshot-isolation"})
    assert r["valid"] == "unknown" and "G-single" in r["reason"]


@pytest.mark.parametrize("kind", KINDS)
def test_no_false_alarm_on_strictly_serializable_histories(kind: str) -> None:
    for seed in (1, 2):
        ops = simulate(2500, kind, seed=seed, concurrency=10, key_count=6)
        r = check_txn(ops, {"isolation": "strict-serializable", "process": True})
        assert r["valid"] is True, (seed, r["anomalies"])
        assert not r["notes"], r["notes"]
        e = r["stats"]["edges"]
        assert e["ww"] + e["wr"] + e["rw"] > 2500 and e["realtime"] > 0


def test_a_stale_read_in_a_large_history_is_found() -> None:
    ops = simulate(5_000, "list-append", seed=5, concurrency=10)
    bad, index = stale_read(ops, seed=5)
    strict = check_txn(bad, {"isolation": "strict-serializable"})
    assert strict["valid"] is False
    found = [e for k, exs in strict["anomalies"].items() for e in exs if index in e["indexes"]]
    # a -realtime cycle at least (the read's writer had completed before it began); a plain
    # G-single too when the stale txn also saw another of that writer's writes
    assert found and any(k.endswith("-realtime") for k in strict["anomalies"]), strict
    assert set(strict["anomalies"]) <= {"G-single", "G-single-realtime", "G2-item-realtime"}
    assert check_txn(ops, {"isolation": "strict-serializable"})["valid"] is True


def test_malformed_micro_ops_name_the_op() -> None:
    ops = [Op("invoke", 0, "txn", [["append", 1]], index=0), Op("ok", 0, "txn", [], index=1)]
    with pytest.raises(HistoryError) as e:
        check_txn(ops)
    assert e.value.index == 0 and "micro-op" in str(e.value)
    ops = [
        Op("invoke", 0, "txn", [["r", 1, None]], index=0),
        Op("ok", 0, "txn", [["r", 1, 5]], index=1),
    ]
    with pytest.raises(HistoryError) as e:
        check_txn(ops, {"workload": "list-append"})
    assert e.value.index == 1 and "list" in str(e.value)
    for kind, bad in (("rw-register", ["x", 1, 2]), ("rw-register", ["w", [1], 2])):
        ops = [Op("invoke", 0, "txn", [bad], index=0), Op("ok", 0, "txn", [bad], index=1)]
        with pytest.raises(HistoryError) as e:
            check_txn(ops, {"workload": kind})
        assert e.value.index == 0, (bad, e.value)
    dup = [
        Op("invoke", 0, "txn", [["append", 1, 1]], index=0),
        Op("ok", 0, "txn", [["append", 1, 1]], index=1),
        Op("invoke", 0, "txn", [["append", 1, 1]], index=2),
        Op("ok", 0, "txn", [["append", 1, 1]], index=3),
    ]
    with pytest.raises(HistoryError) as e:
        check_txn(dup)
    assert e.value.index == 2 and "unique" in str(e.value)
