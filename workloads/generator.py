"""Generator combinators: schedules as plain objects, time and randomness from the context.

A generator here is a small state machine behind ``Generator.op`` / ``.update``
(harness/core/workload.py). It never sleeps and never touches the network: the time
comes from ``GenContext.time_ns`` and randomness from ``GenContext.rng``, so a
fixed seed gives a fixed schedule and :func:`simulate` can replay any schedule
without a cluster.

Conventions every generator here follows, and the runner relies on:

- ``op`` returns an invocation :class:`~harness.core.history.Op` (``type="invoke"``,
  ``process=ctx.process`` unless the generator owns dedicated processes, ``node``
  = the node to talk to, ``time`` left 0 for the history writer to stamp),
  :data:`~harness.core.workload.PENDING` (ask again later), or None (exhausted for good).
- ``update`` gets every completion (ok/fail/info) of an op this generator tree
  handed out. Combinators broadcast it to all their children: a child ignores
  what is not its own (it recognises its ops by process or ``f``). Invocations may
  be passed too; all generators here ignore them.
- One generator object is shared by all workers: the runner calls ``op`` and
  ``update`` under one lock.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from harness.core.history import Op
from harness.core.workload import PENDING, GenContext, Generator

__all__ = [
    "OpFn",
    "invoke",
    "make_rng",
    "Repeat",
    "repeat",
    "once",
    "Limit",
    "limit",
    "TimeLimit",
    "time_limit",
    "Mix",
    "mix",
    "AnyOf",
    "any_of",
    "Phases",
    "phases",
    "EachNode",
    "each_node",
    "on_nodes",
    "Throttle",
    "throttle",
    "Idle",
    "idle",
    "simulate",
]

OpFn = Callable[[GenContext], Op]
"""Builds one invocation for the asking worker."""


def invoke(
    ctx: GenContext,
    f: str,
    value: Any = None,
    *,
    key: str | None = None,
    node: str | None = None,
    process: int | None = None,
) -> Op:
    """An invocation for ``ctx``'s worker; ``node`` defaults to the worker's node."""
    return Op(
        type="invoke",
        process=ctx.process if process is None else process,
        f=f,
        value=value,
        key=key,
        node=ctx.node if node is None else node,
    )


def make_rng(seed: int | str, *parts: object) -> random.Random:
    """A deterministic RNG for (seed, parts): same arguments, same stream, any interpreter.

    String seeding is hashed with SHA-512 by ``random``, independent of PYTHONHASHSEED.
    """
    return random.Random(":".join(map(str, (seed, *parts))))


def _is_op(x: Any) -> bool:
    return isinstance(x, Op)


class Repeat:
    """``fn(ctx)`` over and over, ``times`` times in all (forever if None)."""

    def __init__(self, fn: OpFn, times: int | None = None) -> None:
        self.fn, self.left = fn, times

    def op(self, ctx: GenContext) -> Op | None:
        if self.left is not None:
            if self.left <= 0:
                return None
            self.left -= 1
        return self.fn(ctx)

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


def repeat(fn: OpFn, times: int | None = None) -> Repeat:
    return Repeat(fn, times)


def once(fn: OpFn) -> Repeat:
    return Repeat(fn, 1)


class Limit:
    """At most ``n`` ops from ``gen``, over all workers."""

    def __init__(self, n: int, gen: Generator) -> None:
        self.left, self.gen = n, gen

    def op(self, ctx: GenContext) -> Any:
        if self.left <= 0:
            return None
        r = self.gen.op(ctx)
        if _is_op(r):
            self.left -= 1
        return r

    def update(self, ctx: GenContext, event: Op) -> None:
        self.gen.update(ctx, event)


def limit(n: int, gen: Generator) -> Limit:
    return Limit(n, gen)


class TimeLimit:
    """``gen`` until ``seconds`` after the first time anyone asked (Jepsen's time-limit)."""

    def __init__(self, seconds: float, gen: Generator) -> None:
        self.dur_ns, self.gen = int(seconds * 1e9), gen
        self.deadline: int | None = None

    def op(self, ctx: GenContext) -> Any:
        if self.deadline is None:
            self.deadline = ctx.time_ns + self.dur_ns
        if ctx.time_ns >= self.deadline:
            return None
        return self.gen.op(ctx)

    def update(self, ctx: GenContext, event: Op) -> None:
        self.gen.update(ctx, event)


def time_limit(seconds: float, gen: Generator) -> TimeLimit:
    return TimeLimit(seconds, gen)


class _Many:
    """Shared by combinators over several children: broadcast updates, drop the exhausted."""

    def __init__(self, gens: Iterable[Generator]) -> None:
        self.gens: list[Generator | None] = list(gens)

    def update(self, ctx: GenContext, event: Op) -> None:
        for g in self.gens:
            if g is not None:
                g.update(ctx, event)

    def _try(self, i: int, ctx: GenContext) -> Any:
        g = self.gens[i]
        if g is None:
            return None
        r = g.op(ctx)
        if r is None:
            self.gens[i] = None
        return r

    def _exhausted(self) -> bool:
        return all(g is None for g in self.gens)


class Mix(_Many):
    """Each op from a child picked at random by weight; a PENDING child yields to the others."""

    def __init__(self, gens: Sequence[Generator], weights: Sequence[float] | None = None) -> None:
        super().__init__(gens)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.gens)
        if len(self.weights) != len(self.gens):
            raise ValueError("mix: one weight per generator")
        if any(w < 0 for w in self.weights):
            raise ValueError("mix: weights must be non-negative")

    def op(self, ctx: GenContext) -> Any:
        live = [i for i, g in enumerate(self.gens) if g is not None and self.weights[i] > 0]
        while live:
            i = ctx.rng.choices(live, [self.weights[j] for j in live])[0]
            live.remove(i)
            r = self._try(i, ctx)
            if r is not None and r is not PENDING:
                return r
        if all(g is None or w <= 0 for g, w in zip(self.gens, self.weights, strict=True)):
            return None
        return PENDING


