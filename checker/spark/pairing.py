"""The first pass over a history: pair each completion with its invocation, group the ops.

Everything else the engine does needs to know which check each op feeds (as
:func:`checker.local.classify` decides) and, for log safety, what each append
or log-read completion's invocation said. One window over every client record,
by process, answers both, and also finds what
:func:`harness.core.history.pair_ops` rejects, so that a malformed history
fails with the local engine's error before anything is checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checker.spark.input import as_int
from harness.core.errors import HistoryError

__all__ = ["GROUPS", "APP", "READ", "Groups", "Pairing", "groups_of", "labeled"]

GROUPS = ("log", "set", "maybe-set", "register", "kv", "txn", "mutex", "other")
"""Check groups, as :func:`checker.local.classify` names them, and ``maybe-set``: a
keyless read whose group depends on whether the history has adds at all."""

APP, READ = 0, 1
"""Tags of the paired frame's rows: an append completion, a log-read completion."""

_TYPES = ("invoke", "ok", "fail", "info")
_KINDS = ("null", "boolean", "number", "string", "array", "object")
_RAW = ("index", "process", "f", "t", "keyed", "k", "v_payload", "v_li", "v_term", "fin")


def _group(
    inv_f: Any,
    inv_key: Any,
    inv_kind: Any,
    comp_type: Any,
    comp_kind: Any,
    names: Sequence[Any] = GROUPS,
) -> Any:
    """The check group :func:`checker.local.classify` gives an op, from its invocation's f, key
    and value kind and its completion's type and value kind (null when there is none).

    ``maybe-set`` is a keyless read that is a set read if the history has adds and
    a register read otherwise. ``names`` are the values given for :data:`GROUPS`.
    """
    from pyspark.sql import functions as F

    g = dict(zip(GROUPS, names, strict=True))
    is_dict = F.coalesce(inv_kind == "object", F.lit(False)) | (
        (comp_type == "ok") & F.coalesce(comp_kind == "object", F.lit(False))
    )
    keyless_read = (inv_f == "read") & inv_key.isNull()
    maybe_set = keyless_read & (
        comp_type.isNull() | (comp_type != "ok") | F.coalesce(comp_kind == "array", F.lit(False))
    )
    return (
        F.when(
            (inv_f == "sample")
            | ((inv_f == "append") & inv_key.isNull())
            | (keyless_read & is_dict),
            g["log"],
        )
        .when(inv_f == "add", g["set"])
        .when(maybe_set, g["maybe-set"])
        .when(inv_f.isin("read", "write", "cas"), g["register"])
        .when(inv_f.isin("get", "put", "append"), g["kv"])
        .when(inv_f == "txn", g["txn"])
        .when(inv_f.isin("acquire", "release"), g["mutex"])
        .otherwise(g["other"])
    )


