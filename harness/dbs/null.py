"""A DB with nothing to install: for runs that measure or test the harness alone."""

from __future__ import annotations

from harness.core.db import WorkloadChoice
from harness.core.spec import RunContext

__all__ = ["NullDB"]


class NullDB:
    def default_workload(self) -> WorkloadChoice:
        return WorkloadChoice(name="null")

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {"client": {n: (ctx.hosts[n].address, 0) for n in ctx.nodes}}

    def setup(self, ctx: RunContext, node: str) -> None:
        pass

    def teardown(self, ctx: RunContext, node: str) -> None:
        pass
