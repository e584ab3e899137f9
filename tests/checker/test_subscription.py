"""The subscription checker: planted anomalies found, valid histories valid, each guarantee
judged only when declared, malformed records named, and Spark agreeing example for example."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from checker.planted_subscription import PLANTABLE, history, plant, simulate
from checker.subscription import GUARANTEE_OF, check_subscription
from harness.core.errors import ConfigError, HistoryError
from harness.core.op import Op

SCOPES = ("subscription", "stream")


@pytest.mark.parametrize("scope", SCOPES)
def test_valid_worlds_raise_no_alarm(scope: str) -> None:
    for seed in range(20):
        r = check_subscription(history(simulate(seed, scope=scope)), {"scope": scope})
        assert r["valid"] is True, (seed, r["anomalies"])
        assert r["stats"]["deliveries"] > 0


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("kind", PLANTABLE)
def test_every_planted_anomaly_is_found_and_nothing_else(scope: str, kind: str) -> None:
    planted = 0
    for seed in range(12):
        w = simulate(seed, scope=scope, publishes=30, subscriptions=6)
        if not plant(w, kind, random.Random(seed)):
            continue
        planted += 1
        r = check_subscription(history(w), {"scope": scope})
        assert r["valid"] is False, (seed, kind)
        assert set(r["anomalies"]) == {kind}, (seed, r["anomalies"])
    # scope stream has no progress marks and no one-batch transactions in its worlds
    if not (scope == "stream" and kind in ("watch-went-back", "watch-non-atomic")):
        assert planted >= 5, (scope, kind, planted)


@pytest.mark.parametrize("kind", sorted(GUARANTEE_OF))
def test_an_undeclared_guarantee_is_not_judged(kind: str) -> None:
    for seed in range(30):
        w = simulate(seed)
        if plant(w, kind, random.Random(seed)):
            break
    ops = history(w)
    off = {GUARANTEE_OF[kind]: False}
    r = check_subscription(ops, off)
    assert kind not in r["anomalies"]
    assert GUARANTEE_OF[kind] not in r["stats"]["declared"]
    if kind == "watch-non-atomic":  # half a transaction, when atomicity is not promised,
        assert set(r["anomalies"]) <= {"watch-gap"}  # is a gap if within reach
    else:
        assert r["valid"] is True, r["anomalies"]


def _ops(*pairs: tuple[str, Any, str, Any]) -> list[Op]:
    ops: list[Op] = []
    for p, (f, inv, typ, out) in enumerate(pairs):
        i = Op("invoke", p, f, inv, index=len(ops))
        ops.append(i)
        ops.append(i.replace(type=typ, value=out, index=len(ops)))
    return ops


def _pub(v: str, s: str, pos: int) -> tuple[str, Any, str, Any]:
    inv = {"events": [{"stream": s, "value": v}]}
    return ("publish", inv, "ok", {"events": [{"stream": s, "value": v, "pos": pos}]})


def _sub(start: int, *events: tuple[str, str, int], streams: Any = None) -> tuple:
    evs = [{"stream": s, "value": v, "pos": p, "batch": k} for k, (s, v, p) in enumerate(events)]
    return ("subscribe", {"streams": streams, "from": start}, "ok", {"events": evs})


def test_gap_names_the_subscription_and_the_missing_positions() -> None:
    ops = _ops(
        _pub("a", "k", 2),
        _pub("b", "k", 3),
        _pub("c", "k", 4),
        _sub(0, ("k", "a", 2), ("k", "c", 4)),
    )
    r = check_subscription(ops)
    assert r["valid"] is False
    assert r["anomalies"]["watch-gap"] == [
        {"indexes": [7], "from": 0, "reached": 4, "missing": [["k", 3]], "count": 1}
    ]


def test_a_subscription_that_stopped_early_has_no_gap_beyond_its_reach() -> None:
    ops = _ops(_pub("a", "k", 2), _pub("b", "k", 3), _sub(0, ("k", "a", 2)))
    assert check_subscription(ops)["valid"] is True


def test_a_position_seen_only_by_another_subscriber_still_counts() -> None:
    info = ("publish", {"events": [{"stream": "k", "value": "b"}]}, "info", None)
    ops = _ops(
        _pub("a", "k", 2),
        info,
        _pub("c", "k", 4),
        _sub(0, ("k", "a", 2), ("k", "b", 3), ("k", "c", 4)),
        _sub(0, ("k", "a", 2), ("k", "c", 4)),
    )
    r = check_subscription(ops)
    assert set(r["anomalies"]) == {"watch-gap"}
    assert r["anomalies"]["watch-gap"][0]["indexes"] == [9]


def test_resubscribing_from_a_position_must_not_repeat_it() -> None:
    ops = _ops(_pub("a", "k", 2), _pub("b", "k", 3), _sub(2, ("k", "a", 2), ("k", "b", 3)))
    r = check_subscription(ops)
    assert set(r["anomalies"]) == {"watch-resume-mismatch"}
    assert r["anomalies"]["watch-resume-mismatch"][0]["why"] == "delivered at or before its start"


def test_nothing_delivered_is_unknown_not_valid() -> None:
    ops = _ops(_pub("a", "k", 2), ("subscribe", {"streams": None, "from": 2}, "ok", {"events": []}))
    r = check_subscription(ops)
    assert r["valid"] == "unknown"
    assert "nothing was judged" in r["reason"]


def test_counts_are_whole_when_examples_are_cut() -> None:
    pairs = [_pub(f"v{i}", "k", i + 2) for i in range(10)]
    pairs += [_sub(0, ("k", "v0", 2), ("k", "v9", 11)) for _ in range(5)]
    r = check_subscription(_ops(*pairs), cap=2)
    assert r["stats"]["anomaly_counts"]["watch-gap"] == 5
    assert len(r["anomalies"]["watch-gap"]) == 2
    assert r["anomalies"]["watch-gap"][0]["count"] == 8


@pytest.mark.parametrize(
    ("pair", "field"),
    [
        (("publish", {"events": []}, "ok", None), "value.events"),
        (("publish", {"events": [{"value": "a"}]}, "ok", None), "value.events[0].stream"),
        (
            ("publish", {"events": [{"stream": "k", "value": "a"}]}, "ok", {"events": [{}]}),
            "value.events[0]",
        ),
        (("subscribe", {"streams": None, "from": -1}, "ok", {"events": []}), "value.from"),
        (("subscribe", {"streams": None, "from": 0}, "ok", {}), "value.events"),
        (
            (
                "subscribe",
                {"streams": None, "from": 0},
                "ok",
                {"events": [{"stream": "k", "value": "a", "pos": 0}]},
            ),
            "value.events[0].pos",
        ),
        (("snapshot", {"final": True}, "ok", {"pos": 3}), "value.streams"),
    ],
)
def test_malformed_records_name_index_and_field(pair: tuple, field: str) -> None:
    with pytest.raises(HistoryError) as e:
        check_subscription(_ops(pair))
    assert e.value.field is not None and e.value.field.startswith(field.split("[")[0])
    assert e.value.index in (0, 1)


def test_an_unknown_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ordred"):
        check_subscription([], {"ordred": True})


# the Spark engine -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Any:
    pytest.importorskip("pyspark")
    from checker.spark.session import get_session

    return get_session("local[1]")


def _records(spark: Any, ops: list[Op]) -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    cols = [("index", LongType()), ("type", StringType()), ("process", StringType())]
    cols += [(n, StringType()) for n in ("f", "key", "value", "node")]
    rows = [(o.index, o.type, str(o.process), o.f, o.key, json.dumps(o.value), o.node) for o in ops]
    return spark.createDataFrame(rows, StructType([StructField(n, t) for n, t in cols]))


@pytest.mark.spark
@pytest.mark.slow
def test_spark_gives_the_local_result_on_planted_histories(spark: Any) -> None:
    """Result for result (verdict, examples in order, counts, stats), on a world of each
    scope with several kinds planted at once, as DataFrame jobs (``driver_records=0``:
    the default runs histories this small on the driver; some forty stages each, minutes
    on a loaded machine, hence slow)."""
    from checker.spark.subscription import check_subscription_spark

    cases = []
    for scope, kinds in (
        ("subscription", PLANTABLE),
        ("stream", ("watch-gap", "watch-duplicate", "watch-unordered", "watch-phantom")),
    ):
        w = simulate(5, scope=scope, publishes=30, subscriptions=6)
        rng = random.Random(5)
        for kind in kinds:
            plant(w, kind, rng)
        cases.append((history(w), {"scope": scope}))
    for ops, opts in cases:
        local = check_subscription(ops, opts, cap=3)
        remote = check_subscription_spark(
            spark, _records(spark, ops), opts, cap=3, driver_records=0
        )
        assert remote == local
