"""The total-queue checker (consume-and-ack queues), local and Spark engines.

Unit tests build histories op by op with :class:`H`; the Spark tests run the same
histories through real PySpark (``local[1]``) and compare verdicts and counts.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from checker.total_queue import check_total_queue
from harness.core.errors import HistoryError
from harness.core.history import Op


class H:
    """A history under construction; ``begin``/``end`` allow overlapping ops."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.next_process = 0

    def _add(self, op: Op) -> int:
        op = op.replace(index=len(self.ops), time=len(self.ops))
        self.ops.append(op)
        return op.index

    def begin(self, f: str, value: Any, process: int | None = None) -> int:
        if process is None:
            process = self.next_process
            self.next_process += 1
        return self._add(Op(type="invoke", process=process, f=f, value=value))

    def end(self, inv: int, typ: str, value: Any = None) -> int:
        p = self.ops[inv].process
        return self._add(Op(type=typ, process=p, f=self.ops[inv].f, value=value))

    def enq(self, body: Any, typ: str = "ok") -> int:
        return self.end(self.begin("enqueue", {"body": body}), typ, {"body": body})

    def deq(
        self,
        *bodies: Any,
        typ: str = "ok",
        final: bool = False,
        acked: bool = True,
        most: int | None = 1,
    ) -> int:
        v: dict[str, Any] = {"final": True} if final else {}
        if most is not None:
            v["max"] = most
        inv = self.begin("dequeue", v)
        msgs = [{"body": b, "acked": acked} for b in bodies]
        return self.end(inv, typ, {"messages": msgs} if typ != "fail" else None)

    def drain(self) -> int:
        return self.deq(final=True)


def check(h: H, **opts: Any) -> dict[str, Any]:
    return check_total_queue(h.ops, opts)


def test_consumed_midrun_is_not_lost():
    """What broke before: every message consumed (and so removed) during the load."""
    h = H()
    for i in range(5):
        h.enq(f"m{i}")
        h.deq(f"m{i}")
    h.drain()
    r = check(h)
    assert r["valid"] is True, r
    assert r["stats"]["delivered_messages"] == 5 and r["stats"]["missing"] == 0


def test_lost_counts_exactly_and_names_indexes():
    h = H()
    oks = [h.enq(f"m{i}") for i in range(6)]
    h.deq("m0")
    h.deq("m2", "m3")
    h.drain()
    r = check(h)
    assert r["valid"] is False
    assert r["stats"]["anomaly_counts"] == {"lost": 3}
    assert [e["body"] for e in r["anomalies"]["lost"]] == ["m1", "m4", "m5"]
    assert r["anomalies"]["lost"][0]["indexes"] == [oks[1]]
    assert r["stats"]["lost_provable"] == 3


def test_counts_are_whole_when_examples_are_cut():
    h = H()
    for i in range(50):
        h.enq(i)
    h.drain()
    r = check(h)
    assert r["stats"]["anomaly_counts"]["lost"] == 50
    assert len(r["anomalies"]["lost"]) == 20


def test_no_empty_final_drain_makes_missing_unknown():
    h = H()
    h.enq("a")
    h.enq("b")
    h.deq("a", final=True)  # the drain stopped before the queue looked empty
    r = check(h)
    assert r["valid"] == "unknown" and r["unknown"] == ["lost"]
    assert "still be in it" in r["reason"]
    assert [e["body"] for e in r["notes"]["possibly-lost"]] == ["b"]


def test_nothing_missing_is_valid_without_a_drain():
    h = H()
    h.enq("a")
    h.deq("a")
    assert check(h)["valid"] is True


def test_info_dequeues_bound_what_may_be_missing():
    """Missing <= what unknown dequeues could take: unknown; more: provably lost."""
    h = H()
    for b in "abc":
        h.enq(b)
    h.deq(typ="info", most=1)
    h.drain()
    r = check(h)
    assert r["valid"] is False and r["stats"]["lost_provable"] == 2
    assert r["stats"]["anomaly_counts"]["lost"] == 3
    assert r["stats"]["unknown_dequeue_capacity"] == 1

    h = H()
    h.enq("a")
    h.enq("b")
    h.deq("b")
    h.deq(typ="info", most=1)
    h.drain()
    r = check(h)
    assert r["valid"] == "unknown" and "lost" not in r["anomalies"]
    assert "up to 1 unseen" in r["reason"]


