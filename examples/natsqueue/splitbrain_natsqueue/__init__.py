"""splitbrain plugin: a NATS JetStream work queue (ack removes the message), checked by total-queue.

A workload only: the servers are the ``nats`` DB of the ``splitbrain-nats`` plugin
(examples/nats), on which this package depends. The stream ``SBQUEUE`` has
work-queue retention (a message is deleted once a consumer acks it), file storage
and R = the node count (at most 5); every worker consumes through one durable pull
consumer ``workers`` with explicit acks, so a message fetched and never acked is
redelivered after ``ack_wait``. Producers and consumers run side by side for the
whole load; after healing, final dequeues drain the stream until it holds no
message at all. History: docs/queues.md. Only ``harness.api`` is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.api import ConfigError, DrainUntilEmpty, EnqueueDequeue, Workload

from .client import WorkQueueClient

__all__ = ["WorkQueueClient", "workload"]


def _number(options: Mapping[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    raw = options.get(name, default)
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"a number, not {raw!r}", field=name) from None
    if not lo <= v <= hi:
        raise ConfigError(f"between {lo:g} and {hi:g}, not {v:g}", field=name)
    return v


def workload(options: Mapping[str, Any]) -> Workload:
    """Options: ``replicas`` (default: node count, at most 5), ``nats_timeout`` (s per
    request, 1.5), ``ack_wait`` (s before an unacked delivery is redelivered, 3),
    ``enqueue_percent`` (50)."""
    raw = options.get("replicas")
    return Workload(
        name="nats-workqueue",
        client=WorkQueueClient(
            replicas=None if raw is None else int(_number(options, "replicas", 3, 1, 5)),
            timeout=_number(options, "nats_timeout", 1.5, 0.1, 3.0),
            ack_wait=_number(options, "ack_wait", 3.0, 0.5, 60),
        ),
        generator=EnqueueDequeue(int(_number(options, "enqueue_percent", 50, 1, 99)), prefix="w"),
        final_generator=DrainUntilEmpty(attempts=5000),
        checker={"model": None, "checks": ["total-queue"]},
    )
