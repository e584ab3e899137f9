"""What a nemesis is: the contract between fault schedules, the runner and fault code.

A nemesis turns a nemesis invocation (``process="nemesis"``, ``f`` like
``start-partition``) into real damage and answers with an ``info`` completion
whose value says what was actually done. Every fault has a cure: ``stop-<kind>``
ops heal one kind, and ``teardown`` heals everything and must reach every host
even when some are unreachable, because a fault left behind poisons the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from harness.core.op import Op

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = [
    "Nemesis",
    "NemesisSchedule",
    "NemesisPackage",
    "PlannedFault",
    "null_package",
    "FaultJournal",
]


@runtime_checkable
class Nemesis(Protocol):
    def setup(self, ctx: RunContext) -> None:
        """Heal whatever an earlier run left behind, and check the fault can be applied."""
        ...

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        """Apply ``op``; return its ``info`` completion, value = what was done."""
        ...

    def teardown(self, ctx: RunContext) -> None:
        """Heal everything. Idempotent; logs per-host errors instead of raising."""
        ...

    def fs(self) -> set[str]:
        """The ``f`` values this nemesis handles."""
        ...


class FaultJournal(Protocol):
    """Where a fault is written down before it lands, and struck out once healed.

    A harness killed outright runs no cleanup; whatever it had applied is then
    either healed or in the journal, and the next command undoes it (nemesis/journal.py
    has the format; each entry kind, and its undo, is a ``JournalKind`` registered with the
    fault that writes it, harness/core/fault.py). The runner sets it as ``ctx.journal``.
    """

    def note(self, node: str, kind: str, key: str, undo: Mapping[str, Any], what: str = "") -> None:
        """Durably record a fault on ``node`` (returns once it is on disk)."""
        ...

    def clear(self, node: str, kind: str, key: str) -> None: ...


PlannedFault: TypeAlias = "Op | Callable[[RunContext], Op | None]"
"""A fault to apply after a wait: the op itself, or a function building it when it lands.

A fault aimed at whoever leads *when it lands* must not be computed seconds
earlier; its builder may return None to skip that one.
"""


@runtime_checkable
class NemesisSchedule(Protocol):
    def next(self, ctx: RunContext) -> tuple[float, PlannedFault] | None:
        """``(seconds to wait, fault)``, or None when the schedule is over."""
        ...


@dataclass
class NemesisPackage:
    """What the runner drives: a nemesis, its schedule, and the ops that heal at the end.

    Each fault ships its cure (Jepsen's combined packages): ``final_ops`` are
    applied once the load stops, before the recovery wait and the final reads.
    """

    nemesis: Nemesis
    schedule: NemesisSchedule
    final_ops: list[Op] = field(default_factory=list)


class _NoFaults:
    def setup(self, ctx: RunContext) -> None:
        pass

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        return op.complete("info", value=op.value)

    def teardown(self, ctx: RunContext) -> None:
        pass

    def fs(self) -> set[str]:
        return set()

    def next(self, ctx: RunContext) -> None:
        return None


def null_package() -> NemesisPackage:
    """No faults: for runs with an empty --nemesis, and for benchmarks."""
    none = _NoFaults()
    return NemesisPackage(nemesis=none, schedule=none)
