"""Lost commits (checker/txn_lost.py): planted histories of a primary failed over to a
standby that had not received its last acknowledged commits. Inside a declared loss
window they are measured, not judged; outside it, or with no window, they are INVALID."""

from __future__ import annotations

from typing import Any

import pytest

from checker.txn import check_txn
from checker.txn_planted import LOSS_WINDOW, failover_loss
from harness.core.op import NEMESIS, Op

MS = 1_000_000


class _History:
    """Ops with history indexes and times (1 ms apart) in the order they are added."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _add(self, op: Op) -> Op:
        op = op.replace(index=len(self.ops), time=len(self.ops) * MS)
        self.ops.append(op)
        return op

    def txn(self, process: int, done: list[list[Any]], typ: str = "ok") -> None:
        inv = [[f, k, None if f == "r" else v] for f, k, v in done]
        self._add(Op("invoke", process, "txn", inv))
        self._add(Op(typ, process, "txn", done if typ == "ok" else inv))

    def failover(self, promoted: str | None = "n2", **more: Any) -> None:
        self._add(Op("invoke", NEMESIS, "start-failover", {"target": "master"}))
        value = {"nodes": ["n1"], "killed": "n1", "promoted": promoted, **more}
        self._add(Op("info", NEMESIS, "start-failover", value))


WINDOW = LOSS_WINDOW


@pytest.mark.parametrize("kind", ["list-append", "rw-register"])
def test_a_loss_inside_the_declared_window_is_measured_not_invalid(kind: str) -> None:
    ops = failover_loss(kind)
    res = check_txn(ops, {"durable": True, "loss_window": WINDOW})
    assert res["valid"] is True, res
    assert "lost-commit" not in res["anomalies"]
    (note,) = res["notes"]["lost-commit-window"]
    assert note["failover"]["promoted"] == "n2" and note["failover"]["failover"] == 1
    lost = [[0, 2], [1, 1]] if kind == "list-append" else [[0, 2]]
    assert note["lost"] == lost
    st = res["stats"]["lost_commits"]
    assert st["lost_commits"] == 1 and st["in_window"] == 1 and st["judged_without"] == 1
    (fo,) = st["failovers"]
    # the lost txn was acknowledged 4 ops (4 ms) before the promotion completed
    assert fo["lost_commits"] == 1 and fo["window_ms"] == 4.0 and fo["newest_ms"] == 4.0
    assert res["stats"]["loss_window"] == WINDOW
    assert "loss window" in res["promise"]


@pytest.mark.parametrize("kind", ["list-append", "rw-register"])
def test_with_no_window_a_lost_commit_is_invalid(kind: str) -> None:
    """Synchronous replication declares no window: the same history is INVALID, with the
    lost commit named, its failover and its age at the promotion."""
    ops = failover_loss(kind)
    res = check_txn(ops, {"durable": True})
    assert res["valid"] is False
    (ex,) = res["anomalies"]["lost-commit"]
    assert ex["txn"] == ("T4" if kind == "list-append" else "T2")
    assert ex["failover"]["killed"] == "n1"
    assert ex["acked_ms_before_promotion"] > 0
    assert "acknowledged" in ex["why"]
    assert res["stats"]["lost_commits"]["failovers"][0]["lost_commits"] == 1
    assert "kept" in res["promise"] and "window" not in res["promise"]


def test_a_loss_outside_any_failover_is_invalid_even_with_a_window() -> None:
    res = check_txn(
        failover_loss("list-append", failover=False), {"durable": True, "loss_window": WINDOW}
    )
    assert res["valid"] is False and res["anomalies"]["lost-commit"]
    assert "failover" not in res["anomalies"]["lost-commit"][0]


def test_a_commit_the_new_primary_acknowledged_is_not_in_the_window() -> None:
    ops = failover_loss("list-append", after_promotion=True)
    res = check_txn(ops, {"durable": True, "loss_window": WINDOW})
    assert res["valid"] is False and res["anomalies"]["lost-commit"]
    assert res["stats"]["lost_commits"]["in_window"] == 0


def test_a_level_without_durability_reports_it_as_allowed() -> None:
    """Serializable alone does not promise an acknowledged commit stays (a txn nobody saw
    may be ordered last); the loss is reported, the verdict not failed for it."""
    ops = failover_loss("rw-register")
    res = check_txn(ops, {})
    assert "lost-commit" not in res["anomalies"]
    assert any(a["kind"] == "lost-commit" for a in res["notes"]["allowed-anomaly"])
    assert check_txn(ops, {"isolation": "strict-serializable"})["anomalies"]["lost-commit"]


def test_a_stale_read_at_the_end_is_not_a_lost_commit() -> None:
    """The newest append missing from the last read, with nothing newer in it: a stale
    read at most (the history shows no order for the unread append), not a history
    rewritten."""
    h = _History()
    h.txn(0, [["append", 0, 1]])
    h.txn(0, [["append", 0, 2]])
    h.txn(1, [["r", 0, [1]]])
    res = check_txn(h.ops, {"isolation": "strict-serializable"})
    assert "lost-commit" not in res["anomalies"]
    assert "lost_commits" not in res["stats"]


def test_the_window_ends_when_the_promotion_took_effect() -> None:
    """``kill_ms`` and ``promote_ms`` (the nemesis's measures from the op's start) place
    the kill and the promotion; a failover that promoted nobody has no window."""
    h = _History()
    h.txn(0, [["append", 0, 1]])
    h.txn(0, [["append", 0, 2]])  # acknowledged at op 3 (3 ms)
    h.failover(kill_ms=0.2, promote_ms=0.5)  # invoked at 4 ms, promoted at 4.5 ms
    h.txn(1, [["r", 0, [1]], ["append", 0, 3]])
    h.txn(1, [["r", 0, [1, 3]]])
    res = check_txn(h.ops, {"durable": True, "loss_window": WINDOW})
    assert res["valid"] is True
    (fo,) = res["stats"]["lost_commits"]["failovers"]
    assert fo["window_ms"] == 1.5 and fo["ms"] == 0.3
    ops = [o.replace(value={**o.value, "promoted": None}) if o.type == "info" else o for o in h.ops]
    res = check_txn(ops, {"durable": True, "loss_window": WINDOW})
    assert res["valid"] is False and res["stats"]["lost_commits"]["failovers"] == []


def test_a_commit_acknowledged_after_the_promotion_took_effect_is_not_the_windows() -> None:
    """The promotion took effect 0.5 ms into the failover op; a commit acknowledged after
    it, while the op was still pointing the other standbys at the new primary, and lost,
    is the new primary's loss, not the old one's window."""
    h = _History()
    h.txn(0, [["append", 0, 1]])
    h._add(Op("invoke", NEMESIS, "start-failover", {"target": "master"}))  # op 2, 2 ms
    h.txn(0, [["append", 0, 2]])  # acknowledged at op 4 (4 ms), by the new primary
    value = {"killed": "n1", "promoted": "n2", "kill_ms": 0.1, "promote_ms": 0.5}
    h._add(Op("info", NEMESIS, "start-failover", value))
    h.txn(1, [["r", 0, [1]], ["append", 0, 3]])
    h.txn(1, [["r", 0, [1, 3]]])
    res = check_txn(h.ops, {"durable": True, "loss_window": WINDOW})
    assert res["valid"] is False and res["anomalies"]["lost-commit"]
    assert res["stats"]["lost_commits"]["in_window"] == 0
    late = {**value, "promote_ms": 3.5}  # promoted at 5.5 ms: the same commit is the window's
    ops = [
        o.replace(value=late) if o.f == "start-failover" and o.type == "info" else o for o in h.ops
    ]
    assert check_txn(ops, {"durable": True, "loss_window": WINDOW})["valid"] is True