def mix(gens: Sequence[Generator], weights: Sequence[float] | None = None) -> Mix:
    return Mix(gens, weights)


class AnyOf(_Many):
    """The first child with an op, starting at a rotating position so no child starves."""

    def __init__(self, gens: Iterable[Generator]) -> None:
        super().__init__(gens)
        self.cursor = 0

    def op(self, ctx: GenContext) -> Any:
        n = len(self.gens)
        for k in range(n):
            i = (self.cursor + k) % n
            r = self._try(i, ctx)
            if r is not None and r is not PENDING:
                self.cursor = (i + 1) % n
                return r
        return None if self._exhausted() else PENDING


def any_of(gens: Iterable[Generator]) -> AnyOf:
    return AnyOf(gens)


class Phases:
    """Each generator in turn; the next starts only when all ops of the previous completed.

    In-flight ops are tracked by process, which is why a phase's completions must
    reach ``update`` (the runner sends every completion).
    """

    def __init__(self, *gens: Generator) -> None:
        self.gens = list(gens)
        self.i = 0
        self.outstanding: set[int | str] = set()

    def op(self, ctx: GenContext) -> Any:
        while self.i < len(self.gens):
            r = self.gens[self.i].op(ctx)
            if r is None:
                if self.outstanding:
                    return PENDING
                self.i += 1
                continue
            if _is_op(r):
                self.outstanding.add(r.process)
            return r
        return None

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type == "invoke":
            return
        self.outstanding.discard(event.process)
        if self.i < len(self.gens):
            self.gens[self.i].update(ctx, event)


def phases(*gens: Generator) -> Phases:
    return Phases(*gens)


class EachNode(AnyOf):
    """One child per node, built by ``factory(node)``; nodes from the context unless given.

    The children run side by side (any worker may serve any node's child): each
    op names its node, and the client talks to that node rather than its own.
    """

    def __init__(
        self, factory: Callable[[str], Generator], nodes: Sequence[str] | None = None
    ) -> None:
        super().__init__([])
        self.factory = factory
        self.nodes = list(nodes) if nodes is not None else None
        self.built = False

    def op(self, ctx: GenContext) -> Any:
        if not self.built:
            nodes = self.nodes if self.nodes is not None else ctx.nodes
            if not nodes:
                raise ValueError(
                    "each_node: GenContext.nodes is empty; the runner must pass the test's nodes"
                )
            self.gens = [self.factory(n) for n in nodes]
            self.built = True
        return super().op(ctx)


def each_node(factory: Callable[[str], Generator]) -> EachNode:
    return EachNode(factory)


def on_nodes(nodes: Sequence[str], factory: Callable[[str], Generator]) -> EachNode:
    return EachNode(factory, nodes)


