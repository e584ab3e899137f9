"""The queue workload's generators, pure: sends and pulls, and the final drains' walk."""

from __future__ import annotations

import random

from harness.core.workload import PENDING, GenContext
from workloads import get_workload
from workloads.queue import QueueDrain, QueueGen

RNG = random.Random(1)


def ctx(process: int = 0) -> GenContext:
    return GenContext(time_ns=0, process=process, worker=0, node="n1", rng=RNG,
                      nodes=["n1", "n2"])


def test_gen_bodies_are_unique_and_pulls_follow_the_cursor() -> None:
    g = QueueGen(queues=2, pull_fraction=0.5, commit_fraction=0.0)
    ops = [g.op(ctx()) for _ in range(50)]
    bodies = [o.value["body"] for o in ops if o.f == "send"]
    assert bodies and len(bodies) == len(set(bodies))
    pull = next(o for o in ops if o.f == "pull")
    done = pull.complete("ok", {**pull.value, "messages": [[0, 48, "a"], [1, 99, "b"]]})
    g.update(ctx(), done)
    assert g.cursor[(pull.value["topic"], pull.value["queue"])] == 2


def test_drain_walks_each_queue_until_empty_then_stops() -> None:
    d = QueueDrain("n2", [("t0", 0), ("t0", 1)])
    seen = []
    for msgs in ([[0, 48, "a"]], [], []):
        op = d.op(ctx())
        assert op.node == "n2" and op.value["final"] is True
        assert d.op(ctx()) is PENDING
        seen.append((op.value["queue"], op.value["offset"]))
        d.update(ctx(), op.complete("ok", {**op.value, "messages": msgs}))
    assert seen == [(0, 0), (0, 1), (1, 0)]
    assert d.op(ctx()) is None


def test_registered_with_the_queue_check() -> None:
    w = get_workload("queue", {"queues": 2})
    assert w.checker["checks"] == ["queue"] and w.final_generator is not None
