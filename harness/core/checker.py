"""What a checker is (Jepsen's checker protocol).

A checker judges a whole history and returns a result map whose ``"valid"`` is
a verdict (:mod:`harness.core.verdict`). It is pure: no I/O, and it never
mutates the history, so the same history can be judged again, by another
engine, and give the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from harness.core.history import Op

__all__ = ["Checker"]


@runtime_checkable
class Checker(Protocol):
    """Judges a whole history. Pure: no I/O, never mutates the history."""

    def check(
        self, test: Mapping[str, Any], history: Sequence[Op], opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A result map with at least ``"valid"``."""
        ...
