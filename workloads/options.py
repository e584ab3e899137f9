"""Reading a workload's knobs from ``spec.options``: typed, bounded, one clear error each.

The options dict is shared with the DB and the runner, so unknown keys are not
errors here; a known key with a bad value is a :class:`ConfigError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core.errors import ConfigError

__all__ = ["opt_int", "opt_float", "opt_bool"]


def opt_int(options: Mapping[str, Any], name: str, default: int, *, minimum: int = 0) -> int:
    v = options.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"must be an integer, got {v!r}", field=name)
    if v < minimum:
        raise ConfigError(f"must be at least {minimum}, got {v}", field=name)
    return v


def opt_float(
    options: Mapping[str, Any],
    name: str,
    default: float,
    *,
    minimum: float = 0.0,
    maximum: float | None = None,
    positive: bool = False,
) -> float:
    v = options.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"must be a number, got {v!r}", field=name)
    if maximum is not None and v > maximum:
        raise ConfigError(f"must be at most {maximum}, got {v}", field=name)
    if v < minimum or (positive and v <= 0):
        raise ConfigError(
            f"must be {'positive' if positive else f'at least {minimum}'}, got {v}", field=name
        )
    return float(v)


def opt_bool(options: Mapping[str, Any], name: str, default: bool) -> bool:
    v = options.get(name, default)
    if not isinstance(v, bool):
        raise ConfigError(f"must be true or false, got {v!r}", field=name)
    return v
