"""Client and generator protocols, and the bundle a workload hands the runner.

Data flows one way: a generator proposes an invocation, the runner records it,
a client performs it and returns the completion, the runner records that.
Generators never sleep and never touch the network: time comes from the
context, pacing is the runner's job, so schedules can be simulated in tests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.history import Op
    from harness.test import RunContext

__all__ = ["Client", "Generator", "GenContext", "PENDING", "Workload"]


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


@dataclass
class GenContext:
    time_ns: int
    process: int
    worker: int
    node: str
    rng: random.Random
    nodes: list[str] = field(default_factory=list)


@runtime_checkable
class Generator(Protocol):
    def op(self, ctx: GenContext) -> Op | None | Any:
        """The next invocation for this worker, ``PENDING``, or None when exhausted."""
        ...

    def update(self, ctx: GenContext, event: Op) -> None:
        """Learn of a completion (e.g. to track keys or payloads)."""
        ...


@dataclass
class Workload:
    """A workload's partial test: its client, its main and final generators, checker options."""

    name: str
    client: Client
    generator: Generator
    final_generator: Generator | None = None
    checker: dict[str, Any] = field(default_factory=dict)
