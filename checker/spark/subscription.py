"""The subscription checker as DataFrame jobs: what :mod:`checker.subscription` decides,
in Spark.

Why a second implementation: a long campaign's subscriptions deliver every event many
times over (each final subscription alone replays the whole run), so the deliveries are
the bulk of the history; here they stay in the cluster, exploded once into one row per
delivered event. Every check is a window over one subscription's deliveries in order, a
group-by over positions or values, or a range join of known positions with what each
subscription reached; a history of up to :data:`DRIVER_RECORDS` claimed records is judged
on the driver instead (the plan's forty-odd stages cost more than the check). The driver receives counts and the first examples of each kind
(ties at the cap included, then cut in the local engine's order), and shapes the result
with the local engine's own function (:func:`checker.subscription.shaped`). The
semantics, and every field, are the local module's docstring; the two are held together
by tests/checker/test_subscription.py on planted histories.
"""

from __future__ import annotations

import json
from typing import Any

from checker.spark.completions import with_completions
from checker.subscription import (
    ANOMALY_KINDS,
    MISSING_SHOWN,
    SUBSCRIPTION_FS,
    SubscriptionOptions,
    judged_kind,
    options_of,
    shaped,
    sort_examples,
)
from harness.core.checker import CheckConfig
from harness.core.errors import HistoryError

__all__ = ["check_subscription_spark", "spark_check"]

_EVENT = "struct<stream:string,value:string,pos:long,batch:long>"
_PUB_SCHEMA = f"events array<{_EVENT}>"
_SUB_INV_SCHEMA = "streams array<string>, `from` long, final boolean"
_SUB_SCHEMA = f"events array<{_EVENT}>, progress array<struct<pos:long,after:long,stream:string>>"
_SNAP_SCHEMA = "pos long, streams map<string,struct<value:string,pos:long>>"


DRIVER_RECORDS = 200_000
"""Up to this many claimed records, the check runs on the driver (the local engine's
code over the collected records): the DataFrame plan below is some forty stages, whose
scheduling alone outweighs judging a small history in one process. Above, it runs in
the cluster. Both give the same result (tests/checker/test_subscription.py)."""


def spark_check(session: Any, records: Any, config: CheckConfig) -> dict[str, Any]:
    """The registered checker's Spark implementation (``CheckerSpec.spark``)."""
    return check_subscription_spark(session, records, config.options, cap=config.cap)


