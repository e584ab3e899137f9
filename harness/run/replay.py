"""Replay a recorded schedule: the same DB, workload, options and faults, N times.

``splitbrain replay`` and every candidate of ``splitbrain shrink`` come through here, so
"does it fail again?" is asked one way. A run is built from the schedule document alone
(its ``spec`` is test.json's): the spec's roles as any run builds them, the nemesis the
spec's faults (plus any kind the recorded ops use, e.g. a zoo profile's ``lull``) build
through the fault registry, and in place of the drawn schedule a
:class:`nemesis.recorded.RecordedSchedule` of the recorded faults; the final heal is the
package's as usual.

A replay *reproduces* when its verdict is INVALID with at least one anomaly kind of the
original (any INVALID when the original named none).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.nemesis import NemesisPackage
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.core.verdict import word
from harness.run.options import RunOptions, RunResult

__all__ = [
    "Overrides",
    "Outcome",
    "replay_spec",
    "recorded_package",
    "outcome_of",
    "reproduces",
    "summarize",
    "replay",
]


@dataclass(frozen=True)
class Overrides:
    """What a replay changes from the recording: the bug (``"none"``: the fixed node),
    DB options (``node_src=...``), and, for shrink candidates, time limit and rate."""

    bug: str | None = None
    db_options: Mapping[str, Any] = field(default_factory=dict)
    time_limit: float | None = None
    rate: float | None = None


def replay_spec(doc: Mapping[str, Any], over: Overrides, *, seed: int, name: str) -> TestSpec:
    """The spec of one replay run: the recording's, with the overrides applied."""
    spec = TestSpec.from_json(dict(doc["spec"]))
    options = dict(spec.options)
    if over.db_options:
        options["db"] = {**dict(options.get("db") or {}), **dict(over.db_options)}
    bug = spec.bug
    if over.bug is not None:
        bug = None if over.bug.lower() == "none" else over.bug
    return dataclasses.replace(
        spec,
        name=name,
        seed=seed,
        bug=bug,
        options=options,
        time_limit=float(over.time_limit if over.time_limit is not None else spec.time_limit),
        rate=float(over.rate if over.rate is not None else spec.rate),
    )


def _kinds_used(faults: Iterable[Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    for fault in faults:
        k = str(fault["kind"])
        if k not in out:
            out.append(k)
    return out


def recorded_package(
    spec: TestSpec, faults: Sequence[Mapping[str, Any]], *, time_limit: float | None = None
) -> NemesisPackage:
    """The spec's nemesis and final heal, driven by the recorded faults."""
    from nemesis.package import build_package, select
    from nemesis.recorded import RecordedSchedule, events_of

    names = list(spec.nemesis)
    have = set(select(names).kinds) if names else set()
    names += [k for k in _kinds_used(faults) if k not in have]
    rng = random.Random(spec.seed ^ 0x5EED)
    base = build_package(
        names, interval=spec.nemesis_interval, rng=rng, **_package_options(spec, names)
    )
    schedule = RecordedSchedule(events_of(faults, time_limit), rng=rng)
    return NemesisPackage(nemesis=base.nemesis, schedule=schedule, final_ops=base.final_ops)


def _package_options(spec: TestSpec, names: Sequence[str]) -> dict[str, Any]:
    """The spec's ``--nemesis-option`` keys that still apply (a fault's own keys need that
    fault selected; the drawn schedule's ``max_ops`` means nothing to a recorded one)."""
    from nemesis.package import option_keys

    known = set(option_keys())
    return {k: v for k, v in spec.nemesis_options.items() if k in known and k != "max_ops"}


@dataclass(frozen=True)
class Outcome:
    """One replay run, as the shrink ledger and ``--json`` keep it."""

    verdict: str
    kinds: tuple[str, ...]
    store_dir: str
    seconds: float
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "kinds": list(self.kinds),
            "store_dir": self.store_dir,
            "seconds": round(self.seconds, 1),
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Outcome:
        return cls(
            verdict=str(d["verdict"]),
            kinds=tuple(d.get("kinds") or ()),
            store_dir=str(d.get("store_dir") or ""),
            seconds=float(d.get("seconds") or 0.0),
            reason=d.get("reason"),
        )


def outcome_of(result: RunResult, seconds: float) -> Outcome:
    from harness.run.schedule_file import expected_kinds

    return Outcome(
        verdict=word(result.results.get("valid")),
        kinds=tuple(expected_kinds(result.results)),
        store_dir=str(result.store_dir),
        seconds=seconds,
        reason=result.reason,
    )


def reproduces(outcome: Outcome, expected: Sequence[str]) -> bool:
    """INVALID with an anomaly kind of the original (any INVALID if it named none)."""
    if outcome.verdict != "INVALID":
        return False
    return not expected or bool(set(outcome.kinds) & set(expected))


def summarize(outcomes: Sequence[Outcome], expected: Sequence[str]) -> dict[str, Any]:
    """``{"reproduced", "runs", "verdicts", "kinds"}``: the replay's answer."""
    kinds: dict[str, int] = {}
    for o in outcomes:
        for k in o.kinds:
            kinds[k] = kinds.get(k, 0) + 1
    return {
        "reproduced": sum(1 for o in outcomes if reproduces(o, expected)),
        "runs": len(outcomes),
        "verdicts": [o.verdict for o in outcomes],
        "kinds": kinds,
        "expected_kinds": list(expected),
        "store_dirs": [o.store_dir for o in outcomes],
    }


def replay(
    doc: Mapping[str, Any],
    hosts: Sequence[Host],
    *,
    times: int = 1,
    over: Overrides | None = None,
    store_root: str | Path = "store",
    name: str | None = None,
    options: RunOptions | None = None,
    faults: Sequence[Mapping[str, Any]] | None = None,
    on_run: Callable[[int, Outcome], None] | None = None,
) -> list[Outcome]:
    """Run the schedule ``times`` times in a row; stop early after a user interrupt.

    ``faults`` replaces the document's (a shrink candidate's subset); run i uses the
    recorded seed plus i (the workload's draws vary, the faults do not).
    """
    import time

    from harness.run.campaign import user_stopped
    from harness.run.runner import run_test

    over = over or Overrides()
    chosen = list(doc["faults"] if faults is None else faults)
    base = TestSpec.from_json(dict(doc["spec"]))
    opts = options or RunOptions(progress=False)
    node_names = {h.name for h in hosts}
    nodes = tuple(n for n in base.nodes if n in node_names) or tuple(h.name for h in hosts)
    out: list[Outcome] = []
    for i in range(times):
        spec = replay_spec(doc, over, seed=base.seed + i, name=name or f"{base.name}-replay")
        spec = dataclasses.replace(spec, nodes=nodes)
        package = recorded_package(spec, chosen, time_limit=spec.time_limit)
        started = time.monotonic()
        result = run_test(spec, hosts, store_root=store_root, options=opts, nemesis_package=package)
        o = outcome_of(result, time.monotonic() - started)
        out.append(o)
        if on_run is not None:
            on_run(i + 1, o)
        if user_stopped(result):
            raise KeyboardInterrupt("replay interrupted")
    return out
