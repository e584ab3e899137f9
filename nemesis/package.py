"""Faults bundled with their schedule and their cure (Jepsen's nemesis packages).

``build_package(["partition", "kill"], interval=5, rng=...)`` gives the nemesis
that can apply those faults, a :class:`Schedule` that alternates a random
``start-<kind>`` with its ``stop-<kind>``, and ``final_ops`` that heal every
enabled kind before the final reads. The schedule is pure: its choices (fault,
shape, grudge, nodes, parameters) come from the rng it was given and the node
list, so the same seed gives the same faults; only ``leader`` stays symbolic,
resolved by the nemesis against the live cluster.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import nemesis.grudge as g
from harness.core.errors import ConfigError, NemesisError
from harness.core.history import Op
from harness.core.nemesis import Nemesis, NemesisPackage
from nemesis.base import Compose
from nemesis.clock import ClockNemesis
from nemesis.failover import FailoverNemesis
from nemesis.lull import LullNemesis
from nemesis.net import PartitionNemesis
from nemesis.netem import NetemNemesis
from nemesis.power import PowerNemesis, VmPauseNemesis, machines_of
from nemesis.process import HostFreezeNemesis, KillNemesis, PauseNemesis
from nemesis.schedules import fault_op, heal_ops, scaled
from nemesis.targets import TARGETS, resolve
from nemesis.upgrade import UpgradeNemesis

if TYPE_CHECKING:
    from collections.abc import Iterable

    from harness.core.remote import Host
    from harness.core.spec import RunContext

__all__ = [
    "FAULTS",
    "PARTITION_SHAPES",
    "DEFAULT_TARGETS",
    "Schedule",
    "NemesisPackage",
    "build_package",
    "parse_faults",
    "check_hosts",
]

PARTITION_SHAPES: dict[str, tuple[str, ...]] = {
    "partition": ("halves", "majority", "majorities-ring", "bridge", "random", "leader"),
    "partition-halves": ("halves",),
    "partition-majority": ("majority",),
    "partition-ring": ("majorities-ring",),
    "partition-bridge": ("bridge",),
    "partition-leader": ("leader",),
    "partition-random": ("random",),
}
FAULTS = (
    *PARTITION_SHAPES,
    "clock",
    "kill",
    "pause",
    "freeze",
    "loss",
    "delay",
    "duplicate",
    "reorder",
    "power",
    "vm-pause",
    "failover",
    "lull",
    "upgrade",
)
"""Fault names accepted by ``--nemesis``. ``freeze`` is a whole-host pause (lab freezer cgroup);
``lull`` holds the clients' writes (reads go on); ``upgrade`` switches a mode-ha cluster to
mode broker, one node per step (nemesis/upgrade.py). ``power`` and ``vm-pause`` need VM
hosts (``Host.machine``); ``duplicate`` and ``reorder`` need tc netem (VMs have it)."""

DEFAULT_TARGETS = ("one", "minority", "majority", "all", "leader", "random")
NODE_FAULTS = (
    "clock",
    "kill",
    "pause",
    "loss",
    "delay",
    "duplicate",
    "reorder",
    "power",
    "vm-pause",
)
MACHINE_FAULTS = ("power", "vm-pause")
"""Kinds acted out by the hypervisor: only on hosts with a ``Host.machine``."""
NET_KINDS = ("loss", "delay", "duplicate", "reorder")
CLUSTER_FAULTS = ("failover", "lull", "upgrade")
"""Kinds with no node targets: an operator's failover, a lull in the clients' writes, the
rolling upgrade (it picks its own next node)."""
UPGRADE_FIRST = True
"""A start picks ``upgrade`` whenever it is idle and has steps left (one per node):
the switch should happen early and under load, leaving the rest of the run to the
new mode's faults, rather than drift into the final heal. Other kinds still start
while an upgrade step is active (``overlap`` > 1); with one fault at a time, every
other start is another kind, so partitions and kills land between the steps."""

BUMP_MS = (5, 50, 500, 5_000, 60_000, 300_000)
STROBE_DELTA_MS = (10, 100, 1000)
STROBE_PERIOD_MS = (2, 5, 10, 20)
LOSS_P = (0.05, 0.1, 0.2, 0.4)
DELAY_MS = (10, 50, 100, 250)
DUPLICATE_P = (0.05, 0.2, 0.5)
REORDER_P = (0.1, 0.25, 0.5)
REORDER_DELAY_MS = (5, 20, 50)


def parse_faults(faults: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """(kinds in first-seen order, partition shapes) for fault names; ConfigError on unknown names."""
    kinds: list[str] = []
    shapes: list[str] = []
    for raw in faults:
        name = raw.strip()
        if name in PARTITION_SHAPES:
            kind = "partition"
            shapes += [s for s in PARTITION_SHAPES[name] if s not in shapes]
        elif name in NODE_FAULTS:
            kind = name
        elif name == "freeze":
            kind = "pause"
        elif name in CLUSTER_FAULTS:
            # failover: mode ha (nemesis/failover.py); lull: nemesis/lull.py;
            # upgrade: mode ha to broker (nemesis/upgrade.py)
            kind = name
        else:
            raise ConfigError(
                f"unknown nemesis fault {name!r}; known: {', '.join(FAULTS)}", field="nemesis"
            )
        if kind not in kinds:
            kinds.append(kind)
    return kinds, tuple(shapes)


def _targets_for(
    targets: Sequence[str] | Mapping[str, Sequence[str]] | None, kinds: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for kind in kinds:
        if kind == "partition" or kind in CLUSTER_FAULTS:
            continue
        if targets is None:
            ts: Sequence[str] = DEFAULT_TARGETS
        elif isinstance(targets, Mapping):
            ts = targets.get(kind, DEFAULT_TARGETS)
        else:
            ts = targets
        if isinstance(ts, str):
            ts = [ts]
        bad = [t for t in ts if t not in TARGETS]
        if bad or not ts:
            raise ConfigError(
                f"unknown nemesis target(s) {bad or ts!r} for {kind}; known: {', '.join(TARGETS)}",
                field="targets",
            )
        out[kind] = tuple(ts)
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
    time limit and applies ``final_ops``).
    """

    kinds: tuple[str, ...]
    shapes: tuple[str, ...]
    targets: dict[str, tuple[str, ...]]
    interval: float
    rng: random.Random
    max_ops: int | None = None
    overlap: int = 1
    active: list[str] = field(default_factory=list)
    emitted: int = field(default=0)
    upgrades: int = field(default=0)
    last_start: str | None = field(default=None)

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
        if (
            UPGRADE_FIRST
            and "upgrade" in idle
            and self.upgrades < len(ctx.nodes)
            and (self.overlap > 1 or self.last_start != "upgrade")
        ):
            kind = "upgrade"
        else:
            # Once every node has had its step, further upgrade starts would do nothing
            # but take turns from the faults the new mode must meet (the final heal
            # completes any step that failed).
            spent = self.upgrades >= len(ctx.nodes) or (
                self.overlap == 1 and self.last_start == "upgrade"
            )
            kind = self.rng.choice([k for k in idle if k != "upgrade" or not spent] or idle)
        if kind == "upgrade":
            self.upgrades += 1
        self.last_start = kind
        value = self._start_value(ctx, kind)
        self.active.append(kind)
        return wait, fault_op(f"start-{kind}", value)

    def _start_value(self, ctx: Any, kind: str) -> dict[str, Any]:
        if kind == "failover":
            return {"target": "master"}
        if kind in ("lull", "upgrade"):
            return {}
        nodes = list(ctx.nodes)
        leader_ok = _has_primaries(ctx)
        if kind == "partition":
            shapes = [s for s in self.shapes if s != "leader" or leader_ok]
            if not shapes:
                raise NemesisError("partition-leader needs a DB that reports its primaries")
            shape = self.rng.choice(shapes)
            if shape == "leader":
                return {"shape": shape}
            return {
                "shape": shape,
                "grudge": g.grudge_to_json(g.build_shape(shape, nodes, self.rng)),
            }
        targets = [t for t in self.targets[kind] if t != "leader" or leader_ok]
        if not targets:
            raise NemesisError(
                f"{kind}: the only target is 'leader' and the DB does not report primaries"
            )
        target = self.rng.choice(targets)
        value: dict[str, Any] = {"target": target}
        if target != "leader":
            value["nodes"] = resolve(target, nodes, self.rng)
        if kind == "clock":
            mode = self.rng.choice(("bump", "bump", "strobe"))
            value["mode"] = mode
            if mode == "bump":
                ms = self.rng.choice(BUMP_MS) * self.rng.uniform(0.5, 1.5)
                value["offset_ms"] = round(ms if self.rng.random() < 0.5 else -ms)
            else:
                value["delta_ms"] = self.rng.choice(STROBE_DELTA_MS)
                value["period_ms"] = self.rng.choice(STROBE_PERIOD_MS)
                value["duration_s"] = round(self.interval, 3)
        elif kind == "loss":
            value["probability"] = self.rng.choice(LOSS_P)
        elif kind == "delay":
            d = self.rng.choice(DELAY_MS)
            value["delay_ms"], value["jitter_ms"] = d, d / 5
        elif kind == "duplicate":
            value["probability"] = self.rng.choice(DUPLICATE_P)
        elif kind == "reorder":
            value["probability"] = self.rng.choice(REORDER_P)
            value["delay_ms"] = self.rng.choice(REORDER_DELAY_MS)
        return value


