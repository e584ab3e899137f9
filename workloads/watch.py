"""The watch workload: publishes and subscriptions side by side, for any system with a
stream of events (the ``subscription`` checker, docs/subscriptions.md).

Why one workload for every system: what a watch promises (order, no gap, no duplicate,
resuming from a position) is judged the same way whether the stream is an etcd watch, a
NATS consumer, a ZooKeeper watch or a Kafka consumer by offset; only the client differs.
So the schedule of ops lives here, and a system brings a :class:`WatchClient`: a client
that performs ``publish``, ``subscribe`` and ``snapshot`` as docs/subscriptions.md
describes and declares which guarantees its system promises (``promises``). The checker
judges those and no others.

The schedule: every worker publishes (one event, or a transaction of several streams'
events) and subscribes. A subscription resumes from the last position that worker was
delivered (``resume_percent``), or starts from a random position already seen, so
re-subscribing from a position is exercised all through the faults; it watches one
stream or every stream. After the heal, each node's final worker reads a ``snapshot``
and then subscribes from the beginning to every stream.

``-w watch`` takes its client from the option ``client``: ``etcd``, ``nats`` or
``zookeeper`` (the built-ins, :mod:`workloads.etcd_watch`, :mod:`workloads.nats_watch`,
:mod:`workloads.zk_watch`) or
``module:factory`` for a plugin's (the factory takes no arguments and returns a
:class:`WatchClient`). A plugin may instead register a workload
of its own whose factory returns :func:`watch_workload` with its client.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from checker.subscription import SubscriptionOptions
from harness.core.errors import ConfigError
from harness.core.op import Op
from harness.core.options import as_options, declares_options, option, parse_options
from harness.core.workload import PENDING, Client, GenContext, Generator, Workload
from workloads.generator import each_node

if TYPE_CHECKING:
    pass

__all__ = [
    "perform",
    "FinalWatch",
    "WatchClient",
    "WatchGen",
    "WatchOptions",
    "watch_workload",
    "workload",
]

BUILTIN_CLIENTS = {
    "etcd": "workloads.etcd_watch:EtcdWatchClient",
    "nats": "workloads.nats_watch:NatsWatchClient",
    "zookeeper": "workloads.zk_watch:ZkWatchClient",
    "kafka": "workloads.kafka_watch:KafkaWatchClient",
}
"""The clients ``client=`` names without a module."""


@runtime_checkable
class WatchClient(Client, Protocol):
    """A client of the watch workload: performs ``publish``, ``subscribe`` and
    ``snapshot`` (docs/subscriptions.md) and declares its system's guarantees.

    ``promises`` maps the subscription checker's options
    (:class:`checker.subscription.SubscriptionOptions`: ``ordered``, ``no_gap``,
    ``no_duplicate``, ``resumable``, ``atomic``, ``monotonic``, ``final_state``,
    ``scope``) to what the system promises; an option left out keeps the checker's
    default, so a client should name every guarantee its system does not give.
    ``multi_stream`` says whether one subscription may watch a list of streams (else a
    subscription watches one stream or every stream).
    """

    promises: Mapping[str, Any]
    multi_stream: bool


@dataclass(frozen=True)
class WatchOptions:
    """The watch workload's options (``--workload-option``)."""

    client: str = option(
        "etcd", "the watch client: etcd, nats, zookeeper, kafka, or module:factory (a plugin's)"
    )
    streams: int = option(4, "streams (keys, subjects, partitions) written and watched", minimum=1)
    publish_percent: int = option(50, "share of ops that publish", minimum=0, maximum=100)
    txn_percent: int = option(
        30, "share of publishes that are one transaction over 2-3 streams", minimum=0, maximum=100
    )
    all_percent: int = option(
        50, "share of subscriptions that watch every stream", minimum=0, maximum=100
    )
    resume_percent: int = option(
        60,
        "share of subscriptions resuming from the worker's last delivered position",
        minimum=0,
        maximum=100,
    )
    watch_s: float = option(
        1.0, "seconds one subscription listens (keep below the client timeout)", minimum=0.05
    )
    final_attempts: int = option(
        5, "tries of each node's final snapshot and subscription", minimum=1
    )