class Throttle:
    """At most ``rate`` ops per second from ``gen``, by the context's clock.

    Only for dedicated workers with their own cadence (the sampler); the pool's
    pace is the runner's. A late worker does not catch up with a burst.
    """

    def __init__(self, rate: float, gen: Generator) -> None:
        if rate <= 0:
            raise ValueError("throttle: rate must be positive")
        self.interval = int(1e9 / rate)
        self.gen = gen
        self.next_ns: int | None = None

    def op(self, ctx: GenContext) -> Any:
        if self.next_ns is not None and ctx.time_ns < self.next_ns:
            return PENDING
        r = self.gen.op(ctx)
        if _is_op(r):
            due = ctx.time_ns if self.next_ns is None else self.next_ns
            nxt = due + self.interval
            self.next_ns = nxt if nxt > ctx.time_ns else ctx.time_ns + self.interval
        return r

    def update(self, ctx: GenContext, event: Op) -> None:
        self.gen.update(ctx, event)


def throttle(rate: float, gen: Generator) -> Throttle:
    return Throttle(rate, gen)


class Idle:
    """Never an op, never done: keeps pool workers waiting while others (samplers) work."""

    def op(self, ctx: GenContext) -> Any:
        return PENDING

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


def idle() -> Idle:
    return Idle()


Completer = Callable[[Op, random.Random], tuple[str, Any, "str | None"]]


def _complete_ok(op: Op, rng: random.Random) -> tuple[str, Any, str | None]:
    return "ok", op.value, None


def simulate(
    gen: Generator,
    n_workers: int,
    steps: int,
    rng: random.Random,
    *,
    nodes: Sequence[str] = ("n1", "n2", "n3"),
    complete: Completer | None = None,
    latency_ns: tuple[int, int] = (1_000_000, 10_000_000),
    tick_ns: int = 1_000_000,
    max_idle_ns: int = 10_000_000_000,
    start_ns: int = 0,
) -> list[Op]:
    """Run ``gen`` against ``n_workers`` virtual workers on a virtual clock; return the history.

    Mirrors the runner: worker w starts as process w and becomes w + k*n_workers
    after an ``info``; it serves node ``nodes[w % len(nodes)]``; an exhausted
    generator retires the worker. Each op takes a random latency in
    ``latency_ns`` and completes as ``complete(invocation, rng)`` says (default:
    ok with the invocation's value). At most ``steps`` invocations; the run also
    ends when nothing can happen for ``max_idle_ns`` of virtual time.
    Everything is drawn from ``rng``: the same seed gives the same history.
    """
    complete = complete or _complete_ok
    now = start_ns
    nodes = list(nodes)
    proc = list(range(n_workers))
    free = list(range(n_workers))
    done: set[int] = set()
    inflight: list[tuple[int, int, int, Op]] = []
    history: list[Op] = []
    seq = 0
    idle_since: int | None = None
    invocations = 0

    def gctx(w: int) -> GenContext:
        return GenContext(
            time_ns=now,
            process=proc[w],
            worker=w,
            node=nodes[w % len(nodes)],
            rng=rng,
            nodes=list(nodes),
        )

    def record(op: Op) -> Op:
        op = op.replace(index=len(history), time=now)
        history.append(op)
        return op

    while True:
        progressed = False
        for w in sorted(free):
            if invocations >= steps:
                break
            r = gen.op(gctx(w))
            if r is None:
                free.remove(w)
                done.add(w)
            elif r is PENDING:
                continue
            else:
                if not _is_op(r) or r.type != "invoke":
                    raise TypeError(f"generator returned {r!r}, not an invocation")
                inv = record(r)
                invocations += 1
                free.remove(w)
                seq += 1
                heapq.heappush(inflight, (now + rng.randint(*latency_ns), seq, w, inv))
                progressed = True
        if inflight:
            t, _, w, inv = heapq.heappop(inflight)
            now = max(now, t)
            typ, value, error = complete(inv, rng)
            comp = record(inv.complete(typ, value, error=error))
            gen.update(gctx(w), comp)
            if typ == "info":
                proc[w] += n_workers
            free.append(w)
            idle_since = None
            continue
        if invocations >= steps or len(done) == n_workers:
            break
        if not progressed:
            if idle_since is None:
                idle_since = now
            elif now - idle_since >= max_idle_ns:
                break
            now += tick_ns
    return history
