"""The queue checker (checker/queue.py) on hand-built histories: a valid one passes,
and each planted anomaly is reported, naming the history indexes that show it."""

from __future__ import annotations

from typing import Any

import pytest

from checker.local import check_local, classify
from checker.queue import check_queue
from harness.core.op import Op


class H:
    """A tiny history builder: ``send``/``pull`` add invoke+completion pairs in order."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _add(self, **kw: Any) -> Op:
        op = Op(index=len(self.ops), time=len(self.ops), **kw)
        self.ops.append(op)
        return op

    def send(
        self,
        p: int,
        body: str,
        queue: int = 0,
        *,
        typ: str = "ok",
        offset: int | None = None,
        qo: int | None = None,
    ) -> None:
        v = {"topic": "t", "queue": queue, "body": body}
        self._add(type="invoke", process=p, f="send", value=v)
        self._add(
            type=typ,
            process=p,
            f="send",
            value={**v, "offset": offset, "queue_offset": qo} if typ == "ok" else v,
        )

    def pull(
        self,
        p: int,
        node: str,
        msgs: list[list],
        queue: int = 0,
        *,
        offset: int = 0,
        final: bool = False,
    ) -> None:
        v: dict[str, Any] = {"topic": "t", "queue": queue, "offset": offset, "max": 100}
        if final:
            v["final"] = True
        self._add(type="invoke", process=p, f="pull", value=v, node=node)
        self._add(type="ok", process=p, f="pull", value={**v, "messages": msgs}, node=node)

    def finals(self, msgs: list[list], nodes: tuple[str, ...] = ("n1", "n2", "n3")) -> None:
        for i, n in enumerate(nodes):
            self.pull(100 + i, n, msgs, final=True)


def valid_history() -> H:
    h = H()
    h.send(0, "a", offset=48, qo=0)
    h.send(1, "b", offset=148, qo=1)
    h.send(2, "x", typ="fail")
    h.send(3, "c", typ="info")  # unknown: may or may not appear
    h.pull(4, "n2", [[0, 48, "a"]])  # a lagging slave: a prefix, not an anomaly
    h.finals([[0, 48, "a"], [1, 148, "b"], [2, 300, "c"]])
    return h


def test_valid_history_passes() -> None:
    res = check_queue(valid_history().ops)
    assert res["valid"] is True, res["anomalies"]
    assert res["stats"]["sends"] == {"ok": 2, "fail": 1, "info": 1}
    assert res["stats"]["recovered"] == 1


def test_local_engine_classifies_queue_ops() -> None:
    h = valid_history()
    assert set(classify(h.ops)) == {"queue"}
    res = check_local(h.ops)
    # upgrade-phases claims every queue history and judges only one holding upgrade records
    assert res["valid"] is True and set(res["checkers"]) == {"queue", "upgrade-phases"}
    assert res["checkers"]["upgrade-phases"]["stats"]["judged"] is False


def test_no_final_drain_is_unknown() -> None:
    h = H()
    h.send(0, "a", offset=48, qo=0)
    assert check_queue(h.ops)["valid"] == "unknown"


@pytest.mark.parametrize(
    "kind",
    [
        "queue-lost",
        "queue-duplicate",
        "queue-divergence",
        "queue-gap",
        "queue-order",
        "queue-phys-conflict",
        "queue-phys-regress",
        "queue-ack-mismatch",
        "queue-failed-appears",
        "queue-unexpected",
    ],
)
def test_each_planted_anomaly_is_found(kind: str) -> None:
    h = H()
    if kind == "queue-lost":
        h.send(0, "a", offset=48, qo=0)
        h.send(1, "b", offset=148, qo=1)
        h.finals([[0, 48, "a"]])
        expect = [3, 5]  # b's ok, the first final drain
    elif kind == "queue-duplicate":
        h.send(0, "a", offset=48, qo=0)
        h.pull(1, "n1", [[0, 48, "a"], [1, 148, "a"]])
        h.finals([[0, 48, "a"]])
        expect = [3]
    elif kind == "queue-divergence":
        h.send(0, "a", offset=48, qo=0)
        h.send(1, "b", typ="info")
        h.pull(2, "n1", [[0, 48, "a"]], final=True)
        h.pull(3, "n2", [[0, 48, "b"], [1, 148, "a"]], final=True)
        expect = [5, 7]
    elif kind == "queue-gap":
        h.send(0, "a", offset=48, qo=0)
        h.send(1, "b", offset=148, qo=2)
        h.finals([[0, 48, "a"], [2, 148, "b"]])
        expect = [5]
    elif kind == "queue-order":
        h.send(0, "a", offset=148, qo=0)
        h.send(1, "b", offset=48, qo=1)
        h.finals([[0, 148, "a"], [1, 48, "b"]])
        expect = [5]
    elif kind == "queue-phys-conflict":
        h.send(0, "a", offset=48, qo=0)
        h.send(1, "b", queue=1, typ="info")
        h.pull(2, "n1", [[0, 48, "a"]], final=True)
        h.pull(3, "n1", [[0, 48, "b"]], queue=1, final=True)
        expect = [5, 7]
    elif kind == "queue-phys-regress":
        h.send(0, "a", offset=148, qo=0)
        h.send(1, "b", offset=48, qo=0, queue=1)  # invoked after a was acked
        expect = [1, 3]
    elif kind == "queue-ack-mismatch":
        h.send(0, "a", offset=48, qo=1)
        h.finals([[0, 48, "a"]])
        expect = [1, 3]
    elif kind == "queue-failed-appears":
        h.send(0, "a", typ="fail")
        h.finals([[0, 48, "a"]])
        expect = [1, 3]
    else:
        h.finals([[0, 48, "zz"]])
        expect = [1]
    res = check_queue(h.ops)
    assert res["valid"] is False
    assert kind in res["anomalies"], res["anomalies"]
    assert res["anomalies"][kind][0]["indexes"] == expect


@pytest.mark.spark
@pytest.mark.slow
def test_spark_engine_agrees() -> None:
    """The Spark engine runs the same queue checks (on its driver): same verdicts, same examples."""
    from checker.spark import check_spark

    for h in (valid_history(), _lost_and_divergent()):
        local, spark = check_local(h.ops), check_spark(h.ops)
        assert spark["valid"] == local["valid"]
        assert spark["anomalies"] == local["anomalies"]
        assert set(spark["checkers"]) == set(local["checkers"]) == {"queue"}


def _lost_and_divergent() -> H:
    h = H()
    h.send(0, "a", offset=48, qo=0)
    h.send(1, "b", offset=148, qo=1)
    h.send(2, "c", typ="info")
    h.pull(3, "n1", [[0, 48, "a"], [1, 148, "c"]], final=True)
    h.pull(4, "n2", [[0, 48, "a"]], final=True)
    return h