def test_info_dequeue_without_max_is_unbounded():
    h = H()
    for b in range(10):
        h.enq(b)
    h.deq(typ="info", most=None)
    h.drain()
    r = check(h)
    assert r["valid"] == "unknown"
    assert r["stats"]["unknown_dequeue_capacity"] == "unbounded"


def test_open_dequeue_counts_as_unknown():
    h = H()
    h.enq("a")
    h.begin("dequeue", {"max": 1})  # never completed
    h.drain()
    assert check(h)["valid"] == "unknown"


def test_info_dequeue_deliveries_count_as_seen():
    h = H()
    h.enq("a")
    h.deq("a", typ="info", acked=False)
    h.drain()
    r = check(h)
    # nothing is missing, so the unknown dequeue's unspent capacity does not matter
    assert r["valid"] is True and r["stats"]["missing"] == 0


def test_info_enqueue_may_or_may_not_appear():
    h = H()
    h.enq("a", "info")
    h.enq("b", "info")
    h.deq("a")
    h.drain()
    r = check(h)
    assert r["valid"] is True and r["stats"]["recovered"] == 1


def test_unexpected_and_failed_enqueue_delivered():
    h = H()
    h.enq("a", "fail")
    h.deq("a")
    h.deq("ghost")
    h.drain()
    r = check(h)
    assert r["valid"] is False
    assert r["stats"]["anomaly_counts"] == {"unexpected": 1, "failed-enqueue-delivered": 1}
    assert r["anomalies"]["unexpected"][0]["body"] == "ghost"


def test_redelivery_before_ack_is_a_note_after_ack_an_anomaly():
    h = H()
    h.enq("a")
    h.enq("b")
    h.deq("a", acked=False)  # ack not confirmed: a redelivery is allowed
    h.deq("a")
    h.deq("b")  # acked
    last = h.deq("b")  # delivered again after the confirmed ack
    h.drain()
    r = check(h)
    assert r["valid"] is False
    assert r["stats"]["anomaly_counts"] == {"duplicated": 1}
    assert r["anomalies"]["duplicated"][0]["body"] == "b"
    assert last in r["anomalies"]["duplicated"][0]["indexes"]
    assert r["stats"]["redelivered"] == 1 and r["notes"]["redelivered"][0]["body"] == "a"


def test_concurrent_double_delivery_is_redelivery():
    """Two overlapping dequeues both confirming an ack: nothing says which came first."""
    h = H()
    h.enq("a")
    d1 = h.begin("dequeue", {})
    d2 = h.begin("dequeue", {})
    h.end(d1, "ok", {"messages": [{"body": "a", "acked": True}]})
    h.end(d2, "ok", {"messages": [{"body": "a", "acked": True}]})
    h.drain()
    r = check(h)
    assert r["valid"] is True and r["stats"]["redelivered"] == 1


def test_duplicate_within_one_dequeue_after_its_ack():
    h = H()
    h.enq("a")
    inv = h.begin("dequeue", {})
    h.end(inv, "ok", {"messages": [{"body": "a", "acked": True}, {"body": "a", "acked": True}]})
    h.drain()
    assert check(h)["stats"]["anomaly_counts"] == {"duplicated": 1}


def test_order_only_when_promised():
    h = H()
    h.enq("a")
    h.enq("b")
    h.deq("b")
    h.deq("a")
    h.drain()
    assert check(h)["valid"] is True
    r = check(h, ordered=True)
    assert r["valid"] is False and r["stats"]["anomaly_counts"] == {"order": 1}
    assert r["anomalies"]["order"][0] == {"body": "b", "overtook": "a", "indexes": [5]}


def test_order_within_one_dequeue_and_concurrent_enqueues():
    h = H()
    h.enq("a")
    h.enq("b")
    inv = h.begin("dequeue", {})
    h.end(inv, "ok", {"messages": [{"body": "b", "acked": True}, {"body": "a", "acked": True}]})
    h.drain()
    assert check(h, ordered=True)["stats"]["anomaly_counts"] == {"order": 1}
    # concurrent enqueues promise no order between them
    h = H()
    e1 = h.begin("enqueue", {"body": "a"})
    e2 = h.begin("enqueue", {"body": "b"})
    h.end(e1, "ok")
    h.end(e2, "ok")
    h.deq("b")
    h.deq("a")
    h.drain()
    assert check(h, ordered=True)["valid"] is True


