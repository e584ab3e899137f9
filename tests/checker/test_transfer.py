"""The transfer checker: which answers it judges, and that both engines run it on fault
records alone (checker/transfer.py)."""

from __future__ import annotations

from typing import Any

from checker.dispatch import check_history
from checker.transfer import MEMBERSHIP_F, check_transfers, lost_transfers
from harness.core.op import Op


def nem(index: int, typ: str, f: str, value: Any = None) -> Op:
    return Op(type=typ, process="nemesis", f=f, value=value, index=index, time=index)


def transfer(
    outcome: str, *, lag: str = "kill", promise: str | None = "hands-over", ok: bool = True
) -> dict[str, Any]:
    v: dict[str, Any] = {
        "variant": "transfer",
        "target": "n2",
        "lag": lag,
        "changes": [
            {
                "op": "transfer",
                "node": "n2",
                "ok": ok,
                "result": {"code": "X", "from": "n1", "leader": "n3", "outcome": outcome},
            }
        ],
    }
    if promise:
        v["promise"] = promise
    return v


def membership(at: int, value: dict[str, Any]) -> list[Op]:
    return [
        nem(at, "invoke", MEMBERSHIP_F, {"variant": "transfer"}),
        nem(at + 1, "info", MEMBERSHIP_F, value),
    ]


def test_a_quiet_lost_transfer_is_the_anomaly_with_its_indexes() -> None:
    found, counts = lost_transfers(membership(10, transfer("lost")))
    assert counts == {"judged": 1}
    assert found == [
        {
            "target": "n2",
            "from": "n1",
            "leader": "n3",
            "outcome": "lost",
            "code": "X",
            "indexes": [10, 11],
        }
    ]


def test_handed_over_and_kept_are_judged_and_fine() -> None:
    for outcome in ("handed-over", "kept"):
        res = check_transfers(membership(0, transfer(outcome)))
        assert res["valid"] is True and res["stats"]["judged"] == 1, outcome


def test_what_is_not_judged_says_why() -> None:
    cases = {
        "the DB promises no handover": transfer("lost", promise=None),
        "the target lagged by a cut (its own term rose)": transfer("lost", lag="cut"),
        "no answer from the DB": transfer("lost", ok=False),
        "the answer gives no outcome": transfer("something"),
    }
    for why, value in cases.items():
        res = check_transfers(membership(0, value))
        assert res["valid"] is True, why
        assert res["stats"] == {"judged": 0, "not_judged": {why: 1}}, why


def test_another_fault_in_force_at_any_moment_excuses_the_transfer() -> None:
    # a partition started before and healed after; a kill started during; one never healed
    around = [nem(1, "invoke", "start-partition"), nem(2, "info", "start-partition", {})]
    around += membership(3, transfer("lost"))
    around += [nem(5, "invoke", "stop-partition"), nem(6, "info", "stop-partition", {})]
    during = [nem(1, "invoke", MEMBERSHIP_F), nem(2, "info", "start-kill", {})]
    during += [nem(3, "info", MEMBERSHIP_F, transfer("lost"))]
    never = [nem(1, "invoke", "start-pause"), nem(2, "info", "start-pause", {})]
    never += membership(3, transfer("lost"))
    for ops in (around, during, never):
        res = check_transfers(ops)
        assert res["valid"] is True
        assert res["stats"]["not_judged"] == {"another fault was in force": 1}


def test_a_fault_healed_before_the_transfer_leaves_it_judged() -> None:
    ops = [nem(1, "invoke", "start-kill"), nem(2, "info", "start-kill", {})]
    ops += [nem(3, "invoke", "stop-kill"), nem(4, "info", "stop-kill", {})]
    ops += membership(5, transfer("lost"))
    found, counts = lost_transfers(ops)
    assert counts == {"judged": 1} and [e["indexes"] for e in found] == [[5, 6]]


def test_the_local_engine_hands_fault_records_to_it_from_a_file(tmp_path) -> None:
    """Through check_history on a JSONL file (the path a stored run's re-check takes):
    the columnar path must step aside, the ops path must keep the fault records."""
    from harness.core.jsonl import HistoryWriter

    ops = [
        Op(type="invoke", process=0, f="append", value={"payload": "0-1"}),
        Op(type="ok", process=0, f="append", value={"payload": "0-1", "index": 1, "term": 1}),
        *membership(0, transfer("lost")),
        Op(type="invoke", process=0, f="read", value={"from": 0, "to": 5, "final": True}),
        Op(type="ok", process=0, f="read", value={"entries": [[1, 1, "0-1"]], "committed": 1}),
    ]
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        for n, op in enumerate(ops):
            w.append(op.replace(index=None, time=n + 1))
    res = check_history(path)
    assert res["valid"] is False
    assert set(res["anomalies"]) == {"transfer-lost"}
    assert res["checkers"]["log-safety"]["valid"] is True
