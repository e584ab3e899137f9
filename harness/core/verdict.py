"""Exit codes by verdict (ARCHITECTURE §3), the one rule every command uses.

0 valid, 1 invalid, 2 unknown (the checker gave up or the run did not finish),
3 and above: usage or environment errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["EXIT_VALID", "EXIT_INVALID", "EXIT_UNKNOWN", "EXIT_USAGE", "exit_code_for",
           "worst_exit_code"]

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_USAGE = 0, 1, 2, 3


def exit_code_for(valid: Any, *, fail_on_unknown: bool = False) -> int:
    """ARCHITECTURE §3: 0 valid, 1 invalid, 2 unknown (1 with ``--fail-on unknown``)."""
    if valid is True:
        return 0
    if valid is False:
        return 1
    return 1 if fail_on_unknown else 2


def worst_exit_code(codes: Sequence[int]) -> int:
    """Invalid beats unknown beats valid; usage errors (3+) beat everything."""
    if not codes:
        return 2
    if any(c >= 3 for c in codes):
        return max(codes)
    return 1 if 1 in codes else (2 if 2 in codes else 0)
