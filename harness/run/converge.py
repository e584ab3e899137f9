"""The wait between the heal and the final reads, for a DB that declares ``Converges``.

Jepsen heals, waits for the cluster to recover, then reads, and records what it saw. A
fixed sleep is a guess: too short and the final reads judge replicas still catching up
(a "lost" write that was merely late, a "divergence" about to be repaired); too long and
every run pays for it. A DB that can tell when its replicas agree says so, and the runner
waits for that, bounded, and records the outcome in the history as a nemesis op::

    {"process": "nemesis", "type": "invoke", "f": "converge", "value": {"timeout_s": T}}
    {"process": "nemesis", "type": "info",   "f": "converge",
     "value": {"converged": bool, "elapsed_s", "polls", "last": {...}, "why"?}}

A run whose replicas never converged cannot vouch that its final reads saw the outcome, so
its verdict is at most ``unknown`` (:func:`apply_convergence`); an anomaly found stays
INVALID, since what the reads saw was served or stored by the system either way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, MutableMapping
from typing import Any

from harness.core.db import DB, ConvergenceReport, Converges
from harness.core.spec import RunContext
from harness.core.verdict import merge, normalize

__all__ = ["CONVERGE", "wait_for_convergence", "apply_convergence", "convergence_text"]

CONVERGE = "converge"
"""The ``f`` of the nemesis op that records the wait."""

GRACE_S = 5.0
"""How long past the timeout the runner waits for a DB's ``wait_converged`` to return."""


def wait_for_convergence(
    db: DB, ctx: RunContext, timeout: float, *, grace: float = GRACE_S
) -> ConvergenceReport:
    """The DB's own wait, bounded even when the DB's code overruns its deadline or raises.

    The wait runs on a daemon thread: a plugin that ignores ``deadline`` (a blocking call
    with no timeout) must not hold the run, whose cleanup still has to heal and wipe.
    """
    if not isinstance(db, Converges):
        raise TypeError(f"{type(db).__name__} does not declare Converges")
    started = time.monotonic()
    deadline = started + timeout
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["report"] = db.wait_converged(ctx, deadline)
        except Exception as e:  # noqa: BLE001 - recorded as "did not converge"
            box["error"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=target, name="converge", daemon=True)
    t.start()
    t.join(timeout + grace)
    elapsed = time.monotonic() - started
    if t.is_alive():
        return ConvergenceReport(
            False, elapsed, why=f"the DB's wait did not return within {timeout + grace:g} s"
        )
    if "error" in box:
        return ConvergenceReport(False, elapsed, why=f"the DB's wait failed: {box['error']}")
    report = box.get("report")
    if not isinstance(report, ConvergenceReport):
        return ConvergenceReport(
            False, elapsed, why=f"the DB's wait returned {type(report).__name__}, not a report"
        )
    return report


def convergence_text(block: Any) -> str | None:
    """One line for the summary and the report: ``converged after 4.1 s (9 polls)`` or
    ``NOT converged within 60 s: why``; None when the run had no wait."""
    if not isinstance(block, Mapping):
        return None
    elapsed = block.get("elapsed_s")
    polls = block.get("polls")
    looks = f", {polls} looks" if isinstance(polls, int) and polls else ""
    if block.get("converged") is True:
        return f"replicas converged {_secs(elapsed)} after the heal{looks}"
    limit = block.get("timeout_s", elapsed)
    why = block.get("why")
    return f"replicas NOT converged within {_secs(limit)}{looks}" + (f": {why}" if why else "")


def _secs(v: Any) -> str:
    return f"{float(v):.1f} s" if isinstance(v, (int, float)) else "? s"


def apply_convergence(results: MutableMapping[str, Any]) -> None:
    """At most ``unknown`` when ``results["run"]["converge"]`` says the replicas did not
    converge: the final reads may have judged replicas still catching up. False stays
    False (``verdict.merge``), and the checker's own word is kept as ``checked_valid``."""
    run = results.get("run")
    block = run.get("converge") if isinstance(run, Mapping) else None
    if not isinstance(block, Mapping) or block.get("converged") is True:
        return
    before = normalize(results.get("valid"))
    after = merge([before, "unknown"])
    if after == before:
        return
    results.setdefault("checked_valid", before)
    results["valid"] = after
    if not results.get("reason"):
        results["reason"] = (
            f"{convergence_text(block)}; the final reads may have judged replicas still catching up"
        )
