"""Typed options for every role: a dataclass per DB, workload, fault and checker.

A role says what it accepts as a frozen dataclass whose fields carry their defaults and,
in ``metadata``, their documentation and bounds::

    @dataclass(frozen=True)
    class KillOptions:
        targets: tuple[str, ...] = option(("one", "leader"), "whom a kill may hit")
        grace_s: float = option(0.0, "seconds between TERM and KILL", minimum=0.0)

    opts = parse_options(KillOptions, {"grace_s": "1.5"}, role="fault kill")

Why one module: ``--db-option``, ``--workload-option`` and ``--nemesis-option`` arrive as
loose strings from the command line or as JSON from ``test.json``; every role must reject a
misspelt key *before the load starts*, with the same message (the key, the role and the
known keys), and coerce ``"3"`` to ``3`` the same way. A role never reads another role's
options: what one role needs from another is declared on the role (for instance a DB's
``checker_options``), not fished out of a shared dict.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

from harness.core.errors import ConfigError

__all__ = [
    "option",
    "parse_options",
    "describe_options",
    "option_names",
    "OptionDoc",
    "declares_options",
    "declared_options",
    "as_options",
    "typed_options",
]

T = TypeVar("T")

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def option(
    default: Any,
    doc: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Any:
    """A dataclass field with its documentation and bounds (checked by :func:`parse_options`)."""
    meta = {"doc": doc, "minimum": minimum, "maximum": maximum}
    if isinstance(default, (list, dict, set)):
        raise TypeError("option defaults must be immutable (use a tuple)")
    return dataclasses.field(default=default, metadata=meta)


class OptionDoc(typing.NamedTuple):
    """One option as ``--help`` and the docs show it."""

    name: str
    type: str
    default: Any
    doc: str


def option_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def describe_options(cls: type) -> list[OptionDoc]:
    hints = typing.get_type_hints(cls)
    return [
        OptionDoc(f.name, _type_name(hints[f.name]), f.default, str(f.metadata.get("doc", "")))
        for f in dataclasses.fields(cls)
    ]


def parse_options(cls: type[T], raw: Mapping[str, Any] | None, *, role: str) -> T:
    """An instance of ``cls`` from ``raw``; ConfigError naming the key, the role and the known keys.

    Strings are coerced to the field's type (the command line gives only strings), numbers
    are checked against their bounds, ``Literal`` fields against their choices.
    """
    raw = dict(raw or {})
    known = option_names(cls)
    unknown = sorted(k for k in raw if k not in known)
    if unknown:
        raise ConfigError(
            f"unknown {role} option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(known) or 'none'}",
            field=unknown[0],
        )
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in raw:
            continue
        where = f"{role} option {f.name!r}"
        v = _coerce(raw[f.name], hints[f.name], where)
        lo, hi = f.metadata.get("minimum"), f.metadata.get("maximum")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if lo is not None and v < lo:
                raise ConfigError(f"{where} must be at least {lo}, got {v}", field=f.name)
            if hi is not None and v > hi:
                raise ConfigError(f"{where} must be at most {hi}, got {v}", field=f.name)
        values[f.name] = v
    return cls(**values)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "|".join(map(str, typing.get_args(tp)))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def _coerce(v: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and (
            v is None or (isinstance(v, str) and v.lower() in ("none", "null"))
        ):
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(v, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{where} must be {_type_name(tp)}, got {v!r}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if v in choices:
            return v
        for c in choices:
            if isinstance(v, str) and str(c) == v:
                return c
        raise ConfigError(f"{where} must be one of {', '.join(map(str, choices))}, got {v!r}")
    if origin is tuple:
        (item,) = typing.get_args(tp)[:1]
        items = [x.strip() for x in v.split(",") if x.strip()] if isinstance(v, str) else v
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {v!r}")
        return tuple(_coerce(x, item, where) for x in items)
    if tp is bool:
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.lower() in _TRUE | _FALSE:
            return v.lower() in _TRUE
        raise ConfigError(f"{where} must be true or false, got {v!r}")
    if tp is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, str):
            try:
                return int(v)
            except ValueError:
                pass
        raise ConfigError(f"{where} must be an integer, got {v!r}")
    if tp is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                pass
        raise ConfigError(f"{where} must be a number, got {v!r}")
    if tp is str:
        if isinstance(v, str):
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return str(v)
        raise ConfigError(f"{where} must be a string, got {v!r}")
    if tp is Any:
        return v
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(v, Mapping):
        return parse_options(tp, v, role=where)
    if typing.get_origin(tp) in (dict, Mapping) or tp is dict:
        if isinstance(v, Mapping):
            return dict(v)
        raise ConfigError(f"{where} must be a mapping, got {v!r}")
    raise TypeError(f"{where}: unsupported option type {tp!r}")


# --- declaring a factory's options (added for DB and workload factories; backward compatible) ---

OPTIONS_ATTR = "options_type"
"""The attribute a DB or workload factory carries to declare its options dataclass."""


def declares_options(cls: type) -> Any:
    """Decorator: the factory takes an instance of ``cls`` (a frozen dataclass), not a mapping.

    The harness then parses ``--db-option``/``--workload-option`` with :func:`parse_options`
    before anything connects, so a misspelt key stops the run at once. A factory without
    it keeps receiving the raw mapping (its plugin checks what it likes).
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")

    def mark(factory: Any) -> Any:
        setattr(factory, OPTIONS_ATTR, cls)
        return factory

    return mark


def declared_options(factory: Any) -> type | None:
    """The options dataclass ``factory`` declared with :func:`declares_options`, if any."""
    cls = getattr(factory, OPTIONS_ATTR, None)
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


def as_options(cls: type[T], raw: Any, *, role: str) -> T:
    """``raw`` if it already is a ``cls``, else :func:`parse_options` of the mapping.

    Lets a factory be called both by the harness (an instance) and by code or tests that
    hand it a plain mapping.
    """
    if isinstance(raw, cls):
        return raw
    return parse_options(cls, raw, role=role)


def typed_options(factory: Any, raw: Mapping[str, Any], role: str) -> Any:
    """What ``factory`` takes: its declared options parsed from ``raw``, else ``raw`` itself."""
    cls = declared_options(factory)
    return raw if cls is None else parse_options(cls, raw, role=role)