class WatchGen:
    """Publishes of unique values and subscriptions that resume, per worker.

    Positions come from what the system answered (a publish's ack, a delivery), so a
    subscription's start is always one the system itself gave. Under scope ``stream``
    (each stream its own positions) a subscription to every stream starts from 0.
    """

    def __init__(self, opts: WatchOptions, *, scope: str = "subscription", multi: bool = False):
        self.o, self.scope, self.multi = opts, scope, multi
        self.names = [f"s{i}" for i in range(opts.streams)]
        self.n = 0
        self.seen: dict[str | None, list[int]] = {}  # stream (None: every one) -> positions
        self.last: dict[int, tuple[list[str] | None, int]] = {}  # worker -> (streams, pos)

    def _positions(self, stream: str | None) -> list[int]:
        key = None if self.scope == "subscription" else stream
        return self.seen.setdefault(key, [])

    def op(self, ctx: GenContext) -> Op:
        rng = ctx.rng
        if rng.randrange(100) < self.o.publish_percent:
            k = 1
            if len(self.names) > 1 and rng.randrange(100) < self.o.txn_percent:
                k = rng.randint(2, min(3, len(self.names)))
            events = []
            for s in rng.sample(self.names, k):
                self.n += 1
                events.append({"stream": s, "value": f"v{self.n}"})
            return Op("invoke", ctx.process, "publish", {"events": events}, node=ctx.node)
        last = self.last.get(ctx.worker)
        if last is not None and rng.randrange(100) < self.o.resume_percent:
            streams, start = last
        else:
            streams = None
            if rng.randrange(100) >= self.o.all_percent:
                k = rng.randint(1, 2) if self.multi and len(self.names) > 1 else 1
                streams = sorted(rng.sample(self.names, k))
            start = 0
            if streams is not None or self.scope == "subscription":
                known = self._positions(None if streams is None else streams[0])
                if known and rng.random() < 0.9:
                    start = max(0, known[rng.randrange(len(known))] - rng.randint(0, 1))
        value = {"streams": streams, "from": start}
        return Op("invoke", ctx.process, "subscribe", value, node=ctx.node)

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type != "ok" or not isinstance(event.value, dict):
            return
        events = event.value.get("events") or []
        for e in events:
            if isinstance(e, dict) and isinstance(e.get("pos"), int):
                ps = self._positions(e.get("stream"))
                if len(ps) < 10_000:
                    ps.append(e["pos"])
        if event.f == "subscribe" and events:
            streams = event.value.get("streams")
            top = max(e["pos"] for e in events if isinstance(e.get("pos"), int))
            if self.scope == "stream" and (streams is None or len(streams) != 1):
                return  # one start for several streams' own positions means nothing
            self.last[ctx.worker] = (streams, top)


class FinalWatch:
    """One node's final reads: a snapshot, then a subscription to every stream from the
    beginning; each tried up to ``attempts`` times (the node may be down)."""

    def __init__(self, node: str, attempts: int) -> None:
        self.node, self.attempts = node, attempts
        self.todo = ["snapshot", "subscribe"]
        self.tries = 0
        self.inflight: int | None = None

    def op(self, ctx: GenContext) -> Any:
        if not self.todo:
            return None
        if self.inflight is not None:
            return PENDING
        self.inflight = ctx.process
        f = self.todo[0]
        value: dict[str, Any] = {"final": True}
        if f == "subscribe":
            value = {"streams": None, "from": 0, "final": True}
        return Op("invoke", ctx.process, f, value, node=self.node)

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type == "invoke" or event.process != self.inflight:
            return
        self.inflight = None
        self.tries += 1
        if event.type == "ok" or self.tries >= self.attempts:
            self.todo.pop(0)
            self.tries = 0


def watch_workload(
    client: WatchClient, options: WatchOptions | Mapping[str, Any] | None = None
) -> Workload:
    """The watch workload around ``client``: its guarantees go to the checker as declared."""
    opts = as_options(WatchOptions, options or {}, role="workload watch")
    promises = dict(getattr(client, "promises", {}) or {})
    checked = parse_options(SubscriptionOptions, promises, role="watch client promises")
    multi = bool(getattr(client, "multi_stream", False))
    if hasattr(client, "configure"):
        client.configure(opts)
    final_attempts = opts.final_attempts

    def final(node: str) -> Generator:
        return FinalWatch(node, final_attempts)

    return Workload(
        name="watch",
        client=client,
        generator=WatchGen(opts, scope=checked.scope, multi=multi),
        final_generator=each_node(final),
        checker={"checks": ["subscription"], "options": {"subscription": promises}},
    )


def perform(op: Op, node: str | None, calls: Mapping[str, Callable[[Op], Op]]) -> Op:
    """One watch op done by the client's own call for its ``f`` (``publish``,
    ``subscribe``, ``snapshot``), completed on ``node``; any other ``f`` fails unsent.
    The clients differ in how they talk to their system, not in what an op is."""
    call = calls.get(op.f)
    if call is None:
        return op.complete("fail", op.value, error=f"client error: watch cannot do {op.f!r}")
    return call(op).replace(node=node)


def _client(name: str) -> WatchClient:
    ref = BUILTIN_CLIENTS.get(name, name)
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(
            f"watch client {name!r}: give a built-in ({', '.join(BUILTIN_CLIENTS)}) "
            "or module:factory",
            field="client",
        )
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"watch client {name!r}: {e}", field="client") from None
    client = factory()
    if not isinstance(client, WatchClient):
        raise ConfigError(
            f"watch client {name!r} returned a {type(client).__name__}, which lacks "
            "open/setup/invoke/teardown/close or promises/multi_stream (workloads/watch.py)",
            field="client",
        )
    return client


@declares_options(WatchOptions)
def workload(options: WatchOptions | Mapping[str, Any]) -> Workload:
    """``-w watch``: the client named by ``client`` (default etcd)."""
    opts = as_options(WatchOptions, options, role="workload watch")
    return watch_workload(_client(opts.client), opts)
