"""splitbrain plugin for NATS JetStream: the workload ``nats-stream``, client ``nats-py``.

The servers are splitbrain's built-in DB ``nats`` (``harness/dbs/nats.py``: any served
nats-server release, built from the Go module proxy, or Debian's). Workload
``nats-stream``: producers publish with acks to one replicated stream, consumers read it
back, and after healing every node's replica is read whole from its files. The history
is splitbrain's append-log format (stream sequence = log index), so the existing
log-safety checks judge it: nothing here re-implements a check. Besides ``harness.api``,
only the built-in DB's module is used (the servers' layout and monitoring readings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.api import ConfigError, Workload

from .client import StreamClient
from .generator import FinalReads, StreamGen

__all__ = ["StreamClient", "StreamGen", "FinalReads", "workload"]


def _number(options: Mapping[str, Any], name: str, default: float, *, lo: float, hi: float) -> float:
    raw = options.get(name, default)
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"a number, not {raw!r}", field=name) from None
    if not lo <= v <= hi:
        raise ConfigError(f"between {lo:g} and {hi:g}, not {v:g}", field=name)
    return v


def workload(options: Mapping[str, Any]) -> Workload:
    """Options: ``replicas`` (default: the node count, at most 5), ``nats_timeout``
    (s, per request; default 3), ``read_fraction`` (0.1), ``read_chunk`` (100)."""
    raw = options.get("replicas")
    replicas = None if raw is None else int(_number(options, "replicas", 3, lo=1, hi=5))
    timeout = _number(options, "nats_timeout", 3.0, lo=0.1, hi=60)
    return Workload(
        name="nats-stream",
        client=StreamClient(replicas=replicas, timeout=timeout),
        generator=StreamGen(
            read_fraction=_number(options, "read_fraction", 0.1, lo=0, hi=1),
            chunk=int(_number(options, "read_chunk", 100, lo=1, hi=10_000)),
        ),
        final_generator=FinalReads(),
        # The append-log checks, chosen by the ops' shape (unkeyed append, log reads).
        checker={"model": None, "checks": ["log-safety"]},
    )
