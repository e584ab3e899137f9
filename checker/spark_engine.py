"""The Spark engine: the local engine's checks, as DataFrame jobs.

The semantics are :mod:`checker.log_safety`'s, restated as joins, windows and
aggregations so that no step needs a whole history in one process: the driver
only ever receives anomaly examples (at most :data:`CAP` per kind, with their
total count) and a handful of counters. Per-key linearizability ships each
key's ops to one task and runs :mod:`checker.linearizable` there.

Representing JSON values. Histories on disk keep each op's value as JSON text.
Payloads, terms and incarnations are compared as *raw JSON text in Jackson's
compact form* (``"p1"`` with its quotes, ``7``, ``{"a":1}``), so a string
``"1"`` and a number ``1`` stay different, as they are for the local engine.
Entries are cut out of a read's raw entry text; single fields of append and
sample values are rebuilt into that same form. Examples are decoded back into
Python values on the driver.
"""

from __future__ import annotations

import json
import os
import tempfile
import time as _time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.errors import CheckerError, HistoryError
from harness.history import NEMESIS, Op

__all__ = ["check_spark", "CAP"]

CAP = 20
"""Examples kept per anomaly kind; the total count is always reported."""

_INT = r"^-?[0-9]+$"
_ENTRY = r"^\[(-?[0-9]+),([^,]*),(.*)\]$"


# --------------------------------------------------------------------------- input

def _to_parquet(source: str | os.PathLike[str] | Iterable[Op], work: Path) -> str:
    """A Parquet file holding the history, converting (streamed) when needed."""
    from harness.history import iter_jsonl, read_history, write_parquet

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


def _int_field(F: Any, js: Any, name: str) -> Any:
    """Field ``name`` as a long when it is a JSON integer, else null."""
    txt = F.get_json_object(js, f"$.{name}")
    return F.when(txt.rlike(_INT) & ~js.rlike(r'"' + name + r'"\s*:\s*"'), txt.cast("long"))


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

def _ex(F: Any, kind: str, idx: Any, **fields: Any) -> Any:
    """One example row: (kind, sort key = history indexes, fields as JSON text)."""
    return F.struct(F.lit(kind).alias("kind"), idx.cast("array<long>").alias("idx"),
                    F.to_json(F.struct(*[c.alias(k) for k, c in fields.items()]),
                              {"ignoreNullFields": "false"}).alias("ex"))


