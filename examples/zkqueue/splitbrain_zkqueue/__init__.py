"""splitbrain plugin: ZooKeeper's queue recipe as a consume-and-ack work queue.

A workload only: the servers are the ``zookeeper`` DB of ``splitbrain-zookeeper``
(examples/zookeeper), and the client reuses its one-server kazoo session. Producers
create PERSISTENT_SEQUENTIAL znodes under ``/queue``; consumers take the lowest child
by reading and deleting it (the delete is the ack), side by side for the whole load;
after healing, synced final dequeues drain ``/queue`` until it is empty. History:
docs/queues.md; checked by ``total-queue``. Only ``harness.api`` is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.api import ConfigError, DrainUntilEmpty, EnqueueDequeue, Workload

from .client import WorkQueueClient

__all__ = ["WorkQueueClient", "workload"]


def _int(options: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    raw = options.get(name, default)
    try:
        v = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"an integer, not {raw!r}", field=name) from None
    if not lo <= v <= hi:
        raise ConfigError(f"between {lo} and {hi}, not {v}", field=name)
    return v


def workload(options: Mapping[str, Any]) -> Workload:
    """Options: ``enqueue_percent`` (50), ``drop_acked`` (a test aid: this many acked
    deliveries of the load are left out of the history, so the run must be INVALID with
    exactly those ``lost``; 0)."""
    unknown = sorted(set(options) - {"enqueue_percent", "drop_acked", "argument"})
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}", field=unknown[0])
    return Workload(
        name="zk-workqueue",
        client=WorkQueueClient(drop_acked=[_int(options, "drop_acked", 0, 0, 1_000_000)]),
        generator=EnqueueDequeue(_int(options, "enqueue_percent", 50, 1, 99), prefix="z"),
        final_generator=DrainUntilEmpty(),
        checker={"model": None, "checks": ["total-queue"]},
    )
