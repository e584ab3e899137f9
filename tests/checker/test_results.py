"""The shared result pipeline: one set of caps and shapes for both engines.

The Spark half of "both engines cap alike" needs a session and lives in
``test_spark_engine.py``; these run the local engine and the pipeline alone.
"""

from __future__ import annotations

from typing import Any

from checker.local import check_local
from checker.results import (
    CAP,
    cap_examples,
    compose_results,
    key_order,
    unknown_result,
)
from harness.core.history import Op


def restart_history(restarts: int, node: str = "n1") -> list[Op]:
    """One node restarting ``restarts`` times, each time reporting a lower committed index:
    one committed-regress-restart note per restart, and nothing else to report."""
    ops: list[Op] = []
    for inc in range(restarts + 1):
        val = {
            "role": "follower",
            "term": 1,
            "leader": "n2",
            "begin": 0,
            "end": 5000,
            "committed": 1000 - inc,
            "incarnation": inc,
        }
        ops += [
            Op("invoke", "s", "sample", None, node=node),
            Op("ok", "s", "sample", val, node=node),
        ]
    return [op.replace(index=i, time=i) for i, op in enumerate(ops)]


def lost_ack_history(n: int) -> list[Op]:
    """``n`` appends acked at a term the final read never shows: ``n`` lost acks."""
    ops: list[Op] = []
    for i in range(n):
        ops.append(Op("invoke", i % 5, "append", {"payload": f"x{i}"}))
        ops.append(Op("ok", i % 5, "append", {"payload": f"x{i}", "index": i, "term": 9}))
    entries = [[i, 1, f"x{i}"] for i in range(n)]
    ops.append(Op("invoke", 99, "read", {"from": 0, "to": n - 1, "final": True}))
    ops.append(Op("ok", 99, "read", {"entries": entries, "committed": n - 1}))
    return [op.replace(index=i, time=i) for i, op in enumerate(ops)]


def test_key_order_puts_none_first_then_keys_by_their_text() -> None:
    """Both engines list per-key failures in this one order (the search imports it)."""
    keys: list[Any] = ["b", None, "a", 3, 10, "10", ("x", 1), -1, ""]
    assert sorted(keys, key=key_order)[0] is None
    assert [str(k) for k in sorted(keys, key=key_order) if k is not None] == sorted(
        str(k) for k in keys if k is not None
    )


def test_notes_are_capped_like_anomalies_by_the_local_engine() -> None:
    res = check_local(restart_history(CAP + 10))
    ls = res["checkers"]["log-safety"]
    assert res["valid"] is True
    notes = ls["notes"]["committed-regress-restart"]
    assert len(notes) == CAP
    assert [n["to"] for n in notes] == [1000 - i for i in range(1, CAP + 1)]  # the first ones
    assert ls["stats"]["anomaly_counts"] == {}  # notes are not anomalies


def test_async_ha_loss_window_is_capped_with_its_total() -> None:
    res = check_local(
        lost_ack_history(3 * CAP), opts={"options": {"log-safety": {"ha": {"sync": False}}}}
    )
    ls = res["checkers"]["log-safety"]
    assert len(ls["notes"]["loss-window"]) == CAP
    assert ls["stats"]["loss_window"] == 3 * CAP


def test_cap_keeps_totals_counted_before_the_cap() -> None:
    res: dict[str, Any] = {
        "valid": False,
        "anomalies": {"a": list(range(5)), "b": list(range(50))},
        "notes": {"n": list(range(30))},
        "stats": {"anomaly_counts": {"b": 900}},
    }
    cap_examples(res, 3)
    assert res["anomalies"] == {"a": [0, 1, 2], "b": [0, 1, 2]}
    assert res["notes"] == {"n": [0, 1, 2]}
    assert res["stats"]["anomaly_counts"] == {"a": 5, "b": 900}


def test_compose_caps_gathers_and_takes_the_worst_verdict() -> None:
    out = compose_results(
        {
            "x": {"valid": True},
            "y": {"valid": False, "anomalies": {"k": list(range(30))}},
            "z": unknown_result(RuntimeError("boom\nstack")),
        },
        engine="local",
        started=0.0,
        client_records=lambda: 0,
    )
    assert out["valid"] is False
    assert out["anomalies"] == {"k": list(range(CAP))}
    assert out["checkers"]["y"]["stats"]["anomaly_counts"] == {"k": 30}
    assert out["checkers"]["z"] == {"valid": "unknown", "error": "RuntimeError: boom"}
    assert list(out) == ["valid", "checkers", "anomalies", "engine", "elapsed_s"]


def test_nothing_to_check_is_unknown_with_a_reason() -> None:
    out = compose_results({}, engine="spark", started=0.0, client_records=lambda: 7)
    assert out["valid"] == "unknown"
    assert "(7 client op records)" in out["error"]


def test_linearizable_parts_are_named_by_model() -> None:
    """One family of ops: plain ``linearizable``; several: one result per model."""
    from checker.local import check_local

    def op(i: int, typ: str, p: int, f: str, v: Any, key: str) -> Op:
        return Op(type=typ, process=p, f=f, value=v, key=key, index=i)

    kv = [op(0, "invoke", 0, "put", 1, "k"), op(1, "ok", 0, "put", 1, "k")]
    mutex = [op(2, "invoke", 1, "acquire", None, "m"), op(3, "ok", 1, "acquire", None, "m")]
    reg = [op(4, "invoke", 2, "write", 1, "r"), op(5, "ok", 2, "write", 1, "r")]
    assert list(check_local(kv)["checkers"]) == ["linearizable"]
    assert list(check_local(mutex + reg)["checkers"]) == [
        "linearizable-cas-register",
        "linearizable-mutex",
    ]