def labeled(recs: Any) -> Any:
    """Client records with the check group of their op (both records of an op land in the
    same group), for the checkers that need whole records."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    col = F.col
    w = Window.partitionBy("process").orderBy("index")
    x = recs.select(
        "*",
        F.lag("f").over(w).alias("pf"),
        F.lag("key").over(w).alias("pkey"),
        F.lag("v_kind").over(w).alias("pkind"),
        F.lead("type").over(w).alias("ntype"),
        F.lead("v_kind").over(w).alias("nkind"),
    )
    inv = col("type") == "invoke"
    has_comp = col("ntype").isNotNull() & (col("ntype") != "invoke")
    group = _group(
        F.when(inv, col("f")).otherwise(col("pf")),
        F.when(inv, col("key")).otherwise(col("pkey")),
        F.when(inv, col("v_kind")).otherwise(col("pkind")),
        F.when(inv, F.when(has_comp, col("ntype"))).otherwise(col("type")),
        F.when(inv, F.when(has_comp, col("nkind"))).otherwise(col("v_kind")),
    )
    return x.select(*recs.columns, group.alias("group"))


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
    group = F.when(
        inv,
        _group(
            col("f"),
            F.when(col("keyed"), F.lit("k")),
            F.element_at(kinds, col("k").cast("int") + 1),
            F.when(has_comp, F.element_at(types, col("nt").cast("int") + 1)),
            F.when(has_comp, F.element_at(kinds, col("nk").cast("int") + 1)),
            names=list(range(len(GROUPS))),
        ),
    )
    bad = (inv & (col("pt") == 0)) | (
        ~inv & (col("pt").isNull() | (col("pt") != 0) | (col("pf") != col("f")))
    )
    keyless_inv = (col("pt") == 0) & ~col("pkeyed")
    pair = keyless_inv & (
        ((col("f") == "append") & col("t").isin(1, 2)) | ((col("f") == "read") & (col("t") == 1))
    )
    return x.select(
        "*",
        group.alias("g"),
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


def _metrics(F: Any, count: Any, check: Any) -> list[Any]:
    """Summary aggregates over judged records: groups counted where ``count`` holds, ``bad``
    looked for where ``check`` holds."""
    col = F.col
    at = F.when(col("bad") & check, col("index"))
    return [
        *(F.sum(F.when((col("g") == k) & count, col("n"))).alias(g) for k, g in enumerate(GROUPS)),
        F.min(at).alias("bad"),
        F.min_by(F.struct("process", "t", "f", "pt", "pf", "pindex"), at).alias("why"),
    ]


class Pairing:
    """One window over every client record for three answers: what
    :func:`harness.core.history.pair_ops` rejects, how many records each check group
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
        x = _judged(_neighbours(x, Window.partitionBy("process", "blk").orderBy("index")))
        if split:
            first, last = col("pindex").isNull(), col("nindex").isNull()
        else:
            first = last = F.lit(False)
        self.seen = Observation("summary")
        x = x.observe(
            self.seen,
            *_metrics(F, ~last, ~first),
            F.count_if((col("t") == 0) & (col("f") == "append") & ~col("keyed")).alias(
                "append_invokes"
            ),
        )
        self.kept = (
            x.where((col("pair") & ~first) | first | last)
            .select(
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
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        self.paired = _paired_rows(self.kept)
        self.edges = None
        if split:
            edges = self.kept.where(col("first") | col("last")).select(*_RAW, "first", "last")
            self.edges = _judged(
                _neighbours(edges, Window.partitionBy("process").orderBy("index"))
            ).persist(StorageLevel.MEMORY_AND_DISK)
            self.paired = self.paired.unionByName(_paired_rows(self.edges.where(col("first"))))

    def summary(self) -> dict[str, Any]:
        """Runs both windows; the metrics of the two, merged."""
        from pyspark.sql import functions as F

        col = F.col
        self.kept.count()
        big = self.seen.get
        small: dict[str, Any] = {g: 0 for g in GROUPS} | {"bad": None}
        if self.edges is not None:
            small = self.edges.agg(*_metrics(F, col("last"), col("first"))).collect()[0].asDict()
        out = {g: (big[g] or 0) + (small[g] or 0) for g in GROUPS}
        out["append_invokes"] = big["append_invokes"]
        worst = [m for m in (big, small) if m["bad"] is not None]
        out["bad"], out["why"] = (
            (None, None)
            if not worst
            else min(((m["bad"], m["why"]) for m in worst), key=lambda b: b[0])
        )
        return out

    def close(self) -> None:
        self.kept.unpersist()
        if self.edges is not None:
            self.edges.unpersist()


@dataclass(frozen=True)
class Groups:
    """Record counts per check group, with ``maybe-set`` resolved as classify resolves it:
    keyless reads are set reads in a history with adds, register reads otherwise."""

    counts: dict[str, int]
    set_groups: tuple[str, ...]
    """Labels (of :func:`labeled`) that hold the set checker's ops."""
    register_groups: tuple[str, ...]
    """Labels that hold the register ops."""


def groups_of(summary: Mapping[str, Any]) -> Groups:
    """The groups of a :meth:`Pairing.summary`; raises the local engine's
    :class:`~harness.core.errors.HistoryError` if pairing found a malformed history."""
    if summary["bad"] is not None:
        why = summary["why"].asDict()
        why["type"] = _TYPES[why.pop("t")]
        why["ptype"] = None if why["pt"] is None else _TYPES[why["pt"]]
        _raise_malformed(summary["bad"], why)
    counts = {g: int(summary[g]) for g in GROUPS if summary[g]}
    set_groups: tuple[str, ...] = ("set",)
    if "set" in counts and "maybe-set" in counts:
        counts["set"] += counts.pop("maybe-set")
        set_groups = ("set", "maybe-set")
    elif "maybe-set" in counts:
        counts["register"] = counts.get("register", 0) + counts.pop("maybe-set")
    reg_groups = ("register",) if "set" in counts else ("register", "maybe-set")
    return Groups(counts, set_groups, reg_groups)


def _raise_malformed(index: int, b: Mapping[str, Any]) -> None:
    """The error :func:`harness.core.history.pair_ops` raises, word for word (users and
    tests compare the engines' messages)."""
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