def test_order_after_an_unknown_dequeue_is_unjudged():
    h = H()
    h.enq("a")
    h.enq("b")
    h.deq(typ="info")  # may have held a, which came back later
    h.deq("b")
    h.deq("a")
    h.drain()
    r = check(h, ordered=True)
    assert r["valid"] is True and r["stats"]["order_unjudged"] == 1


def test_other_ops_are_ignored():
    h = H()
    h.enq("a")
    h._add(Op(type="info", process="nemesis", f="start-kill", value={"nodes": ["n1"]}))
    h.deq("a")
    h.drain()
    assert check(h)["valid"] is True


@pytest.mark.parametrize(
    ("op", "field"),
    [
        (Op(type="invoke", process=0, f="enqueue", value={"payload": 1}), "value.body"),
        (Op(type="invoke", process=0, f="dequeue", value={"max": -1}), "value.max"),
    ],
)
def test_malformed_invocations_name_index_and_field(op, field):
    h = H()
    h.enq("x")
    i = h._add(op)
    with pytest.raises(HistoryError) as e:
        check(h)
    assert e.value.index == i and e.value.field == field
    assert f"op {i}" in str(e.value) and "Op(" not in str(e.value)


def test_malformed_completions_name_index_and_field():
    h = H()
    inv = h.begin("dequeue", {})
    bad = h.end(inv, "ok", {"msgs": []})
    with pytest.raises(HistoryError) as e:
        check(h)
    assert (e.value.index, e.value.field) == (bad, "value.messages")
    h = H()
    inv = h.begin("dequeue", {})
    bad = h.end(inv, "ok", {"messages": [{"body": "a"}]})
    with pytest.raises(HistoryError) as e:
        check(h)
    assert (e.value.index, e.value.field) == (bad, "value.messages[0].acked")


def test_reused_body_is_an_error():
    h = H()
    h.enq("a")
    i = h.begin("enqueue", {"body": "a"})
    with pytest.raises(HistoryError, match="unique") as e:
        check(h)
    assert e.value.index == i


def test_unknown_option_is_a_config_error():
    from harness.core.errors import ConfigError

    with pytest.raises(ConfigError, match="ordred"):
        check(H(), ordred=True)


# --- generated histories: planted anomalies found with exact counts -----------------


def generated(
    seed: int, n: int = 60, *, lose: int = 0, dup: int = 0, ghost: int = 0, info_deq: int = 0
) -> tuple[H, dict[str, int]]:
    """A run of a correct consume-and-ack queue with anomalies planted in it.

    Returns the history and the counts a checker must find. Producers and
    consumers overlap; some deliveries are not acked and come back; some enqueues
    end info (half of those messages were stored).
    """
    rng = random.Random(seed)
    h = H()
    queue: list[str] = []
    lost = set(rng.sample(range(n), lose))
    planted_dups = 0
    for i in range(n):
        body = f"b{i}"
        typ = rng.choice(["ok"] * 8 + ["info", "fail"])
        h.enq(body, typ)
        stored = typ == "ok" or (typ == "info" and rng.random() < 0.5)
        if stored and (i not in lost or typ != "ok"):
            queue.append(body)
        if queue and rng.random() < 0.6:
            m = queue.pop(0)
            if rng.random() < 0.2:  # delivered, ack unconfirmed: it comes back
                h.deq(m, acked=False)
                queue.insert(0, m)
            else:
                h.deq(m)
                if planted_dups < dup:
                    h.deq(m)
                    planted_dups += 1
    lost_ok = sum(1 for i in lost if h_enq_ok(h, f"b{i}"))
    for _ in range(info_deq):
        h.deq(typ="info", most=1)
    for g in range(ghost):
        h.deq(f"ghost{g}")
    while queue:
        h.deq(queue.pop(0), final=True)
    h.drain()
    return h, {"lost": lost_ok, "duplicated": planted_dups, "unexpected": ghost}


def h_enq_ok(h: H, body: str) -> bool:
    return any(o.f == "enqueue" and o.type == "ok" and o.value == {"body": body} for o in h.ops)


