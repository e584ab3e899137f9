"""How checkers combine (the protocol itself is :mod:`harness.core.checker`).

Verdicts are three-valued: ``True``, ``False`` or ``"unknown"``. Combining ranks
false above unknown above true: one proven anomaly makes a run invalid, and a
checker that could not decide never passes a run. A checker that crashes is
"unknown" with the error, not a crash of the whole analysis (``check_safe``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from harness.core.checker import Checker
from harness.core.history import Op
from harness.core.verdict import merge

__all__ = ["FnChecker", "check_safe", "compose"]

log = logging.getLogger(__name__)


class FnChecker:
    """A checker from a function ``fn(history) -> result map`` (most of ours need no test)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def check(
        self, test: Mapping[str, Any], history: Sequence[Op], opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        return self.fn(history)


def check_safe(
    checker: Checker,
    test: Mapping[str, Any],
    history: Sequence[Op],
    opts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run a checker; a crash becomes ``{"valid": "unknown", "error": ...}``."""
    try:
        res = checker.check(test, history, opts or {})
    except Exception as e:  # a bug in one checker must not hide the others' verdicts
        log.warning("checker %r crashed", checker, exc_info=True)
        return {"valid": "unknown", "error": f"{type(e).__name__}: {e}"}
    if not isinstance(res, dict) or "valid" not in res:
        return {"valid": "unknown", "error": f"checker returned no verdict: {res!r}"[:500]}
    return res


class _Composed:
    def __init__(self, checkers: Mapping[str, Checker]) -> None:
        self.checkers = dict(checkers)

    def check(
        self, test: Mapping[str, Any], history: Sequence[Op], opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        results = {name: check_safe(c, test, history, opts) for name, c in self.checkers.items()}
        return {"valid": merge(r["valid"] for r in results.values()), "checkers": results}


def compose(checkers: Mapping[str, Checker]) -> Checker:
    """One checker running several, each safely; the verdict is the worst of theirs."""
    return _Composed(checkers)
