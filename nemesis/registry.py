"""Every fault, loaded once from the ``splitbrain.faults`` entry points and checked.

The tables the rest of the harness needs are derived here, never written by hand: the
``--nemesis`` names, the heal order of the final ops, the journal's entry kinds and their
undo order, which kinds aim at nodes, need a hypervisor or netem, each fault's colour, and
the fault of an op kind with its effects (what coverage and the report ask instead of a
name: :func:`fault_of`, :func:`timeline`).
A kind missing from a hand-kept heal order used to be dropped from the final heal without
a word; a fault here either registers completely or stops the command with one
:class:`ConfigError` naming it and the package it came from.

Journal kinds that belong to no fault (the DB node a run starts, which the run layer
journals) are added with :func:`register_journal_kind` by the module that writes them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, is_dataclass

from harness.core import plugins
from harness.core.errors import ConfigError
from harness.core.fault import Effects, Fault, JournalKind, Periods
from harness.core.op import Op
from harness.core.periods import Timeline
from harness.core.periods import timeline as _timeline

__all__ = [
    "Registry",
    "registry",
    "faults",
    "fault",
    "fault_of",
    "timeline",
    "journal_kind",
    "journal_kinds",
    "register_journal_kind",
    "heal_order",
    "refresh",
    "validate",
]

_MAX_RANK = 10_000


@dataclass(frozen=True)
class Registry:
    """The checked faults and what is derived from them."""

    faults: Mapping[str, Fault]
    """By fault name, in heal order."""
    by_name: Mapping[str, Fault]
    """Every ``--nemesis`` name (aliases included) to its fault."""
    journal: Mapping[str, JournalKind]
    """Every journal entry kind, in undo order."""
    by_kind: Mapping[str, Fault]
    """Every op kind (``start-<kind>``) to the first fault recording it (faults sharing a
    kind declare the same effects and periods, checked at registration)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The ``--nemesis`` names, each fault's name then its aliases."""
        return tuple(n for f in self.faults.values() for n in f.names)

    @property
    def heal_order(self) -> tuple[str, ...]:
        """Op kinds in the order the final heal stops them."""
        return tuple(dict.fromkeys(f.kind for f in self.faults.values()))

    def kinds(self, *, targets: str | None = None, needs: str | None = None) -> tuple[str, ...]:
        """Op kinds aimed at ``targets`` (node, cluster) or needing ``needs`` (machine, netem)."""
        return tuple(
            dict.fromkeys(
                f.kind
                for f in self.faults.values()
                if (targets is None or f.targets == targets) and (needs is None or needs in f.needs)
            )
        )

    def colour(self, kind: str) -> str:
        for f in self.faults.values():
            if f.kind == kind or f.name == kind:
                return f.colour
        return "#999999"


def _where(f: object, package: str) -> str:
    name = getattr(f, "name", None)
    return f"fault {name!r} (from {package})" if name else f"fault object from {package}"


def validate(f: object, package: str) -> Fault:
    """``f`` if it is a complete fault; else one ConfigError naming it and its package."""
    where = _where(f, package)
    if not isinstance(f, Fault):
        raise ConfigError(f"{where}: is a {type(f).__name__}, not a harness.core.fault.Fault")
    if not f.name or not isinstance(f.name, str):
        raise ConfigError(f"{where}: has no name")
    if not callable(f.nemesis):
        raise ConfigError(f"{where}: has no nemesis factory (how it is applied and healed)")
    if not callable(f.draw):
        raise ConfigError(f"{where}: has no draw (how a schedule chooses its start value)")
    rank = f.heal_rank
    if rank is None:
        raise ConfigError(
            f"{where}: has no heal: every fault ships its cure (a heal_rank, its place in "
            f"the final heal, and a nemesis whose stop-{f.kind} and teardown undo it)"
        )
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= _MAX_RANK:
        raise ConfigError(
            f"{where}: heal_rank must be an integer in 0..{_MAX_RANK} (its place in the "
            f"final heal), got {rank!r}"
        )
    if not isinstance(f.effects, Effects):
        raise ConfigError(
            f"{where}: effects must be a harness.core.fault.Effects (what it does to the "
            f"cluster: kills, pauses, moves_clock, ...), got {f.effects!r}"
        )
    bad_flags = [k for k, v in vars(f.effects).items() if not isinstance(v, bool)]
    if bad_flags:
        raise ConfigError(f"{where}: effects {', '.join(bad_flags)} must be True or False")
    pr = f.periods
    if not isinstance(pr, Periods):
        raise ConfigError(f"{where}: periods must be a harness.core.fault.Periods, got {pr!r}")
    for what, keys in (("hit", pr.hit), ("ended", pr.ended)):
        if not isinstance(keys, tuple) or not all(isinstance(k, str) and k for k in keys):
            raise ConfigError(
                f"{where}: periods.{what} must be a tuple of value keys, got {keys!r}"
            )
    if f.effects.cuts_network and not pr.grudge:
        raise ConfigError(
            f"{where}: cuts the network but names no periods.grudge (the start value's key "
            f"saying who drops whom)"
        )
    if (f.effects.kills or f.effects.pauses or f.effects.moves_clock) and not pr.hit:
        raise ConfigError(
            f"{where}: acts on nodes ({', '.join(f.effects.words)}) but periods.hit names no "
            f"key of its start value that says which nodes it hit"
        )
    if f.targets not in ("node", "cluster"):
        raise ConfigError(f"{where}: targets must be 'node' or 'cluster', got {f.targets!r}")
    if f.options is not None and not (isinstance(f.options, type) and is_dataclass(f.options)):
        raise ConfigError(f"{where}: options must be a dataclass type, got {f.options!r}")
    for alias, variants in f.aliases.items():
        bad = [v for v in variants if v not in f.variants]
        if bad:
            raise ConfigError(f"{where}: alias {alias!r} names unknown variants {bad}")
    for jk in f.journal:
        if not isinstance(jk, JournalKind) or not callable(jk.undo):
            raise ConfigError(f"{where}: journal kind {jk!r} has no undo")
    return f


