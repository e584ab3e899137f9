"""The verdict: three values, and every rule about them in one place.

A check ends ``True`` (valid), ``False`` (invalid: an anomaly was proven) or
``"unknown"`` (the checker gave up, timed out or crashed, or the run did not
finish). Combining ranks false above unknown above true, as Jepsen's
``compose`` does: one proven anomaly makes a run invalid, and a checker that
could not decide never passes a run.

Exit codes follow from it: 0 valid, 1 invalid, 2 unknown, 3 and above usage or
environment errors (``SplitbrainError.exit_code``). Anything else that is not
exactly ``True`` or ``False`` (a missing key, ``None``, a stray string) counts
as unknown, so a malformed results map can never read as a pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeAlias

__all__ = [
    "Verdict",
    "UNKNOWN",
    "EXIT_VALID",
    "EXIT_INVALID",
    "EXIT_UNKNOWN",
    "EXIT_USAGE",
    "normalize",
    "merge",
    "exit_code_for",
    "worst_exit_code",
    "word",
]

Verdict: TypeAlias = "bool | Literal['unknown']"
UNKNOWN: Literal["unknown"] = "unknown"

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_USAGE = 0, 1, 2, 3


def normalize(value: Any) -> Verdict:
    """``True``/``False`` as they are; everything else is unknown."""
    if value is True or value is False:
        return bool(value)
    return UNKNOWN


def merge(values: Iterable[Any]) -> Verdict:
    """The worst of several verdicts: False > "unknown" > True (True when empty)."""
    vals = [normalize(v) for v in values]
    if any(v is False for v in vals):
        return False
    if any(v is not True for v in vals):
        return UNKNOWN
    return True


def exit_code_for(value: Any, *, fail_on_unknown: bool = False) -> int:
    """0 valid, 1 invalid, 2 unknown (1 with ``--fail-on unknown``)."""
    v = normalize(value)
    if v is True:
        return EXIT_VALID
    if v is False:
        return EXIT_INVALID
    return EXIT_INVALID if fail_on_unknown else EXIT_UNKNOWN


def worst_exit_code(codes: Sequence[int]) -> int:
    """Invalid beats unknown beats valid; usage errors (3+) beat everything."""
    if not codes:
        return EXIT_UNKNOWN
    if any(c >= EXIT_USAGE for c in codes):
        return max(codes)
    if EXIT_INVALID in codes:
        return EXIT_INVALID
    return EXIT_UNKNOWN if EXIT_UNKNOWN in codes else EXIT_VALID


def word(value: Any, *, loud: bool = True) -> str:
    """How a verdict is shown to a person.

    ``loud`` (the default) is for headlines: ``VALID``/``INVALID``/``UNKNOWN``.
    Quiet words are for per-checker lines under a headline, where only a proven
    anomaly should catch the eye: ``valid``/``INVALID``/``unknown``.
    """
    v = normalize(value)
    if v is False:
        return "INVALID"
    if v is True:
        return "VALID" if loud else "valid"
    return "UNKNOWN" if loud else "unknown"
