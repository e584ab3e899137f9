"""The mixed workload: the append log and the kv registers on one cluster at once.

Ops keep their own workloads' shapes; the client tells them apart by ``key``:
register ops carry one (``k0``...), log ops do not. Weights come from
``mixed_weights`` ([append, register], default [1, 1]).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError
from harness.core.workload import Workload
from workloads.append import DEFAULT_CHUNK, AppendGen, final_log_reads, handle_append
from workloads.dledger_client import DEFAULT_TIMEOUT, DLedgerClient, Session
from workloads.generator import mix
from workloads.options import opt_float, opt_int
from workloads.register import handle_register, register_gen
from workloads.sampler import handle_sample, maybe_sampler_workers

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = ["MixedClient", "workload"]


class MixedClient(DLedgerClient):
    read_fs = frozenset({"read", "sample"})

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        if op.f == "sample":
            return handle_sample(self, session, op)
        if op.key is not None:
            return handle_register(self, session, op)
        return handle_append(self, session, op)


def _weights(options: Mapping[str, Any]) -> list[float]:
    w = options.get("mixed_weights", [1, 1])
    if (
        not isinstance(w, (list, tuple))
        or len(w) != 2
        or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in w)
        or sum(w) <= 0
    ):
        raise ConfigError(
            f"must be [append, register] non-negative numbers, got {w!r}", field="mixed_weights"
        )
    return [float(x) for x in w]


def workload(options: Mapping[str, Any]) -> Workload:
    chunk = opt_int(options, "read_chunk", DEFAULT_CHUNK, minimum=1)
    gen = mix(
        [
            AppendGen(
                read_fraction=opt_float(options, "read_fraction", 0.1, maximum=1.0), chunk=chunk
            ),
            register_gen(options),
        ],
        _weights(options),
    )
    return Workload(
        name="mixed",
        client=MixedClient(
            timeout=opt_float(options, "client_timeout", DEFAULT_TIMEOUT, positive=True)
        ),
        generator=gen,
        final_generator=final_log_reads(chunk=chunk),
        checker={
            "model": "cas-register",
            "independent": True,
            "checks": ["linearizable", "log-safety", "samples"],
        },
        extra_workers=maybe_sampler_workers(options),
    )
