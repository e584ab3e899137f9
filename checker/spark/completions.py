"""Each client invocation of some ``f``\\ s with its completion, as one DataFrame row.

The checkers that judge whole ops (an enqueue and its ack, a subscription and what it
delivered) need an invocation beside its completion, not the records apart. A process's
records alternate invocation, completion; the record after an invocation in its process
is its completion unless it is another invocation (the op then never completed). A
malformed pairing fails with the local engine's kind of error
(:func:`harness.core.paired.pair_positions`) on its first offender by history index,
before anything is judged.

The engine's first pass (:mod:`checker.spark.pairing`) pairs every record for the log
checkers; this window is the small one for a checker that reads its own ops only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.core.errors import HistoryError
from harness.core.op import NEMESIS

__all__ = ["with_completions"]


def with_completions(F: Any, W: Any, records: Any, fs: Iterable[str]) -> Any:
    """Client invocations of ``fs`` in ``records`` with what completed them: columns
    ``index``, ``f``, ``value`` (the invocation's), ``comp_index`` and ``comp_value`` (the
    completion's; null when it never completed) and ``outcome`` (``ok``, ``fail``, or
    ``info`` for an op that never completed). ``F`` and ``W`` are pyspark's ``functions``
    and ``Window``, passed in so that this module imports no pyspark.
    """
    q = records.where(F.col("f").isin(*sorted(fs)) & (F.col("process") != NEMESIS))
    w = W.partitionBy("process").orderBy("index")
    q = q.select(
        "index",
        "type",
        "process",
        "f",
        "value",
        F.lag("type").over(w).alias("prev_type"),
        F.lag("f").over(w).alias("prev_f"),
        F.lead("type").over(w).alias("next_type"),
        F.lead("index").over(w).alias("next_index"),
        F.lead("value").over(w).alias("next_value"),
    )
    bad = q.where(
        (F.col("type") != "invoke")
        & (
            F.col("prev_type").isNull()
            | (F.col("prev_type") != "invoke")
            | (F.col("prev_f") != F.col("f"))
        )
    )
    first_bad = bad.orderBy("index").select("index", "type", "process", "prev_type").first()
    if first_bad is not None:
        if first_bad["prev_type"] == "invoke":
            raise HistoryError(
                "completion f differs from its invocation's", index=first_bad["index"], field="f"
            )
        raise HistoryError(
            f"{first_bad['type']} completion of process {first_bad['process']} has no invocation",
            index=first_bad["index"],
            field="process",
        )
    done = F.col("next_type").isNotNull() & (F.col("next_type") != "invoke")
    return q.where(F.col("type") == "invoke").select(
        "index",
        "f",
        "value",
        F.when(done, F.col("next_index")).alias("comp_index"),
        F.when(done, F.col("next_value")).alias("comp_value"),
        F.coalesce(F.when(done, F.col("next_type")), F.lit("info")).alias("outcome"),
    )
