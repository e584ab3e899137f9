"""``start-lull`` / ``stop-lull``: the clients stop writing for a while, and keep reading.

Not damage to the cluster but to its traffic, so it acts on the run's own
write gate (harness/core/traffic.py) instead of a host: the runner holds every
non-read op while the gate is closed, and lull-aware generators propose reads
instead. Healing opens the gate; teardown always does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.errors import NemesisError
from harness.core.fault import Fault
from nemesis.base import completion

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = ["LullNemesis", "LULL"]


class LullNemesis:
    def fs(self) -> set[str]:
        return {"start-lull", "stop-lull"}

    def setup(self, ctx: RunContext) -> None:
        ctx.writes.release()

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        if op.f == "start-lull":
            ctx.writes.hold()
            return completion(op, {**dict(op.value or {}), "writes": "held"})
        if op.f == "stop-lull":
            ctx.writes.release()
            return completion(op, {"writes": "flowing"})
        raise NemesisError(f"lull nemesis cannot handle {op.f!r}")

    def teardown(self, ctx: RunContext) -> None:
        ctx.writes.release()


LULL = Fault(
    name="lull",
    nemesis=lambda chosen: LullNemesis(),
    heal_rank=90,
    targets="cluster",
    colour="#adb5bd",
    doc="the clients' writes held (reads go on): the cluster is quiet, not broken",
)
