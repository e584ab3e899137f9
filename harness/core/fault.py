"""What a fault is: one registered object that holds everything the harness must know of it.

A fault used to be spread over a dozen tables (the ``--nemesis`` names, the heal order,
the journal's kinds and their undo, the cleanup's pid files, the report's colours), and a
kind missing from one of them was silently dropped (never healed at the end of a run).
Now a fault is a :class:`Fault`, exported by its own module and declared as an entry point
of the ``splitbrain.faults`` group (:mod:`harness.core.plugins`); ``nemesis/registry.py``
loads and checks every one and derives those tables, so adding a fault is one module plus
one entry point, for the built-ins and a plugin alike.

Layer 0: plain data and callables, typed against the contracts only. The fault's code
(its nemesis, its journal undo) lives in its own module, which imports this one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from harness.core.errors import ConfigError, NemesisError

if TYPE_CHECKING:
    from harness.core.nemesis import Nemesis
    from harness.core.remote import Host, Remote

__all__ = [
    "Fault",
    "Effects",
    "Periods",
    "EFFECTS",
    "NEEDS",
    "JournalKind",
    "JournalRecord",
    "Residue",
    "Draw",
    "Selected",
    "NemesisFactory",
    "no_value",
    "declines",
]


class JournalRecord(Protocol):
    """What an undo needs of a journal entry (``nemesis.journal.Entry`` is one)."""

    host: str
    kind: str
    key: str
    undo: dict[str, Any]

    def describe(self) -> str: ...


@dataclass(frozen=True)
class JournalKind:
    """A kind of fault journal entry and how a later process undoes it.

    ``rank`` orders a replay (lower first): what cuts a host off from everything (a
    guest powered off, a frozen host) before the network, the network before clocks and
    processes, the cluster's own nodes last. ``local`` kinds are undone on this machine
    (``remote`` may then be None: the host itself cannot be reached). ``undo`` must be
    idempotent: an entry is written before its fault lands, so the fault may never have
    landed.
    """

    name: str
    rank: int
    undo: Callable[[Remote | None, JournalRecord], None]
    local: bool = False
    doc: str = ""


@dataclass(frozen=True)
class Residue:
    """How a fault's leftovers are recognised on a host without a journal, and removed.

    A journal cannot cover everything (an older harness, a journal on another machine),
    so the clean start also *looks*. The generic scan (iptables rules, netem qdiscs,
    stopped processes, busy ports) needs nothing from the fault; what only the fault knows
    is said here: the pid files and command-line markers of the daemons it runs on hosts,
    what this machine can see of a host that SSH cannot reach (``local``: a frozen
    cgroup, a guest held off by its hypervisor; returns a description or None) and how to
    cure it (``cure_local``), and how to cure a leftover the generic scan reported under
    one of ``cures`` (e.g. ``clock``). ``kind`` names what ``local`` finds in a scan
    (``frozen``, ``machine``; the fault's name when empty).
    """

    kind: str = ""
    pidfiles: Callable[[Host], Sequence[str]] | None = None
    markers: tuple[str, ...] = ()
    local: Callable[[Host], str | None] | None = None
    cure_local: Callable[[Host, Remote | None], None] | None = None
    cures: tuple[str, ...] = ()
    cure: Callable[[Remote], None] | None = None


@dataclass
class Draw:
    """What a fault's ``draw`` may use to choose a ``start-<kind>`` value.

    A schedule is pure: every choice comes from ``rng`` (in call order, so a seed gives
    the same faults), ``nodes`` and whether the DB reports primaries; only the ``leader``
    target stays symbolic, resolved by the nemesis against the live cluster.
    """

    rng: random.Random
    nodes: list[str]
    leader_ok: bool
    interval: float
    options: Any = None
    variants: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selected:
    """A fault as a run selected it: its parsed options and the variants its names chose."""

    options: Any = None
    variants: tuple[str, ...] = ()


NemesisFactory = Callable[[Mapping[str, Selected]], "Nemesis"]
"""Builds one nemesis for the selected kinds of a group, by kind (a fault of its own is a
group of one; ``loss``, ``delay``, ``duplicate`` and ``reorder`` share one netem nemesis)."""


EFFECTS: Mapping[str, str] = {
    "kills": "kills",
    "pauses": "pauses",
    "moves_clock": "moves the clock",
    "cuts_network": "cuts the network",
    "degrades_network": "degrades the network",
    "loses_writes": "loses writes",
    "changes_membership": "changes membership",
}
"""Every effect a fault may declare (an :class:`Effects` field) and the words a report
uses for it."""


NEEDS: Mapping[str, str] = {
    "machine": "hosts that are virtual machines (Host.machine): it acts through the hypervisor",
    "netem": "tc netem on the hosts: it acts through the kernel's queueing discipline",
    "primaries": "a DB that reports its leader (HasPrimaries)",
    "fuse": "hosts that declare FUSE (extras fuse: true): it runs the node's directory over "
    "a FUSE file system of its own (the lazy fs, which keeps what the node did not fsync in "
    "a page cache of its own, to drop or tear)",
}
"""Every word a fault's ``needs`` may hold, and what it means. A DB may decline a need
(``harness.core.fault.declines``: the lazy fs under files it never fsyncs), so a word here
says how the fault acts, not only what it asks of the hosts."""


@dataclass(frozen=True)
class Effects:
    """What a fault does to the cluster, for the modules that are not the fault.

    Coverage (which situations a run reached), the report, the schedule file and the
    shrinker reason about *what happened*, not about fault names: a node killed is a node
    killed, whether ``kill``, a power cut or a disk fault took it down, a plugin's fault
    included. Each flag is a promise about the fault's ``start-<kind>`` (its completion
    says whom it hit, as :class:`Periods` tells) and its ``stop-<kind>`` (which undoes it):

    * ``kills``: the DB's processes on the nodes hit are gone (SIGKILL, power, a crash);
      ``stop`` starts them again.
    * ``pauses``: they are stopped, not killed (SIGSTOP, a frozen host or guest), and
      resume where they were on ``stop``.
    * ``moves_clock``: their clocks are off (each node's offset, ms, is the period's
      detail; None when it cannot be told, as for a strobe); node log stamps move with it.
    * ``cuts_network``: messages between nodes are dropped as the start value's grudge
      (node → peers it drops, :attr:`Periods.grudge`) says.
    * ``degrades_network``: messages are lost, delayed, duplicated or reordered, not cut.
    * ``loses_writes``: what the nodes hit had written but not made durable is gone.
    * ``changes_membership``: the cluster's configuration (its voters) is changed.
    """

    kills: bool = False
    pauses: bool = False
    moves_clock: bool = False
    cuts_network: bool = False
    degrades_network: bool = False
    loses_writes: bool = False
    changes_membership: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """The declared effects, as :data:`EFFECTS` keys."""
        return tuple(k for k in EFFECTS if getattr(self, k))

    @property
    def words(self) -> tuple[str, ...]:
        """The declared effects as a report says them (``kills``, ``moves the clock``)."""
        return tuple(EFFECTS[k] for k in self.names)


@dataclass(frozen=True)
class Periods:
    """How the history shows when, and on which nodes, a fault was in force.

    A period opens at a ``start-<kind>`` completion (what the nemesis says it did) and
    closes at the next ``stop-<kind>`` completion (``harness.core.periods`` derives them,
    once, for coverage and the report alike):

    * ``hit``: keys of the start completion's value naming the nodes it hit, tried in
      order; the first one *present* wins (``killed: []`` means no node was killed, even
      though ``nodes`` names the targets). A mapping names its nodes by its keys and gives
      each one's detail (the clock's ``offsets_ms``). Empty: the fault acts on the whole
      cluster, one period with no node.
    * ``ended``: keys of the stop completion's value naming the nodes it ended, the same
      way; none present (or no keys): the stop ends every period of the kind.
    * ``neutral``: a detail that means "back to normal" (the clock's offset 0): a start
      that reports it for a node ends that node's period instead of opening one.
    * ``grudge``: the key of the start value holding who drops whom (a partition's
      ``grudge``), for faults that cut the network.

    A start naming a node whose period is open closes it there and opens the next one
    (a second clock bump: the node's offset changed).
    """

    hit: tuple[str, ...] = ("nodes",)
    ended: tuple[str, ...] = ()
    neutral: float | None = None
    grudge: str = ""


def no_value(d: Draw) -> dict[str, Any]:
    """The start value of a cluster fault that needs no choice."""
    return {}


def declines(db: object) -> dict[str, str]:
    """What ``db`` declines of the faults, each with why, as the DB declares it: keyed by
    what a fault does or needs, never by a fault's name.

    A DB declares ``declines`` (a mapping, or a property when it depends on the options)
    when it has a capability a fault uses but a fact of its own rules the fault out: its
    acks come from page caches, so a lazy fs would judge a promise it never made; its
    ensemble is static, so nothing can change its membership. A key is one of:

    * an effect (:data:`EFFECTS`: ``changes_membership``, ``loses_writes``,
      ``kills`` ...): every fault that declares that effect is declined;
    * a need (:data:`NEEDS`: ``fuse``, ``machine``, ``netem``,
      ``primaries``): every fault that needs it, i.e. acts through it;
    * a capability's class name (``FailsOver``, ``TransfersLeadership``): the DB has the
      protocol's methods (a ``harness.core.db`` protocol), but in this configuration
      every fault that needs it (``Fault.db_needs``) is declined.

    ``Fault.why_not`` matches these against the fault's own :attr:`Fault.traits`, so the deck leaves
    out, and a ``--nemesis`` run refuses before it starts, a plugin's fault of the same
    kind as a built-in one without either being named here. A malformed declaration (not
    a str-to-str mapping, or a lowercase key that is neither an effect nor a need: a typo
    would decline nothing) is a ConfigError naming the DB.
    """
    if getattr(db, "refused_faults", None) is not None:
        # the older form, keyed by fault name: read silently it would decline nothing
        raise ConfigError(
            f"{type(db).__name__}.refused_faults names faults; declare `declines` instead, "
            "keyed by what a fault does or needs (harness.core.fault.declines)",
            field="refused_faults",
        )
    got = getattr(db, "declines", None)
    if got is None:
        return {}
    if not isinstance(got, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in got.items()
    ):
        raise ConfigError(
            f"{type(db).__name__}.declines must map what a fault does or needs to the DB's "
            f"reason (str to non-empty str), got {got!r}",
            field="declines",
        )
    bad = [k for k in got if not (k in EFFECTS or k in NEEDS or k[:1].isupper())]
    if bad:
        raise ConfigError(
            f"{type(db).__name__}.declines: {', '.join(map(repr, bad))} is neither an effect "
            f"({', '.join(EFFECTS)}), a need ({', '.join(NEEDS)}) nor a capability's class "
            f"name (FailsOver)",
            field="declines",
        )
    return dict(got)


@dataclass(frozen=True, kw_only=True)
class Fault:
    """One fault: its names, options, targets, nemesis, draw, journal, leftovers, heal rank, colour.

    * ``name``: the ``--nemesis`` name; ``kind``: the ops' kind (``start-<kind>``,
      ``stop-<kind>``), the name unless a variant shares another fault's ops (``freeze``,
      a whole-host pause, records ``start-pause``; two faults of one kind cannot run
      together).
    * ``aliases``: more ``--nemesis`` names, each selecting some ``variants`` (the
      partition shapes ``partition-ring`` and so on); the bare name selects ``variants``.
    * ``options``: a frozen dataclass (``harness.core.options``) of the fault's own
      ``--nemesis-option`` keys, given as ``<name>_<field>``; a node fault's has ``targets``.
    * ``targets``: ``node`` (aimed at nodes) or ``cluster`` (the fault picks its own);
      ``needs``: ``machine`` (hosts with ``Host.machine``), ``netem`` (tc netem),
      ``primaries`` (a DB reporting its leader), ``fuse`` (hosts whose inventory declares
      ``extras["fuse"]``; :data:`NEEDS`); ``db_needs``: the capabilities (``harness.core.db``
      protocols) the DB must declare; ``refuse``: any other reason it cannot act on this DB
      and these hosts. What the DB itself declines (``harness.core.fault.declines``) is matched
      against the fault's :attr:`traits`, never its name. :meth:`why_not` joins them, so the
      default campaign leaves out, and names, a fault script it could not play, and a fault
      named with ``--nemesis`` stops the run before it starts, instead of failing mid-run.
    * ``nemesis``: a factory given the selected kinds of its ``group`` and their options;
      ``link`` wires it to the other nemeses of the run (a kill that ends a pause).
    * ``draw``: the start value, from a :class:`Draw`; ``usable``: which variants can
      do something on this many nodes (a shape that would cut nothing is never drawn).
    * ``journal``: the entry kinds it writes; ``residue``: its leftovers without a journal.
    * ``heal_value``: the value of the final heal's ``stop-<kind>`` (the rolling upgrade
      completes every remaining step there).
    * ``heal_rank``: where its ``stop-<kind>`` goes in the final heal (lower first); a
      fault without one has no heal and is refused at registration.
    * ``rolling``: a change made one node per start (the rolling upgrade): the stock
      schedule starts it whenever it is idle until it has had one start per node, so the
      change lands early and under load (with one fault at a time, its starts alternate
      with the others'), and then only when nothing else is idle.
    * ``effects``: what it does to the cluster (:class:`Effects`: kills, pauses, moves
      the clock, ...), and ``periods``: how its periods are read from the history
      (:class:`Periods`); everything outside the fault's module asks these, never its name.
    * ``colour``: its shade in reports; ``package`` is filled in by the registry.
    """

    name: str
    nemesis: NemesisFactory
    heal_rank: int | None = None
    draw: Callable[[Draw], dict[str, Any]] = no_value
    kind: str = ""
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    variants: tuple[str, ...] = ()
    usable: Callable[[str, int], bool] | None = None
    options: type | None = None
    targets: Literal["node", "cluster"] = "node"
    needs: frozenset[str] = frozenset()
    db_needs: tuple[type, ...] = ()
    refuse: Callable[[object, Sequence[Host]], str | None] | None = None
    group: str = ""
    link: Callable[[Any, Mapping[str, Any]], None] | None = None
    journal: tuple[JournalKind, ...] = ()
    residue: Residue = field(default_factory=Residue)
    heal_value: Mapping[str, Any] | None = None
    rolling: bool = False
    effects: Effects = field(default_factory=Effects)
    periods: Periods = field(default_factory=Periods)
    colour: str = "#999999"
    doc: str = ""
    package: str = ""

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", self.name)
        if not self.group:
            object.__setattr__(self, "group", self.name)

    @property
    def names(self) -> tuple[str, ...]:
        """Every ``--nemesis`` name that selects this fault."""
        return (self.name, *self.aliases)

    @property
    def traits(self) -> tuple[str, ...]:
        """What a DB may decline this fault by (``harness.core.fault.declines``): its effects'
        names (:data:`EFFECTS`), its needs (:data:`NEEDS`) and the names of the capabilities
        it needs of the DB (``FailsOver``). A fault is declined by what it does and needs,
        so a plugin's fault that declares the same is declined too, unnamed."""
        return (
            *self.effects.names,
            *sorted(self.needs),
            *dict.fromkeys(c.__name__ for c in self.db_needs),
        )

    def declined_by(self, db: object) -> str | None:
        """The DB's own reason not to take this fault, or None: the first of its
        :attr:`traits` that ``db`` declines (a ConfigError for a malformed declaration)."""
        declined = declines(db)
        for trait in self.traits:
            why = declined.get(trait)
            if why:
                return f"{self.name}: {why} ({type(db).__name__} declines {trait})"
        return None

    def why_not(self, db: object, hosts: Sequence[Host]) -> str | None:
        """Why this fault cannot act on ``db`` running on ``hosts``, or None when it can.

        Declared facts only (the DB's capabilities and what it declines, the inventory's
        host facts): nothing is asked of a host, so the answer is known before the run
        starts.
        """
        from harness.core.db import HasPrimaries

        missing = [c.__name__ for c in self.db_needs if not isinstance(db, c)]
        if "primaries" in self.needs and not isinstance(db, HasPrimaries):
            missing.append("HasPrimaries")
        if missing:
            return f"{self.name} needs a DB that declares {', '.join(missing)}"
        if "machine" in self.needs:
            bare = sorted(h.name for h in hosts if h.machine is None)
            if bare:
                return f"{self.name} needs VM hosts; {', '.join(bare)} have no hypervisor"
        if "fuse" in self.needs:
            bare = sorted(h.name for h in hosts if not h.extras.get("fuse"))
            if bare:
                return (
                    f"{self.name} needs hosts that declare FUSE (extras fuse: true); "
                    f"{', '.join(bare)} do not"
                )
        declined = self.declined_by(db)
        if declined is not None:
            return declined
        return self.refuse(db, hosts) if self.refuse is not None else None

    def selected_variants(self, name: str) -> tuple[str, ...]:
        return self.variants if name == self.name else tuple(self.aliases[name])

    def check_usable(self, variants: Sequence[str], n: int) -> tuple[str, ...]:
        """The variants that do something on ``n`` nodes; NemesisError when none does."""
        if self.usable is None:
            return tuple(variants)
        ok = tuple(v for v in variants if self.usable(v, n))
        if variants and not ok:
            raise NemesisError(f"{self.name}: {', '.join(variants)} would do nothing on {n} nodes")
        return ok
