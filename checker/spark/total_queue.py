"""The total-queue checker as DataFrame jobs: what :mod:`checker.total_queue` decides, in Spark.

Why a second implementation: a consume-and-ack history is judged over every delivery
of the run, which for a long campaign is millions of records; here they stay in the
cluster. Every verdict is a join or a group-by over bodies (or over the dequeue that
delivered them); the driver receives only counts and the first ``cap`` examples of
each kind, and applies the same verdict rule as the local engine
(:func:`checker.total_queue.verdict_of`). The semantics, and the meaning of every
field, are the local module's docstring; the two are held together by
``tests/checker/test_total_queue.py`` on generated histories.

``records`` is the history's records (columns ``index``, ``type``, ``process``,
``f``, ``value`` as JSON text; others are ignored). Bodies are compared as the local
engine's :func:`checker.total_queue.body_key` texts: Spark's JSON reader gives a
string field a string's content and any other value's JSON text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from checker.spark.completions import with_completions
from checker.total_queue import TotalQueueOptions, shaped, verdict_of
from harness.core.checker import CheckConfig
from harness.core.errors import HistoryError
from harness.core.options import parse_options

__all__ = ["check_total_queue_spark", "spark_check"]

_ENQ_SCHEMA = "body string"
_DEQ_SCHEMA = "final boolean, max long"
_MSG_SCHEMA = "messages array<struct<body:string,acked:boolean>>"


def spark_check(session: Any, records: Any, config: CheckConfig) -> dict[str, Any]:
    """The registered checker's Spark implementation (``CheckerSpec.spark``)."""
    return check_total_queue_spark(session, records, config.options, cap=config.cap)


def _raise_first(df: Any, field: Any, what: str, index_col: str = "index") -> None:
    row = df.orderBy(index_col).select(index_col, field.alias("field"), "f").first()
    if row is not None:
        raise HistoryError(what.format(f=row["f"]), index=row[index_col], field=row["field"])


