"""After the cluster is safe: Parquet, the checker, results.json, the report.

Runs after cleanup, so nothing here can leave a fault behind; a crash or a
signal here ends as an ``unknown`` verdict with its reason, never as a pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.errors import SplitbrainError
from harness.run.signals import SignalGuard
from harness.run.store import RunStore

if TYPE_CHECKING:
    from harness.core.op import Op
    from harness.run.options import RunOptions
    from harness.run.phases import Run

__all__ = ["check_stored", "analyse", "faults_not_drawn"]

log = logging.getLogger(__name__)


def check_stored(
    store: RunStore,
    checker_opts: Mapping[str, Any],
    engine: str,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run the checker on the stored history; a crash is ``unknown``, never a pass.

    ``checker_opts`` come from :func:`harness.run.roles.checker_options`, the function
    ``splitbrain check`` calls too, so a re-check judges as the run did.
    """
    try:
        from checker.dispatch import check_history
    except ImportError as e:
        return {
            "valid": "unknown",
            "checkers": {},
            "anomalies": {},
            "error": f"checker not available: {e}",
        }
    wc = dict(checker_opts)
    try:
        # The store directory, not a list of ops: the Spark engine reads the Parquet itself.
        results = check_history(
            str(store.path), model=wc.get("model"), engine=engine, timeout=timeout, opts=wc
        )
    except Exception as e:
        log.exception("checker crashed")
        return {
            "valid": "unknown",
            "checkers": {},
            "anomalies": {},
            "error": f"checker crashed: {type(e).__name__}: {e}",
        }
    if not isinstance(results, dict) or "valid" not in results:
        return {
            "valid": "unknown",
            "checkers": {},
            "anomalies": {},
            "error": "checker returned no verdict",
        }
    results.setdefault("checkers", {})
    results.setdefault("anomalies", {})
    return results


def faults_not_drawn(requested: Sequence[str], started: Collection[str]) -> list[str]:
    """The faults named in ``--nemesis`` that no ``start-<kind>`` op of the run began.

    A short run, or a schedule that kept drawing others, may never inject one: the run then
    says nothing about that fault, and the summary says so. A name is compared by the op
    kind its fault starts (``partition-leader`` starts ``start-partition``).
    """
    return [name for name in requested if _fault_kind(name) not in started]


def _fault_kind(name: str) -> str:
    """The op kind the fault ``name`` selects (the fault registry's), else the name itself."""
    try:
        from nemesis.registry import fault

        return fault(name).kind or name
    except (ImportError, SplitbrainError):
        return name


def unreached_reasons(
    cov: Mapping[str, Any], recorded: Any, deck: Mapping[str, Any]
) -> dict[str, str]:
    """Each observable situation the run never reached, and why (nemesis/steering.py)."""
    from nemesis.steering import why_unreached

    by_design = cov.get("by_design") or {}
    unobservable = cov.get("unobservable") or {}
    return {
        name: why_unreached(
            name,
            recorded if isinstance(recorded, Mapping) else None,
            list(deck.get("played") or ()),
            deck.get("steered") or (),
        )
        for name, entry in cov.items()
        if isinstance(entry, Mapping) and "count" in entry and not entry.get("count")
        and name not in by_design and name not in unobservable
    }  # fmt: skip


def run_evidence_safely(run: Run, ops: list[Op]) -> dict[str, Any] | None:
    """The run's evidence block (harness/run/evidence.py): ok client ops before, during
    and after its fault windows, against its workload's floor; None, logged, if it fails."""
    try:
        from harness.run.configurations import configuration_of
        from harness.run.evidence import evidence, summary_line
        from nemesis.registry import timeline

        ev = evidence(
            ops,
            timeline(ops).spans,
            workload=run.spec.workload,
            configuration=configuration_of(run.db),
        )
    except Exception as e:  # the verdict stands without it
        log.warning("evidence failed: %s: %s", type(e).__name__, e)
        return None
    log.info(summary_line(ev))
    return ev


def run_coverage_safely(
    run: Run, store: RunStore
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None]:
    """The run's coverage block (harness/run/coverage.py), the judgement of its node
    events (checker/node_events.py) and its evidence (harness/run/evidence.py); None for
    any, logged, if it fails.

    The history's clock started ``run.history.now()`` ns ago on the monotonic clock,
    so the wall time it read 0 at is known here to the millisecond, better than any
    later guess; node log stamps are placed on the history's clock with it. The events
    are read once for both.
    """
    try:
        from harness.core.history import iter_history
        from harness.run.coverage import run_coverage, run_events

        # Taken when the history started: a wall-clock step since would shift it (issue 43).
        origin = getattr(run.history, "origin_wall_ns", None) or time.time_ns() - run.history.now()
        ops = list(iter_history(store.history_path))
    except Exception as e:  # the verdict stands without it
        log.warning("reading the history failed: %s: %s", type(e).__name__, e)
        return None, None, None
    ev = run_evidence_safely(run, ops)
    try:
        events = run_events(store.path, ops, run.db, origin_wall_ns=origin)
    except Exception as e:  # the verdict stands without it
        log.warning("reading node events failed: %s: %s", type(e).__name__, e)
        return None, None, ev
    cov = judged = None
    try:
        cov = run_coverage(store.path, ops, run.db, list(run.spec.nodes), events=events)
    except Exception as e:  # the verdict stands without it
        log.warning("coverage failed: %s: %s", type(e).__name__, e)
    if events[2] is None:  # events were read
        from checker.node_events import check_node_events, summary_line
        from harness.core.events import event_invariants

        judged = check_node_events(events[0], events[1], event_invariants(run.db))
        log.info(summary_line(judged))
    return cov, judged, ev


