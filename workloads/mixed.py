"""The mixed workload: the append log and the kv registers on one cluster at once.

Ops keep their own workloads' shapes; the client tells them apart by ``key``:
register ops carry one (``k0``...), log ops do not. Weights come from
``mixed_weights``: ``[append, register]`` (default [1, 1]), or with two more,
``[append, register, archive, kv-set]``, the workloads that read the past:

- ``archive`` (:mod:`workloads.archive`): keys ``a<n>`` written a few times,
  then only read for the rest of the test;
- ``kv-set`` (:mod:`workloads.kvset`): a set kept in the kv map, read back
  after the heal starting at every node;
- the registers' retired keys stay readable (``retired_reads``), as Jepsen's
  ``independent`` keys do;
- with ``sticky_ops`` > 0, a worker sticks to the node that last answered
  one of its kv ops for that many kv ops, retrying a failed read there at once
  (:mod:`workloads.sticky`), so a frozen leader wakes up to reads queued while
  it was deposed;
- ``read_timeout`` (default ``client_timeout``) bounds a kv read: below a
  pause's length, a sticky worker re-sends its read to the sleeper several
  times, the last one after the new leader committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError
from harness.core.options import as_options, declares_options, option
from harness.core.workload import Generator, Workload
from workloads.append import AppendGen, final_log_reads, handle_append
from workloads.archive import ArchiveGen
from workloads.dledger_client import DLedgerClient, Session
from workloads.generator import any_of, mix
from workloads.kvset import KvSetGen, handle_kv_set, is_kv_set_op
from workloads.options import LogOptions
from workloads.register import (
    RegisterOptions,
    checks,
    handle_register,
    is_register_op,
    register_gen,
)
from workloads.sampler import handle_sample, maybe_sampler_workers
from workloads.sticky import Sticky

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = ["MixedOptions", "MixedClient", "workload"]


class MixedClient(DLedgerClient):
    read_fs = frozenset({"read", "sample"})

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        if op.f == "sample":
            return handle_sample(self, session, op)
        if is_register_op(op):
            return handle_register(self, session, op)
        if is_kv_set_op(op):
            return handle_kv_set(self, session, op)
        return handle_append(self, session, op)


@dataclass(frozen=True)
class MixedOptions(RegisterOptions, LogOptions):
    mixed_weights: tuple[float, ...] = option(
        (1.0, 1.0),
        "[append, register] or [append, register, archive, kv-set] non-negative weights",
    )
    sticky_ops: int = option(
        0, "kv ops a worker sends to the node that last answered it (0: never sticks)", minimum=0
    )
    sticky_fraction: float = option(
        0.5, "share of workers sticking at a time", minimum=0.0, maximum=1.0
    )


def _weights(options: MixedOptions) -> list[float]:
    w = options.mixed_weights
    if len(w) not in (2, 4) or not all(x >= 0 for x in w) or sum(w) <= 0:
        raise ConfigError(
            "must be [append, register] or [append, register, archive, kv-set] "
            f"non-negative numbers, got {w!r}",
            field="mixed_weights",
        )
    return [float(x) for x in w]


@declares_options(MixedOptions)
def workload(options: MixedOptions | Mapping[str, Any]) -> Workload:
    opts = as_options(MixedOptions, options, role="workload mixed")
    chunk = opts.read_chunk
    weights = _weights(opts)
    append = AppendGen(read_fraction=opts.read_fraction, chunk=chunk)
    kv: Generator = register_gen(opts)
    final: Generator = final_log_reads(chunk=chunk)
    names = ["linearizable", "log-safety"]
    gens: list[Generator] = [append]
    if len(weights) == 4:
        if weights[2] > 0:
            kv = mix([kv, ArchiveGen()], weights[1:3])
        kvset = KvSetGen()
        final = any_of([final, kvset.final_reads()])
        gens.append(kvset)
        weights = [weights[0], weights[3], weights[1] + weights[2]]
        names.append("set")
    gen: Generator = mix([*gens, kv], weights)
    if opts.sticky_ops:
        # Around the whole mix, so a failed read is retried as the worker's very next op.
        gen = Sticky(
            gen, ops=opts.sticky_ops, fraction=opts.sticky_fraction, applies=is_register_op
        )
    return Workload(
        name="mixed",
        client=MixedClient(read_timeout=opts.read_timeout),
        generator=gen,
        final_generator=final,
        checker={"model": "cas-register", "keys": True, "checks": checks(names, opts)},
        extra_workers=maybe_sampler_workers(opts),
    )