def check_total_queue_spark(
    spark: Any,
    records: Any,
    opts: Mapping[str, Any] | TotalQueueOptions | None = None,
    *,
    cap: int = 20,
) -> dict[str, Any]:
    """The result map of :func:`checker.total_queue.check_total_queue`, computed in Spark."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    o = (
        opts
        if isinstance(opts, TotalQueueOptions)
        else parse_options(TotalQueueOptions, opts, role="checker total-queue")
    )
    ops = with_completions(F, W, records, ("enqueue", "dequeue")).cache()
    try:
        return _check(F, W, ops, o, cap)
    finally:
        ops.unpersist()


def _check(F: Any, W: Any, ops: Any, o: TotalQueueOptions, cap: int) -> dict[str, Any]:
    # -- enqueues ------------------------------------------------------------------
    enq_all = ops.where(F.col("f") == "enqueue").withColumn("e", F.from_json("value", _ENQ_SCHEMA))
    _raise_first(
        enq_all.where(F.col("e.body").isNull()),
        F.lit("value.body"),
        "{f} invoke: needs {{'body': b}}",
    )
    enq = enq_all.select(
        F.col("e.body").alias("body"),
        F.col("index").alias("e_inv"),
        F.col("outcome").alias("e_out"),
        F.col("comp_index").alias("e_comp"),
    ).cache()
    reused = enq.withColumn("n", F.row_number().over(W.partitionBy("body").orderBy("e_inv")))
    again = reused.where(F.col("n") > 1).orderBy("e_inv").first()
    if again is not None:
        raise HistoryError(
            f"body {again['body']!r} enqueued again; bodies must be unique",
            index=again["e_inv"],
            field="value.body",
        )
    # -- dequeues and their deliveries ---------------------------------------------
    deq = (
        ops.where(F.col("f") == "dequeue")
        .withColumn("d", F.from_json("value", _DEQ_SCHEMA))
        .withColumn("m", F.from_json("comp_value", _MSG_SCHEMA))
        .select(
            "index",
            "f",
            "outcome",
            "comp_index",
            "value",
            F.coalesce(F.col("d.final"), F.lit(False)).alias("final"),
            F.col("d.max").alias("max"),
            F.col("m.messages").alias("msgs"),
        )
    ).cache()
    _raise_first(
        deq.where(F.col("max") < 0),
        F.lit("value.max"),
        "{f} invoke: must be a non-negative integer",
    )
    _raise_first(
        deq.where((F.col("outcome") == "ok") & F.col("msgs").isNull()).withColumn(
            "at", F.col("comp_index")
        ),
        F.lit("value.messages"),
        "{f} ok: needs {{'messages': [{{'body', 'acked'}}, ...]}}",
        index_col="at",
    )
    deliveries = (
        deq.where((F.col("outcome") != "fail") & F.col("msgs").isNotNull())
        .select(
            "f",
            F.col("index").alias("inv"),
            F.col("comp_index").alias("comp"),
            "final",
            F.posexplode("msgs").alias("pos", "m"),
        )
        .select(
            "f",
            "inv",
            "comp",
            "pos",
            "final",
            F.col("m.body").alias("body"),
            F.col("m.acked").alias("acked"),
        )
    ).cache()
    _raise_first(
        deliveries.where(F.col("body").isNull() | F.col("acked").isNull()),
        F.concat(
            F.lit("value.messages["),
            F.col("pos").cast("string"),
            F.when(F.col("body").isNull(), F.lit("].body")).otherwise(F.lit("].acked")),
        ),
        "{f} completion: each delivered message needs a body and 'acked': true or false",
        index_col="comp",
    )
    try:
        return _judge(F, W, enq, deq, deliveries, o, cap)
    finally:
        for df in (enq, deq, deliveries):
            df.unpersist()


def _judge(
    F: Any, W: Any, enq: Any, deq: Any, deliveries: Any, o: TotalQueueOptions, cap: int
) -> dict[str, Any]:
    # one job over the dequeues: their counts, the drain, the unknown capacity
    is_info = F.col("outcome") == "info"
    agg = deq.agg(
        *(
            F.sum(F.when(F.col("outcome") == t, 1).otherwise(0)).alias(t)
            for t in ("ok", "fail", "info")
        ),
        F.sum(F.col("final").cast("int")).alias("finals"),
        F.max(F.when((F.col("outcome") == "ok") & F.col("final") & (F.size("msgs") == 0), 1)).alias(
            "drained"
        ),
        F.sum(F.when(is_info, F.col("max"))).alias("cap"),
        F.sum(F.when(is_info & F.col("max").isNull(), 1).otherwise(0)).alias("unbounded"),
        F.min(F.when(is_info, F.col("index"))).alias("first_unknown"),
    ).first()
    capacity = math.inf if agg["unbounded"] else float(agg["cap"] or 0)
    drained = bool(agg["drained"])
    # per body: earliest start (invocation, place) and earliest end of its deliveries;
    # duplicated when a delivery was invoked after the earliest confirmed ack, or
    # follows an acked delivery in one dequeue's list
    same_op = deliveries.groupBy("body", "comp").agg(
        F.min(F.when(F.col("acked"), F.col("pos"))).alias("ack_pos"),
        F.max("pos").alias("last_pos"),
        F.count(F.lit(1)).alias("k"),
        F.min(F.struct("inv", "pos")).alias("first"),
        F.max("inv").alias("inv"),
        F.min(F.when(F.col("acked"), F.col("comp"))).alias("ack_comp"),
    )
    seen = (
        same_op.groupBy("body")
        .agg(
            F.min("first").alias("first"),
            F.min("comp").alias("first_comp"),
            F.sum("k").alias("n"),
            F.min("ack_comp").alias("min_ack_comp"),
            F.max("inv").alias("max_inv"),
            F.array_sort(F.collect_list("comp")).alias("comps"),
            F.max(F.coalesce(F.col("ack_pos") < F.col("last_pos"), F.lit(False))).alias("same"),
        )
        .select(
            "body",
            F.col("first.inv").alias("first_inv"),
            F.col("first.pos").alias("first_pos"),
            "first_comp",
            "n",
            "min_ack_comp",
            "comps",
            (
                F.coalesce(F.col("max_inv") > F.col("min_ack_comp"), F.lit(False)) | F.col("same")
            ).alias("dup"),
        )
        .cache()
    )
    try:
        return _results(F, W, enq, deliveries, seen, o, cap, capacity, drained, agg)
    finally:
        seen.unpersist()


def _results(
    F: Any,
    W: Any,
    enq: Any,
    deliveries: Any,
    seen: Any,
    o: TotalQueueOptions,
    cap: int,
    capacity: float,
    drained: bool,
    agg: Any,
) -> dict[str, Any]:
    facts = enq.join(seen, "body", "full_outer").cache()
    try:
        return _from_facts(F, W, enq, deliveries, seen, facts, o, cap, capacity, drained, agg)
    finally:
        facts.unpersist()


def _from_facts(
    F: Any,
    W: Any,
    enq: Any,
    deliveries: Any,
    seen: Any,
    facts: Any,
    o: TotalQueueOptions,
    cap: int,
    capacity: float,
    drained: bool,
    agg: Any,
) -> dict[str, Any]:
    was = F.col("first_comp").isNotNull()
    kinds = {
        "missing": (F.col("e_out") == "ok") & F.col("e_comp").isNotNull() & ~was,
        "unexpected": F.col("e_inv").isNull() & was,
        "failed-enqueue-delivered": (F.col("e_out") == "fail") & was,
        "duplicated": F.coalesce(F.col("dup"), F.lit(False)),
        "redelivered": (F.col("n") >= 2) & ~F.col("dup"),
        "delivered": was,
        "recovered": (F.col("e_out") == "info") & was,
        **{f"enq_{t}": F.col("e_out") == t for t in ("ok", "fail", "info")},
    }
    total = facts.agg(
        *(F.sum(F.when(c, 1).otherwise(0)).alias(k) for k, c in kinds.items()),
        F.sum("n").alias("deliveries"),
    ).first()
    n = {k: int(total[k] or 0) for k in (*kinds, "deliveries")}
    anomalies: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, int] = {}
    missing = n["missing"]
    lost_cols = ["body", F.array("e_comp").alias("indexes")]

    def examples(kind: str, cols: list[Any]) -> list[dict[str, Any]]:
        """The first ``cap`` examples in the local engine's order (indexes, then body)."""
        df = facts.where(kinds[kind]).select(*cols).orderBy("indexes", "body").limit(cap)
        return [r.asDict(recursive=True) for r in df.collect()]

    def put(kind: str, cols: list[Any]) -> None:
        if n[kind]:
            counts[kind] = n[kind]
            anomalies[kind] = examples(kind, cols)

    put("unexpected", ["body", F.array("first_comp").alias("indexes")])
    failed_at = F.array_sort(F.array_distinct(F.array(F.coalesce("e_comp", "e_inv"), "first_comp")))
    put("failed-enqueue-delivered", ["body", failed_at.alias("indexes")])
    # the earliest ack confirmation, and the first delivery completed after it
    after = F.array_min(F.filter("comps", lambda c: c > F.col("min_ack_comp")))
    put(
        "duplicated",
        [
            "body",
            F.col("n").alias("deliveries"),
            F.col("min_ack_comp").alias("acked_at"),
            F.when(after.isNull(), F.array("min_ack_comp"))
            .otherwise(F.array("min_ack_comp", after))
            .alias("indexes"),
        ],
    )
    order_unjudged = 0
    if o.ordered:
        first_unknown = agg["first_unknown"]
        unj = F.lit(False) if first_unknown is None else F.lit(first_unknown) < F.col("first_comp")
        marked = (
            _overtakes(F, W, enq, deliveries, seen)
            .join(seen.select("body", "first_comp"), "body")
            .withColumn("unj", unj)
            .cache()
        )
        row = marked.agg(
            F.sum(F.when(F.col("unj"), 1).otherwise(0)).alias("unj"),
            F.sum(F.when(~F.col("unj"), 1).otherwise(0)).alias("bad"),
        ).first()
        order_unjudged = int(row["unj"] or 0)
        if row["bad"]:
            counts["order"] = int(row["bad"])
            anomalies["order"] = [
                r.asDict(recursive=True)
                for r in marked.where(~F.col("unj"))
                .select("body", "overtook", F.array("first_comp").alias("indexes"))
                .orderBy("indexes", "body")
                .limit(cap)
                .collect()
            ]
        marked.unpersist()
    provable = 0
    if missing and drained and missing > capacity:
        provable = int(missing - capacity)
        counts["lost"] = missing
        anomalies["lost"] = examples("missing", lost_cols)
    valid, unknown, reason = verdict_of(anomalies, missing, capacity, drained)
    notes: dict[str, list[dict[str, Any]]] = {}
    if n["redelivered"]:
        notes["redelivered"] = examples(
            "redelivered",
            ["body", F.col("n").alias("deliveries"), F.array_distinct("comps").alias("indexes")],
        )
    if unknown:
        notes["possibly-lost"] = examples("missing", lost_cols)
    stats = {
        "enqueues": {t: n[f"enq_{t}"] for t in ("ok", "fail", "info")},
        "dequeues": {t: int(agg[t] or 0) for t in ("ok", "fail", "info")},
        "final_dequeues": int(agg["finals"] or 0),
        "drained": drained,
        "deliveries": n["deliveries"],
        "delivered_messages": n["delivered"],
        "recovered": n["recovered"],
        "missing": missing,
        "unknown_dequeue_capacity": "unbounded" if math.isinf(capacity) else int(capacity),
        "lost_provable": provable,
        "redelivered": n["redelivered"],
        "order_checked": o.ordered,
        "order_unjudged": order_unjudged,
        "anomaly_counts": counts,
    }
    return shaped(valid, unknown, reason, anomalies, notes, stats)


