"""Running a checker safely (the checker contract itself is :mod:`harness.core.checker`).

Verdicts are three-valued: ``True``, ``False`` or ``"unknown"``. Combining ranks
false above unknown above true (:func:`harness.core.verdict.merge`): one proven
anomaly makes a run invalid, and a checker that could not decide never passes a
run. A checker that crashes is "unknown" with an error naming the checker and, when
the crash happened while it looked at one op, that op's history index; it is not a
crash of the whole analysis, so the other checkers' verdicts still count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from harness.core.checker import CheckConfig, Checker, CheckerSpec
from harness.core.op import Op
from harness.core.paired import PairedHistory

__all__ = ["FnChecker", "check_safe", "check_spec_safe", "crash_result"]

log = logging.getLogger(__name__)


class FnChecker:
    """A checker from a function ``fn(history) -> result map`` (most of ours need no test)."""

    def __init__(self, fn: Callable[[Sequence[Op]], dict[str, Any]], name: str = "") -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "fn")

    def __repr__(self) -> str:
        return f"<checker {self.name}>"

    def check(
        self, test: Mapping[str, Any], history: Sequence[Op], opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        return self.fn(history)


def _op_index(tb: TracebackType | None) -> int | None:
    """The history index of the op the innermost frame holding one was looking at."""
    found = None
    while tb is not None:
        for v in tb.tb_frame.f_locals.values():
            if isinstance(v, Op) and v.index >= 0:
                found = v.index
                break
        tb = tb.tb_next
    return found


def crash_result(name: str, e: BaseException) -> dict[str, Any]:
    """``{"valid": "unknown", "error": "checker NAME crashed at history index N: ..."}``."""
    at = _op_index(e.__traceback__)
    where = f" at history index {at}" if at is not None else ""
    first = (str(e).strip().splitlines() or [""])[0]
    msg = f"checker {name} crashed{where}: {type(e).__name__}: {first}".rstrip(": ")
    return {"valid": "unknown", "error": msg[:500]}


def _verdict_or_error(name: str, res: Any) -> dict[str, Any]:
    if not isinstance(res, dict) or "valid" not in res:
        return {"valid": "unknown", "error": f"checker {name} returned no verdict: {res!r}"[:500]}
    return res


def check_safe(
    checker: Checker,
    test: Mapping[str, Any],
    history: Sequence[Op],
    opts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run a :class:`Checker`; a crash becomes ``{"valid": "unknown", "error": ...}``."""
    name = str(getattr(checker, "name", "") or type(checker).__name__)
    try:
        res = checker.check(test, history, opts or {})
    except Exception as e:  # a bug in one checker must not hide the others' verdicts
        log.warning("checker %s crashed", name, exc_info=True)
        return crash_result(name, e)
    return _verdict_or_error(name, res)


def check_spec_safe(
    spec: CheckerSpec, history: PairedHistory, config: CheckConfig
) -> dict[str, Any]:
    """Run a registered checker's local implementation, safely (as :func:`check_safe`)."""
    assert spec.local is not None  # the registry refuses a spec without one
    try:
        res = spec.local(history, config)
    except Exception as e:
        log.warning("checker %s crashed", spec.name, exc_info=True)
        return crash_result(spec.name, e)
    return _verdict_or_error(spec.name, res)