def _on_driver(records: Any, o: SubscriptionOptions, cap: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from checker.spark.input import op_columns, op_of
    from checker.subscription import check_subscription

    rows = records.select(*op_columns(F, records)).orderBy("index").toLocalIterator()
    return check_subscription([op_of(tuple(r)) for r in rows], o, cap=cap)


class _Malformed:
    """Every shape check's offending rows, gathered so that one job finds the first
    (by history index) and raises the local engine's kind of error for it."""

    def __init__(self, F: Any) -> None:
        self.F = F
        self.frames: list[Any] = []

    def add(self, df: Any, index_col: str, fld: str, what: str) -> None:
        F = self.F
        self.frames.append(
            df.select(
                F.col(index_col).cast("long").alias("index"),
                F.lit(fld).alias("field"),
                F.lit(what).alias("what"),
            )
        )

    def raise_first(self) -> None:
        if not self.frames:
            return
        bad = self.frames[0]
        for df in self.frames[1:]:
            bad = bad.unionByName(df)
        row = bad.orderBy("index").first()
        if row is not None:
            raise HistoryError(row["what"], index=row["index"], field=row["field"])


def check_subscription_spark(
    spark: Any,
    records: Any,
    opts: Any = None,
    *,
    cap: int = 20,
    driver_records: int | None = None,
) -> dict[str, Any]:
    """The result map of :func:`checker.subscription.check_subscription`, in Spark
    (on the driver up to ``driver_records`` claimed records, :data:`DRIVER_RECORDS`
    unless given; 0: always as DataFrame jobs)."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    o = options_of(opts)
    if driver_records is None:
        driver_records = DRIVER_RECORDS
    claimed = records.where(F.col("f").isin(*sorted(SUBSCRIPTION_FS)))
    if driver_records > 0 and claimed.limit(driver_records + 1).count() <= driver_records:
        return _on_driver(claimed, o, cap)
    ops = with_completions(F, W, records, SUBSCRIPTION_FS).cache()
    try:
        return _check(F, W, ops, o, cap)
    finally:
        ops.unpersist()


def _check(F: Any, W: Any, ops: Any, o: SubscriptionOptions, cap: int) -> dict[str, Any]:
    counts_row = ops.groupBy("f", "outcome").count().collect()
    op_counts = {f: {"ok": 0, "fail": 0, "info": 0} for f in sorted(SUBSCRIPTION_FS)}
    for r in counts_row:
        op_counts[r["f"]][r["outcome"]] = int(r["count"])

    bad = _Malformed(F)
    # publishes ---------------------------------------------------------------------------
    pubs = ops.where(F.col("f") == "publish").select(
        F.col("index").alias("pinv"),
        F.col("comp_index").alias("pcomp"),
        "outcome",
        F.from_json("value", _PUB_SCHEMA).alias("inv"),
        F.when(F.col("outcome") == "ok", F.from_json("comp_value", _PUB_SCHEMA)).alias("ack"),
    )
    bad.add(
        pubs.where(F.col("inv.events").isNull() | (F.size("inv.events") == 0)),
        "pinv",
        "value.events",
        "publish invoke: needs {'events': [{'stream', 'value'}, ...]}",
    )
    pub_events = pubs.select(
        "pinv",
        "pcomp",
        "outcome",
        F.size("inv.events").alias("n"),
        F.explode("inv.events").alias("e"),
    ).select("pinv", "pcomp", "outcome", "n", "e.stream", "e.value")
    bad.add(
        pub_events.where(F.col("stream").isNull() | F.col("value").isNull()),
        "pinv",
        "value.events",
        "publish invoke: each event needs a stream and a value",
    )
    okp = pubs.where(F.col("outcome") == "ok")
    bad.add(
        okp.where(F.col("ack.events").isNull()),
        "pcomp",
        "value.events",
        "publish ok: needs the events with their positions",
    )
    acked = okp.select("pcomp", F.explode("ack.events").alias("e")).select(
        "e.stream", "e.value", "e.pos", F.col("pcomp").alias("idx")
    )
    bad.add(
        acked.where(F.col("pos").isNull() | (F.col("pos") < 1) | F.col("stream").isNull()),
        "idx",
        "value.events",
        "publish ok: each event needs a stream and an integer position >= 1",
    )

    # subscriptions -----------------------------------------------------------------------
    raw = ops.where(F.col("f") == "subscribe").select(
        F.col("index").alias("sinv"),
        F.col("comp_index").alias("scomp"),
        "outcome",
        F.from_json("value", _SUB_INV_SCHEMA).alias("inv"),
        F.from_json("comp_value", _SUB_SCHEMA).alias("out"),
        F.get_json_object("comp_value", "$.events").isNotNull().alias("has_events"),
    )
    bad.add(
        raw.where(F.col("inv").isNull() | (F.coalesce("inv.from", F.lit(0)) < 0)),
        "sinv",
        "value.from",
        "subscribe invoke: needs {'streams', 'from'} with from an integer >= 0",
    )
    live = raw.where(
        (F.col("outcome") != "fail")
        & F.col("scomp").isNotNull()
        & ((F.col("outcome") == "ok") | F.col("has_events"))
    )
    bad.add(
        live.where(F.col("out.events").isNull()),
        "scomp",
        "value.events",
        "subscribe: needs {'events': [{'stream', 'value', 'pos'}, ...]}",
    )
    subs = live.select(
        "sinv",
        "scomp",
        F.col("inv.streams").alias("streams"),
        F.coalesce("inv.from", F.lit(0)).alias("start"),
        F.coalesce("inv.final", F.lit(False)).alias("final"),
        F.col("out.events").alias("events"),
        F.coalesce("out.progress", F.array()).alias("progress"),
    ).cache()
    dels = subs.select(
        "scomp", "start", "streams", F.posexplode("events").alias("seq", "e")
    ).select("scomp", "start", "streams", "seq", "e.stream", "e.value", "e.pos", "e.batch")
    dels = dels.cache()
    marks = subs.select("scomp", F.posexplode("progress").alias("mi", "m")).select(
        "scomp", "mi", "m.pos", "m.after", "m.stream"
    )
    bad.add(
        dels.where(
            F.col("stream").isNull()
            | F.col("value").isNull()
            | F.col("pos").isNull()
            | (F.col("pos") < 1)
        ),
        "scomp",
        "value.events",
        "subscribe: each event needs a stream, a value and an integer position >= 1",
    )
    bad.add(
        marks.where(F.col("pos").isNull() | F.col("after").isNull() | (F.col("after") < 0)),
        "scomp",
        "value.progress",
        "subscribe: each progress mark needs a position and 'after'",
    )

    # snapshots ---------------------------------------------------------------------------
    snaps = ops.where((F.col("f") == "snapshot") & (F.col("outcome") == "ok")).select(
        F.col("comp_index").alias("snap"), F.from_json("comp_value", _SNAP_SCHEMA).alias("s")
    )
    bad.add(
        snaps.where(F.col("s.streams").isNull()),
        "snap",
        "value.streams",
        "snapshot ok: needs {'pos', 'streams': {stream: {'value', 'pos'}}}",
    )
    snap_entries = snaps.select("snap", F.explode("s.streams").alias("stream", "x")).select(
        "snap", "stream", F.col("x.pos").alias("fpos"), F.col("x.value").alias("fval")
    )

    bad.raise_first()
    try:
        return _judge(
            F, W, o, cap, op_counts, pub_events, acked, subs, dels, marks, snaps, snap_entries
        )
    finally:
        dels.unpersist()
        subs.unpersist()


def _judge(
    F: Any,
    W: Any,
    o: SubscriptionOptions,
    cap: int,
    op_counts: dict[str, dict[str, int]],
    pub_events: Any,
    acked: Any,
    subs: Any,
    dels: Any,
    marks: Any,
    snaps: Any,
    snap_entries: Any,
) -> dict[str, Any]:
    obs = acked.unionByName(dels.select("stream", "value", "pos", F.col("scomp").alias("idx")))
    at = obs.groupBy("stream", "pos", "value").agg(F.min("idx").alias("idx")).cache()
    positions = (
        at.select("stream", "pos")
        .unionByName(snap_entries.select("stream", F.col("fpos").alias("pos")))
        .distinct()
        .cache()
    )
    frames: dict[str, Any] = {}
    scoped = o.scope == "subscription"

    # per subscription, in delivery order: out of order, duplicated, before its start ----
    key = [] if scoped else ["stream"]
    before_w = W.partitionBy("scomp", *key).orderBy("seq").rowsBetween(W.unboundedPreceding, -1)
    first_w = W.partitionBy("scomp").orderBy("seq")
    unordered = (
        dels.withColumn("after", F.max("pos").over(before_w))
        .where(F.col("pos") < F.col("after"))
        .withColumn("_r", F.row_number().over(first_w))
        .where(F.col("_r") == 1)
        .select(F.array("scomp").alias("indexes"), "stream", "pos", "after")
    )
    frames["watch-unordered"] = unordered
    same = W.partitionBy("scomp", "stream", "value", "pos").orderBy("seq")
    again = dels.withColumn("_k", F.row_number().over(same)).where(F.col("_k") >= 2)
    dup_counts = again.groupBy("scomp").agg(F.count(F.lit(1)).alias("count"))
    frames["watch-duplicate"] = (
        again.withColumn("_r", F.row_number().over(first_w))
        .where(F.col("_r") == 1)
        .join(dup_counts, "scomp")
        .select(F.array("scomp").alias("indexes"), "stream", "value", "pos", "count")
    )
    before = (
        dels.where(F.col("pos") <= F.col("start"))
        .withColumn("_r", F.row_number().over(first_w))
        .where(F.col("_r") == 1)
        .select(
            F.array("scomp").alias("indexes"),
            F.lit("delivered at or before its start").alias("why"),
            F.col("start").alias("from"),
            "stream",
            "pos",
        )
    )

    # how far each subscription reached, per watched stream --------------------------------
    all_streams = positions.select("stream").distinct()
    watched = (
        subs.where(F.col("streams").isNotNull())
        .select("scomp", "start", F.explode("streams").alias("stream"))
        .unionByName(
            subs.where(F.col("streams").isNull()).select("scomp", "start").crossJoin(all_streams)
        )
        .distinct()
    )
    if scoped:
        tops = (
            dels.groupBy("scomp")
            .agg(F.max("pos").alias("p"))
            .unionByName(marks.groupBy("scomp").agg(F.max("pos").alias("p")))
            .groupBy("scomp")
            .agg(F.max("p").alias("top"))
        )
        reach = watched.join(tops, "scomp", "left")
    else:
        stream_marks = marks.where(F.col("stream").isNotNull()).select("scomp", "stream", "pos")
        open_marks = (
            marks.where(F.col("stream").isNull())
            .join(subs.where(F.col("streams").isNotNull()).select("scomp", "streams"), "scomp")
            .select("scomp", F.explode("streams").alias("stream"), "pos")
        )
        tops = (
            dels.select("scomp", "stream", "pos")
            .unionByName(stream_marks)
            .unionByName(open_marks)
            .groupBy("scomp", "stream")
            .agg(F.max("pos").alias("top"))
        )
        reach = watched.join(tops, ["scomp", "stream"], "left")
    reach = reach.select(
        "scomp", "stream", "start", F.greatest("start", F.coalesce("top", "start")).alias("reach")
    ).cache()

    # transactions delivered in part, or split across batches ---------------------------
    txn_events = pub_events.where(F.col("n") >= 2).select("pinv", "stream", "value")
    got = (
        dels.join(txn_events, ["stream", "value"])
        .groupBy("scomp", "pinv")
        .agg(
            F.countDistinct("stream", "value").alias("delivered"),
            F.countDistinct("batch").alias("_batches"),
            F.max(F.col("batch").isNull().cast("int")).alias("_nulls"),
        )
    )
    delivered_txn = (
        dels.join(txn_events, ["stream", "value"])
        .select("scomp", "pinv", "stream", "value")
        .distinct()
    )
    spots = obs.groupBy("stream", "value").agg(F.min("pos").alias("spot"))
    watching = F.col("streams").isNull() | F.expr("array_contains(streams, stream)")
    mine = (
        got.select("scomp", "pinv")
        .join(txn_events, "pinv")
        .join(subs.select("scomp", "start", "streams"), "scomp")
        .where(watching)
        .join(reach.select("scomp", "stream", "reach"), ["scomp", "stream"], "left")
    )
    of = mine.groupBy("scomp", "pinv").agg(F.count(F.lit(1)).alias("of"))
    missing_txn = mine.join(delivered_txn, ["scomp", "pinv", "stream", "value"], "left_anti")
    if not scoped:
        missing_txn = missing_txn.join(spots, ["stream", "value"]).where(
            (F.col("spot") > F.col("start")) & (F.col("spot") <= F.col("reach"))
        )
    missing_txn = missing_txn.select("scomp", "pinv", "stream", "value").cache()
    miss_n = missing_txn.groupBy("scomp", "pinv").agg(F.count(F.lit(1)).alias("_missing"))
    split = (F.col("_batches") > 1) & (F.col("_nulls") == 0)
    frames["watch-non-atomic"] = (
        got.join(of, ["scomp", "pinv"])
        .join(miss_n, ["scomp", "pinv"], "left")
        .withColumn("split", split)
        .where((F.coalesce("_missing", F.lit(0)) > 0) | F.col("split"))
        .select(F.array("pinv", "scomp").alias("indexes"), "delivered", "of", "split")
    )

    # gaps: known positions within reach that a subscription did not deliver ------------
    cands = positions.join(reach, "stream").where(
        (F.col("pos") > F.col("start")) & (F.col("pos") <= F.col("reach"))
    )
    cands = cands.join(
        dels.select("scomp", "stream", "pos"), ["scomp", "stream", "pos"], "left_anti"
    )
    if o.atomic:
        vals = at.groupBy("stream", "pos").agg(F.count(F.lit(1)).alias("_vals"))
        excused = (
            missing_txn.join(at.select("stream", "value", "pos"), ["stream", "value"])
            .groupBy("scomp", "stream", "pos")
            .agg(F.countDistinct("value").alias("_ex"))
        )
        cands = (
            cands.join(vals, ["stream", "pos"], "left")
            .join(excused, ["scomp", "stream", "pos"], "left")
            .where(F.col("_vals").isNull() | (F.coalesce("_ex", F.lit(0)) < F.col("_vals")))
        )
    reached = reach.groupBy("scomp").agg(F.max("reach").alias("reached"))
    frames["watch-gap"] = (
        cands.groupBy("scomp", "start")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.slice(
                F.array_sort(F.collect_list(F.struct("pos", "stream"))), 1, MISSING_SHOWN
            ).alias("_missing"),
        )
        .join(reached, "scomp")
        .select(
            F.array("scomp").alias("indexes"),
            F.col("start").alias("from"),
            "reached",
            "_missing",
            "count",
        )
    )

    # progress marks that go back, events at or below an earlier mark -------------------
    seq = (
        dels.select(
            "scomp",
            F.col("seq").alias("n"),
            F.lit(1).alias("kind"),
            F.lit(0).alias("mi"),
            "pos",
            F.col("stream").alias("stream"),
        )
        .unionByName(
            marks.select(
                "scomp",
                F.col("after").alias("n"),
                F.lit(0).alias("kind"),
                "mi",
                "pos",
                F.col("stream").alias("stream"),
            )
        )
        .join(marks.select("scomp").distinct(), "scomp")
    )
    order = ["n", "kind", "mi"]
    prior_all = W.partitionBy("scomp").orderBy(*order).rowsBetween(W.unboundedPreceding, -1)
    is_mark = F.col("kind") == 0
    mark_pos = F.when(is_mark, F.col("pos"))
    if scoped:
        seq = seq.withColumn("_top", F.max("pos").over(prior_all)).withColumn(
            "_floor", F.max(mark_pos).over(prior_all)
        )
        back_mark = is_mark & (F.col("pos") < F.col("_top"))
        back_event = ~is_mark & (F.col("pos") <= F.col("_floor"))
        mark_of = F.when(back_mark, F.col("_top")).otherwise(F.col("_floor"))
    else:
        # top and floor per key: a mark's stream (null: every stream), an event's stream
        kk = F.col("stream")
        prior_k = W.partitionBy("scomp", kk).orderBy(*order).rowsBetween(W.unboundedPreceding, -1)
        open_mark = F.when(is_mark & F.col("stream").isNull(), F.col("pos"))
        seq = (
            seq.withColumn("_top", F.max("pos").over(prior_k))
            .withColumn("_floor_k", F.max(mark_pos).over(prior_k))
            .withColumn("_floor_none", F.max(open_mark).over(prior_all))
        )
        # a mark without a stream compares with earlier marks without one (its key)
        back_mark = is_mark & (F.col("pos") < F.col("_top"))
        by_stream = ~is_mark & (F.col("pos") <= F.col("_floor_k"))
        by_none = ~is_mark & (F.col("pos") <= F.col("_floor_none"))
        back_event = by_stream | by_none
        mark_of = (
            F.when(back_mark, F.col("_top"))
            .when(by_stream, F.col("_floor_k"))
            .otherwise(F.col("_floor_none"))
        )
    frames["watch-went-back"] = (
        seq.where(back_mark | back_event)
        .withColumn("_r", F.row_number().over(W.partitionBy("scomp").orderBy(*order)))
        .where(F.col("_r") == 1)
        .select(
            F.array("scomp").alias("indexes"),
            "pos",
            mark_of.alias("mark"),
            F.when(is_mark, F.lit("mark")).otherwise(F.lit("event")).alias("why"),
        )
    )

    # observers that disagree, phantoms ----------------------------------------------
    two_values = (
        at.groupBy("stream", "pos")
        .agg(
            F.count(F.lit(1)).alias("_n"),
            F.array_sort(F.collect_set("idx")).alias("indexes"),
            F.array_sort(F.collect_list("value")).alias("values"),
        )
        .where(F.col("_n") > 1)
        .select(
            "indexes", F.lit("two values at one position").alias("why"), "stream", "pos", "values"
        )
    )
    two_spots = (
        at.groupBy("stream", "value")
        .agg(
            F.count(F.lit(1)).alias("_n"),
            F.array_sort(F.collect_set("idx")).alias("indexes"),
            F.array_sort(F.collect_list("pos")).alias("positions"),
        )
        .where(F.col("_n") > 1)
        .select(
            "indexes",
            F.lit("one value at two positions").alias("why"),
            "stream",
            "value",
            "positions",
        )
    )
    first_seen = dels.groupBy("stream", "value").agg(F.min("scomp").alias("at"))
    tried = pub_events.select("stream", "value", "pinv", "pcomp", "outcome")
    ph = first_seen.join(tried, ["stream", "value"], "left")
    done = F.coalesce("pcomp", "pinv")
    frames["watch-phantom"] = ph.where(
        F.col("pinv").isNull() | (F.col("outcome") == "fail")
    ).select(
        F.when(F.col("pinv").isNull(), F.array("at"))
        .otherwise(F.array_sort(F.array_distinct(F.array(done, F.col("at")))))
        .alias("indexes"),
        "stream",
        "value",
        F.when(F.col("pinv").isNull(), F.lit("never published"))
        .otherwise(F.lit("publish failed"))
        .alias("why"),
    )

    # the final snapshots against the last event observed on each stream --------------
    lastw = W.partitionBy("stream").orderBy(F.col("pos").desc(), F.col("value"))
    last = (
        at.withColumn("_r", F.row_number().over(lastw))
        .where(F.col("_r") == 1)
        .select("stream", F.col("pos").alias("lpos"), F.col("value").alias("lval"))
    )
    at_vals = at.groupBy("stream", "pos").agg(F.collect_set("value").alias("_vals"))
    per_snap = (
        snaps.select("snap")
        .crossJoin(last.select("stream"))
        .unionByName(snap_entries.select("snap", "stream"))
        .distinct()
        .join(snap_entries, ["snap", "stream"], "left")
        .join(last, "stream", "left")
        .join(at_vals.withColumnRenamed("pos", "fpos"), ["stream", "fpos"], "left")
    )
    why = (
        F.when(F.col("fpos").isNull(), F.lit("no final value on a stream with events"))
        .when(
            F.col("lpos").isNotNull() & (F.col("lpos") > F.col("fpos")),
            F.lit("an event after the final value"),
        )
        .when(
            F.col("_vals").isNotNull() & ~F.array_contains("_vals", F.col("fval")),
            F.lit("another value at the final value's position"),
        )
    )
    frames["watch-final-mismatch"] = (
        per_snap.withColumn("why", why)
        .where(F.col("why").isNotNull())
        .select(
            F.array("snap").alias("indexes"),
            "stream",
            F.col("fpos").alias("_fpos"),
            F.col("fval").alias("_fval"),
            F.col("lpos").alias("_lpos"),
            F.col("lval").alias("_lval"),
            "why",
        )
    )

    frames["watch-resume-mismatch"] = (
        before.select("indexes", F.to_json(F.struct("why", "from", "stream", "pos")).alias("_p"))
        .unionByName(
            two_values.select(
                "indexes", F.to_json(F.struct("why", "stream", "pos", "values")).alias("_p")
            )
        )
        .unionByName(
            two_spots.select(
                "indexes", F.to_json(F.struct("why", "stream", "value", "positions")).alias("_p")
            )
        )
    )
    kinds = [kind for kind in ANOMALY_KINDS if judged_kind(o, kind)]
    found = None
    for kind in kinds:
        df = frames[kind]
        if "_p" not in df.columns:
            rest = [c for c in df.columns if c != "indexes"]
            df = df.select("indexes", F.to_json(F.struct(*rest)).alias("_p"))
        df = df.select(F.lit(kind).alias("kind"), "indexes", "_p")
        found = df if found is None else found.unionByName(df)
    # one job: each kind's whole count, and its first rows by indexes (ties at the cap too)
    examples: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, int] = {}
    if found is not None:
        by_kind = W.partitionBy("kind")
        ranked = (
            found.withColumn("_n", F.count(F.lit(1)).over(by_kind))
            .withColumn("_rank", F.rank().over(by_kind.orderBy("indexes")))
            .where(F.col("_rank") <= max(cap, 1))
        )
        for r in ranked.collect():
            kind = r["kind"]
            counts[kind] = int(r["_n"])
            row = {"indexes": list(r["indexes"]), **json.loads(r["_p"])}
            examples.setdefault(kind, []).append(_finish(kind, row))
        examples = {k: sort_examples(v)[:cap] for k, v in examples.items()}

    totals = subs.agg(
        F.count(F.lit(1)).alias("subs"),
        F.sum(F.col("final").cast("int")).alias("finals"),
        F.sum(F.size("events")).alias("deliveries"),
        F.sum(F.size("progress")).alias("marks"),
    ).first()
    known = positions.agg(
        F.count(F.lit(1)).alias("n"), F.countDistinct("stream").alias("streams")
    ).first()
    stats = {
        "ops": op_counts,
        "subscriptions": int(totals["subs"] or 0),
        "final_subscriptions": int(totals["finals"] or 0),
        "deliveries": int(totals["deliveries"] or 0),
        "progress_marks": int(totals["marks"] or 0),
        "positions": int(known["n"] or 0),
        "streams": int(known["streams"] or 0),
        "snapshots": op_counts["snapshot"]["ok"],
    }
    at.unpersist()
    positions.unpersist()
    return shaped(o, examples, counts, stats)


def _finish(kind: str, row: dict[str, Any]) -> dict[str, Any]:
    """A collected row as the local engine's example (its lists and nested pairs)."""
    e = {k: v for k, v in row.items() if not k.startswith("_")}
    e["indexes"] = [int(i) for i in e["indexes"]]
    if kind == "watch-gap":
        e["missing"] = [[m["stream"], int(m["pos"])] for m in row["_missing"]]
    if kind == "watch-final-mismatch":
        fpos, lpos = row.get("_fpos"), row.get("_lpos")
        e["final"] = None if fpos is None else [int(fpos), row.get("_fval")]
        e["last"] = None if lpos is None else [int(lpos), row.get("_lval")]
    return e