def _overtakes(F: Any, W: Any, enq: Any, deliveries: Any, seen: Any) -> Any:
    """``(body, overtook)``: one row per body that overtook an earlier-enqueued one.

    Across dequeues: the running max of earlier-acked messages' first invocation, met in
    one sequence ordered by history index (an ok index of ``a``, an invocation index of
    ``b``: never equal). Within one dequeue: the minimum ok index of the messages whose
    first place is later in that dequeue's list.
    """
    ok_a = (
        enq.where((F.col("e_out") == "ok") & F.col("e_comp").isNotNull())
        .join(seen, "body")
        .select(
            F.col("body").alias("a"),
            F.col("e_comp").alias("ok_a"),
            "first_inv",
            "first_pos",
        )
    )
    b_rows = enq.join(seen, "body").select("body", "e_inv", "first_comp")
    points = ok_a.select(
        F.col("ok_a").alias("at"),
        F.struct("first_inv", "a").alias("val"),
        F.lit(None).cast("string").alias("body"),
        F.lit(None).cast("long").alias("first_comp"),
    ).unionByName(
        b_rows.select(
            F.col("e_inv").alias("at"),
            F.lit(None).cast("struct<first_inv:bigint,a:string>").alias("val"),
            "body",
            "first_comp",
        )
    )
    run = W.orderBy("at").rowsBetween(W.unboundedPreceding, W.currentRow)
    cross = (
        points.withColumn("best", F.max("val").over(run))
        .where(F.col("body").isNotNull() & (F.col("best.first_inv") > F.col("first_comp")))
        .select("body", F.col("best.a").alias("overtook"))
    )
    firsts = ok_a.select(
        F.col("first_inv").alias("dq"),
        F.col("first_pos").alias("pos"),
        F.struct("ok_a", "a").alias("val"),
        F.lit(None).cast("string").alias("body"),
        F.lit(None).cast("long").alias("e_inv"),
    )
    dels = deliveries.join(enq.select("body", "e_inv"), "body").select(
        F.col("inv").alias("dq"),
        "pos",
        F.lit(None).cast("struct<ok_a:bigint,a:string>").alias("val"),
        "body",
        "e_inv",
    )
    later = W.partitionBy("dq").orderBy(F.col("pos").desc()).rowsBetween(W.unboundedPreceding, -1)
    within = (
        firsts.unionByName(dels)
        .withColumn("best", F.min("val").over(later))
        .where(F.col("body").isNotNull() & (F.col("best.ok_a") < F.col("e_inv")))
        .select("body", F.col("best.a").alias("overtook"))
    )
    both = cross.unionByName(within)
    return both.groupBy("body").agg(F.min("overtook").alias("overtook"))
