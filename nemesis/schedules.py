"""Pieces every fault schedule is built from, so the stock one and the scripted ones agree.

A schedule is pure: ``next(ctx)`` answers at once with ``(wait, fault)`` and
never sleeps. The runner does the waiting (cut short when the load stops), so a
schedule can be stepped in a unit test without a clock, and a stop is never
stuck behind a sleep inside fault code.

A scripted fault sequence is a list of :class:`Step` (plain data: the wait
before, the op's ``f``, its value). A value that depends on the cluster when
the step lands (who leads *now*) is a builder called then; a builder that
finds the cluster not ready yet answers :class:`Retry`, and
:class:`StepSchedule` asks again after that many seconds, through the runner's
wait like any other.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from harness.core.errors import NemesisError
from harness.core.history import NEMESIS, Op
from nemesis.base import leader_now

if TYPE_CHECKING:
    from harness.core.nemesis import PlannedFault
    from harness.core.spec import RunContext

__all__ = [
    "POLL_S",
    "Retry",
    "Builder",
    "Step",
    "StepSchedule",
    "fault_op",
    "start",
    "stop",
    "scaled",
    "heal_ops",
    "now_s",
    "leader_within",
]

POLL_S = 0.2
"""How soon a step that is not ready asks again (an election here takes 1-6 s)."""


@dataclass(frozen=True)
class Retry:
    """A builder's "not yet": land this step ``after`` seconds from now instead."""

    after: float


Builder: TypeAlias = "Callable[[RunContext], dict[str, Any] | Retry]"
"""Computes a step's value when it lands; :class:`Retry` puts the step off."""


class Step(NamedTuple):
    """One scripted fault: the wait before it, the op's ``f``, its value or builder."""

    wait: float
    f: str
    value: dict[str, Any] | Builder | None


def fault_op(f: str, value: Any = None) -> Op:
    return Op(type="invoke", process=NEMESIS, f=f, value=value)


def start(wait: float, kind: str, value: dict[str, Any] | Builder) -> Step:
    return Step(wait, f"start-{kind}", value)


def stop(wait: float, kind: str) -> Step:
    return Step(wait, f"stop-{kind}", None)


def scaled(rng: random.Random, base: float, lo: float, hi: float) -> float:
    """``base`` times a uniform draw from [lo, hi]: every schedule's jittered wait.

    One draw per call, in call order, so a seed gives the same waits as long as
    the calls come in the same order.
    """
    return base * rng.uniform(lo, hi)


def heal_ops(kinds: Iterable[str]) -> list[Op]:
    """``stop-<kind>`` for every kind, in the registry's heal order: what ends every run's faults.

    The order is the faults' ``heal_rank`` (nemesis/registry.py): whole guests first (nothing
    else reaches a guest that is off or paused), then the network, so nodes that resume or
    restart reach their peers at once; the rolling upgrade last. A kind no fault registers
    is a NemesisError, never dropped: a fault left out of the final heal outlives the run.
    """
    from nemesis import registry

    enabled = set(kinds)
    reg = registry.registry()
    order = reg.heal_order
    unknown = sorted(enabled - set(order))
    if unknown:
        raise NemesisError(
            f"no registered fault heals {', '.join(unknown)}; known kinds: {', '.join(order)}"
        )
    values: dict[str, Any] = {}
    for f in reg.faults.values():
        if f.heal_value is not None:
            values[f.kind] = dict(f.heal_value)
    return [fault_op(f"stop-{k}", values.get(k)) for k in order if k in enabled]


def now_s(ctx: RunContext) -> float:
    """Seconds since the test started, on the history's clock (the one the ops are stamped with)."""
    return ctx.history.now() / 1e9


def leader_within(
    ctx: RunContext,
    rng: random.Random,
    among: Sequence[str] | None,
    deadlines: dict[str, float],
    key: str,
    within: float = 0.0,
) -> str | None | Retry:
    """Who leads now (one of ``among``), by the DB's own account, without waiting for one.

    With ``within`` > 0 and nobody leading, the answer is :class:`Retry` until
    ``within`` seconds have passed since the first ask (its deadline kept in
    ``deadlines[key]``, on the history clock); then None. A DB that cannot say
    answers None at once: asking again would not change that.
    """
    try:
        leaders = leader_now(ctx, rng, among)
    except NemesisError:
        return None
    except Exception:  # a node that cannot answer is no leader; the profile goes on
        leaders = []
    if leaders:
        deadlines.pop(key, None)
        return leaders[0]
    if within <= 0:
        return None
    now = now_s(ctx)
    if now >= deadlines.setdefault(key, now + within):
        deadlines.pop(key, None)
        return None
    return Retry(POLL_S)


class StepSchedule:
    """Plays steps in order, taking more from :meth:`more` when they run out.

    A builder answering :class:`Retry` makes the runner skip that landing
    (the planned fault returns None), and the same step comes back from the
    next ``next(ctx)`` with the retry's wait; the steps after it wait their turn.
    """

    def __init__(self) -> None:
        self.pending: list[Step] = []
        self.retry: tuple[float, Step] | None = None

    def more(self, ctx: RunContext) -> Sequence[Step]:
        """The next steps; empty when the schedule is over."""
        return ()

    def next(self, ctx: RunContext) -> tuple[float, PlannedFault] | None:
        if self.retry is not None:
            (wait, step), self.retry = self.retry, None
            return wait, self._planned(step)
        if not self.pending:
            self.pending = list(self.more(ctx))
            if not self.pending:
                return None
        step = self.pending.pop(0)
        return step.wait, self._planned(step)

    def _planned(self, step: Step) -> PlannedFault:
        value = step.value
        if not callable(value):
            return fault_op(step.f, value)
        make = value

        def at_landing(ctx: RunContext) -> Op | None:
            v = make(ctx)
            if isinstance(v, Retry):
                self.retry = (v.after, step)
                return None
            return fault_op(step.f, v)

        return at_landing
