"""A workload that touches nothing: every op is ``ok`` at once.

It measures the harness alone (``splitbrain bench harness``) and drives runner
tests that need no cluster: whatever rate it reaches is the ceiling of the
runner, the validation wrappers and the live history, not of any database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core.history import Op
from harness.core.options import as_options, declares_options
from harness.core.spec import RunContext
from harness.core.workload import GenContext, Workload
from workloads.options import NoOptions

__all__ = ["NullClient", "CountingGenerator", "workload"]


class NullClient:
    """Answers every op ``ok`` with its own value."""

    read_fs = frozenset({"read"})

    def open(self, ctx: RunContext, node: str) -> NullClient:
        return self

    def setup(self, ctx: RunContext) -> None:
        pass

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        return op.complete("ok", op.value)

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        pass


class CountingGenerator:
    """Unique appends forever (or ``limit`` of them): a generator with no logic to speak of."""

    def __init__(self, limit: int | None = None, f: str = "append") -> None:
        self.n = 0
        self.limit = limit
        self.f = f

    def op(self, ctx: GenContext) -> Op | None:
        if self.limit is not None and self.n >= self.limit:
            return None
        self.n += 1
        return Op(
            type="invoke",
            process=ctx.process,
            f=self.f,
            value={"payload": f"p{self.n}"},
            node=ctx.node,
        )

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


@declares_options(NoOptions)
def workload(options: NoOptions | Mapping[str, Any]) -> Workload:
    as_options(NoOptions, options, role="workload null")
    return Workload(name="null", client=NullClient(), generator=CountingGenerator())
