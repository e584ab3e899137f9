"""Coverage that steers: the deck's spare time goes to the situations not reached yet.

The default campaign plays its deck once, shuffled by the seed, and a situation the
coverage report names is often not reached: "clock jump during a lease" was missed in
15 of 25 default runs (issue 42), and where it was missed ``wallclock-lease`` escaped.
So once the pass is over, and while the run's time limit leaves room, the schedule asks
:class:`Steering` for one more script: it reads the history written so far, computes
which situations the history and the samples can show are still at 0
(:mod:`checker.situations`), adds those missed by most earlier runs of the same test in
the store (situations only the node logs show, which this run cannot see before its
end), and plays a script built to reach one of them (:data:`REACHES`). Each situation
gets at most :data:`TRIES` steered scripts; when none is left to try, the load ends.

What was steered, and for what, is recorded (``results.json`` → ``run.deck.steered``);
a situation still unreached at the end says why (:func:`why_unreached`): no script of
this deck reaches it, its scripts were left out, time ran out, or they played and it
did not happen. Replays are unaffected: ``schedule.json`` records every fault as it
landed, steered or not.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.core.op import Op
    from harness.core.spec import RunContext

__all__ = ["REACHES", "TRIES", "Steering", "earlier_unreached", "why_unreached"]

log = logging.getLogger(__name__)

REACHES: Mapping[str, tuple[str, ...]] = {
    "concurrent-candidates": ("elections", "restart-all", "crash"),
    "split-vote": ("elections", "restart-all", "crash"),
    "voter-asked-twice": ("elections", "rejoin", "restart-all"),
    "leaderless-term": ("elections", "restart-all", "crash"),
    "deposed-leader-with-clients": ("stopped-leader", "deposed-crash", "lease"),
    "read-from-non-leader": ("stopped-leader", "lease", "deposed-crash"),
    "read-to-deposed-leader": ("stopped-leader", "lease", "deposed-crash"),
    "read-refused-by-leader": ("stopped-leader", "deposed-crash", "lease"),
    "resumed-after-successor-commit": ("stopped-leader", "rejoin", "figure8"),
    "kill-with-ops-in-flight": ("crash", "rolling", "deposed-crash"),
    "whole-cluster-restart": ("restart-all", "crash"),
    "follower-truncation": ("deposed-crash", "figure8", "lag"),
    "healed-minority-uncommitted": ("deposed-crash", "figure8", "overlap"),
    "clock-jump-on-leader": ("lease", "clock-split"),
}
"""Situation → the scripts built to reach it, the likeliest first (from the scripts'
own designs, docs/zoo.md "The fault scripts")."""

TRIES = 2
"""Steered scripts per situation before it is given up for this run."""


def _ops_so_far(path: Path) -> list[Op]:
    """The history written so far; a line being written (no newline yet) is left out."""
    from harness.core.jsonl import parse_op

    out: list[Op] = []
    try:
        data = path.read_bytes()
    except OSError:
        return out
    for lineno, raw in enumerate(data.split(b"\n")[:-1], 1):
        try:
            out.append(parse_op(json.loads(raw), path=path, line=lineno))
        except Exception:  # noqa: BLE001 - a line the checker will judge; not steering's job
            continue
    return out


def live_unreached(ops: Iterable[Op], nodes: Sequence[str]) -> list[str]:
    """The situations the history and samples can show that are still at 0."""
    from checker.situations import coverage, observed_from

    cov = coverage(observed_from(ops, nodes=nodes))
    unobservable = cov.get("unobservable") or {}
    return [
        name
        for name, entry in cov.items()
        if isinstance(entry, Mapping) and "count" in entry
        and not entry.get("count") and name not in unobservable
    ]  # fmt: skip


def earlier_unreached(store_dir: str | Path, *, limit: int = 20) -> tuple[dict[str, int], int]:
    """Over the latest ``limit`` earlier runs of this test (sibling run directories in
    the store), how many left each situation unreached; and how many runs were read."""
    here = Path(store_dir)
    runs = sorted(
        (p for p in here.parent.iterdir() if p.is_dir() and p != here and not p.is_symlink()),
        reverse=True,
    )[:limit] if here.parent.is_dir() else []  # fmt: skip
    missed: dict[str, int] = {}
    read = 0
    for run in runs:
        try:
            cov = json.loads((run / "results.json").read_text()).get("coverage")
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(cov, Mapping):
            continue
        read += 1
        by_design = cov.get("by_design") or {}
        for name, entry in cov.items():
            counted = isinstance(entry, Mapping) and "count" in entry
            if counted and name not in by_design and not entry.get("count"):
                missed[name] = missed.get(name, 0) + 1
    return missed, read


class Steering:
    """Picks the scripts the deck plays after its pass, for the situations unreached."""

    def __init__(self, scripts: Sequence[str], *, by_design: Iterable[str] = ()) -> None:
        self.scripts = tuple(scripts)
        self.by_design = frozenset(by_design)
        self.tries: dict[str, int] = {}
        self.steered: list[dict[str, Any]] = []
        """Each steered script: ``{"script", "for": [situations], "at_s"}``."""
        self._earlier: tuple[dict[str, int], int] | None = None

    def targets(self, ctx: RunContext) -> list[str]:
        """What to aim at now: the live-unreached situations, then those missed by most
        earlier runs (which this run cannot see before its node logs are read)."""
        if self._earlier is None:
            try:
                self._earlier = earlier_unreached(ctx.store_dir)
            except OSError:
                self._earlier = ({}, 0)
        missed, read = self._earlier
        live = live_unreached(_ops_so_far(Path(ctx.history.path)), list(ctx.nodes))
        from checker.situations import SITUATIONS

        history_seen = {
            s.name for s in SITUATIONS if any(alt <= {"history", "samples"} for alt in s.needs)
        }
        often = [
            name for name, n in sorted(missed.items(), key=lambda kv: -kv[1])
            if read and 2 * n >= read and name not in history_seen
        ]  # fmt: skip
        declared = getattr(ctx.db, "unreachable_situations", None)
        by_design = self.by_design | set(declared if isinstance(declared, Mapping) else ())
        return [t for t in dict.fromkeys([*live, *often]) if t not in by_design]

    def next_script(self, ctx: RunContext) -> str | None:
        """The next script to play, or None: nothing unreached that a script could still try."""
        try:
            targets = self.targets(ctx)
        except Exception as e:  # noqa: BLE001 - steering must never cost the run its load
            log.warning("steering: coverage so far unreadable: %s: %s", type(e).__name__, e)
            return None
        played = [s["script"] for s in self.steered]
        for target in targets:
            if self.tries.get(target, 0) >= TRIES:
                continue
            options = [s for s in REACHES.get(target, ()) if s in self.scripts]
            if not options:
                continue
            script = min(options, key=lambda s: (played.count(s), options.index(s)))
            served = [t for t in targets if script in REACHES.get(t, ())]
            for t in served:
                self.tries[t] = self.tries.get(t, 0) + 1
            self.steered.append(
                {"script": script, "for": served, "at_s": round(ctx.history.now() / 1e9, 3)}
            )
            log.info("steering: %s for %s", script, ", ".join(served))
            return script
        return None


def why_unreached(
    situation: str,
    deck: Mapping[str, Any] | None,
    played: Sequence[str],
    steered: Sequence[Mapping[str, Any]] = (),
) -> str:
    """Why ``situation`` was not reached by a run of ``deck`` that played ``played``."""
    scripts = REACHES.get(situation, ())
    if not scripts:
        return "no script of the deck is built to reach it"
    left_out = dict((deck or {}).get("left_out") or {})
    in_deck = [s for s in scripts if s in ((deck or {}).get("scripts") or ())]
    if not in_deck:
        outs = [f"{s} ({left_out[s]})" for s in scripts if s in left_out]
        return "its scripts were left out: " + ("; ".join(outs) or ", ".join(scripts))
    ran = [s for s in in_deck if s in played]
    if not ran:
        return f"time ran out before its scripts ({', '.join(in_deck)}) played"
    tried = sum(1 for s in steered if situation in (s.get("for") or ()))
    more = f" ({tried} steered for it)" if tried else ""
    return f"its scripts {', '.join(ran)} played{more} and it did not happen"