class _LogSafety:
    """The log-safety checks over one history DataFrame, planned as one Spark job.

    Every check yields rows ``(kind, idx, ex)``; their union is ranked per kind
    by ``idx`` (the local engine's ``indexes`` order) and only the first
    ``cap`` rows per kind, with the per-kind totals, reach the driver. Counters
    for ``stats`` ride along as rows of their own.
    """

    def __init__(self, spark: Any, hist: Any, cap: int, ha: dict[str, Any] | None = None) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        self.F, self.W, self.cap, self.spark, self.ha = F, Window, cap, spark, ha
        self.level = StorageLevel.MEMORY_AND_DISK
        self.persisted: list[Any] = []
        client = hist.where(F.col("process") != NEMESIS)

        # Appends and log reads, each completion beside its invocation. Pairs stay
        # adjacent in a process's stream once other functions are dropped, because
        # invocation and completion share ``f`` (validated in the same job).
        w = Window.partitionBy("process").orderBy("index")
        ar = client.where(F.col("f").isin("append", "read"))
        self.ar = ar
        paired = ar.select(
            "index", "type", "f", "key", "value",
            F.lag("type").over(w).alias("itype"), F.lag("index").over(w).alias("iindex"),
            F.lag("value").over(w).alias("ivalue"), F.lag("key").over(w).alias("ikey"))
        comp = paired.where((F.col("type") != "invoke") & (F.col("itype") == "invoke"))

        inv_payload = _raw_field(F, F.col("ivalue"), "payload")
        ok_has_payload = F.col("value").rlike(r'"payload"\s*:')
        apps = comp.where((F.col("f") == "append") & F.col("ikey").isNull()
                          & (F.col("type") != "info")).select(
            F.col("iindex").alias("inv"), F.col("index").alias("comp"), "type",
            F.when((F.col("type") == "ok") & ok_has_payload, _raw_field(F, F.col("value"), "payload"))
             .otherwise(inv_payload).alias("payload"),
            F.when(F.col("type") == "ok", _int_field(F, F.col("value"), "index")).alias("li"),
            F.when(F.col("type") == "ok", _raw_field(F, F.col("value"), "term")).alias("term"))
        self.apps = self._keep(apps)

        parsed = F.from_json(F.col("value"), "entries array<string>, committed string")
        reads = comp.where((F.col("f") == "read") & F.col("ikey").isNull() & (F.col("type") == "ok")
                           & F.col("value").startswith("{")).select(
            F.col("index").alias("r"),
            F.coalesce(F.get_json_object("ivalue", "$.final") == "true", F.lit(False)).alias("final"),
            parsed.alias("p")).where(F.col("p.entries").isNotNull())
        self.reads = reads.select("r", "final", F.col("p.committed").alias("c"),
                                  F.col("p.entries").alias("entries"))
        e = F.col("e")
        obs = self.reads.select("r", "final", "c", F.explode("entries").alias("e")).where(
            e.rlike(_ENTRY)).select(
            "r", "final", "c",
            F.regexp_extract(e, _ENTRY, 1).cast("long").alias("li"),
            F.regexp_extract(e, _ENTRY, 2).alias("term"),
            F.regexp_extract(e, _ENTRY, 3).alias("payload"))
        c = F.col("c")
        obs = obs.where(c.isNull() | (c.rlike(_INT) & (F.col("li") <= c.cast("long"))))
        self.obs = self._keep(obs.select("r", "final", "li", "term", "payload"))

        samples = hist.where((F.col("f") == "sample") & (F.col("type") == "ok")
                             & F.col("value").startswith("{"))
        v = F.col("value")
        self.samples = self._keep(samples.select(
            "index", "node",
            _raw_field(F, v, "incarnation").alias("inc"),
            _int_field(F, v, "committed").alias("c"), _int_field(F, v, "end").alias("e"),
            _int_field(F, v, "term").alias("t"),
            (F.get_json_object(v, "$.role") == "leader").alias("is_leader")))
        self.client = client

    def _keep(self, df: Any) -> Any:
        df = df.persist(self.level)
        self.persisted.append(df)
        return df

    def close(self) -> None:
        for df in self.persisted:
            df.unpersist()

    def malformed(self) -> Any:
        """What :func:`harness.history.pair_ops` raises on, as rows of kind ``_bad``."""
        F, W = self.F, self.W
        w = W.partitionBy("process").orderBy("index")
        x = self.client.select("index", "process", "type", "f",
                               F.lag("type").over(w).alias("ptype"), F.lag("f").over(w).alias("pf"),
                               F.lag("index").over(w).alias("pindex"))
        bad = x.where(((F.col("type") == "invoke") & (F.col("ptype") == "invoke"))
                      | ((F.col("type") != "invoke")
                         & (F.col("ptype").isNull() | (F.col("ptype") != "invoke")
                            | (F.col("pf") != F.col("f")))))
        return bad.select(_ex(F, "_bad", F.array("index"), process=F.col("process"),
                              type=F.col("type"), f=F.col("f"), ptype=F.col("ptype"),
                              pf=F.col("pf"), pindex=F.col("pindex")).alias("x"))

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

    # ----- log contents

    def divergent_committed(self) -> Any:
        F = self.F
        g = self.obs.groupBy("li").agg(
            F.collect_set(F.struct("term", "payload")).alias("vals"),
            F.sort_array(F.collect_set("r")).alias("readers"))
        x = g.where(F.size("vals") > 1)
        return x.select(_ex(F, "divergent-committed", F.col("readers"), index=F.col("li"),
                            values=F.col("vals")).alias("x"))

    def lost_ack(self) -> Any:
        """Computed even without final reads; the driver drops it then (see ``run``)."""
        F = self.F
        fin = self.obs.where(F.col("final")).select("li", "term", "payload")
        ok = self.apps.where((F.col("type") == "ok") & F.col("li").isNotNull())
        lost = ok.join(fin, ["li", "term", "payload"], "left_anti")
        there = (fin.join(lost.select("li").distinct(), "li")
                 .groupBy("li").agg(F.collect_set(F.struct("term", "payload")).alias("found")))
        x = lost.join(there, "li", "left")
        return x.select(_ex(F, "lost-ack", F.array("comp"), payload=F.col("payload"),
                            index=F.col("li"), term=F.col("term"), found=F.col("found")).alias("x"))

    def failed_append_present(self) -> Any:
        F = self.F
        fails = self.apps.where((F.col("type") == "fail") & (F.col("payload") != "null")).select(
            "comp", "payload")
        obs = self.obs.where(F.col("payload") != "null").select("payload", "r", "li")
        hit = (fails.join(obs, "payload").groupBy("comp", "payload")
               .agg(F.min(F.struct("r", "li")).alias("at")))
        return hit.select(_ex(F, "failed-append-present", F.array_sort(F.array("comp", "at.r")),
                              payload=F.col("payload"), index=F.col("at.li")).alias("x"))

    def duplicate_payload(self) -> Any:
        F = self.F
        g = (self.obs.where(F.col("payload") != "null").groupBy("payload")
             .agg(F.sort_array(F.collect_set("li")).alias("lis"),
                  F.sort_array(F.collect_set("r")).alias("readers")))
        x = g.where(F.size("lis") > 1)
        return x.select(_ex(F, "duplicate-payload", F.col("readers"), payload=F.col("payload"),
                            log_indexes=F.col("lis")).alias("x"))

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
        comps = ok.select(F.col("comp").alias("pos"), best.alias("b"), F.lit(None).cast("long").alias("inv"))
        btype = comps.schema["b"].dataType
        invs = ok.select(F.col("inv").alias("pos"), F.lit(None).cast(btype).alias("b"), F.col("inv"))
        ev = comps.unionByName(invs).withColumn("bk", F.floor(F.col("pos") / bucket))
        per = comps.groupBy(F.floor(F.col("pos") / bucket).alias("bk")).agg(F.max("b").alias("m"))
        pre = per.select("bk", F.max("m").over(
            W.orderBy("bk").rowsBetween(W.unboundedPreceding, -1)).alias("before"))
        w = W.partitionBy("bk").orderBy("pos").rowsBetween(W.unboundedPreceding, 0)
        at_inv = (ev.select("bk", "pos", "inv", F.max("b").over(w).alias("within"))
                  .where(F.col("inv").isNotNull())
                  .join(pre, "bk", "left")
                  .select("inv", F.greatest("within", "before").alias("prior")))
        x = ok.join(at_inv, "inv").where(F.col("prior").isNotNull() & (F.col("li") <= F.col("prior.li")))
        return x.select(_ex(F, "append-order", F.array(-F.col("prior.nc"), F.col("comp")),
                            a_index=F.col("prior.li"), b_index=F.col("li")).alias("x"))

    def counters(self) -> Any:
        F = self.F
        apps = self.apps.agg(F.sum((F.col("type") == "ok").cast("long")).alias("ok"),
                             F.sum((F.col("type") == "fail").cast("long")).alias("fail"))
        inv = self.ar.where((F.col("f") == "append") & (F.col("type") == "invoke")
                            & F.col("key").isNull()).agg(F.count("*").alias("n"))
        rd = self.reads.agg(F.count("*").alias("n"), F.sum(F.col("final").cast("long")).alias("f"))
        return [
            apps.select(_ex(F, "_stats_apps", F.array(F.coalesce("ok", F.lit(0)),
                                                      F.coalesce("fail", F.lit(0)))).alias("x")),
            inv.select(_ex(F, "_stats_append_invokes", F.array("n")).alias("x")),
            rd.select(_ex(F, "_stats_reads", F.array("n", F.coalesce("f", F.lit(0)))).alias("x")),
            self.samples.agg(F.count("*").alias("n")).select(
                _ex(F, "_stats_samples", F.array("n")).alias("x")),
            self.obs.agg(F.count("*").alias("n")).select(_ex(F, "_stats_obs", F.array("n")).alias("x")),
        ]

    def run(self) -> dict[str, Any]:
        F, W = self.F, self.W
        parts = [getattr(self, k.replace("-", "_"))() for k in _CHECKS] + [
            self.committed_regress_restart()] + self.counters()
        allx = parts[0]
        for p in parts[1:]:
            allx = allx.unionByName(p)
        allx = allx.select("x.*")
        wk = W.partitionBy("kind")
        ranked = allx.select("kind", "idx", "ex", F.count("*").over(wk).alias("n"),
                             F.row_number().over(wk.orderBy("idx")).alias("rn"))
        rows = ranked.where(F.col("rn") <= self.cap).collect()
        by: dict[str, list[Any]] = {}
        totals: dict[str, int] = {}
        for r in sorted(rows, key=lambda r: (r["kind"], r["rn"])):
            by.setdefault(r["kind"], []).append(r)
            totals[r["kind"]] = r["n"]
        if "_bad" in by:
            _raise_malformed(by["_bad"][0])
        st = {k: list(v[0]["idx"]) for k, v in by.items() if k.startswith("_stats_")}
        ok, fail = st["_stats_apps"]
        n_reads, n_final = st["_stats_reads"]
        stats = {"samples": st["_stats_samples"][0],
                 "appends": {"ok": ok, "fail": fail, "info": st["_stats_append_invokes"][0] - ok - fail},
                 "reads": n_reads, "final_reads": n_final,
                 "committed_observations": st["_stats_obs"][0]}
        if not n_final:
            by.pop("lost-ack", None)
        anomalies = {k: [_decode(k, r) for r in by[k]] for k in _CHECKS if k in by}
        notes = {k: [_decode(k, r) for r in by[k]] for k in _NOTES if k in by}
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
    for k in ("incarnation", "previous_incarnation", "payload", "term"):
        if k in d and not (kind == "two-leaders-in-term" and k == "term"):
            d[k] = _loads(d[k])
    if kind == "two-leaders-in-term":
        d["nodes"] = sorted(d["nodes"], key=str)
    elif kind == "divergent-committed":
        d["values"] = sorted(([_loads(v["term"]), _loads(v["payload"])] for v in d["values"]),
                             key=_value_key)
    elif kind == "lost-ack":
        found = [[_loads(v["term"]), _loads(v["payload"])] for v in d.get("found") or []]
        d["found"] = min(found, key=_value_key) if found else None
    d["indexes"] = idx
    return d