@pytest.mark.parametrize("seed", range(8))
def test_generated_planted_anomalies_found_exactly(seed):
    h, want = generated(seed, lose=3, dup=2, ghost=1)
    r = check(h)
    expect = {k: v for k, v in want.items() if v}
    assert r["stats"]["anomaly_counts"] == expect
    assert r["valid"] is (not expect)


@pytest.mark.parametrize("seed", range(4))
def test_generated_clean_histories_are_valid(seed):
    h, _ = generated(seed)
    r = check(h)
    assert r["valid"] is True, r["anomalies"]


# --- the Spark engine agrees --------------------------------------------------------

SPARK_CASES = [
    ("clean", lambda: generated(1)[0], {}),
    ("planted", lambda: generated(2, lose=3, dup=2, ghost=2)[0], {}),
    ("planted-ordered", lambda: generated(3, lose=1, dup=1, ghost=1)[0], {"ordered": True}),
    ("info-exceeded", lambda: generated(5, lose=3, info_deq=1)[0], {}),
]


@pytest.fixture(scope="module")
def spark() -> Any:
    pytest.importorskip("pyspark")
    from checker.spark.session import get_session

    return get_session("local[1]")


def records_of(spark: Any, ops: list[Op]) -> Any:
    import json

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [
            StructField("index", LongType()),
            StructField("time", LongType()),
            StructField("type", StringType()),
            StructField("process", StringType()),
            StructField("f", StringType()),
            StructField("key", StringType()),
            StructField("value", StringType()),
            StructField("node", StringType()),
            StructField("error", StringType()),
        ]
    )
    rows = [
        (
            o.index,
            o.time,
            o.type,
            str(o.process),
            o.f,
            o.key,
            None if o.value is None else json.dumps(o.value),
            o.node,
            o.error,
        )
        for o in ops
    ]
    return spark.createDataFrame(rows, schema)


def _summary(r: dict[str, Any]) -> tuple[Any, ...]:
    s = r["stats"]
    keys = ("missing", "lost_provable", "redelivered", "delivered_messages", "order_unjudged")
    return (r["valid"], s["anomaly_counts"], r["unknown"], *(s[k] for k in keys))


@pytest.mark.slow  # the agreement test covers total-queue in the default run
@pytest.mark.spark
def test_spark_agrees_on_cases(spark):
    from checker.spark.total_queue import check_total_queue_spark

    for name, make, opts in SPARK_CASES:
        ops = make().ops
        local = check_total_queue(ops, opts)
        remote = check_total_queue_spark(spark, records_of(spark, ops), opts)
        assert _summary(remote) == _summary(local), name
        # the same evidence, example for example, in the same order
        assert remote["anomalies"] == local["anomalies"], name
        assert remote["notes"] == local["notes"], name
        assert remote["stats"] == local["stats"], name


@pytest.mark.slow  # the agreement test covers total-queue in the default run
@pytest.mark.spark
def test_spark_agrees_on_random_histories(spark):
    """A generated property test: random plants, both engines, same verdicts and counts."""
    from checker.spark.total_queue import check_total_queue_spark

    rng = random.Random(2026)
    hs = []
    for _ in range(3):
        h, _ = generated(
            rng.randrange(10**6),
            n=rng.randrange(5, 40),
            lose=rng.randrange(0, 3),
            dup=rng.randrange(0, 2),
            ghost=rng.randrange(0, 2),
            info_deq=rng.randrange(0, 2),
        )
        hs.append(h)
    for h in hs:
        opts = {"ordered": rng.random() < 0.5}
        local = check_total_queue(h.ops, opts)
        remote = check_total_queue_spark(spark, records_of(spark, h.ops), opts)
        assert _summary(remote) == _summary(local)
        assert (remote["anomalies"], remote["notes"]) == (local["anomalies"], local["notes"])


@pytest.mark.spark
def test_spark_malformed_names_index_and_field(spark):
    from checker.spark.total_queue import check_total_queue_spark

    h = H()
    h.enq("a")
    inv = h.begin("dequeue", {})
    bad = h.end(inv, "ok", {"messages": [{"body": "a"}]})
    with pytest.raises(HistoryError) as e:
        check_total_queue_spark(spark, records_of(spark, h.ops), {})
    assert e.value.index == bad and e.value.field is not None and "acked" in e.value.field


def test_registered_checker_declares_itself():
    from checker.total_queue import TOTAL_QUEUE

    assert TOTAL_QUEUE.name == "total-queue"