class _PackageNemesis(Compose):
    """The composed nemesis, checking up front what the schedule will need from the DB."""

    def __init__(self, nemeses: Sequence[Nemesis], needs_primaries: bool) -> None:
        super().__init__(nemeses)
        self.needs_primaries = needs_primaries

    def setup(self, ctx: RunContext) -> None:
        if self.needs_primaries and not _has_primaries(ctx):
            raise NemesisError(
                f"partition-leader needs a DB that reports its primaries; "
                f"{type(ctx.db).__name__} does not"
            )
        super().setup(ctx)


def check_hosts(faults: Sequence[str], hosts: Iterable[Host]) -> None:
    """Before a run: ConfigError naming the hosts a machine fault cannot act on.

    ``power`` on hosts without a hypervisor must stop the run at once, not
    leave a durability campaign that never cut the power to report VALID.
    """
    kinds, _ = parse_faults(faults)
    hosts = list(hosts)
    for kind in MACHINE_FAULTS:
        if kind in kinds:
            machines_of(hosts, kind)


def _split(ts: Any) -> Any:
    return [t.strip() for t in ts.split(",") if t.strip()] if isinstance(ts, str) else ts


def build_package(
    faults: Sequence[str],
    *,
    interval: float,
    rng: random.Random,
    targets: str | Sequence[str] | Mapping[str, Sequence[str]] | None = None,
    max_ops: int | None = None,
    overlap: int = 1,
    **options: Any,
) -> NemesisPackage:
    """The nemesis, schedule and healing ops for ``--nemesis`` fault names.

    ``targets`` applies to every node fault ("one,leader" or a list), or maps a
    kind to its targets; ``<kind>_targets`` options (``kill_targets=leader``,
    from ``--nemesis-option``) override it for one kind. ``overlap`` is how
    many fault kinds may be active at once (see :class:`Schedule`).
    """
    per_kind = {f"{k}_targets": k for k in NODE_FAULTS}
    unknown = sorted(set(options) - set(per_kind))
    if unknown:
        raise ConfigError(
            f"unknown nemesis option(s) {', '.join(unknown)}; known: targets, max_ops, "
            "overlap, " + ", ".join(per_kind),
            field="nemesis",
        )
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 1:
        raise ConfigError(
            f"overlap must be a positive integer (faults active at once), got {overlap!r}",
            field="nemesis",
        )
    targets = _split(targets)
    if any(k in options for k in per_kind):
        base = (
            dict(targets)
            if isinstance(targets, Mapping)
            else {k: targets for k in NODE_FAULTS if targets is not None}
        )
        targets = {**base, **{per_kind[k]: _split(v) for k, v in options.items()}}
    if max_ops is not None and (not isinstance(max_ops, int) or max_ops < 0):
        raise ConfigError(
            f"max_ops must be a non-negative integer, got {max_ops!r}", field="nemesis"
        )
    if not interval > 0:
        raise ConfigError(
            f"nemesis interval must be positive, got {interval}", field="nemesis_interval"
        )
    kinds, shapes = parse_faults(faults)
    names = {f.strip() for f in faults}
    if {"pause", "freeze"} <= names:
        raise ConfigError(
            "nemesis faults 'pause' and 'freeze' both pause nodes; choose one", field="nemesis"
        )
    tmap = _targets_for(targets, kinds)
    nemeses: list[Nemesis] = []
    kill = pause = None
    power = None
    if "vm-pause" in kinds:
        nemeses.append(VmPauseNemesis())
    if "power" in kinds:
        power = PowerNemesis()
        nemeses.append(power)
    if "partition" in kinds:
        nemeses.append(PartitionNemesis())
    if "clock" in kinds:
        nemeses.append(ClockNemesis())
    if "kill" in kinds:
        kill = KillNemesis()
        nemeses.append(kill)
    if "freeze" in names:
        nemeses.append(HostFreezeNemesis())
    elif "pause" in kinds:
        pause = PauseNemesis()
        nemeses.append(pause)
    if kill is not None and pause is not None:
        kill.paused_by = pause
    if power is not None:
        power.killed_by, power.paused_by = kill, pause
    net_kinds = tuple(k for k in NET_KINDS if k in kinds)
    if net_kinds:
        nemeses.append(NetemNemesis(net_kinds))
    if "failover" in kinds:
        nemeses.append(FailoverNemesis())
    if "lull" in kinds:
        nemeses.append(LullNemesis())
    if "upgrade" in kinds:
        nemeses.append(UpgradeNemesis())
    nemesis = _PackageNemesis(nemeses, needs_primaries=shapes == ("leader",))
    schedule = Schedule(
        kinds=tuple(kinds),
        shapes=shapes,
        targets=tmap,
        interval=interval,
        rng=rng,
        max_ops=max_ops,
        overlap=overlap,
    )
    # the final heal completes a rolling upgrade: every run ends on one mode
    final_ops = [
        fault_op(o.f, {"complete": True}) if o.f == "stop-upgrade" else o for o in heal_ops(kinds)
    ]
    return NemesisPackage(nemesis=nemesis, schedule=schedule, final_ops=final_ops)
