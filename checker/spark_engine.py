"""The Spark engine: the local engine's checks, as DataFrame jobs.

The semantics are :mod:`checker.log_safety`'s, restated as joins, windows and
aggregations so that no step needs a whole history in one process: the driver
only ever receives anomaly examples (at most :data:`checker.results.CAP` per kind, with their
total count) and a handful of counters. Per-key linearizability ships each
key's ops to one task and runs :mod:`checker.linearizable` there.

Representing JSON values. Payloads, terms and incarnations are compared as
*raw compact JSON text* (``"p1"`` with its quotes, ``7``, ``{"a":1}``), so a
string ``"1"`` and a number ``1`` stay different, as they are for the local
engine. Parquet histories carry that text in typed columns
(:data:`harness.history.PARQUET_VALUE_COLUMNS`), written once with the file, so
no record or log entry is parsed here. Files from before those columns existed
are still checked: the columns are then derived from ``value`` with Spark's
JSON functions (the old, slow path; object keys keep their order there).
Examples are decoded back into Python values on the driver.

How a big history is checked (measured on 10M records, 2 cores; see
benchmarks/README.md). Three passes over the records:

1. One window over every client record, by process, pairs each completion with
   its invocation. Group counts and what :func:`harness.history.pair_ops`
   rejects are observed as metrics of that pass; the append and log-read
   completions leave it as a narrow *paired* frame, kept in memory.
2. Log reads' entries are most of the data (two per record, a thousand per
   final read). They are exploded once, beside the acknowledged appends, and
   shuffled once, by log index, into ``D``: one row per distinct (log index,
   term, payload) with counts and first history indexes, a few million narrow
   rows kept in memory. Samples are kept too, partitioned by node.
3. Every check is a window or aggregate over those, unioned into one job that
   returns the first ``cap`` examples per kind with the totals.

Examples that need every read of a log index or payload (divergent-committed,
duplicate-payload) are finished by a second, small pass over the reads, only
for the few candidates that can make the first ``cap``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time as _time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from checker.results import CAP, compose_results, key_order, shape_linearizable, unknown_result
from harness.core.errors import CheckerError, HistoryError
from harness.core.history import NEMESIS, PARQUET_VALUE_COLUMNS, VALUE_FIELDS, Op

__all__ = ["check_spark"]

_ENTRY = r"^\[(-?[0-9]+),([^,]*),(.*)\]$"
_BASE = ("index", "type", "process", "f", "key", "value", "node")


# --------------------------------------------------------------------------- input

def _to_parquet(source: str | os.PathLike[str] | Iterable[Op], work: Path) -> str:
    """A Parquet file holding the history, converting (streamed) when needed."""
    from harness.core.history import iter_jsonl, read_history, write_parquet

    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            for name in ("history.parquet", "history.jsonl"):
                if (path / name).exists():
                    path = path / name
                    break
            else:
                raise HistoryError("no history.jsonl or history.parquet in this directory", path=path)
        if not path.exists():
            raise HistoryError("no such file", path=path)
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            return str(path)
        out = Path(tempfile.mkdtemp(dir=work)) / "history.parquet"
        ops: Iterable[Op] = iter_jsonl(path) if suffix in (".jsonl", ".json") else read_history(path)
        write_parquet(ops, out)
        return str(out)
    out = Path(tempfile.mkdtemp(dir=work)) / "history.parquet"
    write_parquet(source, out)
    return str(out)


# --------------------------------------------------------------------------- column helpers

def _raw_field(F: Any, js: Any, name: str) -> Any:
    """Raw compact JSON text of top-level field ``name`` of the JSON object text ``js``.

    ``get_json_object`` gives a string's content without quotes; re-quote it with
    Jackson (``to_json``) so that it matches raw entry text. A missing or null
    field gives ``'null'``.
    """
    txt = F.get_json_object(js, f"$.{name}")
    is_str = js.rlike(r'"' + name + r'"\s*:\s*"')
    quoted = F.regexp_replace(F.to_json(F.array(txt)), r"^\[|\]$", "")
    return F.when(txt.isNull(), F.lit("null")).when(is_str, quoted).otherwise(txt)


def _with_typed(F: Any, hist: Any) -> Any:
    """The history with the typed value columns, derived from ``value`` when the file lacks them.

    The derivation is the engine's former per-row JSON parsing, kept for Parquet
    files written before the typed columns existed; it gives the same texts
    except that object keys keep their order.
    """
    if all(c in hist.columns for c in PARQUET_VALUE_COLUMNS):
        return hist.select(*_BASE, *PARQUET_VALUE_COLUMNS)
    v = F.col("value")
    kind = (F.when(v.isNull() | (v == "null"), "null").when(v.startswith("{"), "object")
            .when(v.startswith("["), "array").when(v.startswith('"'), "string")
            .when(v.isin("true", "false"), "boolean").otherwise("number"))
    obj = kind == "object"
    cols = {"v_kind": kind}
    for name in VALUE_FIELDS:
        present = v.rlike(r'"' + name + r'"\s*:') if name == "payload" else F.lit(True)
        cols[f"v_{name}"] = F.when(obj & present, _raw_field(F, v, name))
    ents = F.from_json(v, "entries array<string>").getField("entries")
    cols["v_entries"] = F.when(obj, F.transform(
        F.filter(ents, lambda e: e.rlike(_ENTRY)),
        lambda e: F.struct(F.regexp_extract(e, _ENTRY, 1).cast("long").alias("index"),
                           F.regexp_extract(e, _ENTRY, 2).alias("term"),
                           F.regexp_extract(e, _ENTRY, 3).alias("payload"))))
    return hist.select(*_BASE, *[cols[c].alias(c) for c in PARQUET_VALUE_COLUMNS])


def _as_int(c: Any) -> Any:
    """A JSON text column as a long where it is a JSON integer, else null.

    Casting alone would accept ``7.5`` (as 7); the round trip keeps exactly the
    texts an integer prints as.
    """
    from pyspark.sql import functions as F

    n = c.cast("long")
    return F.when(n.cast("string") == c, n)


def _loads(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"), default=str)


def _value_key(tp: Sequence[Any]) -> tuple[Any, str]:
    term, payload = tp
    is_int = isinstance(term, int) and not isinstance(term, bool)
    return (term if is_int else -1, _canon(payload))


# --------------------------------------------------------------------------- log safety

def _ex(F: Any, kind: str, idx: Any, weight: Any = None, **fields: Any) -> Any:
    """One example row: (kind, sort key = history indexes, how many anomalies it stands for,
    fields as JSON text)."""
    return F.struct(F.lit(kind).alias("kind"), idx.cast("array<long>").alias("idx"),
                    (F.lit(1) if weight is None else weight).cast("long").alias("w"),
                    F.to_json(F.struct(*[c.alias(k) for k, c in fields.items()]),
                              {"ignoreNullFields": "false"}).alias("ex"))


# Rows of the paired frame (see _pair), and the flags of observation rows (see _LogSafety).
_APP, _READ = 0, 1
_OBS, _FIN, _FIRST, _ACK = 1, 2, 4, 8
_GROUPS = ("log", "set", "maybe-set", "register", "kv", "txn", "mutex", "other")

# Kinds whose first-pass rows are candidates ranked by their smallest history index;
# the exact examples (all reads involved) come from a second pass over the candidates.
_CANDIDATES = ("divergent-committed", "duplicate-payload")


class _LogSafety:
    """The log-safety checks over the client records of one history.

    ``paired`` holds the append completions and log-read completions with what
    their invocations said (see :func:`_pair`); the caller has already rejected
    histories that :func:`harness.history.pair_ops` rejects. Every check yields
    rows ``(kind, idx, w, ex)``; their union is ranked per kind by ``idx`` (the
    local engine's ``indexes`` order) and only the first ``cap`` rows per kind,
    with the per-kind totals (sums of ``w``), reach the driver.
    """

    def __init__(self, client: Any, paired: Any, cap: int, ha: dict[str, Any] | None,
                 parts: int, append_invokes: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import Window as W
        from pyspark.sql import functions as F

        self.F, self.W, self.cap, self.ha, self.parts = F, W, cap, ha, parts
        self.append_invokes = append_invokes
        self.level = StorageLevel.MEMORY_AND_DISK
        self.persisted: list[Any] = []
        col = F.col
        self.apps = paired.where(col("tag") == _APP).select("inv", "comp", "type", "payload", "li", "term")
        # Log reads: the completions' entries join their (small) pairing result by index,
        # broadcast, so entries never shuffle before they are reduced.
        valid = paired.where(col("tag") == _READ).select(col("comp").alias("r"), "final")
        rc = client.where((col("f") == "read") & (col("type") == "ok") & col("v_entries").isNotNull())
        self.reads = rc.select(col("index").alias("r"), "v_committed", "v_entries").join(
            F.broadcast(valid), "r")

        # Samples, partitioned once by node and kept (narrow, a sixth of the records): every
        # sample check is a window over a node. Without the cache each check's filter
        # would be pushed below the exchange, and each would scan and shuffle again.
        self.samples = self._keep(client.where((col("f") == "sample") & (col("type") == "ok")
                                               & (col("v_kind") == "object")).select(
            "index", "node", F.coalesce(col("v_incarnation"), F.lit("null")).alias("inc"),
            _as_int(col("v_committed")).alias("c"), _as_int(col("v_end")).alias("e"),
            _as_int(col("v_term")).alias("t"), (col("v_role") == '"leader"').alias("is_leader"),
        ).repartition(parts, "node"))

        # D: committed observations and acked appends, by (log index, term, payload).
        # The first row of each read also stands for the read itself, for the counters.
        fl = col("fl")

        def has(bits: int) -> Any:
            return fl.bitwiseAND(bits) == bits

        self.D = self._keep(self._observations(F, col).groupBy("li", "term", "payload").agg(
            F.sum(has(_OBS).cast("long")).alias("n_obs"),
            F.sum(has(_OBS | _FIN).cast("long")).alias("n_fin"),
            F.min(F.when(has(_OBS), col("r"))).alias("min_r"),
            F.sum(has(_ACK).cast("long")).alias("n_ack"),
            F.min(F.when(has(_ACK), col("r"))).alias("min_ack"),
            F.sum(has(_FIRST).cast("long")).alias("n_reads"),
            F.sum(has(_FIRST | _FIN).cast("long")).alias("n_final_reads")))

    def _observations(self, F: Any, col: Any) -> Any:
        """Committed observations, read markers and acks, by log index, flags in one small int
        (shuffled rows stay narrow: there are two or three of them per history record)."""
        c = col("v_committed")
        x = self.reads.select("r", "final", (c.isNull() | (c == "null")).alias("all"),
                              _as_int(c).alias("ci"), F.posexplode_outer("v_entries").alias("pos", "e"))
        obs = col("e").isNotNull() & (col("all") | (col("e.index") <= col("ci")))
        first = col("pos").isNull() | (col("pos") == 0)
        flags = (F.when(obs, _OBS).otherwise(0) + F.when(col("final"), _FIN).otherwise(0)
                 + F.when(first, _FIRST).otherwise(0)).cast("tinyint")
        x = x.where(obs | first).select(
            F.when(obs, col("e.index")).alias("li"), F.when(obs, col("e.term")).alias("term"),
            F.when(obs, col("e.payload")).alias("payload"), "r", flags.alias("fl"))
        acks = self.apps.where((col("type") == "ok") & col("li").isNotNull()).select(
            "li", "term", "payload", col("comp").alias("r"), F.lit(_ACK).cast("tinyint").alias("fl"))
        return x.unionByName(acks).repartition(self.parts, "li")

    def _keep(self, df: Any) -> Any:
        df = df.persist(self.level)
        self.persisted.append(df)
        return df

    def close(self) -> None:
        for df in self.persisted:
            df.unpersist()

    # ----- sample checks

    def committed_regress(self) -> Any:
        F, W = self.F, self.W
        s = self.samples.where(F.col("c").isNotNull())
        w = W.partitionBy("node", "inc").orderBy("index").rowsBetween(W.unboundedPreceding, -1)
        x = s.select("index", "node", "inc", "c",
                     F.max(F.struct("c", (-F.col("index")).alias("ni"))).over(w).alias("best"))
        off = x.where(F.col("c") < F.col("best.c"))
        first = off.select("*", F.row_number().over(
            W.partitionBy("node", "inc").orderBy("index")).alias("rn")).where(F.col("rn") == 1)
        return first.select(_ex(F, "committed-regress", F.array(-F.col("best.ni"), F.col("index")),
                                node=F.col("node"), incarnation=F.col("inc"), **{
                                    "from": F.col("best.c"), "to": F.col("c")}).alias("x"))

    def committed_regress_restart(self) -> Any:
        F, W = self.F, self.W
        s = self.samples.where(F.col("c").isNotNull())
        w = W.partitionBy("node").orderBy("index")
        x = s.select("index", "node", "inc", "c", F.lag(F.struct("index", "inc", "c")).over(w).alias("p"))
        notes = x.where(F.col("p").isNotNull() & (F.col("p.inc") != F.col("inc"))
                        & (F.col("c") < F.col("p.c")))
        return notes.select(_ex(F, "committed-regress-restart", F.array("p.index", "index"),
                                node=F.col("node"), incarnation=F.col("inc"),
                                previous_incarnation=F.col("p.inc"),
                                **{"from": F.col("p.c"), "to": F.col("c")}).alias("x"))

    def committed_beyond_end(self) -> Any:
        F = self.F
        x = self.samples.where(F.col("c").isNotNull() & F.col("e").isNotNull() & (F.col("c") > F.col("e")))
        return x.select(_ex(F, "committed-beyond-end", F.array("index"), node=F.col("node"),
                            incarnation=F.col("inc"), committed=F.col("c"), end=F.col("e")).alias("x"))

    def two_leaders_in_term(self) -> Any:
        F = self.F
        led = (self.samples.where(F.col("is_leader") & F.col("t").isNotNull())
               .groupBy("t", "node").agg(F.min("index").alias("first")))
        terms = led.groupBy("t").agg(F.collect_list("node").alias("nodes"),
                                     F.sort_array(F.collect_list("first")).alias("idx"))
        x = terms.where(F.size("idx") > 1)
        return x.select(_ex(F, "two-leaders-in-term", F.col("idx"), term=F.col("t"),
                            nodes=F.col("nodes")).alias("x"))

    def term_regress(self) -> Any:
        F, W = self.F, self.W
        s = self.samples.where(F.col("t").isNotNull())
        w = W.partitionBy("node").orderBy("index").rowsBetween(W.unboundedPreceding, -1)
        x = s.select("index", "node", "inc", "t",
                     F.max(F.struct("t", (-F.col("index")).alias("ni"))).over(w).alias("best"))
        off = x.where(F.col("t") < F.col("best.t"))
        return off.select(_ex(F, "term-regress", F.array(-F.col("best.ni"), F.col("index")),
                              node=F.col("node"), incarnation=F.col("inc"),
                              **{"from": F.col("best.t"), "to": F.col("t")}).alias("x"))

    # ----- log contents (first pass: all from D)

    def divergent_committed(self) -> Any:
        """Candidates: log indexes with two committed values, by their first reader."""
        F = self.F
        g = self.D.where(F.col("n_obs") > 0).groupBy("li").agg(
            F.count("*").alias("k"), F.min("min_r").alias("r0"))
        x = g.where(F.col("k") > 1)
        return x.select(_ex(F, "divergent-committed", F.array("r0"), index=F.col("li")).alias("x"))

    def lost_ack(self) -> Any:
        """Acked (index, term, payload) absent from every final read; ``found`` comes later.

        One row per distinct acked triple, standing for its ``n_ack`` acks. Computed
        even without final reads; the driver drops it then (see ``run``).
        """
        F = self.F
        x = self.D.where((F.col("n_ack") > 0) & (F.col("n_fin") == 0))
        return x.select(_ex(F, "lost-ack", F.array("min_ack"), F.col("n_ack"), payload=F.col("payload"),
                            index=F.col("li"), term=F.col("term")).alias("x"))

    def _by_payload(self) -> Any:
        """Per observed non-null payload: lowest and highest log index, first reader (``r0``) and
        a log index it shows the payload at (``li0``, made exact for examples later); with the
        ``fail`` appends of that payload (count and two completions), in one shuffle."""
        F, col = self.F, self.F.col
        obs = self.D.where((col("n_obs") > 0) & (col("payload") != "null")).select(
            "payload", "li", "min_r", F.lit(None).cast("long").alias("comp"))
        fails = self.apps.where((col("type") == "fail") & (col("payload") != "null")).select(
            "payload", F.lit(None).cast("long").alias("li"), F.lit(None).cast("long").alias("min_r"),
            "comp")
        return obs.unionByName(fails).groupBy("payload").agg(
            F.min("li").alias("lo"), F.max("li").alias("hi"), F.min("min_r").alias("r0"),
            F.min_by("li", "min_r").alias("li0"), F.count("comp").alias("nf"),
            F.min("comp").alias("f1"), F.max("comp").alias("f2"))

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
        fails = [_ex(F, "failed-append-present", F.array_sort(F.array(c, "r0")), w,
                     payload=col("payload"), index=col("li0"), comp=c)
                 for c, w in ((comps[0], col("nf") - F.size(comps) + 1), (comps[1], F.lit(1)))]
        rows = F.array(
            F.when(col("lo") != col("hi"), _ex(F, "duplicate-payload", F.array("r0"),
                                                 payload=col("payload"))),
            F.when(hit, fails[0]), F.when(hit & (F.size(comps) > 1), fails[1]),
            F.when(hit & (col("nf") > 2), _ex(F, "_failed_multi", F.array("nf"))))
        return x.select(F.explode(F.filter(rows, lambda r: r.isNotNull())).alias("x"))

    def append_order(self) -> Any:
        """Running maximum of acked indexes over history order, in buckets.

        A global window would pull every append into one task; instead each
        bucket of history positions gets the maximum of all earlier buckets (a
        window over one small row per bucket) plus a window inside it.
        """
        F, W = self.F, self.W
        bucket = 1 << 16
        ok = self.apps.where((F.col("type") == "ok") & F.col("li").isNotNull()).select("inv", "comp", "li")
        best = F.struct("li", (-F.col("comp")).alias("nc"))
        comps = ok.select(F.col("comp").alias("pos"), best.alias("b"), F.lit(None).cast("long").alias("inv"),
                          F.lit(None).cast("long").alias("li"), F.lit(None).cast("long").alias("comp"))
        btype = comps.schema["b"].dataType
        invs = ok.select(F.col("inv").alias("pos"), F.lit(None).cast(btype).alias("b"), "inv", "li", "comp")
        ev = comps.unionByName(invs).withColumn("bk", F.floor(F.col("pos") / bucket))
        per = comps.groupBy(F.floor(F.col("pos") / bucket).alias("bk")).agg(F.max("b").alias("m"))
        pre = per.select("bk", F.max("m").over(
            W.orderBy("bk").rowsBetween(W.unboundedPreceding, -1)).alias("before"))
        w = W.partitionBy("bk").orderBy("pos").rowsBetween(W.unboundedPreceding, 0)
        at_inv = (ev.select("bk", "inv", "li", "comp", F.max("b").over(w).alias("within"))
                  .where(F.col("inv").isNotNull())
                  .join(F.broadcast(pre), "bk", "left")
                  .select("li", "comp", F.greatest("within", "before").alias("prior")))
        x = at_inv.where(F.col("prior").isNotNull() & (F.col("li") <= F.col("prior.li")))
        return x.select(_ex(F, "append-order", F.array(-F.col("prior.nc"), F.col("comp")),
                            a_index=F.col("prior.li"), b_index=F.col("li")).alias("x"))

    def counters(self) -> Any:
        F, col = self.F, self.F.col
        apps = self.apps.agg(F.sum((col("type") == "ok").cast("long")).alias("ok"),
                             F.sum((col("type") == "fail").cast("long")).alias("fail"))
        d = self.D.agg(F.sum("n_obs").alias("obs"), F.sum("n_reads").alias("reads"),
                       F.sum("n_final_reads").alias("finals"),
                       F.count_if((col("n_ack") > 1) & (col("n_fin") == 0)).alias("lost_multi"))
        z = F.lit(0)
        return [
            apps.select(_ex(F, "_apps", F.array(F.coalesce("ok", z), F.coalesce("fail", z))).alias("x")),
            self.samples.agg(F.count("*").alias("n")).select(_ex(F, "_samples", F.array("n")).alias("x")),
            d.select(_ex(F, "_d", F.array(*(F.coalesce(c, z) for c in (
                "obs", "reads", "finals", "lost_multi")))).alias("x")),
        ]

    def run(self) -> dict[str, Any]:
        F, W = self.F, self.W
        col = F.col
        parts = [self.committed_regress(), self.committed_beyond_end(), self.two_leaders_in_term(),
                 self.term_regress(), self.divergent_committed(), self.lost_ack(),
                 self.payload_checks(), self.append_order(), self.committed_regress_restart(),
                 *self.counters()]
        allx = parts[0]
        for p in parts[1:]:
            allx = allx.unionByName(p)
        allx = allx.select("x.*")
        wk = W.partitionBy("kind")
        wo = wk.orderBy("idx")
        ranked = allx.select("kind", "idx", "w", "ex", F.sum("w").over(wk).alias("n"),
                             F.when(col("kind").isin(*_CANDIDATES), F.rank().over(wo))
                             .otherwise(F.row_number().over(wo)).alias("rn"))
        rows = ranked.where(col("rn") <= self.cap).collect()
        by: dict[str, list[Any]] = {}
        totals: dict[str, int] = {}
        for r in sorted(rows, key=lambda r: (r["kind"], r["rn"], r["idx"])):
            by.setdefault(r["kind"], []).append(r)
            totals[r["kind"]] = int(r["n"])
        st = {k: list(v[0]["idx"]) for k, v in by.items() if k.startswith("_")}
        ok, fail = st["_apps"]
        n_obs, n_reads, n_final, lost_multi = st["_d"]
        stats = {"samples": st["_samples"][0],
                 "appends": {"ok": ok, "fail": fail, "info": self.append_invokes - ok - fail},
                 "reads": n_reads, "final_reads": n_final, "committed_observations": n_obs}
        if not n_final:
            by.pop("lost-ack", None)
        anomalies = {k: [_decode(k, r) for r in by[k]] for k in _CHECKS if k in by}
        notes = {k: [_decode(k, r) for r in by[k]] for k in _NOTES if k in by}
        self._finish(anomalies, multi_lost=bool(lost_multi), multi_failed="_failed_multi" in by)
        unknown = [] if (n_final or not ok) else ["lost-ack"]
        ha = self.ha
        if ha is not None and not ha.get("sync"):   # async master: a loss window by design
            for kind, note in (("lost-ack", "loss-window"), ("append-order", "loss-window-order")):
                if kind in anomalies:
                    notes[note] = anomalies.pop(kind)
        if ha is not None:
            stats["loss_window"] = totals.get("lost-ack", 0) if "lost-ack" in by else 0
        stats["anomaly_counts"] = {k: totals[k] for k in anomalies}
        valid: bool | str = False if anomalies else ("unknown" if unknown else True)
        return {"valid": valid, "anomalies": anomalies, "notes": notes, "unknown": unknown,
                "stats": stats}

    # ----- second pass: what the first pass left to finish

    def _finish(self, anomalies: dict[str, list[dict[str, Any]]], *, multi_lost: bool,
                multi_failed: bool) -> None:
        """Complete what the first pass left open, for the examples kept only.

        Candidates (divergent-committed, duplicate-payload) get all their readers and
        values; only keys that can be among the first ``cap`` were kept: a key whose
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
        lis = sorted({e["index"] for e in div})
        pays = sorted({e["_raw"] for e in dup})
        for e in failed:
            e["_r0"] = next(i for i in e["indexes"] if i != e["_comp"])
        firsts = sorted({(e["_raw"], e["_r0"]) for e in failed})
        lost_lis = sorted({e["index"] for e in lost})
        if not (lis or pays or firsts or lost_lis):
            return
        obs = col("n_obs") > 0
        cond = (obs & (col("li").isin(lis) | col("payload").isin(pays))) | (
            (col("n_fin") > 0) & col("li").isin(lost_lis))
        for p, r0 in firsts:
            cond = cond | (obs & (col("payload") == p) & (col("min_r") == r0))
        rows = self.D.where(cond).select("li", "term", "payload", "n_obs", "n_fin", "min_r").collect()
        readers: dict[tuple[str, str], list[int]] = {}
        if lis or pays:
            for row in self._readers(lis, pays).collect():
                readers[(row["k"], row["key"])] = list(row["rs"])
        if div:
            vals: dict[int, list[list[Any]]] = {}
            for row in rows:
                if row["n_obs"] and row["li"] in lis:
                    vals.setdefault(row["li"], []).append([_loads(row["term"]), _loads(row["payload"])])
            ex = [{"index": li, "values": sorted(vals[li], key=_value_key),
                   "indexes": readers[("li", str(li))]} for li in lis]
            anomalies["divergent-committed"] = sorted(ex, key=lambda e: e["indexes"])[:self.cap]
        if dup:
            at: dict[str, set[int]] = {}
            for row in rows:
                if row["n_obs"] and row["payload"] in pays:
                    at.setdefault(row["payload"], set()).add(row["li"])
            ex = [{"payload": _loads(p), "log_indexes": sorted(at[p]),
                   "indexes": readers[("payload", p)]} for p in pays]
            anomalies["duplicate-payload"] = sorted(ex, key=lambda e: e["indexes"])[:self.cap]
        for e in failed:
            key = (e["_raw"], e.pop("_r0"))
            e["index"] = min(r["li"] for r in rows if r["n_obs"] and (r["payload"], r["min_r"]) == key)
            e["indexes"] = e.pop("indexes")
        found: dict[int, list[list[Any]]] = {}
        for row in rows:
            if row["n_fin"]:
                found.setdefault(row["li"], []).append([_loads(row["term"]), _loads(row["payload"])])
        for e in lost:
            vals_at = found.get(e["index"])
            e["found"] = min(vals_at, key=_value_key) if vals_at else None
            e["indexes"] = e.pop("indexes")
        for ex in anomalies.values():
            for e in ex:
                e.pop("_raw", None)
                e.pop("_comp", None)

    def _readers(self, lis: list[int], pays: list[str]) -> Any:
        """Sorted reads with a committed observation at these log indexes or of these payloads:
        rows (``k`` = "li" or "payload", ``key`` as text, ``rs``)."""
        F, col = self.F, self.F.col
        c = col("v_committed")
        x = self.reads.select("r", (c.isNull() | (c == "null")).alias("all"), _as_int(c).alias("ci"),
                              F.explode("v_entries").alias("e"))
        x = x.where((col("all") | (col("e.index") <= col("ci")))
                    & (col("e.index").isin(lis) | col("e.payload").isin(pays)))
        keys = F.array(F.when(col("e.index").isin(lis), F.struct(
                           F.lit("li").alias("k"), col("e.index").cast("string").alias("key"))),
                       F.when(col("e.payload").isin(pays), F.struct(
                           F.lit("payload").alias("k"), col("e.payload").alias("key"))))
        x = x.select("r", F.explode(F.filter(keys, lambda k: k.isNotNull())).alias("kk"))
        return x.groupBy("kk.k", "kk.key").agg(F.sort_array(F.collect_set("r")).alias("rs"))

    def _all_lost(self) -> list[dict[str, Any]]:
        col = self.F.col
        trip = self.D.where((col("n_ack") > 0) & (col("n_fin") == 0)).select("li", "term", "payload")
        acks = self.apps.where((col("type") == "ok") & col("li").isNotNull())
        x = acks.join(trip, ["li", "term", "payload"]).orderBy("comp").limit(self.cap)
        return [{"payload": _loads(r["payload"]), "index": r["li"], "term": _loads(r["term"]),
                 "indexes": [r["comp"]], "_raw": r["payload"]} for r in x.collect()]

    def _all_failed(self) -> list[dict[str, Any]]:
        F, col = self.F, self.F.col
        hit = self._by_payload().where((col("nf") > 0) & col("r0").isNotNull()).select("payload", "r0")
        fails = self.apps.where(col("type") == "fail").select("payload", "comp")
        x = fails.join(hit, "payload").select(
            "payload", "comp", F.array_sort(F.array("comp", "r0")).alias("idx"))
        return [{"payload": _loads(r["payload"]), "index": None, "indexes": list(r["idx"]),
                 "_raw": r["payload"], "_comp": r["comp"]}
                for r in x.orderBy("idx").limit(self.cap).collect()]


_CHECKS = ("committed-regress", "committed-beyond-end", "two-leaders-in-term", "term-regress",
           "divergent-committed", "lost-ack", "failed-append-present", "duplicate-payload",
           "append-order")
_NOTES = ("committed-regress-restart",)


def _raise_malformed(r: Any) -> None:
    b = json.loads(r["ex"])
    index = r["idx"][0]
    if b["type"] == "invoke":
        raise HistoryError(f"process {b['process']} invoked again while op {b.get('pindex')} was open",
                           index=index, field="process")
    if b.get("ptype") != "invoke":
        raise HistoryError(f"{b['type']} completion of process {b['process']} has no invocation",
                           index=index, field="process")
    raise HistoryError(f"completion f {b['f']!r} differs from its invocation's {b.get('pf')!r}",
                       index=index, field="f")


def _decode(kind: str, r: Any) -> dict[str, Any]:
    """An example row back to the local engine's example dict."""
    d = json.loads(r["ex"])
    idx = list(r["idx"])
    if kind in ("duplicate-payload", "failed-append-present"):
        d["_raw"] = d["payload"]
    if kind == "failed-append-present":
        d["_comp"] = d.pop("comp")
    for k in ("incarnation", "previous_incarnation", "payload", "term"):
        if k in d and not (kind == "two-leaders-in-term" and k == "term"):
            d[k] = _loads(d[k])
    if kind == "two-leaders-in-term":
        d["nodes"] = sorted(d["nodes"], key=str)
    d["indexes"] = idx
    return d


# --------------------------------------------------------------------------- entry point

def _parts(rows: int) -> int:
    """Shuffle partitions for a history of ``rows`` records.

    Small histories drown in per-task overhead (a 3k-record history took 100-230 s
    with 8 partitions and adaptive execution, 20 s with 2); big ones want tasks of
    a few hundred thousand rows so that sorts and aggregations stay in memory.
    """
    env = os.environ.get("SPLITBRAIN_SPARK_PARTITIONS")
    if env:
        return max(1, int(env))
    return 1 if rows < 100_000 else max(2, min(64, rows // 400_000))


def _footer(path: str) -> tuple[int, int | None]:
    """Records and largest ``index`` of a Parquet history, from its footer (None: unknown)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except Exception:
        return 1_000_000, None
    try:
        col = meta.schema.names.index("index")
        stats = [meta.row_group(i).column(col).statistics for i in range(meta.num_row_groups)]
        top = max(s.max for s in stats if s is not None and s.has_min_max) if stats else -1
        if any(s is None or not s.has_min_max for s in stats):
            top = None
    except (ValueError, TypeError):
        top = None
    return int(meta.num_rows), top


def _tune(spark: Any, rows: int, size: int) -> int:
    """Per-history settings; returns the shuffle partitions.

    Input splits are cut to about a quarter of the file per core: with Spark's
    128 MB splits a 10M-record file made three scan tasks for two cores, one of
    them holding most final reads (they come last in a history). Parquet batches
    are cut to 512 records: a batch's nested entries are decoded at once, and 4096
    final reads of a thousand entries each filled most of a 1 GiB heap.
    """
    parts = _parts(rows)
    cores = max(1, spark.sparkContext.defaultParallelism)
    split = max(4 << 20, min(128 << 20, size // (4 * cores) + 1))
    spark.conf.set("spark.sql.shuffle.partitions", str(parts))
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split))
    spark.conf.set("spark.sql.parquet.columnarReaderBatchSize", "512")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.codegen.wholeStage", "true" if rows > 200_000 else "false")
    # Below this, compiling generated code costs more than it saves (a 3k-record check:
    # 6.5 s with code generation, 4.5 s interpreted).
    spark.conf.set("spark.sql.codegen.factoryMode", "FALLBACK" if rows > 100_000 else "NO_CODEGEN")
    return parts


def check_spark(source: str | os.PathLike[str] | Iterable[Op], *, model: Any = None,
                master: str | None = None, timeout: float | None = None,
                opts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Check a history on Spark; same result shape and verdicts as the local engine.

    ``source`` is a Parquet or JSONL path (or a store directory), or ops in
    memory (written to a temporary Parquet file first).
    """

    from checker.spark_session import get_session, work_dir

    opts = dict(opts or {})
    cap = int(opts.get("cap", CAP))
    t0 = _time.monotonic()
    work = work_dir()
    path = _to_parquet(source, work)
    spark = get_session(master)
    rows, max_index = _footer(path)
    parts = _tune(spark, rows, os.path.getsize(path))
    try:
        hist = spark.read.parquet(path)
    except Exception as e:
        raise HistoryError(f"Spark cannot read this Parquet file: {str(e).splitlines()[0]}",
                           path=path) from None
    missing = [c for c in _BASE if c not in hist.columns]
    if missing:
        raise HistoryError(f"Parquet history lacks columns {', '.join(missing)}", path=path)
    try:
        return _check_df(spark, hist, model=model, timeout=timeout, cap=cap, opts=opts, t0=t0,
                         parts=parts, max_index=max_index)
    except HistoryError:
        raise
    except Exception as e:  # a dead JVM or failed job: one line, the details are in its log
        if type(e).__module__.startswith(("py4j", "pyspark")):
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise CheckerError(f"the Spark job failed ({first[:300]}); rerun with "
                               "SPLITBRAIN_SPARK_VERBOSE=1 or a larger "
                               "SPLITBRAIN_SPARK_DRIVER_MEMORY") from None
        raise


def _group(inv_f: Any, inv_key: Any, inv_kind: Any, comp_type: Any, comp_kind: Any,
           names: Sequence[Any] = _GROUPS) -> Any:
    """The check group :func:`checker.local.classify` gives an op, from its invocation's f, key
    and value kind and its completion's type and value kind (null when there is none).

    ``maybe-set`` is a keyless read that is a set read if the history has adds and
    a register read otherwise. ``names`` are the values given for :data:`_GROUPS`.
    """
    from pyspark.sql import functions as F

    g = dict(zip(_GROUPS, names, strict=True))
    is_dict = F.coalesce(inv_kind == "object", F.lit(False)) | (
        (comp_type == "ok") & F.coalesce(comp_kind == "object", F.lit(False)))
    keyless_read = (inv_f == "read") & inv_key.isNull()
    maybe_set = keyless_read & (comp_type.isNull() | (comp_type != "ok")
                                | F.coalesce(comp_kind == "array", F.lit(False)))
    return (F.when((inv_f == "sample") | ((inv_f == "append") & inv_key.isNull())
                   | (keyless_read & is_dict), g["log"])
            .when(inv_f == "add", g["set"])
            .when(maybe_set, g["maybe-set"])
            .when(inv_f.isin("read", "write", "cas"), g["register"])
            .when(inv_f.isin("get", "put", "append"), g["kv"])
            .when(inv_f == "txn", g["txn"])
            .when(inv_f.isin("acquire", "release"), g["mutex"])
            .otherwise(g["other"]))


def _labeled(recs: Any) -> Any:
    """Client records with the check group of their op (both records of an op land in the
    same group), for the checkers that need whole records."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    col = F.col
    w = Window.partitionBy("process").orderBy("index")
    x = recs.select(
        "*", F.lag("f").over(w).alias("pf"), F.lag("key").over(w).alias("pkey"),
        F.lag("v_kind").over(w).alias("pkind"),
        F.lead("type").over(w).alias("ntype"), F.lead("v_kind").over(w).alias("nkind"))
    inv = col("type") == "invoke"
    has_comp = col("ntype").isNotNull() & (col("ntype") != "invoke")
    group = _group(F.when(inv, col("f")).otherwise(col("pf")),
                   F.when(inv, col("key")).otherwise(col("pkey")),
                   F.when(inv, col("v_kind")).otherwise(col("pkind")),
                   F.when(inv, F.when(has_comp, col("ntype"))).otherwise(col("type")),
                   F.when(inv, F.when(has_comp, col("nkind"))).otherwise(col("v_kind")))
    return x.select(*recs.columns, group.alias("group"))


_TYPES = ("invoke", "ok", "fail", "info")
_KINDS = ("null", "boolean", "number", "string", "array", "object")


def _code(c: Any, names: Sequence[str]) -> Any:
    """A small integer for one of ``names`` (null for anything else)."""
    from pyspark.sql import functions as F

    out = F.when(c == names[0], 0)
    for i, n in enumerate(names[1:], 1):
        out = out.when(c == n, i)
    return out.cast("tinyint")


_BLOCK = 20
"""History indexes per window group, as a power of two: a process's records are
windowed in blocks of this many indexes, so no task buffers a whole sampler
(a third of all records) and the blocks spread over the cores."""


def _neighbours(x: Any, w: Any) -> Any:
    """``x`` with its previous and next record's fields over the window ``w``."""
    from pyspark.sql import functions as F

    lag, lead = F.lag, F.lead
    return x.select("*", lag("t").over(w).alias("pt"), lag("f").over(w).alias("pf"),
                    lag("keyed").over(w).alias("pkeyed"), lag("index").over(w).alias("pindex"),
                    lag("v_payload").over(w).alias("ip"), lag("fin").over(w).alias("ifin"),
                    lead("t").over(w).alias("nt"), lead("k").over(w).alias("nk"),
                    lead("index").over(w).alias("nindex"))


def _judged(x: Any) -> Any:
    """Records with neighbours, judged: their op's group code and record count (``g``,
    ``n``, on invocations), what pair_ops rejects (``bad``), and whether they are an
    append or log-read completion of a keyless invocation (``pair``)."""
    from pyspark.sql import functions as F

    col = F.col
    inv = col("t") == 0
    has_comp = col("nt") > 0
    kinds = F.array(*(F.lit(k) for k in _KINDS))
    types = F.array(*(F.lit(t) for t in _TYPES))
    group = F.when(inv, _group(col("f"), F.when(col("keyed"), F.lit("k")),
                               F.element_at(kinds, col("k").cast("int") + 1),
                               F.when(has_comp, F.element_at(types, col("nt").cast("int") + 1)),
                               F.when(has_comp, F.element_at(kinds, col("nk").cast("int") + 1)),
                               names=list(range(len(_GROUPS)))))
    bad = ((inv & (col("pt") == 0))
           | (~inv & (col("pt").isNull() | (col("pt") != 0) | (col("pf") != col("f")))))
    keyless_inv = (col("pt") == 0) & ~col("pkeyed")
    pair = keyless_inv & (((col("f") == "append") & col("t").isin(1, 2))
                          | ((col("f") == "read") & (col("t") == 1)))
    return x.select("*", group.alias("g"), F.when(has_comp, 2).otherwise(1).alias("n"),
                    bad.alias("bad"), pair.alias("pair"))


def _paired_rows(x: Any) -> Any:
    """Judged records that are pairs (``pair``), as rows of the paired frame."""
    from pyspark.sql import functions as F

    col = F.col
    app = col("f") == "append"
    ok = col("t") == 1
    ip = F.coalesce(col("ip"), F.lit("null"))
    return x.where(col("pair")).select(
        F.when(app, _APP).otherwise(_READ).alias("tag"), col("pindex").alias("inv"),
        col("index").alias("comp"), F.when(ok, "ok").otherwise("fail").alias("type"),
        F.when(app, F.when(ok, F.coalesce(col("v_payload"), ip)).otherwise(ip)).alias("payload"),
        F.when(app & ok, col("v_li")).alias("li"),
        F.when(app & ok, F.coalesce(col("v_term"), F.lit("null"))).alias("term"),
        F.coalesce(col("ifin"), F.lit(False)).alias("final"))


def _metrics(F: Any, count: Any, check: Any) -> list[Any]:
    """Summary aggregates over judged records: groups counted where ``count`` holds, ``bad``
    looked for where ``check`` holds."""
    col = F.col
    at = F.when(col("bad") & check, col("index"))
    return [*(F.sum(F.when((col("g") == k) & count, col("n"))).alias(g) for k, g in enumerate(_GROUPS)),
            F.min(at).alias("bad"),
            F.min_by(F.struct("process", "t", "f", "pt", "pf", "pindex"), at).alias("why")]


class _Pairing:
    """One window over every client record for three answers: what
    :func:`harness.history.pair_ops` rejects, how many records each check group
    holds, and the *paired frame* (append and log-read completions with what their
    invocations said: ``tag``, ``inv``, ``comp``, ``type``, ``payload``, ``li``,
    ``term``, ``final``).

    The window runs per process and block of history indexes (:data:`_BLOCK`).
    The first and last record of each block group miss a neighbour in another
    block; they are kept aside (a few per process and block) and judged again by
    a second, small window over them alone, where each one's neighbour is the next
    kept record of its process. Group counts and rejections of the big window are
    observed as metrics while it runs, leaving those edge cases out. Records are
    cut to small codes first: their width costs as much as the sort.
    """

    def __init__(self, client: Any, block: int = _BLOCK, max_index: int | None = None) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import Observation, Window
        from pyspark.sql import functions as F

        col = F.col
        # A history within one block has no edges to judge again (most do: 1M records).
        split = max_index is None or max_index >> block > 0
        x = client.select("index", "process", "f", _code(col("type"), _TYPES).alias("t"),
                          col("key").isNotNull().alias("keyed"),
                          _code(col("v_kind"), _KINDS).alias("k"), "v_payload",
                          _as_int(col("v_index")).alias("v_li"), "v_term",
                          (col("v_final") == "true").alias("fin"),
                          F.shiftright(col("index"), block).alias("blk"))
        x = _judged(_neighbours(x, Window.partitionBy("process", "blk").orderBy("index")))
        if split:
            first, last = col("pindex").isNull(), col("nindex").isNull()
        else:
            first = last = F.lit(False)
        self.seen = Observation("summary")
        x = x.observe(self.seen, *_metrics(F, ~last, ~first), F.count_if(
            (col("t") == 0) & (col("f") == "append") & ~col("keyed")).alias("append_invokes"))
        self.kept = x.where((col("pair") & ~first) | first | last).select(
            *_RAW, "pt", "pkeyed", "pindex", "ip", "ifin", (col("pair") & ~first).alias("pair"),
            first.alias("first"), last.alias("last")).persist(StorageLevel.MEMORY_AND_DISK)
        self.paired = _paired_rows(self.kept)
        self.edges = None
        if split:
            edges = self.kept.where(col("first") | col("last")).select(*_RAW, "first", "last")
            self.edges = _judged(_neighbours(edges, Window.partitionBy("process").orderBy("index"))
                                 ).persist(StorageLevel.MEMORY_AND_DISK)
            self.paired = self.paired.unionByName(_paired_rows(self.edges.where(col("first"))))

    def summary(self) -> dict[str, Any]:
        """Runs both windows; the metrics of the two, merged."""
        from pyspark.sql import functions as F

        col = F.col
        self.kept.count()
        big = self.seen.get
        small: dict[str, Any] = {g: 0 for g in _GROUPS} | {"bad": None}
        if self.edges is not None:
            small = self.edges.agg(*_metrics(F, col("last"), col("first"))).collect()[0].asDict()
        out = {g: (big[g] or 0) + (small[g] or 0) for g in _GROUPS}
        out["append_invokes"] = big["append_invokes"]
        worst = [m for m in (big, small) if m["bad"] is not None]
        out["bad"], out["why"] = (None, None) if not worst else min(
            ((m["bad"], m["why"]) for m in worst), key=lambda b: b[0])
        return out

    def close(self) -> None:
        self.kept.unpersist()
        if self.edges is not None:
            self.edges.unpersist()


_RAW = ("index", "process", "f", "t", "keyed", "k", "v_payload", "v_li", "v_term", "fin")


_AUTO = {"register": "cas-register", "kv": "kv", "txn": "multi-register", "mutex": "mutex"}
_OP_COLS = ("index", "type", "process", "f", "key", "value", "node")


def _op_of(row: Sequence[Any]) -> Op:
    index, typ, proc, f, key, value, node = row
    return Op(type=typ, process=proc if proc == NEMESIS else int(proc), f=f,
              value=None if value is None else json.loads(value), key=key, index=index, node=node)


def _check_part(item: tuple[Any, Iterable[Sequence[Any]]], model_name: str, params: dict[str, Any],
                deadline: float | None, keys: bool) -> tuple[Any, dict[str, Any]]:
    """Runs on an executor: one key's ops through the local engine's search."""
    from checker.linearizable import check_linearizable
    from checker.models import get_model

    key, rows = item
    ops = sorted((_op_of(r) for r in rows), key=lambda o: o.index)
    m = get_model(model_name, **params)
    timeout = None if deadline is None else max(0.001, deadline - _time.time())
    try:
        res = check_linearizable(ops, m, timeout=timeout, keys=keys)
    except Exception as e:  # noqa: BLE001 - reported as the local engine's check_safe does
        return key, {"error": f"{type(e).__name__}: {e}"}
    return key, res


def _lin_checker(spark: Any, recs: Any, model_name: str, params: dict[str, Any],
                 timeout: float | None, keys: bool) -> dict[str, Any]:
    """One linearizability checker, parts spread over the cluster by key."""
    from checker.models import get_model

    m = get_model(model_name, **params)
    deadline = None if timeout is None else _time.time() + timeout
    n_part = max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
    rdd = recs.select(*_OP_COLS).rdd.map(lambda r: ((r[4] if keys else None), tuple(r)))
    results = (rdd.groupByKey(numPartitions=n_part)
               .map(lambda kv: _check_part(kv, model_name, params, deadline, keys)).collect())
    errors = [r["error"] for _, r in results if "error" in r]
    if errors:
        return {"valid": "unknown", "error": errors[0]}
    failures: list[Any] = []
    unknown: list[Any] = []
    cex = None
    n_parts = steps = 0
    for _key, r in sorted(results, key=lambda kr: key_order(kr[0])):
        n_parts += r["keys"]
        steps += r["steps"]
        failures.extend(r["failures"])
        unknown.extend(r["unknown_keys"])
        if r["counterexample"] is not None and cex is None:
            cex = r["counterexample"]
    failures.sort(key=key_order)
    if failures:
        unknown = []
    valid: bool | str = False if failures else ("unknown" if unknown else True)
    res: dict[str, Any] = {
        "valid": valid, "model": m.name, "keys": n_parts, "failures": failures,
        "unknown_keys": sorted(unknown, key=key_order), "unchecked_keys": [],
        "counterexample": cex, "steps": steps}
    return shape_linearizable(res, m)


def _check_df(spark: Any, hist: Any, *, model: Any, timeout: float | None, cap: int,
              opts: dict[str, Any], t0: float, parts: int,
              max_index: int | None = None) -> dict[str, Any]:
    from pyspark.sql import functions as F

    client = _with_typed(F, hist).where(F.col("process") != NEMESIS)
    # First job: one window over narrow columns gives the groups, well-formedness and
    # the paired appends and reads, which are kept for the log-safety job.
    pairing = _Pairing(client, max_index=max_index)
    try:
        return _check_paired(spark, client, pairing, model=model, timeout=timeout, cap=cap,
                             opts=opts, t0=t0, parts=parts)
    finally:
        pairing.close()


def _check_paired(spark: Any, client: Any, pairing: _Pairing, *, model: Any,
                  timeout: float | None, cap: int, opts: dict[str, Any], t0: float,
                  parts: int) -> dict[str, Any]:
    """The checks, once the first pass has run."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from checker.models import get_model

    summary = pairing.summary()
    paired = pairing.paired
    groups = {g: int(summary[g]) for g in _GROUPS if summary[g]}
    if summary["bad"] is not None:
        why = summary["why"].asDict()
        why["type"] = _TYPES[why.pop("t")]
        why["ptype"] = None if why["pt"] is None else _TYPES[why["pt"]]
        _raise_malformed({"idx": [summary["bad"]], "ex": json.dumps(why)})
    if "set" in groups and "maybe-set" in groups:
        groups["set"] += groups.pop("maybe-set")
        set_groups = ("set", "maybe-set")
    else:
        if "maybe-set" in groups:
            groups["register"] = groups.get("register", 0) + groups.pop("maybe-set")
        set_groups = ("set",)
    reg_groups = ("register",) if "set" in groups else ("register", "maybe-set")

    keys = bool(opts.get("keys", True))
    params = dict(opts.get("model_params") or {})
    checkers: dict[str, Any] = {}
    plans: list[tuple[str, str, dict[str, Any], tuple[str, ...], tuple[str, ...] | None]] = []
    if model is not None:
        name = model if isinstance(model, str) else model.name
        m = get_model(name, **params)
        want = {"append-log": ("log",), "set": set_groups}.get(
            m.name, (*reg_groups, "kv", "txn", "mutex", "other"))
        plans.append(("linearizable", name, params, want, tuple(sorted(m.fs))))
    else:
        present = [g for g in _AUTO if groups.get(g)]
        for g in present:
            nm = "linearizable" if len(present) == 1 else f"linearizable-{_AUTO[g]}"
            plans.append((nm, _AUTO[g], {}, reg_groups if g == "register" else (g,), None))
    want_set = bool(groups.get("set")) and (model is None or model != "set")
    lab = None
    if plans or want_set:   # the op-level checkers need values: label the full records
        lab = _labeled(client.select(*_OP_COLS, "v_kind"))
        if len(plans) + want_set > 1:
            lab = lab.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        for nm, mname, mparams, gs, fs in plans:
            assert lab is not None
            recs = lab.where(F.col("group").isin(*gs))
            if fs is not None:
                recs = recs.where(F.col("f").isin(*fs))
            try:
                checkers[nm] = _lin_checker(spark, recs, mname, mparams, timeout, keys)
            except Exception as e:  # a failed job must not hide the other checkers' verdicts
                checkers[nm] = unknown_result(e)
        if groups.get("log"):
            job = _LogSafety(client, paired, cap, opts.get("ha"), parts,
                             summary["append_invokes"])
            try:
                checkers["log-safety"] = job.run()
            except HistoryError:
                raise
            except Exception as e:
                checkers["log-safety"] = unknown_result(e)
            finally:
                job.close()
        if want_set:
            from checker.sets import check_set

            assert lab is not None
            set_ops = [_op_of(tuple(r)) for r in lab.where(F.col("group").isin(*set_groups)).select(
                *_OP_COLS).orderBy("index").toLocalIterator()]
            checkers["set"] = check_set(set_ops)
    finally:
        if lab is not None:
            lab.unpersist()
    return compose_results(checkers, engine="spark", started=t0, cap=cap,
                           client_records=lambda: sum(groups.values()))
