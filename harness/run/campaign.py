"""Many runs in a row: ``splitbrain run --test-count N`` and the zoo share this loop.

Both run a list of tests one after another against the same hosts, report each
as it finishes, stop at once when the user interrupts one (a Ctrl-C means "no
further runs", not "skip this one"), and judge the whole by its worst run. Only
what they print and how they tabulate differs, so that is the caller's
``on_result``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.core.nemesis import NemesisPackage
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.core.verdict import EXIT_INVALID, EXIT_UNKNOWN, worst_exit_code
from harness.run.options import RunOptions, RunResult
from harness.run.runner import run_test

__all__ = [
    "PlannedRun",
    "CampaignRun",
    "run_campaign",
    "seeded",
    "user_stopped",
    "campaign_exit_code",
]


@dataclass(frozen=True)
class PlannedRun:
    """One test of a campaign; ``package`` builds its nemesis package just before it runs."""

    spec: TestSpec
    package: Callable[[], NemesisPackage] | None = None
    tag: Any = None
    """The caller's own label for the run (the zoo's target and run number)."""


@dataclass(frozen=True)
class CampaignRun:
    """A finished run: what was planned, what came back, and how long it took."""

    number: int
    """1-based position in the campaign."""
    planned: PlannedRun
    result: RunResult
    seconds: float

    @property
    def spec(self) -> TestSpec:
        return self.planned.spec


def seeded(spec: TestSpec, count: int, base_seed: int) -> list[PlannedRun]:
    """``count`` runs of ``spec``; run i has seed ``base_seed + i``, so run i is reproducible alone."""
    return [PlannedRun(replace(spec, seed=base_seed + i)) for i in range(count)]


def user_stopped(result: RunResult) -> bool:
    """Whether the user interrupted this run (rather than it failing on its own)."""
    return bool(result.interrupted and (result.reason or "").startswith("interrupted"))


def run_campaign(
    plan: Iterable[PlannedRun],
    hosts: Sequence[Host],
    *,
    store_root: str | Path = "store",
    options: RunOptions | None = None,
    on_result: Callable[[CampaignRun], None] | None = None,
) -> list[CampaignRun]:
    """Run the plan in order, calling ``on_result`` after each; stop after a user interrupt.

    ``plan`` is consumed lazily, so a caller may build each spec when its turn comes.
    """
    done: list[CampaignRun] = []
    for number, planned in enumerate(plan, 1):
        started = time.monotonic()
        package = planned.package() if planned.package is not None else None
        result = run_test(
            planned.spec, hosts, store_root=store_root, options=options, nemesis_package=package
        )
        run = CampaignRun(
            number=number, planned=planned, result=result, seconds=time.monotonic() - started
        )
        done.append(run)
        if on_result is not None:
            on_result(run)
        if user_stopped(result):
            break
    return done


def campaign_exit_code(runs: Sequence[CampaignRun], *, fail_on_unknown: bool = False) -> int:
    """The worst run's exit code; with ``fail_on_unknown``, an undecided run counts as failed."""
    codes = [r.result.exit_code for r in runs]
    if fail_on_unknown:
        codes = [EXIT_INVALID if c == EXIT_UNKNOWN else c for c in codes]
    return worst_exit_code(codes)
