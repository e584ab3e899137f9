"""Shrink a red run to a minimal failing schedule: ddmin over its faults, then time and rate.

Which of a run's 10-20 faults matter? Delta debugging (Zeller's ddmin) answers with real
runs: a candidate is a subset of the recorded faults (plus a time limit and a load rate),
replayed through :mod:`harness.run.replay`, and it *fails* when at least half of its K runs
are INVALID with an anomaly kind of the original (:func:`judge`). The search keeps a
1-minimal failing subset: removing any single fault of it makes it pass. Then the time
limit is cut to just after the last kept fault ends, and the load rate is halved while it
still fails.

Every candidate's time limit is already cut to its last fault's end plus ``recovery_s``
(:func:`candidate_time_limit`): faults after that point are not in the candidate, so the
load after them only costs time.

Resuming: every judged candidate is appended to ``RUN_DIR/shrunk/ledger.jsonl`` at once
(as the mutant ledger does). ddmin is deterministic given its oracle's answers, so a
restarted shrink replays the search from the ledger without running anything it already
ran, and goes on where it stopped; the budget counts the seconds the ledger records.

The algorithm (:func:`ddmin`) and the judging (:func:`judge`, :func:`candidate_time_limit`)
are pure; :func:`shrink` drives real runs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.core.errors import ConfigError
from harness.core.remote import Host
from harness.run.replay import Outcome, Overrides, replay, reproduces, summarize
from harness.run.schedule_file import SCHEDULE, fault_end_s, load_schedule
from nemesis.recorded import REPLAY_VERSION

__all__ = [
    "Exhausted",
    "ddmin",
    "judge",
    "candidate_time_limit",
    "ShrinkSettings",
    "Ledger",
    "shrink",
    "SHRUNK_DIR",
    "LEDGER",
]

SHRUNK_DIR = "shrunk"
LEDGER = "ledger.jsonl"

T = TypeVar("T")


class Exhausted(Exception):
    """The oracle's budget is spent: the search stops with the smallest failing set so far."""


def ddmin(items: Sequence[T], fails: Callable[[Sequence[T]], bool]) -> list[T]:
    """A 1-minimal subsequence of ``items`` for which ``fails`` holds (Zeller and
    Hildebrandt's ddmin; ``fails(items)`` is assumed true, order is kept).

    Split the current set into n chunks; keep a chunk that fails alone (n back to 2), else
    a complement that fails (n - 1), else split finer (2n), until n exceeds the set's size.
    When ``fails`` raises :class:`Exhausted` the current set is returned as it is.
    """
    current = list(items)
    n = 2
    try:
        while len(current) >= 2:
            chunks = _split(current, n)
            reduced = False
            for chunk in chunks:
                if fails(chunk):
                    current, n, reduced = chunk, 2, True
                    break
            if not reduced and n > 2:
                for i in range(len(chunks)):
                    complement = [x for j, c in enumerate(chunks) if j != i for x in c]
                    if fails(complement):
                        current, n, reduced = complement, max(n - 1, 2), True
                        break
            if not reduced:
                if n >= len(current):
                    break
                n = min(len(current), 2 * n)
        if len(current) == 1 and fails([]):
            current = []
    except Exhausted:
        pass
    return current


def _split(xs: list[T], n: int) -> list[list[T]]:
    """``xs`` in ``n`` contiguous chunks whose sizes differ by at most one."""
    out, start = [], 0
    for i in range(n):
        size = len(xs) // n + (1 if i < len(xs) % n else 0)
        out.append(xs[start : start + size])
        start += size
    return [c for c in out if c]


def judge(outcomes: Sequence[Outcome], expected: Sequence[str]) -> bool:
    """A candidate fails when at least half of its runs reproduce (INVALID with an
    anomaly kind of the original); no runs is no evidence, so it passes."""
    if not outcomes:
        return False
    hits = sum(1 for o in outcomes if reproduces(o, expected))
    return 2 * hits >= len(outcomes)


def candidate_time_limit(
    faults: Sequence[Mapping[str, Any]],
    *,
    original: float,
    hold: float,
    recovery_s: float,
    floor_s: float = 5.0,
) -> float:
    """Just after the last fault ends plus ``recovery_s``, never above the original (the
    load must still meet every kept fault) nor below ``floor_s``; whole tenths."""
    end = max((fault_end_s(f, hold) for f in faults), default=0.0)
    return round(min(original, max(floor_s, end + recovery_s)), 1)