# --------------------------------------------------------------------------- entry point

def _tune(spark: Any, path: str) -> None:
    """Size shuffles to the history: small ones drown in per-task and codegen overhead.

    Measured here (2 cores): a 3k-record history took 100-230 s with adaptive
    execution and 8 partitions, 20 s with 2 fixed partitions and no codegen.
    """
    import pyarrow.parquet as pq

    try:
        rows = int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:
        rows = 1_000_000
    auto = 1 if rows < 100_000 else max(2, min(32, rows // 400_000))
    parts = os.environ.get("SPLITBRAIN_SPARK_PARTITIONS") or str(auto)
    spark.conf.set("spark.sql.shuffle.partitions", parts)
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.codegen.wholeStage", "true" if rows > 200_000 else "false")


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
    _tune(spark, path)
    try:
        hist = spark.read.parquet(path)
    except Exception as e:
        raise HistoryError(f"Spark cannot read this Parquet file: {str(e).splitlines()[0]}",
                           path=path) from None
    missing = [c for c in ("index", "type", "process", "f", "key", "value", "node") if c not in hist.columns]
    if missing:
        raise HistoryError(f"Parquet history lacks columns {', '.join(missing)}", path=path)
    try:
        return _check_df(spark, hist, model=model, timeout=timeout, cap=cap, opts=opts, t0=t0)
    except HistoryError:
        raise
    except Exception as e:  # a dead JVM or failed job: one line, the details are in its log
        if type(e).__module__.startswith(("py4j", "pyspark")):
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise CheckerError(f"the Spark job failed ({first[:300]}); rerun with "
                               "SPLITBRAIN_SPARK_VERBOSE=1 or a larger "
                               "SPLITBRAIN_SPARK_DRIVER_MEMORY") from None
        raise


def _labeled(hist: Any) -> Any:
    """Client records with the check group :func:`checker.local.classify` gives their op.

    Decided on the invocation (and, for reads, the completion's value), so both
    records of an op land in the same group. ``maybe-set`` is a keyless read
    that is a set read if the history has adds and a register read otherwise.
    Also flags what :func:`harness.history.pair_ops` rejects (``bad``).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    col = F.col
    w = Window.partitionBy("process").orderBy("index")
    x = hist.where(col("process") != NEMESIS).select(
        "index", "type", "process", "f", "key", "value", "node",
        F.lag("type").over(w).alias("ptype"), F.lag("f").over(w).alias("pf"),
        F.lag("key").over(w).alias("pkey"), F.lag("value").over(w).alias("pvalue"),
        F.lag("index").over(w).alias("pindex"),
        F.lead("type").over(w).alias("ntype"), F.lead("value").over(w).alias("nvalue"))
    inv = col("type") == "invoke"
    has_comp = col("ntype").isNotNull() & (col("ntype") != "invoke")
    inv_f = F.when(inv, col("f")).otherwise(col("pf"))
    inv_key = F.when(inv, col("key")).otherwise(col("pkey"))
    inv_val = F.when(inv, col("value")).otherwise(col("pvalue"))
    comp_type = F.when(inv, F.when(has_comp, col("ntype"))).otherwise(col("type"))
    comp_val = F.when(inv, F.when(has_comp, col("nvalue"))).otherwise(col("value"))
    is_dict = F.coalesce(inv_val.startswith("{"), F.lit(False)) | (
        (comp_type == "ok") & F.coalesce(comp_val.startswith("{"), F.lit(False)))
    keyless_read = (inv_f == "read") & inv_key.isNull()
    maybe_set = keyless_read & (comp_type.isNull() | (comp_type != "ok")
                                | F.coalesce(comp_val.startswith("["), F.lit(False)))
    group = (F.when((inv_f == "sample") | ((inv_f == "append") & inv_key.isNull())
                    | (keyless_read & is_dict), "log")
             .when(inv_f == "add", "set")
             .when(maybe_set, "maybe-set")
             .when(inv_f.isin("read", "write", "cas"), "register")
             .when(inv_f.isin("get", "put", "append"), "kv")
             .when(inv_f == "txn", "txn")
             .when(inv_f.isin("acquire", "release"), "mutex")
             .otherwise("other"))
    bad = ((inv & (col("ptype") == "invoke"))
           | (~inv & (col("ptype").isNull() | (col("ptype") != "invoke") | (col("pf") != col("f")))))
    return x.select("index", "type", "process", "f", "key", "value", "node",
                    group.alias("group"), bad.alias("bad"), "ptype", "pf", "pindex")


_AUTO = {"register": "cas-register", "kv": "kv", "txn": "multi-register", "mutex": "mutex"}


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
    from checker.linearizable import _sort_key
    from checker.local import PREFIX_KEPT, _jsonable_key, _lin_example
    from checker.models import get_model

    m = get_model(model_name, **params)
    deadline = None if timeout is None else _time.time() + timeout
    n_part = max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
    rdd = recs.select("index", "type", "process", "f", "key", "value", "node").rdd.map(
        lambda r: ((r[4] if keys else None), tuple(r)))
    results = (rdd.groupByKey(numPartitions=n_part)
               .map(lambda kv: _check_part(kv, model_name, params, deadline, keys)).collect())
    errors = [r["error"] for _, r in results if "error" in r]
    if errors:
        return {"valid": "unknown", "error": errors[0]}
    failures: list[Any] = []
    unknown: list[Any] = []
    cex = None
    n_parts = steps = 0
    for _key, r in sorted(results, key=lambda kr: _sort_key(kr[0])):
        n_parts += r["keys"]
        steps += r["steps"]
        failures.extend(r["failures"])
        unknown.extend(r["unknown_keys"])
        if r["counterexample"] is not None and cex is None:
            cex = r["counterexample"]
    failures.sort(key=_sort_key)
    if failures:
        unknown = []
    valid: bool | str = False if failures else ("unknown" if unknown else True)
    res: dict[str, Any] = {
        "valid": valid, "model": m.name, "keys": n_parts,
        "failures": [_jsonable_key(k) for k in failures],
        "unknown_keys": [_jsonable_key(k) for k in sorted(unknown, key=_sort_key)],
        "unchecked_keys": [], "counterexample": cex, "steps": steps,
        "model_params": dict(m.params)}
    if cex is not None:
        cex["key"] = _jsonable_key(cex["key"])
        cex["prefix_length"] = len(cex["prefix"])
        del cex["prefix"][:-PREFIX_KEPT]
        res["anomalies"] = {"nonlinearizable": [_lin_example(cex)]}
    return res


def _cap_counts(res: dict[str, Any], cap: int) -> dict[str, Any]:
    anomalies = res.get("anomalies")
    if isinstance(anomalies, dict):
        counts = res.setdefault("stats", {}).setdefault("anomaly_counts", {})
        for k, v in anomalies.items():
            counts.setdefault(k, len(v))
            del v[cap:]
    return res


def _check_df(spark: Any, hist: Any, *, model: Any, timeout: float | None, cap: int,
              opts: dict[str, Any], t0: float) -> dict[str, Any]:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from checker.base import merge_valid
    from checker.models import get_model

    hist = hist.select("index", "type", "process", "f", "key", "value", "node")
    lab = _labeled(hist).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        summary = lab.groupBy("group").agg(
            F.count("*").alias("n"), F.min(F.when(F.col("bad"), F.col("index"))).alias("bad")).collect()
        groups = {r["group"]: r["n"] for r in summary}
        bads = [r["bad"] for r in summary if r["bad"] is not None]
        if bads:
            row = lab.where(F.col("index") == min(bads)).limit(1).collect()[0]
            _raise_malformed({"idx": [row["index"]], "ex": json.dumps({
                "process": row["process"], "type": row["type"], "f": row["f"],
                "ptype": row["ptype"], "pf": row["pf"], "pindex": row["pindex"]})})
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
        plans: list[tuple[str, str, dict[str, Any], Any]] = []
        if model is not None:
            name = model if isinstance(model, str) else model.name
            m = get_model(name, **params)
            want = {"append-log": ("log",), "set": set_groups}.get(
                m.name, (*reg_groups, "kv", "txn", "mutex", "other"))
            recs = lab.where(F.col("group").isin(*want) & F.col("f").isin(*sorted(m.fs)))
            plans.append(("linearizable", name, params, recs))
        else:
            present = [g for g in _AUTO if groups.get(g)]
            for g in present:
                nm = "linearizable" if len(present) == 1 else f"linearizable-{_AUTO[g]}"
                gs = reg_groups if g == "register" else (g,)
                plans.append((nm, _AUTO[g], {}, lab.where(F.col("group").isin(*gs))))
        for nm, mname, mparams, recs in plans:
            try:
                res = _lin_checker(spark, recs, mname, mparams, timeout, keys)
            except Exception as e:  # a failed job must not hide the other checkers' verdicts
                res = {"valid": "unknown", "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
            checkers[nm] = _cap_counts(res, cap)
        if groups.get("log"):
            job = _LogSafety(spark, lab.where(F.col("group") == "log").select(
                "index", "type", "process", "f", "key", "value", "node"), cap, opts.get("ha"))
            try:
                checkers["log-safety"] = job.run()
            except HistoryError:
                raise
            except Exception as e:
                checkers["log-safety"] = {"valid": "unknown",
                                          "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
            finally:
                job.close()
        if groups.get("set") and (model is None or model != "set"):
            from checker.sets import check_set

            set_ops = [_op_of(tuple(r)) for r in lab.where(F.col("group").isin(*set_groups)).select(
                "index", "type", "process", "f", "key", "value", "node").orderBy("index").toLocalIterator()]
            checkers["set"] = _cap_counts(check_set(set_ops), cap)
    finally:
        lab.unpersist()
    anomalies: dict[str, list[Any]] = {}
    for res in checkers.values():
        for kind, ex in (res.get("anomalies") or {}).items():
            anomalies.setdefault(kind, []).extend(ex)
    result: dict[str, Any] = {
        "valid": merge_valid(r["valid"] for r in checkers.values()) if checkers else "unknown",
        "checkers": checkers, "anomalies": anomalies, "engine": "spark",
        "elapsed_s": round(_time.monotonic() - t0, 3)}
    if not checkers:
        n_client = sum(groups.values())
        result["error"] = (f"no check applies to this history ({n_client} client op records); "
                           "name a model with --model")
    return result
