"""After the cluster is safe: Parquet, the checker, results.json, the report.

Runs after cleanup, so nothing here can leave a fault behind; a crash or a
signal here ends as an ``unknown`` verdict with its reason, never as a pass.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from harness.core.workload import Workload
from harness.run.signals import SignalGuard
from harness.run.store import RunStore

if TYPE_CHECKING:
    from harness.run.options import RunOptions
    from harness.run.phases import Run

__all__ = ["check_stored", "analyse"]

log = logging.getLogger(__name__)


def check_stored(
    store: RunStore, workload: Workload, engine: str, timeout: float | None = None
) -> dict[str, Any]:
    """Run the checker on the stored history; a crash is ``unknown``, never a pass."""
    try:
        from checker.dispatch import check_history
    except ImportError as e:
        return {
            "valid": "unknown",
            "checkers": {},
            "anomalies": {},
            "error": f"checker not available: {e}",
        }
    wc = dict(workload.checker)
    model = wc.pop("model", None)
    try:
        # The store directory, not a list of ops: the Spark engine reads the Parquet itself.
        results = check_history(
            str(store.path), model=model, engine=engine, timeout=timeout, opts=wc
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


def analyse(
    run: Run,
    store: RunStore,
    workload: Workload,
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
            results = check_stored(store, workload, opts.engine, opts.check_timeout)
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
        "interrupted": interrupted,
        "reason": reason,
        "cleanup_problems": problems,
    }
    if problems:
        log.error("cleanup problems: %s", "; ".join(problems))
    store.write_results(results)
    if opts.reporter is not None and not interrupted:
        try:
            opts.reporter(store.path)
        except Exception as e:
            log.warning("report failed: %s", e)
    return results
