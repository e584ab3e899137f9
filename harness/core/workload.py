"""Client and generator protocols, and the bundle a workload hands the runner.

Data flows one way: a generator proposes an invocation, the runner records it,
a client performs it and returns the completion, the runner records that.
Generators never sleep and never touch the network: time comes from the
context, pacing is the runner's job, so schedules can be simulated in tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = [
    "Client",
    "DeclaresReads",
    "ExtraWorker",
    "Generator",
    "GenContext",
    "PENDING",
    "Workload",
    "client_timeout",
]


class _Pending:
    def __repr__(self) -> str:
        return "PENDING"


PENDING: Any = _Pending()
"""Returned by ``Generator.op`` when there is nothing to do yet; ask again later."""


@runtime_checkable
class Client(Protocol):
    def open(self, ctx: RunContext, node: str) -> Client:
        """A new client bound to ``node``. Must not change any data."""
        ...

    def setup(self, ctx: RunContext) -> None: ...

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        """Perform ``op`` (an invocation); return its completion (ok, fail or info).

        A timeout or a lost connection is ``info``: the op may have happened.
        """
        ...

    def teardown(self, ctx: RunContext) -> None: ...

    def close(self, ctx: RunContext) -> None: ...


@runtime_checkable
class DeclaresReads(Protocol):
    """A client that says which of its ops change nothing.

    During a lull the runner holds every op whose ``f`` is not in ``read_fs``;
    a client that does not declare it is taken to have only ``read``.
    """

    read_fs: frozenset[str]


@dataclass
class GenContext:
    time_ns: int
    process: int
    worker: int
    node: str
    rng: random.Random
    nodes: list[str] = field(default_factory=list)
    lull: bool = False
    """A lull is on (harness/core/traffic.py): writes are held, so propose reads if you can."""


@runtime_checkable
class Generator(Protocol):
    def op(self, ctx: GenContext) -> Op | None | Any:
        """The next invocation for this worker, ``PENDING``, or None when exhausted."""
        ...

    def update(self, ctx: GenContext, event: Op) -> None:
        """Learn of a completion (e.g. to track keys or payloads)."""
        ...


@dataclass
class ExtraWorker:
    """A dedicated worker outside the client pool, e.g. one status sampler per node.

    The runner drives it exactly like a pool worker (open ``client`` on ``node``,
    ask ``generator``, record, invoke, record, update) with three differences:
    its process ids are ``process_base + k * process_stride`` (k = 0, 1, ... bumped
    after each ``info``), it is not paced by the test's rate (its generator
    returns ``PENDING`` until its own next due time, so poll it every few ms),
    and it runs from the start of the client phases (warm-up, faults, heal,
    recovery) until final reads begin, when the runner stops asking it.
    """

    name: str
    node: str
    generator: Generator
    client: Client
    process_base: int
    process_stride: int = 1000


@dataclass
class Workload:
    """A workload's partial test: its client, its main and final generators, checker options."""

    name: str
    client: Client
    generator: Generator
    final_generator: Generator | None = None
    checker: dict[str, Any] = field(default_factory=dict)
    """What the checker runs: ``checks`` (registered checker names: ``linearizable``,
    ``log-safety``, ``queue``, ``total-queue``, ``set``; absent: all that claim ops),
    ``model``, ``model_params``, ``keys`` (per-key linearizability), ``cap`` and
    ``options`` (``{checker: {...}}``). What the DB adds (mode ha's loss window) is the DB's
    to declare; the run layer merges both (harness/run/roles.py ``checker_options``)."""
    extra_workers: Callable[[Sequence[str]], list[ExtraWorker]] | None = None
    """Given the test's nodes, the dedicated workers to run beside the pool (optional)."""


def client_timeout(ctx: RunContext) -> float:
    """The run's one client timeout (``--client-timeout``, ``TestSpec.client_timeout``).

    A client that is not given its own timeout reads it here when it is opened, so the
    deadline of its calls and the runner's watchdog agree.
    """
    from harness.core.spec import DEFAULT_CLIENT_TIMEOUT

    spec = getattr(ctx, "spec", None)
    return float(getattr(spec, "client_timeout", DEFAULT_CLIENT_TIMEOUT))
