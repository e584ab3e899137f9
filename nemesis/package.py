"""Faults bundled with their schedule and their cure (Jepsen's nemesis packages).

``build_package(["partition", "kill"], interval=5, rng=...)`` gives the nemesis
that can apply those faults, a :class:`Schedule` that alternates a random
``start-<kind>`` with its ``stop-<kind>``, and ``final_ops`` that heal every
enabled kind before the final reads. Everything about a fault comes from its
registered object (:mod:`nemesis.registry`): this module knows no fault by name
(a ``rolling`` fault, the upgrade, is started first by what it declares).

The schedule is pure: its choices (fault, shape, grudge, nodes, parameters) come
from the rng it was given and the node list, so the same seed gives the same
faults; only ``leader`` stays symbolic, resolved by the nemesis against the live
cluster.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError
from harness.core.fault import Draw, Fault, Selected
from harness.core.history import Op
from harness.core.nemesis import Nemesis, NemesisPackage
from harness.core.options import option, option_names, parse_options
from nemesis import registry as reg
from nemesis.base import Compose
from nemesis.schedules import fault_op, heal_ops, scaled
from nemesis.targets import Target

if TYPE_CHECKING:
    from collections.abc import Iterable

    from harness.core.remote import Host

__all__ = [
    "PackageOptions",
    "Schedule",
    "NemesisPackage",
    "Selection",
    "select",
    "build_package",
    "parse_faults",
    "check_hosts",
    "check_faults",
    "option_keys",
]


@dataclass(frozen=True)
class PackageOptions:
    """The ``--nemesis-option`` keys of the package itself (a fault's own are ``<name>_<key>``)."""

    targets: tuple[Target, ...] | None = option(
        None, "whom every node fault may hit (a fault's <name>_targets overrides it)"
    )
    max_ops: int | None = option(None, "stop the schedule after this many ops", minimum=0)
    overlap: int = option(1, "how many fault kinds may be active at once", minimum=1)


@dataclass(frozen=True)
class Selection:
    """The faults ``--nemesis`` names select: by op kind, in first-seen order, with variants."""

    faults: dict[str, Fault]
    variants: dict[str, tuple[str, ...]]

    @property
    def kinds(self) -> list[str]:
        return list(self.faults)


def select(names: Sequence[str]) -> Selection:
    """The faults for ``--nemesis`` names; ConfigError for an unknown name or two of one kind."""
    faults: dict[str, Fault] = {}
    variants: dict[str, list[str]] = {}
    for raw in names:
        name = raw.strip()
        f = reg.fault(name)
        other = faults.get(f.kind)
        if other is not None and other.name != f.name:
            raise ConfigError(
                f"nemesis faults {other.name!r} and {f.name!r} both apply "
                f"start-{f.kind}; choose one",
                field="nemesis",
            )
        faults[f.kind] = f
        vs = variants.setdefault(f.kind, [])
        vs += [v for v in f.selected_variants(name) if v not in vs]
    return Selection(faults, {k: tuple(v) for k, v in variants.items()})


def parse_faults(faults: Sequence[str]) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """(op kinds in first-seen order, the variants selected of each kind): the selection
    in brief (``partition-ring`` and ``partition-bridge`` select two shapes of one kind)."""
    sel = select(faults)
    return sel.kinds, {k: v for k, v in sel.variants.items() if v}


def option_keys() -> list[str]:
    """Every ``--nemesis-option`` key: the package's, then ``<fault>_<key>`` per fault."""
    keys = option_names(PackageOptions)
    for f in reg.faults().values():
        if f.options is not None:
            keys += [f"{f.name}_{k}" for k in option_names(f.options)]
    return keys


def _fault_options(
    sel: Selection, package_targets: Any, raw: Mapping[str, Any]
) -> dict[str, Selected]:
    """Each selected fault's options, parsed against its schema, and its variants."""
    per: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        if key in option_names(PackageOptions):
            continue
        for f in reg.faults().values():
            # `--nemesis-option` keys reach us with `-` turned into `_` (as every role's
            # do), so `lose-unfsynced_targets` arrives as `lose_unfsynced_targets`.
            prefixes = {f"{f.name}_", f"{f.name.replace('-', '_')}_"}
            prefix = next((p for p in prefixes if key.startswith(p)), None)
            if prefix is not None and f.options is not None:
                field_name = key[len(prefix) :]
                if field_name in option_names(f.options):
                    per.setdefault(f.name, {})[field_name] = value
                    break
        else:
            raise ConfigError(
                f"unknown nemesis option {key!r}; known: {', '.join(option_keys())}",
                field=key,
            )
    out: dict[str, Selected] = {}
    for kind, f in sel.faults.items():
        opts: Any = None
        if f.options is not None:
            raw_f: dict[str, Any] = {}
            if (
                package_targets is not None
                and f.targets == "node"
                and "targets" in option_names(f.options)
            ):
                raw_f["targets"] = package_targets
            raw_f.update(per.get(f.name, {}))
            opts = parse_options(f.options, raw_f, role=f"fault {f.name}")
        out[kind] = Selected(options=opts, variants=sel.variants.get(kind, ()))
    return out


def _has_primaries(ctx: Any) -> bool:
    from harness.core.db import HasPrimaries

    return isinstance(getattr(ctx, "db", None), HasPrimaries)


@dataclass
class Schedule:
    """Starts and stops faults, waiting about ``interval`` before each op.

    With ``overlap`` 1 (the default) it alternates a random ``start-<kind>``
    with its ``stop-<kind>``. With ``overlap`` k > 1, up to k kinds are active
    at once, as in Jepsen's combined nemesis: a leader isolated while its clock
    is skewed, a partition during a failover. Then each step starts an idle
    kind or stops an active one, by a coin flip while both are possible.

    ``next(ctx)`` only reads ``ctx.nodes`` and whether ``ctx.db`` reports
    primaries, so it can be driven in a unit test with a tiny stand-in context.
    ``max_ops`` bounds the schedule (None: endless; the runner stops at its
    time limit and applies ``final_ops``). Each start's value is the fault's own
    ``draw`` (:class:`harness.core.fault.Fault`).
    """

    kinds: tuple[str, ...]
    faults: dict[str, Fault]
    selected: dict[str, Selected]
    interval: float
    rng: random.Random
    max_ops: int | None = None
    overlap: int = 1
    active: list[str] = field(default_factory=list)
    emitted: int = field(default=0)
    steps: dict[str, int] = field(default_factory=dict)
    """Starts so far of each ``rolling`` kind (one per node is its whole change)."""
    last_start: str | None = field(default=None)

    @property
    def targets(self) -> dict[str, tuple[str, ...]]:
        """Whom each node fault may hit."""
        return {
            k: tuple(s.options.targets)
            for k, s in self.selected.items()
            if self.faults[k].targets == "node" and hasattr(s.options, "targets")
        }

    def _wait(self) -> float:
        return scaled(self.rng, self.interval, 0.5, 1.5)

    def next(self, ctx: Any) -> tuple[float, Op] | None:
        if not self.kinds or (self.max_ops is not None and self.emitted >= self.max_ops):
            return None
        wait = self._wait()
        self.emitted += 1
        idle = [k for k in self.kinds if k not in self.active]
        if self.active and (
            len(self.active) >= self.overlap or not idle or self.rng.random() < 0.5
        ):
            i = 0 if len(self.active) == 1 else self.rng.randrange(len(self.active))
            return wait, fault_op(f"stop-{self.active.pop(i)}")
        # A rolling kind (the upgrade) starts whenever it is idle and has steps left (one
        # per node): the change should happen early and under load, leaving the rest of
        # the run to the faults its new state must meet, rather than drift into the final
        # heal. With one fault at a time, every other start is another kind, so partitions
        # and kills land between its steps. Once every node has had its step, further
        # starts would do nothing but take turns from the other faults (the final heal
        # completes any step that failed).
        n = len(ctx.nodes)

        def spent(k: str) -> bool:
            return self.faults[k].rolling and (
                self.steps.get(k, 0) >= n or (self.overlap == 1 and self.last_start == k)
            )

        due = [
            k
            for k in idle
            if self.faults[k].rolling
            and self.steps.get(k, 0) < n
            and (self.overlap > 1 or self.last_start != k)
        ]
        kind = due[0] if due else self.rng.choice([k for k in idle if not spent(k)] or idle)
        if self.faults[kind].rolling:
            self.steps[kind] = self.steps.get(kind, 0) + 1
        self.last_start = kind
        value = self._start_value(ctx, kind)
        self.active.append(kind)
        return wait, fault_op(f"start-{kind}", value)

    def _start_value(self, ctx: Any, kind: str) -> dict[str, Any]:
        f, sel = self.faults[kind], self.selected[kind]
        draw = Draw(
            rng=self.rng,
            nodes=list(ctx.nodes),
            leader_ok=_has_primaries(ctx),
            interval=self.interval,
            options=sel.options,
            variants=sel.variants,
            targets=tuple(getattr(sel.options, "targets", ())),
        )
        return f.draw(draw)


class _PackageNemesis(Compose):
    """The composed nemesis; each fault's own nemesis checks at setup what it needs."""


def check_hosts(faults: Sequence[str], hosts: Iterable[Host]) -> None:
    """Before a run: ConfigError naming the hosts a machine fault cannot act on.

    ``power`` on hosts without a hypervisor must stop the run at once, not
    leave a durability campaign that never cut the power to report VALID.
    """
    hosts = list(hosts)
    missing = sorted(h.name for h in hosts if h.machine is None)
    for f in select(faults).faults.values():
        if "machine" in f.needs and missing:
            raise ConfigError(
                f"nemesis fault {f.name!r} needs hosts that are virtual machines of a VM lab "
                f"(`splitbrain lab up --driver vm`); these have no hypervisor to act on: "
                f"{', '.join(missing)}",
                field="nemesis",
            )


def check_faults(faults: Sequence[str], db: object, hosts: Iterable[Host]) -> None:
    """Before a run: ConfigError naming the first ``--nemesis`` fault that cannot act on
    ``db`` on ``hosts``, and why (:meth:`harness.core.fault.Fault.why_not`: what the DB
    declares and declines, the inventory's host facts).

    The deck leaves out a script whose fault is refused; a fault named by hand must not
    fare better: it would run and do nothing (a failover that promotes no one, a lazy fs
    that takes the whole store), and a run that never applied its fault looks as strong
    as one that did.
    """
    hosts = list(hosts)
    check_hosts(faults, hosts)
    for name in dict.fromkeys(n.strip() for n in faults):
        why = reg.fault(name).why_not(db, hosts)
        if why is not None:
            raise ConfigError(
                f"nemesis fault {name!r} cannot run against {type(db).__name__} here: {why}",
                field="nemesis",
            )


def build_package(
    faults: Sequence[str],
    *,
    interval: float,
    rng: random.Random,
    **options: Any,
) -> NemesisPackage:
    """The nemesis, schedule and healing ops for ``--nemesis`` fault names.

    ``options`` are the ``--nemesis-option`` keys: the package's (:class:`PackageOptions`:
    ``targets`` for every node fault, ``max_ops``, ``overlap``) and each fault's own as
    ``<name>_<key>`` (``kill_targets=leader``), checked against the fault's schema; a
    ``targets`` mapping (kind to targets) is the same as per-fault keys.
    """
    if not interval > 0:
        raise ConfigError(
            f"nemesis interval must be positive, got {interval}", field="nemesis_interval"
        )
    raw = dict(options)
    targets = raw.get("targets")
    if isinstance(targets, Mapping):
        del raw["targets"]
        for k, v in targets.items():
            raw.setdefault(f"{k}_targets", v)
    if isinstance(raw.get("overlap"), bool):
        raise ConfigError(
            f"nemesis option 'overlap' must be an integer, got {raw['overlap']!r}", field="overlap"
        )
    sel = select(faults)
    selected = _fault_options(sel, raw.get("targets"), raw)
    pkg = parse_options(
        PackageOptions,
        {k: v for k, v in raw.items() if k in option_names(PackageOptions)},
        role="nemesis",
    )
    groups: dict[str, dict[str, Selected]] = {}
    factories: dict[str, Fault] = {}
    for f in sorted(sel.faults.values(), key=lambda f: (f.heal_rank or 0, f.name)):
        groups.setdefault(f.group, {})[f.kind] = selected[f.kind]
        factories.setdefault(f.group, f)
    built: dict[str, Nemesis] = {}
    nemeses: list[Nemesis] = []
    for group, chosen in groups.items():
        f = factories[group]
        nem = f.nemesis(chosen)
        handled = nem.fs()
        missing = [k for k in chosen if f"stop-{k}" not in handled]
        if missing:
            raise ConfigError(
                f"fault {f.name!r} (from {f.package}): its nemesis does not handle "
                f"{', '.join(f'stop-{k}' for k in missing)}: no heal",
                field="nemesis",
            )
        nemeses.append(nem)
        for k in chosen:
            built[k] = nem
    for kind, f in sel.faults.items():
        if f.link is not None:
            f.link(built[kind], built)
    schedule = Schedule(
        kinds=tuple(sel.kinds),
        faults=dict(sel.faults),
        selected=selected,
        interval=interval,
        rng=rng,
        max_ops=pkg.max_ops,
        overlap=pkg.overlap,
    )
    return NemesisPackage(
        nemesis=_PackageNemesis(nemeses), schedule=schedule, final_ops=heal_ops(sel.kinds)
    )


def __getattr__(name: str) -> Any:
    """``FAULTS``: the ``--nemesis`` names, derived from the registry when first asked."""
    if name == "FAULTS":
        return reg.registry().names
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
