"""The status sampler: every node's role, term and water marks at a fixed rate.

Samples feed the invariants that need a node's own view over time (committed
monotonic per incarnation, one leader per term, terms never going back), and the
membership checks (docs/membership.md M14): a sample names the member that answered
(``member``: a host re-added wiped runs a new member, whose term starts again at 0)
and the configuration in force on it (``config``), so the checker can key each
invariant by member and tell a removed member's stale view from the cluster's. Each
node gets a dedicated :class:`~harness.core.workload.ExtraWorker` whose process ids are
``1_000_000 + i + k*1000`` (node i, k bumped after each info), and whose
generator throttles itself to ``sample_rate`` per second by the context clock.

A timeout or a refused connection is ``info``: the node is down or cut off,
which is exactly what the sample shows; the runner then moves that worker on to
its next process id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.options import as_options, declares_options
from harness.core.workload import ExtraWorker, GenContext, Generator, Workload
from workloads.dledger_client import DLedgerClient, Session, jsonable
from workloads.generator import OpFn, each_node, idle, invoke, once, repeat, throttle
from workloads.options import SampleOptions, SamplerOptions

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = [
    "SAMPLER_PROCESS_BASE",
    "SAMPLER_PROCESS_STRIDE",
    "SAMPLE_KEYS",
    "SamplerClient",
    "sample_value",
    "handle_sample",
    "sampler_generator",
    "sampler_workers",
    "maybe_sampler_workers",
    "workload",
]

SAMPLER_PROCESS_BASE = 1_000_000
SAMPLER_PROCESS_STRIDE = 1000
SAMPLE_KEYS = (
    "role",
    "term",
    "leader",
    "begin",
    "end",
    "committed",
    "incarnation",
    "member",
    "config",
)
DEFAULT_SAMPLE_TIMEOUT = 1.0


def sample_value(status: Mapping[str, Any]) -> dict[str, Any]:
    """The history's sample value from a ``status`` reply."""
    return jsonable(
        {
            "role": status.get("role"),
            "term": status.get("term"),
            "leader": status.get("leader"),
            "begin": status.get("ledgerBeginIndex"),
            "end": status.get("ledgerEndIndex"),
            "committed": status.get("committedIndex"),
            "incarnation": status.get("incarnation"),
            "member": status.get("id"),
            "config": _config(status.get("config")),
        }
    )


def _config(view: Any) -> dict[str, Any] | None:
    """The configuration in force on the node, by member id only (the addresses would
    triple a sample's size and no check reads them); null when the node has none (mode
    ha)."""
    if not isinstance(view, Mapping):
        return None
    return {
        "voters": sorted(map(str, view.get("voters") or ())),
        "learners": sorted(map(str, view.get("learners") or ())),
        "index": view.get("configIndex"),
    }


def handle_sample(client: DLedgerClient, session: Session, op: Op) -> Op:
    """One status sample of the op's node (the host: the reply's ``member`` says which
    member answered, so a sample straddling a re-addition is still attributed)."""
    node = client.target(op)
    res = session.call(node, lambda c: c.status(), follow=False)
    if res.exc is not None:
        return op.complete("info", None, error=f"{type(res.exc).__name__}: {res.exc}").replace(
            node=node
        )
    reply = res.reply or {}
    if reply.get("code") != "SUCCESS":
        return op.complete("fail", None, error=str(reply.get("code"))).replace(node=node)
    return op.complete("ok", sample_value(reply)).replace(node=node)


class SamplerClient(DLedgerClient):
    read_fs = frozenset({"sample"})

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        if op.f != "sample":
            raise ValueError(f"sampler client cannot do {op.f!r}")
        return handle_sample(self, session, op)


def _sample_op(node: str) -> OpFn:
    def fn(ctx: GenContext) -> Op:
        return invoke(ctx, "sample", None, node=node)

    return fn


def sampler_generator(node: str, rate: float) -> Generator:
    """Samples of ``node``, at most ``rate`` per second, forever (the runner stops it)."""
    return throttle(rate, repeat(_sample_op(node)))


def sampler_workers(
    nodes: Sequence[str], *, rate: float = 10.0, timeout: float = DEFAULT_SAMPLE_TIMEOUT
) -> list[ExtraWorker]:
    client = SamplerClient(timeout=timeout)
    return [
        ExtraWorker(
            name=f"sampler-{node}",
            node=node,
            generator=sampler_generator(node, rate),
            client=client,
            process_base=SAMPLER_PROCESS_BASE + i,
            process_stride=SAMPLER_PROCESS_STRIDE,
        )
        for i, node in enumerate(nodes)
    ]


ExtraWorkers = Callable[[Sequence[str]], list[ExtraWorker]]


def maybe_sampler_workers(options: SampleOptions) -> ExtraWorkers | None:
    """The ``extra_workers`` hook for a workload: samplers unless ``sampler=false``."""
    if isinstance(options, SamplerOptions) and not options.sampler:
        return None
    rate, timeout = options.sample_rate, options.sample_timeout

    def extra(nodes: Sequence[str]) -> list[ExtraWorker]:
        return sampler_workers(nodes, rate=rate, timeout=timeout)

    return extra


@declares_options(SampleOptions)
def workload(options: SampleOptions | Mapping[str, Any]) -> Workload:
    """Samplers only: pool workers idle, one last sample of every node at the end."""
    opts = as_options(SampleOptions, options, role="workload sampler-only")
    return Workload(
        name="sampler-only",
        client=SamplerClient(timeout=opts.sample_timeout),
        generator=idle(),
        final_generator=each_node(lambda node: once(_sample_op(node))),
        checker={"model": None, "checks": ["log-safety"]},
        extra_workers=maybe_sampler_workers(opts),
    )
