"""splitbrain plugin: a consume-and-ack work queue on Redis lists (Debian's ``redis-server``).

DB ``redis-queue``: one ``redis-server`` per node; the first node is the primary and
holds the queue, the others replicate it (``replicaof``). No failover: the queue is
the primary's, written to its append-only file with ``appendfsync always`` before
any reply, so an acknowledged push survives a kill of the primary.

Workload ``redis-queue``: the reliable-queue recipe (a message is never only in a
client's memory). ``enqueue`` is ``RPUSH queue body``; a consumer takes a message
with ``LMOVE queue processing:<slot> LEFT RIGHT`` (atomically into its own
processing list) and acks it with ``LREM processing:<slot> 1 body``. A consumer
that comes back after an unknown outcome first redelivers what its processing list
still holds (at-least-once), and the final drains empty every processing list and
then the queue until it is empty. History: docs/queues.md; checked by
``total-queue``. Only ``harness.api`` is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.api import ConfigError, DrainUntilEmpty, EnqueueDequeue, Workload

from .client import QueueClient
from .db import RedisQueueDB

__all__ = ["RedisQueueDB", "QueueClient", "db", "workload"]


def _int(options: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    raw = options.get(name, default)
    try:
        v = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"an integer, not {raw!r}", field=name) from None
    if not lo <= v <= hi:
        raise ConfigError(f"between {lo} and {hi}, not {v}", field=name)
    return v


def db(options: Mapping[str, Any]) -> RedisQueueDB:
    """Options: ``port`` (6379), ``ready_timeout`` (s, 30)."""
    unknown = sorted(set(options) - {"port", "ready_timeout", "argument"})
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}", field=unknown[0])
    return RedisQueueDB(
        port=_int(options, "port", 6379, 1, 65535),
        ready_timeout=_int(options, "ready_timeout", 30, 1, 600),
    )


def workload(options: Mapping[str, Any]) -> Workload:
    """Options: ``enqueue_fraction`` (percent of ops that enqueue, 50), ``redis_timeout``
    (ms per command, 1500), ``drop_acked`` (test aid: this many acked deliveries are
    left out of the history on purpose, 0; the checker must then report them lost)."""
    return Workload(
        name="redis-queue",
        client=QueueClient(
            timeout=_int(options, "redis_timeout", 1500, 50, 60_000) / 1000,
            drop_acked=_int(options, "drop_acked", 0, 0, 1_000_000),
        ),
        generator=EnqueueDequeue(enqueue_percent=_int(options, "enqueue_fraction", 50, 1, 99), prefix="m"),
        final_generator=DrainUntilEmpty(),
        checker={"model": None, "checks": ["total-queue"]},
    )
