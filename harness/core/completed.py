"""Client ops with both ends, paired as a history streams past: what latency figures,
throughput and timelines are made of, for the report and the benchmarks alike.

Unlike :func:`harness.core.history.pair_ops` this never raises: a report and a bench must
work on a crashed run's history too (a stray completion is ignored, a second invoke closes
the first as never completed).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from harness.core.history import NEMESIS, Op

__all__ = ["Completed", "completed_ops", "pair_stream"]


@dataclass(frozen=True)
class Completed:
    """A client op with both ends: the unit every latency plot and timeline bar is made of."""

    invoke: Op
    completion: Op | None  # None: never completed (the run ended first)

    @property
    def start(self) -> int:
        return self.invoke.time

    @property
    def end(self) -> int | None:
        return None if self.completion is None else self.completion.time

    @property
    def type(self) -> str:
        return "info" if self.completion is None else self.completion.type

    @property
    def latency_ns(self) -> int | None:
        return None if self.completion is None else self.completion.time - self.invoke.time


def pair_stream(ops: Iterable[Op]) -> Iterator[Completed]:
    """Pair client invocations with completions as the history streams past.

    Yields each op when its completion arrives (so in completion order), then the
    invocations never completed. Only the open invocations are held, one per process:
    memory is bounded by the concurrency, not by the history's length.

    A report must render even for a crashed run, so unlike ``pair_ops`` this
    never raises: a stray completion is ignored, a second invoke closes the first
    as never completed.
    """
    open_: dict[Any, Op] = {}
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.type == "invoke":
            prev = open_.pop(op.process, None)
            if prev is not None:
                yield Completed(prev, None)
            open_[op.process] = op
        else:
            inv = open_.pop(op.process, None)
            if inv is not None:
                yield Completed(inv, op)
    yield from (Completed(inv, None) for inv in open_.values())


def completed_ops(ops: Iterable[Op]) -> list[Completed]:
    """Every client op with both ends, ordered by start (:func:`pair_stream`, held whole)."""
    return sorted(pair_stream(ops), key=lambda c: c.start)
