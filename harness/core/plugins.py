"""Finding DBs, workloads, models, faults and checkers by name: Python entry points, for
built-ins and plugins alike.

Every name ``--db``, ``--workload``, ``--nemesis`` and a checker's ``model`` accept, and
every check a workload selects, is an entry point in one of the groups of :data:`GROUPS`. splitbrain declares its own in
``pyproject.toml`` exactly as a third-party package does, so a built-in has no
code path a plugin cannot use: ``pip install my-plugin`` and its names appear in
``splitbrain run --help``, ``splitbrain plugins`` and every registry.

A name given on the command line is resolved as follows:

* ``NAME``: the entry point ``NAME`` of the group;
* ``NAME:ARGUMENT`` where ``NAME`` is an entry point: that factory, with
  ``argument=ARGUMENT`` added to its options (``--db yaml:system.yaml``,
  ``-w stdio:./client.pl``);
* ``package.module:attr`` otherwise: a factory importable from ``sys.path``,
  for code that is not packaged at all.

Anything that goes wrong (no such name, an import error, a factory that raises,
a factory that returns the wrong kind of object) is one :class:`ConfigError`
line naming the plugin, where it came from and what failed, never a traceback.

Fallback: when the distribution that provides this very code carries no entry
points in a group (a checkout run through ``PYTHONPATH``, or an editable install
made before the entry points were declared), the built-ins are read from the
checkout's ``pyproject.toml``: still the one declaration, never a second table.
Re-running ``pip install -e .`` makes the metadata current.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, SplitbrainError

__all__ = [
    "GROUPS",
    "Plugin",
    "available",
    "names",
    "resolve",
    "build",
    "describe",
    "with_argument",
    "refresh",
    "OBJECT_KINDS",
]

GROUPS: dict[str, str] = {
    "db": "splitbrain.dbs",
    "workload": "splitbrain.workloads",
    "model": "splitbrain.models",
    "fault": "splitbrain.faults",
    "checker": "splitbrain.checkers",
}
"""Kind of plugin -> entry-point group."""

OBJECT_KINDS = frozenset({"fault", "checker"})
"""Kinds whose entry points name a registered object (a ``Fault``, a ``CheckerSpec``), not a
factory: such an object is plain data plus functions, built once at import."""

_OWN_DIST = "splitbrain"
_CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Plugin:
    """One named factory: ``value`` is ``module:attr``; ``origin`` says which package gave it."""

    kind: str
    name: str
    value: str
    origin: str

    def load(self) -> Any:
        """Import the factory (or, for :data:`OBJECT_KINDS`, the registered object); every
        failure becomes one ConfigError line naming the plugin."""
        module_name, _, attr = self.value.partition(":")
        try:
            obj: Any = importlib.import_module(module_name.strip())
        except Exception as e:  # an ImportError, or anything the module raises on import
            raise ConfigError(
                f"{self.kind} plugin {self.name!r} ({self.value}, from "
                f"{self.origin}): import failed: {_one_line(e)}",
                field=self.kind,
            ) from None
        for part in filter(None, attr.strip().split(".")):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise ConfigError(
                    f"{self.kind} plugin {self.name!r} ({self.value}, from "
                    f"{self.origin}): module {module_name!r} has no {attr!r}",
                    field=self.kind,
                ) from None
        if not callable(obj) and self.kind not in OBJECT_KINDS:
            raise ConfigError(
                f"{self.kind} plugin {self.name!r} ({self.value}, from "
                f"{self.origin}): {type(obj).__name__} is not callable",
                field=self.kind,
            )
        return obj


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _pyproject_entry_points(group: str) -> dict[str, str]:
    """``[project.entry-points."<group>"]`` of the checkout this code runs from, if any."""
    path = _CHECKOUT / "pyproject.toml"
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 without tomllib
        try:
            import tomli as tomllib  # type: ignore[import-not-found]
        except ImportError:
            return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if data.get("project", {}).get("name") != _OWN_DIST:
        return {}
    table = data.get("project", {}).get("entry-points", {}).get(group, {})
    return {str(k): str(v) for k, v in table.items()}


def _dist_name(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) or (dist.metadata["Name"] if dist is not None else None)
    return str(name) if name else "unknown distribution"


def available(kind: str) -> dict[str, Plugin]:
    """Every name of ``kind`` (``db``, ``workload``, ``model``): built-ins first, then plugins.

    When two packages declare the same name, the built-in (or the first package
    found) wins, so installing a plugin can never silently replace a built-in.
    Scanned once per process (models are looked up per key in the checker);
    :func:`refresh` forgets the scan.
    """
    return dict(_scan(kind))


def refresh() -> None:
    """Forget the entry points seen so far (after installing a plugin in this process)."""
    _scan.cache_clear()


@functools.cache
def _scan(kind: str) -> dict[str, Plugin]:
    group = GROUPS[kind]
    found: dict[str, Plugin] = {}
    own: dict[str, Plugin] = {}
    others: list[Plugin] = []
    for ep in metadata.entry_points(group=group):
        origin = _dist_name(ep)
        plugin = Plugin(kind, ep.name, ep.value, origin)
        if origin.lower() == _OWN_DIST:
            own[ep.name] = plugin
        else:
            others.append(plugin)
    if not own:
        own = {
            n: Plugin(kind, n, v, f"{_OWN_DIST} (pyproject.toml)")
            for n, v in _pyproject_entry_points(group).items()
        }
    found.update(own)
    for p in sorted(others, key=lambda p: (p.origin, p.name)):
        found.setdefault(p.name, p)
    return found


def names(kind: str) -> list[str]:
    return sorted(available(kind))


def resolve(kind: str, name: str) -> tuple[Plugin, str | None]:
    """The plugin ``name`` designates and its ``ARGUMENT`` if any (see the module docstring)."""
    plugins = available(kind)
    if name in plugins:
        return plugins[name], None
    head, sep, rest = name.partition(":")
    if sep and head in plugins:
        return plugins[head], rest
    if sep and head and rest:
        return Plugin(kind, name, name, "sys.path"), None
    raise ConfigError(
        f"unknown {kind} {name!r} (known: {', '.join(sorted(plugins)) or 'none'}; "
        f"or give package.module:factory)",
        field=kind,
    )


def build(
    kind: str,
    name: str,
    call: Callable[[Callable[..., Any], str | None], Any],
    expected: type | tuple[type, ...],
    *,
    error: type[SplitbrainError] = ConfigError,
) -> Any:
    """Resolve ``name``, load its factory, ``call(factory, argument)``, check the result's type.

    ``error`` is the class raised for a factory that raises or returns the wrong
    type (a ConfigError, or a CheckerError for models); errors the factory
    raises itself as SplitbrainErrors pass through untouched (they already say
    what is wrong).
    """
    plugin, argument = resolve(kind, name)
    factory = plugin.load()
    where = f"{kind} plugin {plugin.name!r} ({plugin.value}, from {plugin.origin})"
    try:
        obj = call(factory, argument)
    except SplitbrainError:
        raise
    except TypeError as e:
        label = "parameters" if kind == "model" else "option"
        raise _error(error, f"{where}: bad {label}: {_one_line(e)}", kind) from None
    except Exception as e:
        raise _error(error, f"{where}: factory raised {_one_line(e)}", kind) from None
    if not isinstance(obj, expected):
        want = (
            expected.__name__
            if isinstance(expected, type)
            else " or ".join(t.__name__ for t in expected)
        )
        raise _error(error, f"{where}: factory returned {type(obj).__name__}, not a {want}", kind)
    return obj


def _error(cls: type[SplitbrainError], message: str, kind: str) -> SplitbrainError:
    if issubclass(cls, ConfigError):
        return cls(message, field=kind)
    return cls(message)


def describe() -> dict[str, list[Plugin]]:
    """Every plugin of every kind, for ``splitbrain plugins``."""
    return {kind: [p for _, p in sorted(available(kind).items())] for kind in GROUPS}


def with_argument(options: Mapping[str, Any], argument: str | None) -> dict[str, Any]:
    """``options`` plus ``argument`` when the name carried one (``NAME:ARGUMENT``)."""
    out = dict(options)
    if argument is not None:
        out["argument"] = argument
    return out