def analyse(
    run: Run,
    store: RunStore,
    checker_opts: Mapping[str, Any],
    opts: RunOptions,
    guard: SignalGuard,
    interrupted: bool,
    reason: str | None,
    problems: list[str],
) -> dict[str, Any]:
    """Parquet, checker, results.json, report: after cleanup, so the cluster is already safe.

    A signal here stops the checker (the verdict is then unknown) but results.json
    is still written.
    """
    try:
        store.write_parquet()
    except Exception as e:
        log.error("converting the history to Parquet failed: %s", e)
        problems.append(f"parquet: {e}")
    results: dict[str, Any]
    if interrupted:
        results = {
            "valid": "unknown",
            "checkers": {},
            "anomalies": {},
            "interrupted": True,
            "reason": reason,
        }
    elif opts.check:
        run._phase("check")
        guard.cleaning = False  # a Ctrl-C may stop a long check
        try:
            results = check_stored(store, checker_opts, opts.engine, opts.check_timeout)
        except KeyboardInterrupt as e:
            interrupted = True
            reason = f"interrupted by {e.args[0] if e.args else 'SIGINT'} during the check"
            results = {
                "valid": "unknown",
                "checkers": {},
                "anomalies": {},
                "interrupted": True,
                "reason": reason,
            }
        finally:
            guard.cleaning = True
    else:
        results = {"valid": "unknown", "checkers": {}, "anomalies": {}, "reason": "checker skipped"}
    results["run"] = {
        "ops": len(run.history),
        "ok": run.counters.ok,
        "fail": run.counters.fail,
        "info": run.counters.info,
        "extra_ops": run.counters.extra,
        "interrupted": interrupted,
        "reason": reason,
        "cleanup_problems": problems,
        "faults_not_drawn": faults_not_drawn(run.spec.nemesis, run.counters.started_faults),
    }
    if run.spec.options.get("deck"):
        from nemesis.deck import deck_record

        played = getattr(run.package.schedule, "played", ())
        results["run"]["deck"] = deck_record(run.spec.options["deck"], played)
        steering = getattr(run.package.schedule, "steering", None)
        if steering is not None:  # nemesis/steering.py: what the spare time went to
            results["run"]["deck"]["steered"] = list(steering.steered)
    if run.convergence is not None:  # the wait after the heal (harness/run/converge.py)
        from harness.run.converge import apply_convergence

        results["run"]["converge"] = run.convergence
        if not interrupted:
            apply_convergence(results)
    if problems:
        log.error("cleanup problems: %s", "; ".join(problems))
    cov, judged, ev = run_coverage_safely(run, store)
    if cov is not None:
        results["coverage"] = cov
        deck = results["run"].get("deck")
        if isinstance(deck, Mapping):
            cov["why_unreached"] = unreached_reasons(cov, run.spec.options.get("deck"), deck)
    if judged is not None and not interrupted and opts.check:
        from checker.node_events import merge_node_events

        merge_node_events(results, judged)
    if ev is not None:
        from harness.run.evidence import apply_floor

        results["evidence"] = ev
        if not interrupted and opts.check:
            apply_floor(results, ev)
    unhealed = list(getattr(run, "unconfirmed_heals", ()))
    if unhealed:  # never valid on a heal nobody confirmed (docs/crash-cleanup.md)
        results["run"]["unconfirmed_heals"] = unhealed
        results["checked_valid"] = results.get("valid")
        results["valid"] = "unknown"
        results["reason"] = results["run"]["reason"] = "; ".join(
            [*([reason] if reason else []), *unhealed]
        )
    try:
        store.write_results(results)
    except OSError as e:  # full or read-only: the record on disk stays "did not finish"
        why = f"cannot write {store.results_path} ({e.strerror or e})"
        log.error("%s", why)
        results["checked_valid"] = results.get("valid")
        results["valid"] = "unknown"
        results["run"]["interrupted"] = True
        results["reason"] = results["run"]["reason"] = "; ".join(
            r for r in (results["run"]["reason"], why) if r
        )
        return results
    if opts.reporter is not None and not interrupted:
        try:
            opts.reporter(store.path)
        except Exception as e:
            log.warning("report failed: %s", e)
    return results
