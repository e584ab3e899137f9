"""examples/zookeeper's queue: the fifo-queue model and the final drain, pure (no ZooKeeper).

Histories go through splitbrain's own linearizability search, so these fail if
the model stops telling a lost, duplicated or reordered item from a clean run.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from checker.linearizable import check_linearizable
from harness.api import PENDING, GenContext, Op

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "zookeeper"))

from splitbrain_zookeeper.queue import (  # noqa: E402
    FinalDrain,
    QueueGen,
    fifo_queue,
    without_unseen_enqueues,
)


def history(*steps: tuple[int, str, str, object]) -> list[Op]:
    """(process, type, f, value) records on key q0, numbered in order."""
    return [
        Op(type=t, process=p, f=f, value=v, key="q0", index=i, time=i)
        for i, (p, t, f, v) in enumerate(steps)
    ]


def verdict(ops: list[Op]) -> object:
    return check_linearizable(ops, fifo_queue(), timeout=30)["valid"]


def test_items_come_out_in_order_and_empty_only_when_empty() -> None:
    ops = history(
        (0, "invoke", "enqueue", 1), (0, "ok", "enqueue", 1),
        (1, "invoke", "enqueue", 2), (1, "ok", "enqueue", 2),
        (0, "invoke", "dequeue", None), (0, "ok", "dequeue", 1),
        (1, "invoke", "dequeue", None), (1, "ok", "dequeue", 2),
        (0, "invoke", "dequeue", None), (0, "ok", "dequeue", None),
    )  # fmt: skip
    assert verdict(ops) is True


def test_a_lost_item_a_duplicate_and_a_reorder_are_not_linearizable() -> None:
    lost = history(
        (0, "invoke", "enqueue", 1), (0, "ok", "enqueue", 1),
        (1, "invoke", "dequeue", None), (1, "ok", "dequeue", None),
    )  # fmt: skip
    twice = history(
        (0, "invoke", "enqueue", 1), (0, "ok", "enqueue", 1),
        (1, "invoke", "dequeue", None), (1, "ok", "dequeue", 1),
        (2, "invoke", "dequeue", None), (2, "ok", "dequeue", 1),
    )  # fmt: skip
    reordered = history(
        (0, "invoke", "enqueue", 1), (0, "ok", "enqueue", 1),
        (0, "invoke", "enqueue", 2), (0, "ok", "enqueue", 2),
        (1, "invoke", "dequeue", None), (1, "ok", "dequeue", 2),
    )  # fmt: skip
    assert [verdict(h) for h in (lost, twice, reordered)] == [False, False, False]


def test_an_unknown_enqueue_may_or_may_not_have_happened() -> None:
    took = history(
        (0, "invoke", "enqueue", 1), (0, "info", "enqueue", 1),
        (1, "invoke", "dequeue", None), (1, "ok", "dequeue", 1),
    )  # fmt: skip
    never = history(
        (0, "invoke", "enqueue", 1), (0, "info", "enqueue", 1),
        (1, "invoke", "dequeue", None), (1, "ok", "dequeue", None),
    )  # fmt: skip
    assert verdict(took) is True and verdict(never) is True


def test_unknown_enqueues_no_dequeue_returned_are_left_out_of_the_search() -> None:
    ops = history(
        (0, "invoke", "enqueue", 1), (0, "info", "enqueue", 1),  # never seen: dropped
        (1, "invoke", "enqueue", 2), (1, "info", "enqueue", 2),  # seen below: kept
        (2, "invoke", "enqueue", 3), (2, "ok", "enqueue", 3),  # acknowledged: kept
        (3, "invoke", "enqueue", 4),  # never completed, never seen: dropped
        (2, "invoke", "dequeue", None), (2, "ok", "dequeue", 2),
        (2, "invoke", "dequeue", None), (2, "fail", "dequeue", None),
    )  # fmt: skip
    kept = without_unseen_enqueues(ops)
    assert [(o.process, o.value) for o in kept if o.f == "enqueue"] == [
        (1, 2), (1, 2), (2, 3), (2, 3),
    ]  # fmt: skip
    assert verdict(ops) is True
    unsure = [*ops, *history((4, "invoke", "dequeue", None), (4, "info", "dequeue", None))]
    assert without_unseen_enqueues(unsure) == unsure  # it may have taken item 1


def test_leaving_unseen_enqueues_out_keeps_a_lost_item_visible() -> None:
    ops = history(
        (0, "invoke", "enqueue", 1), (0, "info", "enqueue", 1),
        (1, "invoke", "enqueue", 2), (1, "ok", "enqueue", 2),
        (2, "invoke", "dequeue", None), (2, "ok", "dequeue", None),
    )  # fmt: skip
    assert verdict(ops) is False


def _ctx(process: int) -> GenContext:
    return GenContext(0, process, process, "n1", random.Random(3), ["n1"])


def test_the_final_drain_empties_every_key_once_each_answers_empty() -> None:
    gen = QueueGen(per_key=2)
    for p in range(5):
        gen.op(_ctx(p))
    drain = FinalDrain(lambda: gen.keys, attempts=3)
    first = drain.op(_ctx(10))
    assert first.f == "dequeue" and first.key == "q0"
    second = drain.op(_ctx(11))
    assert second.key == "q1"  # keys are drained side by side, one dequeue each at a time
    drain.update(_ctx(10), first.complete("ok", None))  # q0 is empty
    drain.update(_ctx(11), second.complete("ok", 7))  # q1 still had one
    keys = []
    while (op := drain.op(_ctx(12))) not in (None, PENDING):
        keys.append(op.key)
        drain.update(_ctx(12), op.complete("ok", None if op.key != "q2" else 9))
    assert keys == ["q1", "q2", "q2", "q2"]  # q2 gives up after its attempts
    assert set(gen.keys) == {"q0", "q1", "q2"}