@dataclass(frozen=True)
class ShrinkSettings:
    """What the ledger's answers depend on: a changed setting judges candidates anew."""

    runs_per_candidate: int = 1
    bug: str | None = None
    db_options: dict[str, Any] = field(default_factory=dict)
    recovery_s: float = 5.0
    replay_version: int = REPLAY_VERSION
    """How the replay aims faults (nemesis/recorded.py); another version judges anew."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Ledger:
    """``RUN_DIR/shrunk/ledger.jsonl``: one line per judged candidate, fsynced as written."""

    def __init__(self, path: Path, settings: ShrinkSettings) -> None:
        self.path = path
        self.settings = settings.to_json()
        self.entries: dict[str, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    d = json.loads(line)
                except ValueError:
                    continue  # torn by a kill mid-write
                if isinstance(d, dict) and d.get("settings") == self.settings and "key" in d:
                    self.entries[str(d["key"])] = d

    @property
    def seconds(self) -> float:
        return sum(float(e.get("seconds") or 0.0) for e in self.entries.values())

    @property
    def runs(self) -> int:
        return sum(len(e.get("outcomes") or ()) for e in self.entries.values())

    def append(self, entry: dict[str, Any]) -> None:
        entry = {**entry, "settings": self.settings}
        self.entries[str(entry["key"])] = entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())


def _key(ids: Sequence[int], time_limit: float, rate: float, tag: str = "candidate") -> str:
    return json.dumps([tag, sorted(ids), time_limit, rate])


def shrink(
    run_dir: Path,
    hosts: Sequence[Host],
    *,
    settings: ShrinkSettings,
    budget_s: float,
    fresh_runs: int = 5,
    lab: str | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Shrink ``run_dir``'s schedule; returns the ``--json`` document (see module doc)."""
    run_dir = Path(run_dir)
    doc = load_schedule(run_dir)
    expect = doc.get("expect") or {}
    if expect.get("verdict") is not False:
        raise ConfigError(
            f"{run_dir}: the run is not INVALID (verdict {expect.get('verdict')!r}); "
            "shrink needs a red run",
            field="run_dir",
        )
    expected = list(expect.get("anomaly_kinds") or ())
    spec = doc["spec"]
    original_tl, original_rate = float(spec["time_limit"]), float(spec["rate"])
    hold = float(spec.get("nemesis_interval") or 5.0)
    faults = list(doc["faults"])
    by_id = {int(f["id"]): f for f in faults}
    out_dir = run_dir / SHRUNK_DIR
    ledger = Ledger(out_dir / LEDGER, settings)
    store_root = out_dir / "runs"
    over = Overrides(bug=settings.bug, db_options=dict(settings.db_options))
    started = time.monotonic()
    tried = 0
    size = [len(faults)]
    from_ledger = [False]

    def left() -> float:
        return budget_s - ledger.seconds

    def run_candidate(
        ids: Sequence[int], time_limit: float, rate: float, times: int, tag: str
    ) -> list[Outcome]:
        nonlocal tried
        key = _key(ids, time_limit, rate, tag)
        cached = ledger.entries.get(key)
        if cached is not None:
            tried += 1
            from_ledger[0] = True
            return [Outcome.from_json(o) for o in cached["outcomes"]]
        from_ledger[0] = False
        if tag == "candidate" and left() <= 0:
            raise Exhausted()
        t = time.monotonic()
        chosen = [by_id[i] for i in ids]
        outs = replay(
            doc,
            hosts,
            times=times,
            over=Overrides(
                bug=over.bug, db_options=over.db_options, time_limit=time_limit, rate=rate
            ),
            store_root=store_root,
            name=f"{spec['name']}-shrink",
            faults=chosen,
        )
        ledger.append(
            {
                "key": key,
                "tag": tag,
                "faults": sorted(ids),
                "time_limit": time_limit,
                "rate": rate,
                "outcomes": [o.to_json() for o in outs],
                "failing": judge(outs, expected),
                "seconds": round(time.monotonic() - t, 1),
            }
        )
        tried += 1
        return outs

    def fails(
        ids: Sequence[int], time_limit: float | None = None, rate: float = original_rate
    ) -> bool:
        tl = time_limit
        if tl is None:
            tl = candidate_time_limit(
                [by_id[i] for i in ids],
                original=original_tl,
                hold=hold,
                recovery_s=settings.recovery_s,
            )
        outs = run_candidate(ids, tl, rate, settings.runs_per_candidate, "candidate")
        verdict = judge(outs, expected)
        if verdict:
            size[0] = min(size[0], len(ids))
        echo(
            f"shrink: candidate {tried}: {len(ids)} faults {sorted(ids)}, time limit {tl:g} s, "
            f"rate {rate:g}: {'FAILS' if verdict else 'passes'} "
            f"({sum(1 for o in outs if reproduces(o, expected))}/{len(outs)}) | smallest failing "
            f"{size[0]} | {max(0.0, left()) / 60:.1f} min left"
            + (" (from the ledger)" if from_ledger[0] else "")
        )
        return verdict

    echo(
        f"shrink: {run_dir}: {len(faults)} faults, time limit {original_tl:g} s, rate "
        f"{original_rate:g}; expected anomalies {', '.join(expected) or '(any INVALID)'}; "
        f"{settings.runs_per_candidate} run(s) per candidate; budget {budget_s / 60:.0f} min"
        + (f"; resuming, {len(ledger.entries)} candidates in the ledger" if ledger.entries else "")
    )
    kept_ids = ddmin([int(f["id"]) for f in faults], fails)
    kept = [by_id[i] for i in kept_ids]
    time_limit = candidate_time_limit(
        kept, original=original_tl, hold=hold, recovery_s=settings.recovery_s
    )
    rate = original_rate
    # The time limit: down to one second of recovery after the last kept fault.
    try:
        tight = candidate_time_limit(kept, original=original_tl, hold=hold, recovery_s=1.0)
        if tight < time_limit and fails(kept_ids, tight, rate):
            time_limit = tight
        # The load rate: halved while the candidate still fails.
        while rate >= 4 and fails(kept_ids, time_limit, round(rate / 2, 1)):
            rate = round(rate / 2, 1)
    except Exhausted:
        echo("shrink: budget spent; keeping the smallest failing schedule so far")
    shrunk = _shrunk_doc(doc, kept, time_limit, rate, run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SCHEDULE
    path.write_text(json.dumps(shrunk, indent=2) + "\n", encoding="utf-8")
    echo(
        f"shrink: {len(faults)} -> {len(kept)} faults, time limit {time_limit:g} s, rate "
        f"{rate:g}; {fresh_runs} fresh runs of {path}"
    )
    final = run_candidate(kept_ids, time_limit, rate, fresh_runs, "fresh")
    final_summary = summarize(final, expected)
    lab_part = f" --lab {lab}" if lab else ""
    command = f"splitbrain replay {path} --times {fresh_runs}{lab_part}"
    return {
        "run_dir": str(run_dir),
        "faults_before": len(faults),
        "faults_after": len(kept),
        "time_limit_before": original_tl,
        "time_limit_after": time_limit,
        "rate_before": original_rate,
        "rate_after": rate,
        "reproduced": final_summary["reproduced"],
        "runs": final_summary["runs"],
        "verdicts": final_summary["verdicts"],
        "kinds": final_summary["kinds"],
        "expected_kinds": expected,
        "candidates": sum(1 for e in ledger.entries.values() if e.get("tag") == "candidate"),
        "runs_spent": ledger.runs,
        "seconds_spent": round(ledger.seconds, 1),
        "wall_s_this_invocation": round(time.monotonic() - started, 1),
        "schedule": str(path),
        "kept": [_brief(f) for f in kept],
        "command": command,
    }


def _brief(f: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: f.get(k)
        for k in ("id", "kind", "offset_s", "duration_s", "role", "target", "nodes", "value")
    }


def _shrunk_doc(
    doc: Mapping[str, Any],
    kept: Sequence[Mapping[str, Any]],
    time_limit: float,
    rate: float,
    run_dir: Path,
) -> dict[str, Any]:
    """The shrunk schedule: the original's, with only the kept faults, time limit and rate."""
    spec = {**dict(doc["spec"]), "time_limit": time_limit, "rate": rate}
    return {
        **{k: v for k, v in doc.items() if k not in ("spec", "faults")},
        "spec": spec,
        "faults": list(kept),
        "shrunk_from": {
            "run_dir": str(run_dir),
            "faults": len(doc["faults"]),
            "time_limit": doc["spec"]["time_limit"],
            "rate": doc["spec"]["rate"],
        },
    }
