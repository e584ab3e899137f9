"""Small histories with planted anomalies, one set per built-in checker (their
``CheckerSpec.examples``).

The engine-agreement test (tests/checker/test_engines_agree.py) runs every registered
checker's examples through both engines and compares verdicts and anomaly kinds, so a
checker is covered the moment it is registered. The histories are small on purpose:
Spark runs each in ``local[1]`` within the default test run. The log and register
histories come from the simulation (:mod:`checker.synth`), whose validity does not
depend on any checker; the queue and set ones are built op by op, each anomaly named
where it is planted.
"""

from __future__ import annotations

from typing import Any

from checker.synth import LOG_ANOMALIES, generate
from harness.core.checker import Example
from harness.core.op import Op

__all__ = ["linearizable", "log_safety", "queue", "sets", "total_queue"]


class _Builder:
    """Ops in history order: ``op`` adds an invocation and its completion (or none)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def op(
        self,
        process: int,
        f: str,
        inv: Any,
        typ: str | None,
        out: Any = None,
        *,
        key: str | None = None,
        node: str | None = None,
    ) -> None:
        invocation = Op("invoke", process, f, inv, key=key, node=node, index=len(self.ops))
        self.ops.append(invocation)
        if typ is not None:
            self.ops.append(invocation.replace(type=typ, value=out, index=len(self.ops)))


def linearizable() -> dict[str, Example]:
    """Per-key registers: valid, and with a read no linearization explains."""
    kw: dict[str, Any] = {"workload": "register", "keys": 8, "concurrency": 4}
    return {
        "valid": (list(generate(400, seed=21, **kw)), {}, ()),
        "stale-read": (
            list(generate(400, anomaly="nonlinearizable", seed=22, **kw)),
            {},
            ("nonlinearizable",),
        ),
    }


def log_safety() -> dict[str, Example]:
    """The append workload with every log anomaly planted, and a history whose lost acks
    mode ha with an async master measures as its loss window (notes, not anomalies)."""
    lost = list(generate(400, workload="append", anomaly="lost-ack", seed=24))
    return {
        "every-anomaly": (
            list(generate(500, workload="append", anomaly=LOG_ANOMALIES, seed=23)),
            {},
            LOG_ANOMALIES,
        ),
        "ha-async-loss-window": (lost, {"options": {"log-safety": {"ha": {"sync": False}}}}, ()),
    }


def queue() -> dict[str, Example]:
    """Broker sends and final drains: an acked send no drain holds (queue-lost), and two
    nodes' drains that disagree at a position (queue-divergence), which puts two
    bodies at one physical offset (queue-phys-conflict)."""
    b = _Builder()
    for p, body, off in ((0, "a", 48), (1, "b", 148), (3, "d", 248)):
        v = {"topic": "t", "queue": 0, "body": body}
        b.op(p, "send", v, "ok", {**v, "offset": off, "queue_offset": len(b.ops) // 2})
    b.op(2, "send", {"topic": "t", "queue": 0, "body": "c"}, "info")
    for p, node, msgs in (
        (4, "n1", [[0, 48, "a"], [1, 148, "c"]]),
        (5, "n2", [[0, 48, "a"], [1, 148, "b"]]),
    ):
        v = {"topic": "t", "queue": 0, "offset": 0, "max": 100, "final": True}
        b.op(p, "pull", v, "ok", {**v, "messages": msgs}, node=node)
    return {
        "lost-and-divergent": (b.ops, {}, ("queue-lost", "queue-divergence", "queue-phys-conflict"))
    }


def sets() -> dict[str, Example]:
    """Adds and a final read: valid, and one that lost an acked add and shows an element
    nobody added."""
    out: dict[str, Example] = {}
    for label, final, kinds in (
        ("valid", [0, 1, 2, 3, 5], ()),
        ("lost-and-unexpected", [0, 1, 2, 5, 99], ("set-lost", "set-unexpected")),
    ):
        b = _Builder()
        for e in range(4):
            b.op(e, "add", e, "ok", e)
        b.op(4, "add", 4, "fail", 4)
        b.op(5, "add", 5, "info", 5)
        b.op(6, "read", None, "ok", final)
        out[label] = (b.ops, {}, kinds)
    return out


def total_queue() -> dict[str, Example]:
    """Consume-and-ack queues: valid, and with every anomaly planted: ``b`` never
    delivered though a final drain saw the queue empty (lost), ``a`` delivered again
    after its ack (duplicated), ``d`` delivered though its enqueue failed, ``zz`` never
    enqueued (unexpected), and ``f`` overtaking ``e`` (order, with the option ``ordered``)."""

    def deliveries(*bodies: str) -> dict[str, Any]:
        return {"messages": [{"body": x, "acked": True} for x in bodies]}

    out: dict[str, Example] = {}
    for label, during, kinds in (
        ("valid", [("a", "b", "c"), ("e", "f")], ()),
        (
            "every-anomaly",
            [("a", "c", "f"), ("a", "d", "zz", "e")],
            ("lost", "duplicated", "failed-enqueue-delivered", "unexpected", "order"),
        ),
    ):
        b = _Builder()
        for p, body in enumerate("abcef"):
            b.op(p, "enqueue", {"body": body}, "ok", {"body": body})
        b.op(5, "enqueue", {"body": "d"}, "fail", {"body": "d"})
        for p, bodies in enumerate(during, 6):
            b.op(p, "dequeue", {}, "ok", deliveries(*bodies))
        b.op(9, "dequeue", {"final": True}, "ok", deliveries())
        out[label] = (b.ops, {"options": {"total-queue": {"ordered": True}}}, kinds)
    return out
