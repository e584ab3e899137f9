"""Log safety as DataFrame jobs: the anomalies :mod:`checker.log_anomalies` defines (as the
local engine, :mod:`checker.log_safety`, computes them), restated as joins, windows and
aggregations so that no step needs a whole history in one process.

The driver only ever receives anomaly examples (at most ``cap`` per kind, with
their total count) and a handful of counters. How a big history is checked
(measured on 10M records, 2 cores; see benchmarks/README.md): after the pairing
pass (:mod:`checker.spark.pairing`), log reads' entries, most of the data (two
per record, a thousand per final read), are exploded once, beside the
acknowledged appends, aggregated in each scan task and shuffled, then moved by log
index, into ``D``: one row per distinct (log index, term, payload) with counts and
first history indexes, a few million narrow rows kept in memory. Samples are kept too, partitioned by node.
Every check is then a window or aggregate over those, unioned into one job that
returns the first ``cap`` examples per kind with the totals.

Examples that need every read of a log index or payload (divergent-committed,
duplicate-payload, unproposed-committed) are finished by a second, small pass over
the reads, only for the few candidates that can make the first ``cap``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from checker.log_anomalies import (
    ANOMALIES,
    NOTES,
    SETTLED_ROLES,
    canon,
    first_examples,
    ha_of,
    judgeable,
    result,
    value_key,
    volatile_of,
)
from checker.spark.input import as_int, loads
from checker.spark.kept import keep, release
from checker.spark.pairing import APP, READ
from harness.core.checker import CheckConfig

__all__ = ["LogSafety", "check_log_safety_spark"]


def _ex(F: Any, kind: str, idx: Any, weight: Any = None, **fields: Any) -> Any:
    """One example row: (kind, sort key = history indexes, how many anomalies it stands for,
    fields as JSON text)."""
    return F.struct(
        F.lit(kind).alias("kind"),
        idx.cast("array<long>").alias("idx"),
        (F.lit(1) if weight is None else weight).cast("long").alias("w"),
        F.to_json(
            F.struct(*[c.alias(k) for k, c in fields.items()]), {"ignoreNullFields": "false"}
        ).alias("ex"),
    )


# Flags of observation rows (see LogSafety._observations).
_OBS, _FIN, _FIRST, _ACK, _DONE = 1, 2, 4, 8, 16

BROADCAST_ROWS = 200_000
"""Rows a check may send to every task through the driver (a few MiB of payload texts)."""

# Kinds whose first-pass rows are candidates ranked by their smallest history index;
# the exact examples (all reads involved) come from a second pass over the candidates.
_CANDIDATES = ("divergent-committed", "duplicate-payload", "unproposed-committed")


class LogSafety:
    """The log-safety checks over the client records of one history.

    ``paired`` holds the append completions and log-read completions with what
    their invocations said (see :class:`checker.spark.pairing.Pairing`); the caller has already rejected
    histories that :func:`harness.core.history.pair_ops` rejects. Every check yields
    rows ``(kind, idx, w, ex)``; their union is ranked per kind by ``idx`` (the
    local engine's ``indexes`` order) and only the first ``cap`` rows per kind,
    with the per-kind totals (sums of ``w``), reach the driver.
    """

    def __init__(
        self,
        client: Any,
        paired: Any,
        cap: int,
        ha: dict[str, Any] | None,
        parts: int,
        append_invokes: int,
        level: Any,
        *,
        settled_terms_only: bool = False,
    ) -> None:
        from pyspark.sql import Window as W
        from pyspark.sql import functions as F

        self.settled_terms_only = settled_terms_only

        self.F, self.W, self.cap, self.ha, self.parts = F, W, cap, ha, parts
        self.append_invokes = append_invokes
        self.level = level
        self.checkpoints: list[Any] = []
        col = F.col
        self.apps = paired.where(col("tag") == APP).select(
            "inv", "comp", "type", "payload", "li", "term"
        )
        # Log reads: the completions' entries join their (small) pairing result by index,
        # broadcast, so entries never shuffle before they are reduced.
        valid = paired.where(col("tag") == READ).select(col("comp").alias("r"), "final")
        rc = client.where(
            (col("f") == "read") & (col("type") == "ok") & col("v_entries").isNotNull()
        )
        self.reads = rc.select(col("index").alias("r"), "v_committed", "v_entries", "v_end").join(
            F.broadcast(valid), "r"
        )

        # Samples, partitioned once by member and kept (narrow, a sixth of the records):
        # every sample check is a window over a member. Without the cache each check's
        # filter would be pushed below the exchange, and each would scan and shuffle again.
        # ``node`` is the member key (checker.log_anomalies: Samples), ``host`` the node
        # sampled; ``voters``/``learners``/``ci`` the configuration in force, if any.
        cfg = F.from_json(
            col("v_config"), "voters array<string>, learners array<string>, index long"
        )
        member = F.get_json_object(F.concat(F.lit('{"m":'), col("v_member"), F.lit("}")), "$.m")
        has_cfg = cfg.getField("voters").isNotNull()
        self.samples = self._keep(
            client.where(
                (col("f") == "sample") & (col("type") == "ok") & (col("v_kind") == "object")
            )
            .select(
                "index",
                F.when(col("v_member").startswith('"'), member)
                .otherwise(col("node"))
                .alias("node"),
                col("node").alias("host"),
                F.coalesce(col("v_incarnation"), F.lit("null")).alias("inc"),
                as_int(col("v_committed")).alias("c"),
                as_int(col("v_end")).alias("e"),
                as_int(col("v_term")).alias("t"),
                (col("v_role") == '"leader"').alias("is_leader"),
                F.coalesce(
                    ~col("v_role").isin(*map(json.dumps, SETTLED_ROLES))
                    & col("v_role").startswith('"'),
                    F.lit(False),
                ).alias("unsettled"),
                F.when(has_cfg, F.array_sort(F.array_distinct(cfg.getField("voters")))).alias(
                    "voters"
                ),
                F.when(
                    has_cfg,
                    F.array_sort(
                        F.array_distinct(
                            F.coalesce(cfg.getField("learners"), F.array().cast("array<string>"))
                        )
                    ),
                ).alias("learners"),
                F.when(has_cfg, cfg.getField("index")).alias("ci"),
            )
            .repartition(parts, "node")
        )
        self.client = client

        # D: committed observations and acked appends, by (log index, term, payload).
        # The first row of each read also stands for the read itself, for the counters.
        # Aggregated before any shuffle (Spark's partial aggregation, in each scan task),
        # then moved by log index, which the checks over D group by: reads of long log
        # prefixes repeat each entry hundreds of times, and shuffling every observation
        # by index first (11M rows of a 1M-record history) was most of such a check.
        fl = col("fl")

        def has(bits: int) -> Any:
            return fl.bitwiseAND(bits) == bits

        self.D = self._keep(
            self._observations(F, col)
            .groupBy("li", "term", "payload")
            .agg(
                F.sum(has(_OBS).cast("long")).alias("n_obs"),
                F.sum(has(_OBS | _FIN).cast("long")).alias("n_fin"),
                F.min(F.when(has(_OBS), col("r"))).alias("min_r"),
                F.sum(has(_ACK).cast("long")).alias("n_ack"),
                F.min(F.when(has(_ACK), col("r"))).alias("min_ack"),
                F.sum(has(_FIRST).cast("long")).alias("n_reads"),
                F.sum(has(_FIRST | _FIN).cast("long")).alias("n_final_reads"),
                F.sum(has(_DONE).cast("long")).alias("n_done"),
            )
            .repartition(parts, "li")
        )
        # D is computed by a job of its own thread, while this one plans the rest: every
        # check's plan is built, and the final job submitted, before D is there.
        # (On two cores a check is mostly CPU-bound, but the driver's planning leaves a
        # core idle: 2.5 s less on the 1.86M-record history; benchmarks/README.md.)
        self.filling = _Filling(self._fill)
        try:
            # Removed members: one row each, on the driver. Most histories have none, and
            # then the two checks that need them (one a window over every ack's two ends,
            # the costliest check of all) are not built.
            rem = self._removals()
            gone = rem.collect()
        except BaseException:
            self.close()
            raise
        self.removed = paired.sparkSession.createDataFrame(gone, rem.schema) if gone else None

    def _observations(self, F: Any, col: Any) -> Any:
        """Committed observations, read markers and acks, by log index, flags in one small int
        (shuffled rows stay narrow: there are two or three of them per history record)."""
        c = col("v_committed")
        ents, end = col("v_entries"), as_int(col("v_end"))
        # the final reach (checker.log_anomalies): the chunk holding the node's end, or past it,
        # with a committed index (null: all) that covers the end
        covered = c.isNull() | (c == "null") | (as_int(c) >= end)
        reached = end.isNull() | (
            F.coalesce(covered, F.lit(False))
            & ((F.size(ents) == 0) | (F.array_max(F.transform(ents, lambda e: e["index"])) >= end))
        )
        x = self.reads.select(
            "r",
            "final",
            (col("final") & reached).alias("done"),
            (c.isNull() | (c == "null")).alias("all"),
            as_int(c).alias("ci"),
            F.posexplode_outer("v_entries").alias("pos", "e"),
        )
        obs = col("e").isNotNull() & (col("all") | (col("e.index") <= col("ci")))
        first = col("pos").isNull() | (col("pos") == 0)
        flags = (
            F.when(obs, _OBS).otherwise(0)
            + F.when(col("final"), _FIN).otherwise(0)
            + F.when(first, _FIRST).otherwise(0)
            + F.when(first & col("done"), _DONE).otherwise(0)
        ).cast("tinyint")
        x = x.where(obs | first).select(
            F.when(obs, col("e.index")).alias("li"),
            F.when(obs, col("e.term")).alias("term"),
            F.when(obs, col("e.payload")).alias("payload"),
            "r",
            flags.alias("fl"),
        )
        acks = self.apps.where((col("type") == "ok") & col("li").isNotNull()).select(
            "li", "term", "payload", col("comp").alias("r"), F.lit(_ACK).cast("tinyint").alias("fl")
        )
        return x.unionByName(acks)

    def _keep(self, df: Any) -> Any:
        """``df`` kept (:mod:`checker.spark.kept`); the first job that reads it computes it
        (the samples: the removals' job; ``D``: the filling thread's)."""
        df = keep(df, self.level)
        self.checkpoints.append(df)
        return df

    def close(self) -> None:
        self.filling.stop()
        for df in self.checkpoints:
            release(df)

    # ----- sample checks

    def committed_regress(self) -> Any:
        F, W = self.F, self.W
        s = self.samples.where(F.col("c").isNotNull())
        w = W.partitionBy("node", "inc").orderBy("index").rowsBetween(W.unboundedPreceding, -1)
        x = s.select(
            "index",
            "node",
            "inc",
            "c",
            F.max(F.struct("c", (-F.col("index")).alias("ni"))).over(w).alias("best"),
        )
        off = x.where(F.col("c") < F.col("best.c"))
        first = off.select(
            "*", F.row_number().over(W.partitionBy("node", "inc").orderBy("index")).alias("rn")
        ).where(F.col("rn") == 1)
        return self._examples(
            first,
            "committed-regress",
            F.array(-F.col("best.ni"), F.col("index")),
            node=F.col("node"),
            incarnation=F.col("inc"),
            **{"from": F.col("best.c"), "to": F.col("c")},
        )

    def committed_regress_restart(self) -> Any:
        F, W = self.F, self.W
        s = self.samples.where(F.col("c").isNotNull())
        w = W.partitionBy("node").orderBy("index")
        x = s.select(
            "index", "node", "inc", "c", F.lag(F.struct("index", "inc", "c")).over(w).alias("p")
        )
        notes = x.where(
            F.col("p").isNotNull() & (F.col("p.inc") != F.col("inc")) & (F.col("c") < F.col("p.c"))
        )
        return self._examples(
            notes,
            "committed-regress-restart",
            F.array("p.index", "index"),
            node=F.col("node"),
            incarnation=F.col("inc"),
            previous_incarnation=F.col("p.inc"),
            **{"from": F.col("p.c"), "to": F.col("c")},
        )

    def committed_beyond_end(self) -> Any:
        F = self.F
        x = self.samples.where(
            F.col("c").isNotNull() & F.col("e").isNotNull() & (F.col("c") > F.col("e"))
        )
        return self._examples(
            x,
            "committed-beyond-end",
            F.array("index"),
            node=F.col("node"),
            incarnation=F.col("inc"),
            committed=F.col("c"),
            end=F.col("e"),
        )

    def two_leaders_in_term(self) -> Any:
        F = self.F
        led = (
            self.samples.where(F.col("is_leader") & F.col("t").isNotNull())
            .groupBy("t", "node")
            .agg(F.min("index").alias("first"))
        )
        terms = led.groupBy("t").agg(
            F.collect_list("node").alias("nodes"),
            F.sort_array(F.collect_list("first")).alias("idx"),
        )
        x = terms.where(F.size("idx") > 1)
        return self._examples(
            x, "two-leaders-in-term", F.col("idx"), term=F.col("t"), nodes=F.col("nodes")
        )

    def term_regress(self) -> Any:
        """term-regress (an unsettled sample's term sets no floor when the
        DB declared ``settled_terms_only``)."""
        F, W = self.F, self.W
        s = self.samples.where(F.col("t").isNotNull())
        w = W.partitionBy("node").orderBy("index").rowsBetween(W.unboundedPreceding, -1)
        floor = F.struct("t", (-F.col("index")).alias("ni"))
        if self.settled_terms_only:
            floor = F.when(~F.col("unsettled"), floor)
        x = s.select(
            "index",
            "node",
            "inc",
            "t",
            F.max(floor).over(w).alias("best"),
        )
        off = x.where(F.col("t") < F.col("best.t"))
        return self._examples(
            off,
            "term-regress",
            F.array(-F.col("best.ni"), F.col("index")),
            node=F.col("node"),
            incarnation=F.col("inc"),
            **{"from": F.col("best.t"), "to": F.col("t")},
        )

    # ----- membership (checker.log_anomalies: leader-after-removal defines a removal)

    def _removals(self) -> Any:
        """Rows (``m``, ``r``: struct(t, index, ci)) for each removed member: the lowest-term
        sample showing its removal committed (ties: the earliest), and the removing entry."""
        F, col = self.F, self.F.col
        cfgs = self.samples.where(col("voters").isNotNull() & col("ci").isNotNull())
        listed = F.when(col("ci") < 0, col("voters")).otherwise(
            F.concat(col("voters"), col("learners"))
        )
        span = (
            cfgs.select("ci", F.explode(listed).alias("m"))
            .groupBy("m")
            .agg(F.min("ci").alias("lo"), F.max("ci").alias("hi"))
        )
        seen = (
            cfgs.where(
                (col("ci") >= 0)
                & col("c").isNotNull()
                & (col("ci") <= col("c"))
                & col("t").isNotNull()
            )
            .groupBy("ci", "voters", "learners")
            .agg(F.min(F.struct("t", "index")).alias("first"))
        )
        gone = seen.crossJoin(F.broadcast(span)).where(
            (col("lo") < col("ci"))
            & (col("hi") < col("ci"))
            & ~F.array_contains(col("voters"), col("m"))
            & ~F.array_contains(col("learners"), col("m"))
        )
        return gone.groupBy("m").agg(
            F.min(
                F.struct(col("first.t").alias("t"), col("first.index").alias("index"), "ci")
            ).alias("r")
        )

    def leader_after_removal(self) -> Any:
        F, col = self.F, self.F.col
        led = self.samples.where(col("is_leader") & col("t").isNotNull())
        x = led.join(F.broadcast(self.removed), led["node"] == col("m")).where(
            col("t") > col("r.t")
        )
        first = x.groupBy("node").agg(F.min(F.struct("index", "t", "r")).alias("s"))
        return self._examples(
            first,
            "leader-after-removal",
            F.array_sort(F.array(col("s.r.index"), col("s.index"))),
            node=col("node"),
            term=col("s.t"),
            removed_term=col("s.r.t"),
            config_index=col("s.r.ci"),
        )

    def ack_after_removal(self) -> Any:
        """The member on an ack's host: the host's samples just before its invocation and
        just after its completion, by a window over the host's samples and the ack's two
        ends."""
        F, W, col = self.F, self.W, self.F.col
        acks = (
            self.apps.where(col("type") == "ok")
            .select("inv", "comp")
            .join(
                self.client.where((col("f") == "append") & (col("type") == "ok")).select(
                    col("index").alias("comp"),
                    col("node").alias("host"),
                    as_int(col("v_term")).alias("at"),
                    F.coalesce(col("v_index"), F.lit("null")).alias("li"),
                ),
                "comp",
            )
            .where(col("at").isNotNull())
        )
        ev = (
            self.samples.select(
                "host", "index", col("node").alias("m"), F.lit(None).cast("long").alias("k")
            )
            .unionByName(
                acks.select(
                    "host",
                    col("inv").alias("index"),
                    F.lit(None).alias("m"),
                    col("comp").alias("k"),
                )
            )
            .unionByName(
                acks.select(
                    "host",
                    col("comp").alias("index"),
                    F.lit(None).alias("m"),
                    col("comp").alias("k"),
                )
            )
        )
        # Both frames grow from the partition's start, which Spark updates row by row; a
        # frame running to the partition's end is recomputed for every row (quadratic: a
        # host's events are a fifth of the history). "After" is "before" in reverse order.
        fwd = W.partitionBy("host").orderBy("index")
        rev = W.partitionBy("host").orderBy(col("index").desc())
        ev = ev.where(col("k").isNotNull() | col("m").isNotNull()).select(
            "k",
            "index",
            F.last("m", ignorenulls=True)
            .over(fwd.rowsBetween(W.unboundedPreceding, -1))
            .alias("before"),
            F.last("m", ignorenulls=True)
            .over(rev.rowsBetween(W.unboundedPreceding, -1))
            .alias("after"),
        )
        ends = (
            ev.where(col("k").isNotNull())
            .groupBy("k")
            .agg(
                F.max(F.when(col("index") < col("k"), col("before"))).alias("before"),
                F.max(F.when(col("index") == col("k"), col("after"))).alias("after"),
            )
            .where(col("before") == col("after"))
        )
        x = (
            acks.join(ends, acks["comp"] == ends["k"])
            .join(F.broadcast(self.removed), col("after") == col("m"))
            .where(col("at") > col("r.t"))
        )
        return self._examples(
            x,
            "ack-after-removal",
            F.array_sort(F.array(col("r.index"), col("comp"))),
            node=col("m"),
            term=col("at"),
            index=col("li"),
            removed_term=col("r.t"),
        )

    def divergent_committed(self) -> Any:
        """Candidates: log indexes with two committed values, by their first reader."""
        F = self.F
        g = (
            self.D.where(F.col("n_obs") > 0)
            .groupBy("li")
            .agg(F.count("*").alias("k"), F.min("min_r").alias("r0"))
        )
        x = g.where(F.col("k") > 1)
        return self._examples(x, "divergent-committed", F.array("r0"), index=F.col("li"))

    def _unseen(self) -> Any:
        """Acked triples no final read shows, with the final reads' reach beside them
        (checker.log_anomalies: Final reach): ``judged`` when some final read got to its
        node's end or the ack is at or below the highest committed final observation."""
        F, col = self.F, self.F.col
        reach = self.D.agg(
            F.max(F.when(col("n_fin") > 0, col("li"))).alias("reach"),
            F.sum("n_done").alias("done"),
        )
        x = self.D.where((col("n_ack") > 0) & (col("n_fin") == 0)).crossJoin(F.broadcast(reach))
        judged = (F.coalesce(col("done"), F.lit(0)) > 0) | (
            col("li") <= F.coalesce(col("reach"), F.lit(-1))
        )
        return x.withColumn("judged", judged)

    def _lost(self) -> Any:
        return self._unseen().where(self.F.col("judged"))

    def lost_ack(self) -> Any:
        """Acked (index, term, payload) absent from every final read; ``found`` comes later.

        One row per distinct acked triple, standing for its ``n_ack`` acks. Computed
        even without final reads; the driver drops it then (see ``run``).
        """
        F = self.F
        x = self._lost()
        return self._examples(
            x,
            "lost-ack",
            F.array("min_ack"),
            F.col("n_ack"),
            payload=F.col("payload"),
            index=F.col("li"),
            term=F.col("term"),
        )

    def _by_payload(self) -> Any:
        """Per observed non-null payload: lowest and highest log index, first reader (``r0``) and
        a log index it shows the payload at (``li0``, made exact for examples later); with the
        ``fail`` appends of that payload (count and two completions), in one shuffle."""
        F, col = self.F, self.F.col
        obs = self.D.where((col("n_obs") > 0) & (col("payload") != "null")).select(
            "payload", "li", "min_r", F.lit(None).cast("long").alias("comp")
        )
        fails = self.apps.where((col("type") == "fail") & (col("payload") != "null")).select(
            "payload",
            F.lit(None).cast("long").alias("li"),
            F.lit(None).cast("long").alias("min_r"),
            "comp",
        )
        return (
            obs.unionByName(fails)
            .groupBy("payload")
            .agg(
                F.min("li").alias("lo"),
                F.max("li").alias("hi"),
                F.min("min_r").alias("r0"),
                F.min_by("li", "min_r").alias("li0"),
                F.count("comp").alias("nf"),
                F.min("comp").alias("f1"),
                F.max("comp").alias("f2"),
            )
        )

    def payload_checks(self) -> Any:
        """failed-append-present and duplicate-payload candidates, from one pass over
        :meth:`_by_payload` (each further use of it would shuffle again).

        One failed-append-present row per fail completion whose payload was observed;
        a payload with more than two fails is flagged (``_failed_multi``) and its
        fails are listed by a second pass.
        """
        F, col = self.F, self.F.col
        bp = self._by_payload()
        hit = (col("nf") > 0) & col("r0").isNotNull()
        x = bp.where((col("lo") != col("hi")) | hit)
        comps = F.array_distinct(F.array("f1", "f2"))
        fails = [
            _ex(
                F,
                "failed-append-present",
                F.array_sort(F.array(c, "r0")),
                w,
                payload=col("payload"),
                index=col("li0"),
                comp=c,
            )
            for c, w in ((comps[0], col("nf") - F.size(comps) + 1), (comps[1], F.lit(1)))
        ]
        rows = F.array(
            F.when(
                col("lo") != col("hi"),
                _ex(F, "duplicate-payload", F.array("r0"), payload=col("payload")),
            ),
            F.when(hit, fails[0]),
            F.when(hit & (F.size(comps) > 1), fails[1]),
            F.when(hit & (col("nf") > 2), _ex(F, "_failed_multi", F.array("nf"))),
        )
        return x.select(F.explode(F.filter(rows, lambda r: r.isNotNull())).alias("x"))

    def unproposed_committed(self) -> Any:
        """Candidates: log indexes where a committed payload is one no append proposed
        (checker.log_anomalies: unproposed-committed), by their first reader, with
        those payloads' texts (``payloads``) for the second pass.

        A row of ``D`` that an ack shares (``n_ack``) holds that ack's payload, proposed;
        only the others, a few, are looked up among the payloads of every keyless append
        invocation and ok completion (info or never completed too).
        """
        F, col = self.F, self.F.col
        lo = self.apps.where((col("type") == "ok") & col("li").isNotNull()).agg(
            F.min("li").alias("lo")
        )
        # Parsed only where the text could hold the key: an object with a "kind" key spells
        # it, or escapes it. Parsing every unacked observation was 4% of the executors' time.
        pay = col("payload")
        system = F.when(
            pay.contains('"kind"') | pay.contains("\\u"),
            F.coalesce(F.array_contains(F.json_object_keys(pay), "kind"), F.lit(False)),
        ).otherwise(F.lit(False))
        cand = (
            self.D.where((col("n_obs") > 0) & (col("n_ack") == 0) & (col("payload") != "null"))
            .crossJoin(F.broadcast(lo))
            .where((col("li") >= col("lo")) & ~system)
        )
        proposed = self.client.where(
            (col("f") == "append")
            & col("key").isNull()  # keyed appends are kv ops (checker.families.is_log)
            & col("type").isin("invoke", "ok")
            & col("v_payload").isNotNull()
        ).select(col("v_payload").alias("payload"))
        # The candidates are few where the proposals are many (every append's payload):
        # left to itself, Spark broadcast the proposals, a million strings through the
        # driver. Counted first, so that a history with many candidates still shuffles.
        if cand.count() <= BROADCAST_ROWS:
            proposed = proposed.join(
                F.broadcast(cand.select("payload").distinct()), "payload", "left_semi"
            )
        else:
            proposed = proposed.hint("merge")
        x = (
            cand.join(proposed, "payload", "left_anti")
            .groupBy("li")
            .agg(
                F.min("min_r").alias("r0"),
                F.sort_array(F.collect_set("payload")).alias("payloads"),
            )
        )
        return self._examples(
            x, "unproposed-committed", F.array("r0"), index=col("li"), payloads=col("payloads")
        )

    def append_order(self) -> Any:
        """Running maximum of acked indexes over history order, in buckets.

        A global window would pull every append into one task; instead each
        bucket of history positions gets the maximum of all earlier buckets (a
        window over one small row per bucket) plus a window inside it.
        """
        F, W = self.F, self.W
        bucket = 1 << 16
        ok = self.apps.where((F.col("type") == "ok") & F.col("li").isNotNull()).select(
            "inv", "comp", "li"
        )
        best = F.struct("li", (-F.col("comp")).alias("nc"))
        comps = ok.select(
            F.col("comp").alias("pos"),
            best.alias("b"),
            F.lit(None).cast("long").alias("inv"),
            F.lit(None).cast("long").alias("li"),
            F.lit(None).cast("long").alias("comp"),
        )
        btype = comps.schema["b"].dataType
        invs = ok.select(
            F.col("inv").alias("pos"), F.lit(None).cast(btype).alias("b"), "inv", "li", "comp"
        )
        ev = comps.unionByName(invs).withColumn("bk", F.floor(F.col("pos") / bucket))
        per = comps.groupBy(F.floor(F.col("pos") / bucket).alias("bk")).agg(F.max("b").alias("m"))
        pre = per.select(
            "bk",
            F.max("m").over(W.orderBy("bk").rowsBetween(W.unboundedPreceding, -1)).alias("before"),
        )
        w = W.partitionBy("bk").orderBy("pos").rowsBetween(W.unboundedPreceding, 0)
        at_inv = (
            ev.select("bk", "inv", "li", "comp", F.max("b").over(w).alias("within"))
            .where(F.col("inv").isNotNull())
            .join(F.broadcast(pre), "bk", "left")
            .select("li", "comp", F.greatest("within", "before").alias("prior"))
        )
        x = at_inv.where(F.col("prior").isNotNull() & (F.col("li") <= F.col("prior.li")))
        return self._examples(
            x,
            "append-order",
            F.array(-F.col("prior.nc"), F.col("comp")),
            a_index=F.col("prior.li"),
            b_index=F.col("li"),
        )

    def _examples(self, rows: Any, kind: str, idx: Any, weight: Any = None, **fields: Any) -> Any:
        """``rows`` as example rows of ``kind`` (:func:`_ex`), in the column ``x`` that
        :meth:`_top` unions across the checks."""
        return rows.select(_ex(self.F, kind, idx, weight, **fields).alias("x"))

    def _top(self, parts: list[Any]) -> list[Any]:
        """The first ``cap`` example rows of each kind in ``parts``, with the kind's total."""
        F, W = self.F, self.W
        col = F.col
        allx = _union(parts).select("x.*")
        wk = W.partitionBy("kind")
        wo = wk.orderBy("idx")
        ranked = allx.select(
            "kind",
            "idx",
            "w",
            "ex",
            F.sum("w").over(wk).alias("n"),
            F.when(col("kind").isin(*_CANDIDATES), F.rank().over(wo))
            .otherwise(F.row_number().over(wo))
            .alias("rn"),
        )
        return list(ranked.where(col("rn") <= self.cap).collect())

    def _fill(self) -> list[Any]:
        """What the filling thread does: ``D`` computed, then the one check whose plan
        depends on a count over it."""
        self.D.count()
        return self._top([self.unproposed_committed()])

    def counters(self) -> Any:
        F, col = self.F, self.F.col
        apps = self.apps.agg(
            F.sum((col("type") == "ok").cast("long")).alias("ok"),
            F.sum((col("type") == "fail").cast("long")).alias("fail"),
        )
        d = self.D.agg(
            F.sum("n_obs").alias("obs"),
            F.sum("n_reads").alias("reads"),
            F.sum("n_final_reads").alias("finals"),
        )
        lost = self._unseen().agg(
            F.count_if(col("judged") & (col("n_ack") > 1)).alias("lost_multi"),
            F.sum(F.when(~col("judged"), col("n_ack"))).alias("unjudged"),
        )
        z = F.lit(0)
        return [
            apps.select(
                _ex(F, "_apps", F.array(F.coalesce("ok", z), F.coalesce("fail", z))).alias("x")
            ),
            self.samples.agg(F.count("*").alias("n")).select(
                _ex(F, "_samples", F.array("n")).alias("x")
            ),
            d.select(
                _ex(
                    F, "_d", F.array(*(F.coalesce(c, z) for c in ("obs", "reads", "finals")))
                ).alias("x")
            ),
            lost.select(
                _ex(
                    F, "_lost", F.array(*(F.coalesce(c, z) for c in ("lost_multi", "unjudged")))
                ).alias("x")
            ),
        ]

    def run(self) -> dict[str, Any]:
        parts = [
            self.committed_regress(),
            self.committed_beyond_end(),
            self.two_leaders_in_term(),
            self.term_regress(),
            self.divergent_committed(),
            self.lost_ack(),
            self.payload_checks(),
            self.append_order(),
            *(
                (self.leader_after_removal(), self.ack_after_removal())
                if self.removed is not None
                else ()
            ),
            self.committed_regress_restart(),
            *self.counters(),
        ]
        rows = self._top(parts) + self.filling.result()
        by: dict[str, list[Any]] = {}
        totals: dict[str, int] = {}
        for r in sorted(rows, key=lambda r: (r["kind"], r["rn"], r["idx"])):
            by.setdefault(r["kind"], []).append(r)
            totals[r["kind"]] = int(r["n"])
        st = {k: list(v[0]["idx"]) for k, v in by.items() if k.startswith("_")}
        ok, fail = st["_apps"]
        n_obs, n_reads, n_final = st["_d"]
        lost_multi, unjudged = st["_lost"] if n_final else (0, 0)
        stats = {
            "samples": st["_samples"][0],
            "appends": {"ok": ok, "fail": fail, "info": self.append_invokes - ok - fail},
            "reads": n_reads,
            "final_reads": n_final,
            "committed_observations": n_obs,
            "lost_ack_unjudged": unjudged,
        }
        if not n_final:
            by.pop("lost-ack", None)
        anomalies = {k: [_decode(k, r) for r in by[k]] for k in ANOMALIES if k in by}
        notes = {k: [_decode(k, r) for r in by[k]] for k in NOTES if k in by}
        self._finish(anomalies, multi_lost=bool(lost_multi), multi_failed="_failed_multi" in by)
        return result(
            anomalies,
            notes,
            stats,
            judgeable=judgeable(n_final, ok, unjudged),
            ha=self.ha,
            totals=totals,
        )

    # ----- second pass: what the first pass left to finish

    def _finish(
        self, anomalies: dict[str, list[dict[str, Any]]], *, multi_lost: bool, multi_failed: bool
    ) -> None:
        """Complete what the first pass left open, for the examples kept only.

        Candidates (divergent-committed, duplicate-payload, unproposed-committed) get all
        their readers and values (the smallest unproposed payload at each index); only keys that can be among the first ``cap`` were kept: a key whose
        first reader comes later than the ``cap``-th smallest first reader cannot sort
        before ``cap`` others, as examples sort by their sorted reader lists. Lost
        acks get ``found``, failed appends the exact log index (the first reader may
        show a payload at several). Kinds where one first-pass row stood for several
        examples are listed again, exactly. Two small queries: one over ``D``, one
        over the reads.
        """
        col = self.F.col
        if multi_failed:
            anomalies["failed-append-present"][:] = self._all_failed()
        if multi_lost and "lost-ack" in anomalies:
            anomalies["lost-ack"][:] = self._all_lost()
        div = anomalies.get("divergent-committed", [])
        dup = anomalies.get("duplicate-payload", [])
        failed = anomalies.get("failed-append-present", [])
        lost = anomalies.get("lost-ack", [])
        unprop = anomalies.get("unproposed-committed", [])
        lis = sorted({e["index"] for e in div})
        pays = sorted({e["_raw"] for e in dup})
        for e in failed:
            e["_r0"] = next(i for i in e["indexes"] if i != e["_comp"])
        firsts = sorted({(e["_raw"], e["_r0"]) for e in failed})
        lost_lis = sorted({e["index"] for e in lost})
        pairs = sorted({_pair_key(e["index"], p) for e in unprop for p in e["_raw"]})
        if not (lis or pays or firsts or lost_lis or pairs):
            return
        rows: list[Any] = []
        if lis or pays or firsts or lost_lis:
            obs = col("n_obs") > 0
            cond = (obs & (col("li").isin(lis) | col("payload").isin(pays))) | (
                (col("n_fin") > 0) & col("li").isin(lost_lis)
            )
            for p, r0 in firsts:
                cond = cond | (obs & (col("payload") == p) & (col("min_r") == r0))
            rows = (
                self.D.where(cond)
                .select("li", "term", "payload", "n_obs", "n_fin", "min_r")
                .collect()
            )
        readers: dict[tuple[str, str], list[int]] = {}
        if lis or pays or pairs:
            for row in self._readers(lis, pays, pairs).collect():
                readers[(row["k"], row["key"])] = list(row["rs"])
        if unprop:
            ex = [
                {
                    "index": e["index"],
                    "payload": min(map(loads, e["_raw"]), key=canon),
                    "indexes": sorted(
                        {r for p in e["_raw"] for r in readers[("pair", _pair_key(e["index"], p))]}
                    ),
                }
                for e in unprop
            ]
            anomalies["unproposed-committed"] = first_examples(ex, self.cap)
        if div:
            vals: dict[int, list[list[Any]]] = {}
            for row in rows:
                if row["n_obs"] and row["li"] in lis:
                    vals.setdefault(row["li"], []).append(
                        [loads(row["term"]), loads(row["payload"])]
                    )
            ex = [
                {
                    "index": li,
                    "values": sorted(vals[li], key=value_key),
                    "indexes": readers[("li", str(li))],
                }
                for li in lis
            ]
            anomalies["divergent-committed"] = first_examples(ex, self.cap)
        if dup:
            at: dict[str, set[int]] = {}
            for row in rows:
                if row["n_obs"] and row["payload"] in pays:
                    at.setdefault(row["payload"], set()).add(row["li"])
            ex = [
                {
                    "payload": loads(p),
                    "log_indexes": sorted(at[p]),
                    "indexes": readers[("payload", p)],
                }
                for p in pays
            ]
            anomalies["duplicate-payload"] = first_examples(ex, self.cap)
        for e in failed:
            key = (e["_raw"], e.pop("_r0"))
            e["index"] = min(
                r["li"] for r in rows if r["n_obs"] and (r["payload"], r["min_r"]) == key
            )
            e["indexes"] = e.pop("indexes")
        found: dict[int, list[list[Any]]] = {}
        for row in rows:
            if row["n_fin"]:
                found.setdefault(row["li"], []).append([loads(row["term"]), loads(row["payload"])])
        for e in lost:
            vals_at = found.get(e["index"])
            e["found"] = min(vals_at, key=value_key) if vals_at else None
            e["indexes"] = e.pop("indexes")
        for ex in anomalies.values():
            for e in ex:
                e.pop("_raw", None)
                e.pop("_comp", None)

    def _readers(self, lis: list[int], pays: list[str], pairs: Sequence[str] = ()) -> Any:
        """Sorted reads with a committed observation at these log indexes, of these payloads,
        or of these (log index, payload) pairs (:func:`_pair_key`): rows (``k`` = "li",
        "payload" or "pair", ``key`` as text, ``rs``)."""
        F, col = self.F, self.F.col
        c = col("v_committed")
        x = self.reads.select(
            "r",
            (c.isNull() | (c == "null")).alias("all"),
            as_int(c).alias("ci"),
            F.explode("v_entries").alias("e"),
        )
        pair = F.concat(col("e.index").cast("string"), F.lit("\t"), col("e.payload"))
        x = x.where(
            (col("all") | (col("e.index") <= col("ci")))
            & (col("e.index").isin(lis) | col("e.payload").isin(pays) | pair.isin(list(pairs)))
        )
        keys = F.array(
            F.when(
                col("e.index").isin(lis),
                F.struct(F.lit("li").alias("k"), col("e.index").cast("string").alias("key")),
            ),
            F.when(
                col("e.payload").isin(pays),
                F.struct(F.lit("payload").alias("k"), col("e.payload").alias("key")),
            ),
            F.when(
                pair.isin(list(pairs)),
                F.struct(F.lit("pair").alias("k"), pair.alias("key")),
            ),
        )
        x = x.select("r", F.explode(F.filter(keys, lambda k: k.isNotNull())).alias("kk"))
        return x.groupBy("kk.k", "kk.key").agg(F.sort_array(F.collect_set("r")).alias("rs"))

    def _all_lost(self) -> list[dict[str, Any]]:
        col = self.F.col
        trip = self._lost().select("li", "term", "payload")
        acks = self.apps.where((col("type") == "ok") & col("li").isNotNull())
        x = acks.join(trip, ["li", "term", "payload"]).orderBy("comp").limit(self.cap)
        return [
            {
                "payload": loads(r["payload"]),
                "index": r["li"],
                "term": loads(r["term"]),
                "indexes": [r["comp"]],
                "_raw": r["payload"],
            }
            for r in x.collect()
        ]

    def _all_failed(self) -> list[dict[str, Any]]:
        F, col = self.F, self.F.col
        hit = (
            self._by_payload()
            .where((col("nf") > 0) & col("r0").isNotNull())
            .select("payload", "r0")
        )
        fails = self.apps.where(col("type") == "fail").select("payload", "comp")
        x = fails.join(hit, "payload").select(
            "payload", "comp", F.array_sort(F.array("comp", "r0")).alias("idx")
        )
        return [
            {
                "payload": loads(r["payload"]),
                "index": None,
                "indexes": list(r["idx"]),
                "_raw": r["payload"],
                "_comp": r["comp"],
            }
            for r in x.orderBy("idx").limit(self.cap).collect()
        ]


def _union(frames: Sequence[Any]) -> Any:
    """The union of ``frames`` (one column each, alike), as a balanced tree: Spark
    analyses the whole plan at each union, so a chain of sixteen cost twice as much."""
    while len(frames) > 1:
        frames = [
            frames[i].union(frames[i + 1]) if i + 1 < len(frames) else frames[i]
            for i in range(0, len(frames), 2)
        ]
    return frames[0]


class _Filling:
    """A step of a check run by a thread of its own, while the driver goes on planning
    the rest. Its jobs go to a scheduler pool of their own (the session schedules
    pools fairly), or the small jobs the driver submits meanwhile would queue behind
    them; and to a job group of their own, cancelled when the check ends first (it
    failed, or Ctrl-C), rather than waited for."""

    def __init__(self, step: Callable[[], list[Any]]) -> None:
        import threading
        import uuid

        self.group = f"splitbrain-filling-{uuid.uuid4().hex}"
        self.out: list[Any] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(step,), daemon=True)
        self.thread.start()

    @staticmethod
    def _context() -> Any:
        from pyspark import SparkContext

        return SparkContext._active_spark_context

    def _run(self, step: Callable[[], list[Any]]) -> None:
        try:
            sc = self._context()
            if sc is not None:
                sc.setLocalProperty("spark.scheduler.pool", "filling")
                sc.setJobGroup(self.group, "splitbrain log safety: D", interruptOnCancel=True)
            self.out = step()
        except BaseException as e:
            self.error = e

    def result(self) -> list[Any]:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.out

    def stop(self) -> None:
        if self.thread.is_alive():
            sc = self._context()
            if sc is not None:
                with contextlib.suppress(Exception):
                    sc.cancelJobGroup(self.group)
        self.thread.join()