def _build(loaded: Iterable[tuple[Fault, str]], extra: Mapping[str, JournalKind]) -> Registry:
    by_name: dict[str, Fault] = {}
    by_rank: dict[int, Fault] = {}
    journal: dict[str, tuple[JournalKind, str]] = {}
    faults: list[Fault] = []
    for f, package in loaded:
        rank = int(f.heal_rank or 0)  # validate() refused None
        for n in f.names:
            if n in by_name:
                other = by_name[n]
                raise ConfigError(
                    f"{_where(f, package)}: name {n!r} is already taken by fault "
                    f"{other.name!r} (from {other.package})"
                )
        same = next((o for o in faults if o.kind == f.kind), None)
        if same is not None and (same.effects, same.periods) != (f.effects, f.periods):
            raise ConfigError(
                f"{_where(f, package)}: records start-{f.kind} like fault {same.name!r} "
                f"(from {same.package}) but declares other effects or periods; one op kind "
                f"must mean one thing in a history"
            )
        other_rank = by_rank.get(rank)
        if other_rank is not None and other_rank.kind != f.kind:
            raise ConfigError(
                f"{_where(f, package)}: heal_rank {f.heal_rank} is already fault "
                f"{other_rank.name!r}'s (from {other_rank.package}); the heal order must be total"
            )
        for jk in f.journal:
            seen = journal.get(jk.name)
            if seen is not None and seen[0] != jk:
                raise ConfigError(
                    f"{_where(f, package)}: journal kind {jk.name!r} differs from the one "
                    f"{seen[1]} registered"
                )
            journal[jk.name] = (jk, f.name)
        by_rank[rank] = f
        for n in f.names:
            by_name[n] = f
        faults.append(f)
    for name, jk in extra.items():
        journal.setdefault(name, (jk, "the run"))
    faults.sort(key=lambda f: (int(f.heal_rank or 0), f.name))
    jkinds = sorted((jk for jk, _ in journal.values()), key=lambda j: (j.rank, j.name))
    return Registry(
        faults={f.name: f for f in faults},
        by_name=by_name,
        journal={j.name: j for j in jkinds},
        by_kind={f.kind: f for f in reversed(faults)},
    )


_extra: dict[str, JournalKind] = {}
_lock = threading.Lock()


def register_journal_kind(kind: JournalKind) -> None:
    """Add a journal kind that belongs to no fault (the run's DB nodes)."""
    with _lock:
        _extra[kind.name] = kind
    registry.cache_clear()


def _shadowed() -> None:
    """ConfigError for a fault name two packages declare (the registry keeps the first one
    found, so without this the second would be skipped without a word)."""
    from importlib import metadata

    seen: dict[str, str] = {}
    for ep in metadata.entry_points(group=plugins.GROUPS["fault"]):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "unknown distribution"
        other = seen.setdefault(ep.name, dist)
        if other != dist:
            raise ConfigError(
                f"fault {ep.name!r} (from {dist}, {ep.value}): name {ep.name!r} is already "
                f"taken by fault {ep.name!r} (from {other})"
            )


@functools.cache
def registry() -> Registry:
    """Every registered fault, checked (ConfigError naming the first bad one)."""
    _shadowed()
    loaded = []
    for p in plugins.available("fault").values():
        obj = p.load()
        f = validate(obj, f"{p.origin}, {p.value}")
        if f.name != p.name:
            raise ConfigError(
                f"fault {f.name!r} (from {p.origin}, {p.value}) is declared as entry point "
                f"{p.name!r}: the entry point must carry the fault's name"
            )
        if f.package != p.origin:
            f = _with_package(f, p.origin)
        loaded.append((f, p.origin))
    with _lock:
        extra = dict(_extra)
    return _build(loaded, extra)


def _with_package(f: Fault, package: str) -> Fault:
    import dataclasses

    return dataclasses.replace(f, package=package)


def refresh() -> None:
    """Forget the loaded faults (after a plugin was installed in this process)."""
    plugins.refresh()
    registry.cache_clear()


def faults() -> Mapping[str, Fault]:
    return registry().faults


def fault(name: str) -> Fault:
    """The fault a ``--nemesis`` name selects; ConfigError listing the known names."""
    reg = registry()
    try:
        return reg.by_name[name]
    except KeyError:
        raise ConfigError(
            f"unknown nemesis fault {name!r}; known: {', '.join(reg.names)}", field="nemesis"
        ) from None


def fault_of(kind: str) -> Fault | None:
    """The fault an op kind (``start-<kind>``) belongs to; None for a kind nobody registers."""
    return registry().by_kind.get(kind)


def timeline(ops: Iterable[Op], *, end_time: int | None = None) -> Timeline:
    """The faults of a history as the registered faults declare them
    (:func:`harness.core.periods.timeline`)."""
    return _timeline(ops, fault_of, end_time=end_time)


def journal_kinds() -> Mapping[str, JournalKind]:
    return registry().journal


def journal_kind(name: str) -> JournalKind | None:
    return registry().journal.get(name)


def heal_order() -> tuple[str, ...]:
    return registry().heal_order
