"""The register workload: Jepsen's independent CAS registers over the node's kv map.

History values (docs/architecture.md §3), one register per ``key``:

- ``read``: invoke null, ok = the value read (null if the key was never written);
- ``write``: invoke v, ok v;
- ``cas``: invoke ``[old, new]``, ok ``[old, new]``; ``fail`` with error
  ``CAS_MISMATCH`` when the node applied it and found another value.

Keys are ``k0``, ``k1``, ...; ``keys`` of them are live at once, each gets
``ops_per_key`` ops and is then replaced by a fresh one, so every key's history
stays small enough for a linearizability search. Values are small ints, so
cas ops often succeed. As Jepsen's ``independent``, a retired key is not
forgotten: with ``retired_reads`` > 0, that fraction of ops reads one of the
last retired keys, whose last write may be long past (a restart ago).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.options import as_options, declares_options, option
from harness.core.workload import GenContext, Workload
from workloads.dledger_client import DLedgerClient, Session, finish
from workloads.generator import invoke
from workloads.options import RegisterGenOptions, SamplerOptions
from workloads.sampler import handle_sample, maybe_sampler_workers

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = [
    "RegisterGen",
    "RegisterClient",
    "handle_register",
    "is_register_op",
    "RegisterOptions",
    "register_gen",
    "checks",
    "workload",
    "CHECKER",
]

CHECKER: dict[str, Any] = {"model": "cas-register", "keys": True, "checks": ["linearizable"]}
"""Per-key linearizability against a cas-register (``keys``: each key checked alone)."""


class RegisterGen:
    """Random read/write/cas over a few live keys, each retired after a fixed count (reads in a lull)."""

    RETIRED_KEPT = 64
    """How many retired keys stay readable (the oldest drop out)."""

    def __init__(
        self,
        *,
        keys: int = 3,
        ops_per_key: int = 200,
        max_value: int = 5,
        retired_reads: float = 0.0,
    ) -> None:
        if keys < 1 or ops_per_key < 1 or max_value < 1:
            raise ValueError("register: keys, ops_per_key and max_value must be positive")
        if not 0.0 <= retired_reads < 1.0:
            raise ValueError("register: retired_reads must be in [0, 1)")
        self.retired_reads = retired_reads
        self.retired: list[str] = []
        self.ops_per_key = ops_per_key
        self.max_value = max_value
        self.next_key = keys
        self.live: list[list[Any]] = [[f"k{i}", ops_per_key] for i in range(keys)]

    def op(self, ctx: GenContext) -> Op:
        if self.retired and self.retired_reads and ctx.rng.random() < self.retired_reads:
            return invoke(ctx, "read", None, key=ctx.rng.choice(self.retired))
        slot = self.live[ctx.rng.randrange(len(self.live))]
        key = slot[0]
        slot[1] -= 1
        if slot[1] <= 0:
            self.retired = [*self.retired[-(self.RETIRED_KEPT - 1) :], key]
            slot[0], slot[1] = f"k{self.next_key}", self.ops_per_key
            self.next_key += 1
        f = "read" if ctx.lull else ctx.rng.choice(("read", "write", "cas"))
        if f == "read":
            return invoke(ctx, "read", None, key=key)
        if f == "write":
            return invoke(ctx, "write", ctx.rng.randrange(self.max_value), key=key)
        return invoke(
            ctx,
            "cas",
            [ctx.rng.randrange(self.max_value), ctx.rng.randrange(self.max_value)],
            key=key,
        )

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


def is_register_op(op: Op) -> bool:
    """Ops on one key of the kv map (registers and archive keys) carry the key; others do not."""
    return op.key is not None


def handle_register(client: DLedgerClient, session: Session, op: Op) -> Op:
    key = op.key
    if key is None:
        raise ValueError(f"register op {op.f!r} has no key")
    node = client.target(op)
    if op.f == "read":
        res = session.call(node, lambda c: c.kv_read(key, client.read_timeout))
        return finish(
            op, res, read=True, ok_value=lambda r: r.get("value") if r.get("found") else None
        )
    if op.f == "write":
        value = op.value
        res = session.call(node, lambda c: c.kv_write(key, value), to_leader=True)
        return finish(op, res, read=False)
    if op.f == "cas":
        old, new = op.value
        res = session.call(node, lambda c: c.kv_cas(key, old, new), to_leader=True)
        if res.reply is not None and res.code == "SUCCESS" and res.reply.get("ok") is False:
            return op.complete("fail", op.value, error="CAS_MISMATCH").replace(node=res.node)
        return finish(op, res, read=False)
    raise ValueError(f"register workload cannot do {op.f!r}")


class RegisterClient(DLedgerClient):
    read_fs = frozenset({"read", "sample"})

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        if op.f == "sample":
            return handle_sample(self, session, op)
        return handle_register(self, session, op)


@dataclass(frozen=True)
class RegisterOptions(SamplerOptions, RegisterGenOptions):
    read_timeout: float | None = option(
        None,
        "seconds a kv read waits (default: the client timeout); a read that gives up does no harm",
        minimum=0.001,
    )


def register_gen(options: RegisterGenOptions) -> RegisterGen:
    return RegisterGen(
        keys=options.keys,
        ops_per_key=options.ops_per_key,
        max_value=options.max_value,
        retired_reads=options.retired_reads,
    )


def checks(base: list[str], options: object) -> list[str]:
    """``base`` plus ``log-safety`` when the status samplers run (their samples feed it)."""
    sampling = isinstance(options, SamplerOptions) and options.sampler
    return base + (["log-safety"] if sampling and "log-safety" not in base else [])


@declares_options(RegisterOptions)
def workload(options: RegisterOptions | Mapping[str, Any]) -> Workload:
    opts = as_options(RegisterOptions, options, role="workload register")
    return Workload(
        name="register",
        client=RegisterClient(read_timeout=opts.read_timeout),
        generator=register_gen(opts),
        final_generator=None,
        checker={**CHECKER, "checks": checks(["linearizable"], opts)},
        extra_workers=maybe_sampler_workers(opts),
    )