def _pair_key(li: int, payload: str) -> str:
    """A (log index, payload text) pair as one text, as :meth:`LogSafety._readers` makes it
    in a job (an index has no tab, so the first one splits it)."""
    return f"{li}\t{payload}"


_INT_TERMS = (
    "two-leaders-in-term",
    "leader-after-removal",
    "ack-after-removal",
)
"""Kinds whose examples' ``term`` is a sampled or acked integer, not raw JSON text."""


def _decode(kind: str, r: Any) -> dict[str, Any]:
    """An example row back to the local engine's example dict."""
    d: dict[str, Any] = json.loads(r["ex"])
    idx = list(r["idx"])
    if kind in ("duplicate-payload", "failed-append-present"):
        d["_raw"] = d["payload"]
    if kind == "unproposed-committed":
        d["_raw"] = d.pop("payloads")
    if kind == "failed-append-present":
        d["_comp"] = d.pop("comp")
    for k in ("incarnation", "previous_incarnation", "payload", "term"):
        if k in d and not (kind in _INT_TERMS and k == "term"):
            d[k] = loads(d[k])
    if kind == "ack-after-removal":
        d["index"] = loads(d["index"])
    if kind == "two-leaders-in-term":
        d["nodes"] = sorted(d["nodes"], key=str)
    d["indexes"] = idx
    return d


def check_log_safety_spark(session: Any, records: Any, config: CheckConfig) -> dict[str, Any]:
    """The log-safety checker's Spark implementation (registered in
    :data:`checker.log_safety.LOG_SAFETY`).

    It works from the engine's first pass (``config.shared``: ``client``, the client
    records, ``paired``, ``parts``, ``append_invokes`` and ``level``, see
    :class:`checker.spark.pairing.Pairing`) rather than from ``records``, whose
    pairing that pass already did.
    """
    shared = config.shared
    job = LogSafety(
        shared["client"],
        shared["paired"],
        config.cap,
        ha_of(config),
        int(shared["parts"]),
        int(shared["append_invokes"]),
        shared["level"],
        settled_terms_only=volatile_of(config),
    )
    try:
        return job.run()
    finally:
        job.close()
