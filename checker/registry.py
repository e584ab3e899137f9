"""The checkers, by name: every :class:`~harness.core.checker.CheckerSpec` registered as an
entry point of ``splitbrain.checkers`` (built-ins and plugins alike, through
:mod:`harness.core.plugins`), validated once, and the one mapping of checker options
parsed into :class:`Settings`.

Both engines ask this module which checkers exist and what each was told; neither
names a checker itself, so a checker registered by a plugin runs in both.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.core import plugins
from harness.core.checker import ALL, CheckConfig, CheckerSpec, Example, Examples, SparkCheck
from harness.core.errors import CheckerError, ConfigError
from harness.core.op import Op
from harness.core.options import parse_options

__all__ = [
    "DEPRECATED_CHECKS",
    "OPTION_KEYS",
    "Settings",
    "checkers",
    "examples",
    "parse_settings",
    "refresh",
    "spark_impl",
    "validate",
]

log = logging.getLogger(__name__)

DEPRECATED_CHECKS = {"samples": "log-safety"}
"""Old check names still accepted in ``checks``: ``samples`` (the sampler's ops) have
always fed log safety."""

OPTION_KEYS = ("checks", "model", "model_params", "keys", "cap", "options")
"""The keys of the checker-options mapping (module docstring of
:mod:`harness.core.checker`)."""

_LEGACY_KEYS = ("independent",)
"""Keys workloads wrote before the options mapping: ``independent`` (per-key, what
``keys`` says; the tutorial once taught it, so plugins may still set it)."""


def validate(found: Mapping[str, tuple[Any, str]]) -> dict[str, CheckerSpec]:
    """The specs of ``found`` (name -> (loaded object, where it came from)), checked:
    a CheckerSpec named as registered, with a local implementation, an options dataclass
    or none, and anomaly and note kinds no other checker claims. One CheckerError
    naming the checker and its package otherwise."""
    specs: dict[str, CheckerSpec] = {}
    owner: dict[str, str] = {}
    for name, (obj, origin) in found.items():
        where = f"checker {name!r} (from {origin})"
        if not isinstance(obj, CheckerSpec):
            raise CheckerError(f"{where} is a {type(obj).__name__}, not a CheckerSpec")
        if obj.name != name:
            raise CheckerError(f"{where} calls itself {obj.name!r}; register it under that name")
        if not callable(obj.local):
            raise CheckerError(f"{where} has no local implementation")
        if not callable(obj.claims):
            raise CheckerError(f"{where} has no claims function")
        if obj.options is not None and not hasattr(obj.options, "__dataclass_fields__"):
            raise CheckerError(f"{where}: options must be a dataclass")
        if not obj.anomalies:
            raise CheckerError(f"{where} lists no anomaly kinds")
        for kind in (*obj.anomalies, *obj.notes):
            if kind in owner and owner[kind] != name:
                raise CheckerError(
                    f"{where} registers anomaly kind {kind!r}, already checker "
                    f"{owner[kind]!r}'s (from {found[owner[kind]][1]})"
                )
            owner[kind] = name
        specs[name] = obj
    return specs


@functools.cache
def _load() -> dict[str, CheckerSpec]:
    found: dict[str, tuple[Any, str]] = {}
    for name, plugin in sorted(plugins.available("checker").items()):
        module = plugin.value.partition(":")[0].strip()
        try:
            present = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            present = False
        if not present:  # metadata naming a module that is gone (a stale editable install)
            log.warning("checker %r: module %s not found (from %s)", name, module, plugin.origin)
            continue
        try:
            found[name] = (plugin.load(), plugin.origin)
        except ConfigError as e:
            raise CheckerError(str(e).removeprefix("field 'checker': ")) from None
    return validate(found)


def checkers() -> dict[str, CheckerSpec]:
    """Every registered checker by name, sorted by name (results.json keeps that order)."""
    return dict(_load())


def refresh() -> None:
    """Forget the checkers loaded so far (after installing a plugin in this process)."""
    plugins.refresh()
    _load.cache_clear()


def _named_function(spec: CheckerSpec, ref: str, what: str) -> Any:
    module, _, attr = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise CheckerError(f"checker {spec.name!r}: {what} {ref}: {e}") from None
    if not callable(fn):
        raise CheckerError(f"checker {spec.name!r}: {what} {ref} is not callable")
    return fn


def spark_impl(spec: CheckerSpec) -> SparkCheck | None:
    """A spec's Spark implementation, imported if it names one (``"module:function"``)."""
    impl = spec.spark
    if impl is None or callable(impl):
        return impl
    fn: SparkCheck = _named_function(spec, impl, "Spark implementation")
    return fn


def examples(spec: CheckerSpec) -> Mapping[str, Example] | None:
    """A spec's example histories (``CheckerSpec.examples``), or None if it has none."""
    ex = spec.examples
    if ex is None:
        return None
    fn: Examples = ex if callable(ex) else _named_function(spec, ex, "examples")
    return fn()


@dataclass(frozen=True)
class Settings:
    """The checker options of one check, parsed (see :func:`parse_settings`)."""

    checks: tuple[str, ...] | None = None
    """Checkers to run, by name; None: every registered one that claims ops."""
    model: str | None = None
    model_params: Mapping[str, Any] = field(default_factory=dict)
    keys: bool = True
    cap: int = 20
    timeout: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    """Checker name -> its parsed options dataclass (every registered checker's)."""

    def selected(self, specs: Mapping[str, CheckerSpec]) -> list[CheckerSpec]:
        if self.checks is None:
            return list(specs.values())
        return [specs[n] for n in specs if n in self.checks]

    def config(
        self,
        name: str,
        part: str = ALL,
        shared: Mapping[str, Any] | None = None,
        faults: Sequence[Op] = (),
    ) -> CheckConfig:
        return CheckConfig(
            faults=tuple(faults),
            options=self.options.get(name),
            model=self.model,
            model_params=dict(self.model_params),
            keys=self.keys,
            cap=self.cap,
            timeout=self.timeout,
            part=part,
            shared=dict(shared or {}),
        )


def parse_settings(
    opts: Mapping[str, Any] | None,
    *,
    model: str | None = None,
    timeout: float | None = None,
    specs: Mapping[str, CheckerSpec] | None = None,
) -> Settings:
    """:class:`Settings` from the checker-options mapping (``check_history(opts=...)``).

    ``model`` (an argument, e.g. ``--model``) wins over ``opts["model"]``. Unknown keys,
    check names and checker options are ConfigErrors naming them and the known ones.
    """
    from checker.results import CAP

    specs = checkers() if specs is None else specs
    raw = dict(opts or {})
    unknown = sorted(k for k in raw if k not in OPTION_KEYS and k not in _LEGACY_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown checker option {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(OPTION_KEYS)}",
            field=unknown[0],
        )
    per_checker: dict[str, Any] = {k: dict(v) for k, v in (raw.get("options") or {}).items()}
    bad = sorted(n for n in per_checker if n not in specs)
    if bad:
        raise ConfigError(
            f"options for unknown checker {', '.join(map(repr, bad))}; known: {', '.join(specs)}",
            field=bad[0],
        )
    options: dict[str, Any] = {}
    for name, spec in specs.items():
        given = per_checker.get(name)
        if spec.options is None:
            if given:
                raise ConfigError(
                    f"checker {name!r} takes no options, got {', '.join(map(repr, given))}",
                    field=name,
                )
            continue
        options[name] = parse_options(spec.options, given, role=f"checker {name}")
    checks = None
    if raw.get("checks") is not None:
        names = [DEPRECATED_CHECKS.get(str(n), str(n)) for n in raw["checks"]]
        missing = [n for n in names if n not in specs]
        if missing:
            raise ConfigError(
                f"unknown check {', '.join(map(repr, missing))}; known: {', '.join(specs)}",
                field="checks",
            )
        checks = tuple(dict.fromkeys(names))
    keys = raw.get("keys", raw.get("independent", True))
    return Settings(
        checks=checks,
        model=model if model is not None else raw.get("model"),
        model_params=dict(raw.get("model_params") or {}),
        keys=bool(keys),
        cap=int(raw.get("cap", CAP)),
        timeout=timeout,
        options=options,
    )
