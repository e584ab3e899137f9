"""The first pass over a history: pair each completion with its invocation, label the ops.

Everything else the engine does needs to know which checker each op feeds (each
checker's ``claims``, as lookup columns: :mod:`checker.spark.claims`) and, for log
safety, what each append or log-read completion's invocation said. One window over
every client record, by process, answers both, and also finds what
:func:`harness.core.paired.pair_positions` rejects, so that a malformed history
fails with the local engine's error before anything is checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from checker.spark.claims import KINDS, TYPES, Labels, shape_code
from checker.spark.input import as_int
from checker.spark.kept import keep, release
from harness.core.errors import HistoryError

__all__ = [
    "APP",
    "READ",
    "Pairing",
    "check_malformed",
    "label_columns",
    "labeled",
    "part_counts",
]

APP, READ = 0, 1
"""Tags of the paired frame's rows: an append completion, a log-read completion."""

_TYPES = TYPES
_KINDS = KINDS
_RAW = ("index", "process", "f", "t", "keyed", "k", "v_payload", "v_li", "v_term", "fin")


def label_columns(labels: Labels) -> list[str]:
    """The label column of each checker: its part number of the record's op, or null."""
    return [f"l{c}" for c in range(len(labels.checkers))]


def labeled(recs: Any, labels: Labels, fs: Any) -> Any:
    """Client records with each checker's label (:func:`label_columns`; both records of
    an op are labelled alike), for the checkers that need whole records."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    col = F.col
    w = Window.partitionBy("process").orderBy("index")
    t, k = _code(col("type"), _TYPES), _code(col("v_kind"), _KINDS)
    x = recs.select(
        "*",
        F.lag("f").over(w).alias("pf"),
        F.lag("key").over(w).alias("pkey"),
        F.lag(k).over(w).alias("pk"),
        F.lead(t).over(w).alias("nt"),
        F.lead(k).over(w).alias("nk"),
    )
    inv = col("type") == "invoke"
    code = shape_code(
        F,
        fs,
        F.when(inv, col("f")).otherwise(col("pf")),
        F.when(inv, col("key")).otherwise(col("pkey")).isNotNull(),
        F.when(inv, k).otherwise(col("pk")),
        F.when(inv, col("nt")).otherwise(t),
        F.when(inv, col("nk")).otherwise(k),
    )
    x = x.select(*recs.columns, code.alias("sc"))
    return x.select(
        *recs.columns,
        *(labels.column(F, c, "sc").alias(n) for c, n in enumerate(label_columns(labels))),
    )


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
    return x.select(
        "*",
        lag("t").over(w).alias("pt"),
        lag("f").over(w).alias("pf"),
        lag("keyed").over(w).alias("pkeyed"),
        lag("index").over(w).alias("pindex"),
        lag("v_payload").over(w).alias("ip"),
        lag("fin").over(w).alias("ifin"),
        lead("t").over(w).alias("nt"),
        lead("k").over(w).alias("nk"),
        lead("index").over(w).alias("nindex"),
    )


def _judged(x: Any, labels: Labels, fs: Any) -> Any:
    """Records with neighbours, judged: each checker's part number of their op and the
    op's record count (``l<c>``, ``n``, on invocations), what pairing rejects
    (``bad``), and whether they are an append or log-read completion of a keyless
    invocation (``pair``)."""
    from pyspark.sql import functions as F

    col = F.col
    inv = col("t") == 0
    has_comp = col("nt") > 0
    code = shape_code(F, fs, col("f"), col("keyed"), col("k"), col("nt"), col("nk"))
    x = x.select("*", code.alias("sc"))
    label_cols = [
        F.when(inv, labels.column(F, c, "sc")).alias(n) for c, n in enumerate(label_columns(labels))
    ]
    # An invocation after an open one, or after an info completion (that process is
    # gone for good); a completion without its invocation just before, or of another f.
    bad = (inv & col("pt").isin(0, 3)) | (
        ~inv & (col("pt").isNull() | (col("pt") != 0) | (col("pf") != col("f")))
    )
    keyless_inv = (col("pt") == 0) & ~col("pkeyed")
    pair = keyless_inv & (
        ((col("f") == "append") & col("t").isin(1, 2)) | ((col("f") == "read") & (col("t") == 1))
    )
    return x.select(
        "*",
        *label_cols,
        F.when(has_comp, 2).otherwise(1).alias("n"),
        bad.alias("bad"),
        pair.alias("pair"),
    )


def _paired_rows(x: Any) -> Any:
    """Judged records that are pairs (``pair``), as rows of the paired frame."""
    from pyspark.sql import functions as F

    col = F.col
    app = col("f") == "append"
    ok = col("t") == 1
    ip = F.coalesce(col("ip"), F.lit("null"))
    return x.where(col("pair")).select(
        F.when(app, APP).otherwise(READ).alias("tag"),
        col("pindex").alias("inv"),
        col("index").alias("comp"),
        F.when(ok, "ok").otherwise("fail").alias("type"),
        F.when(app, F.when(ok, F.coalesce(col("v_payload"), ip)).otherwise(ip)).alias("payload"),
        F.when(app & ok, col("v_li")).alias("li"),
        F.when(app & ok, F.coalesce(col("v_term"), F.lit("null"))).alias("term"),
        F.coalesce(col("ifin"), F.lit(False)).alias("final"),
    )


def _counted(labels: Labels) -> list[tuple[str, int, str]]:
    """(label column, part number, metric name) of every checker part."""
    return [
        (n, p, f"{n}_{p}")
        for c, n in enumerate(label_columns(labels))
        for p in range(len(labels.parts[c]))
    ]


def _metrics(F: Any, labels: Labels, count: Any, check: Any) -> list[Any]:
    """Summary aggregates over judged records: records per checker part and in all counted
    where ``count`` holds, ``bad`` looked for where ``check`` holds."""
    col = F.col
    at = F.when(col("bad") & check, col("index"))
    return [
        *(F.sum(F.when((col(n) == p) & count, col("n"))).alias(m) for n, p, m in _counted(labels)),
        F.sum(F.when((col("t") == 0) & count, col("n"))).alias("records"),
        F.min(at).alias("bad"),
        F.min_by(F.struct("process", "t", "f", "pt", "pf", "pindex"), at).alias("why"),
    ]


class Pairing:
    """One window over every client record for three answers: what
    :func:`harness.core.paired.pair_positions` rejects (``strict``), how many records
    each checker part holds, and the *paired frame* (append and log-read completions
    with what their invocations said: ``tag``, ``inv``, ``comp``, ``type``,
    ``payload``, ``li``, ``term``, ``final``).

    The window runs per process and block of history indexes (:data:`_BLOCK`).
    The first and last record of each block group miss a neighbour in another
    block; they are kept aside (a few per process and block) and judged again by
    a second, small window over them alone, where each one's neighbour is the next
    kept record of its process. Part counts and rejections of the big window are
    observed as metrics while it runs, leaving those edge cases out. Records are
    cut to small codes first: their width costs as much as the sort.

    Building one plans the window; :meth:`summary` runs it, and only then is
    :attr:`paired` there. What the window keeps (pairs and edges) is a local
    checkpoint at ``level`` (:mod:`checker.spark.kept`), so the checks built over
    the paired frame do not analyse the window again.
    """

    def __init__(
        self,
        client: Any,
        labels: Labels,
        fs: Any,
        level: Any,
        block: int = _BLOCK,
        max_index: int | None = None,
    ) -> None:
        from pyspark.sql import Observation, Window
        from pyspark.sql import functions as F

        col = F.col
        # A history within one block has no edges to judge again (most do: 1M records).
        self.split = max_index is None or max_index >> block > 0
        x = client.select(
            "index",
            "process",
            "f",
            _code(col("type"), _TYPES).alias("t"),
            col("key").isNotNull().alias("keyed"),
            _code(col("v_kind"), _KINDS).alias("k"),
            "v_payload",
            as_int(col("v_index")).alias("v_li"),
            "v_term",
            (col("v_final") == "true").alias("fin"),
            F.shiftright(col("index"), block).alias("blk"),
        )
        self.labels, self.fs, self.level = labels, fs, level
        x = _judged(
            _neighbours(x, Window.partitionBy("process", "blk").orderBy("index")), labels, fs
        )
        if self.split:
            first, last = col("pindex").isNull(), col("nindex").isNull()
        else:
            first = last = F.lit(False)
        self.seen = Observation("summary")
        self._big = [
            *_metrics(F, labels, ~last, ~first),
            F.count_if((col("t") == 0) & (col("f") == "append") & ~col("keyed")).alias(
                "append_invokes"
            ),
        ]
        self._judged = x
        x = x.observe(self.seen, *self._big)
        self._to_keep = x.where((col("pair") & ~first) | first | last).select(
            *_RAW,
            "pt",
            "pkeyed",
            "pindex",
            "ip",
            "ifin",
            (col("pair") & ~first).alias("pair"),
            first.alias("first"),
            last.alias("last"),
        )
        self.kept: Any = None
        self.edges: Any = None
        self.paired: Any = None
        self.recounted = False
        """Whether the summary's sums were counted again after a change of executors."""

    def summary(self) -> dict[str, Any]:
        """Runs both windows (once; the kept frames stay until :meth:`close`); the
        metrics of the two, merged."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        col = F.col
        # Eager: the metrics are observed by the job that fills the checkpoint.
        sc = self._judged.sparkSession.sparkContext
        before = executor_ids(sc)
        self.kept = keep(self._to_keep, self.level, eager=True)
        big = self.seen.get
        if not str(sc.master).startswith("local") and (
            before is None or executor_ids(sc) != before
        ):
            # An executor came or went while the window ran: the observed sums may count
            # some records twice (see :func:`executor_ids`), so they are counted again, by
            # an aggregate whose result Spark takes once per partition.
            self.recounted = True
            big = self._judged.agg(*self._big).collect()[0].asDict()
        self.paired = _paired_rows(self.kept)
        names = [m for _, _, m in _counted(self.labels)] + ["records"]
        small: dict[str, Any] = {m: 0 for m in names} | {"bad": None}
        if self.split:
            edges = self.kept.where(col("first") | col("last")).select(*_RAW, "first", "last")
            self.edges = keep(
                _judged(
                    _neighbours(edges, Window.partitionBy("process").orderBy("index")),
                    self.labels,
                    self.fs,
                ),
                self.level,
            )
            self.paired = self.paired.unionByName(_paired_rows(self.edges.where(col("first"))))
            small = (
                self.edges.agg(*_metrics(F, self.labels, col("last"), col("first")))
                .collect()[0]
                .asDict()
            )
        out = {m: (big[m] or 0) + (small[m] or 0) for m in names}
        out["append_invokes"] = big["append_invokes"]
        worst = [m for m in (big, small) if m["bad"] is not None]
        out["bad"], out["why"] = (
            (None, None)
            if not worst
            else min(((m["bad"], m["why"]) for m in worst), key=lambda b: b[0])
        )
        return out

    def close(self) -> None:
        for df in (self.kept, self.edges):
            if df is not None:
                release(df)


def executor_ids(sc: Any) -> frozenset[str] | None:
    """The ids of the executors ``sc``'s driver knows now (None when it will not say).

    The pairing window's counts are observed metrics, that is accumulators updated by
    the tasks that fill the kept frame, and those tasks end a shuffle-map stage (the
    count's partial aggregate). Spark applies a map task's updates every time the task
    succeeds: when an executor dies mid-stage, the tasks it had finished lose their
    output and run again, and their records are counted twice (Spark's own rule for
    accumulators in transformations; tests/checker/test_spark_executor_loss.py kills an
    executor there). An executor id is never reused, so a loss, or a replacement,
    changes this set.
    """
    try:
        seq = sc._jsc.sc().getExecutorIds()
        return frozenset(str(seq.apply(i)) for i in range(seq.size()))
    except Exception:  # an older or other Spark: the caller counts again to be safe
        return None


def check_malformed(summary: Mapping[str, Any]) -> None:
    """Raise the local engine's :class:`~harness.core.errors.HistoryError` if the first
    pass (:meth:`Pairing.summary`) found a malformed history."""
    if summary["bad"] is not None:
        why = summary["why"].asDict()
        why["type"] = _TYPES[why.pop("t")]
        why["ptype"] = None if why["pt"] is None else _TYPES[why["pt"]]
        _raise_malformed(summary["bad"], why)


def part_counts(summary: Mapping[str, Any], labels: Labels) -> dict[tuple[int, int], int]:
    """Records per (checker, part) number that has any, from a :meth:`Pairing.summary`."""
    out = {}
    for c, parts in enumerate(labels.parts):
        for p in range(len(parts)):
            n = int(summary[f"l{c}_{p}"] or 0)
            if n:
                out[(c, p)] = n
    return out


def _raise_malformed(index: int, b: Mapping[str, Any]) -> None:
    """The error :func:`harness.core.history.pair_ops` raises, word for word (users and
    tests compare the engines' messages)."""
    if b["type"] == "invoke" and b.get("ptype") == "info":
        raise HistoryError(
            f"process {b['process']} invoked again after an info completion",
            index=index,
            field="process",
        )
    if b["type"] == "invoke":
        raise HistoryError(
            f"process {b['process']} invoked again while op {b.get('pindex')} was open",
            index=index,
            field="process",
        )
    if b.get("ptype") != "invoke":
        raise HistoryError(
            f"{b['type']} completion of process {b['process']} has no invocation",
            index=index,
            field="process",
        )
    raise HistoryError(
        f"completion f {b['f']!r} differs from its invocation's {b.get('pf')!r}",
        index=index,
        field="f",
    )
