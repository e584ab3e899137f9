"""What the zoo runs: one campaign per node mode, the targets (bugs) it meets, and their seeds.

There is deliberately no per-bug configuration: a bug that only a tailored
campaign catches says more about the tailor than about the harness. The fault
profiles themselves are nemesis schedules (:mod:`nemesis.profiles`); this
module only picks which ones a campaign cycles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from harness.core.errors import ConfigError
from harness.core.nemesis import NemesisPackage
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.dbs.dledger import STRONGEST_WORKLOAD
from nemesis.deck import DEFAULT_TIME_LIMIT, deck_for
from nemesis.deck import HOLD as DECK_HOLD
from nemesis.motifs import MOTIFS
from nemesis.profiles import PROFILES, SCRIPTS

__all__ = [
    "BROKER_CAMPAIGN",
    "UPGRADE_CAMPAIGN",
    "Campaign",
    "DEFAULT_CAMPAIGN",
    "HA_CAMPAIGN",
    "NO_CAMPAIGN_YET",
    "CAMPAIGNS",
    "QUICK_TIME_LIMIT",
    "CORRECT",
    "PROFILES",
    "SCRIPTS",
    "Target",
    "zoo_bugs",
    "bug_mode",
    "target_label",
    "select_targets",
    "split_vm_targets",
    "POWER_BUGS",
    "run_seeds",
    "campaign_command",
    "describe_campaign",
    "build_zoo_package",
    "zoo_spec",
]

CORRECT = "(correct)"
"""The label of the node with no seeded bug, in the table and the JSON."""


@dataclass(frozen=True)
class Campaign:
    """Everything a ``splitbrain run`` needs besides the inventory, the bug and the seed."""

    workload: str
    nemesis: tuple[str, ...]
    profiles: tuple[str, ...]
    nemesis_interval: float
    time_limit: float
    rate: float
    concurrency: int
    workload_options: tuple[tuple[str, Any], ...] = ()
    db_options: tuple[tuple[str, Any], ...] = ()
    nemesis_options: tuple[tuple[str, Any], ...] = ()
    shuffle: bool = False
    """Draw the profiles as a seeded deck (every one once per pass, shuffled), not in order."""
    deck: bool = False
    """Play the DB's deck (:func:`nemesis.deck.deck_for`, as ``splitbrain run`` does by
    default): ``profiles`` if given, else every script the DB and hosts can take."""
    passes: int | None = None
    """End the load after this many passes over the deck (``time_limit`` is then a cap)."""
    needs_vm: bool = False
    """Its faults need VM hosts (``Host.machine``): it runs only with ``zoo --vm``."""

    def with_time_limit(self, seconds: float) -> Campaign:
        """Load for ``seconds``: a deck then cycles until the time is up."""
        return replace(self, time_limit=seconds, passes=None)

    def with_profiles(self, names: Sequence[str]) -> Campaign:
        """Only these fault scripts (profiles or motifs), played in this order (for tuning one,
        or reproducing a run); an unknown name is an error."""
        unknown = [n for n in names if n not in SCRIPTS]
        if unknown or not names:
            raise ConfigError(
                f"unknown fault profile(s) {', '.join(unknown) or '(none given)'} "
                f"(known: {', '.join(SCRIPTS)})",
                field="profiles",
            )
        if not (self.profiles or self.deck):
            return self
        return replace(self, profiles=tuple(names), shuffle=False, passes=None)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["nemesis"] = list(self.nemesis)
        d["profiles"] = list(self.profiles)
        d["workload_options"] = dict(self.workload_options)
        d["db_options"] = dict(self.db_options)
        d["nemesis_options"] = dict(self.nemesis_options)
        return d


# Mode dledger is what `splitbrain run` does by default, so there is one campaign: the
# reference node's strongest workload (harness/dbs/dledger.py: "mixed", with the readers
# of the past and sticky clients) under the deck of every fault script it can take (the
# per-bug profiles of nemesis/profiles.py, the generic motifs of nemesis/motifs.py and
# the membership motifs; nemesis/deck.py), the same for every bug (docs/zoo.md).
DEFAULT_CAMPAIGN = Campaign(
    workload=STRONGEST_WORKLOAD.name,
    nemesis=(),
    profiles=(),
    nemesis_interval=DECK_HOLD,
    time_limit=DEFAULT_TIME_LIMIT,
    rate=STRONGEST_WORKLOAD.rate or 60.0,
    concurrency=STRONGEST_WORKLOAD.concurrency or 15,
    workload_options=(
        *STRONGEST_WORKLOAD.options.items(),
        ("client_timeout", STRONGEST_WORKLOAD.client_timeout),
    ),
    shuffle=True,
    deck=True,
    passes=1,
)
# Mode ha (RocketMQ master/slave) has no election, so its bugs need other
# faults: the master cut off from every slave *while* the operator fails over.
# The stock schedule with two faults active at once gives exactly that overlap
# now and then; a sync master that keeps acking (ha-ok-on-timeout) or counts
# sent bytes as stored (ha-ack-on-send) then loses acked appends, which sync
# mode forbids.
HA_CAMPAIGN = Campaign(
    workload="append",
    nemesis=("partition-leader", "failover"),
    profiles=(),
    nemesis_interval=3.0,
    time_limit=40.0,
    rate=50.0,
    concurrency=5,
    db_options=(("mode", "ha"), ("sync", True), ("slave_timeout_ms", 1000)),
    nemesis_options=(("overlap", 2),),
)
# Mode broker (RocketMQ on DLedger, node_impl/broker.py) is checked as producers
# and consumers see it: the queue workload with final drains of every node. Its
# faults are the generic motifs of the DLedger campaign (none of them built for a
# broker bug), drawn as a seeded deck: a leader cut off and killed while cut off
# (``deposed-crash``) restarts with an uncommitted tail a new leader replaces (consume
# queues rebuilt past the commit index point at replaced entries); a leader cut off
# or stopped while clients still reach it is a deposed master that may keep acking.
BROKER_CAMPAIGN = Campaign(
    workload="queue",
    nemesis=(),
    profiles=MOTIFS,
    deck=True,
    nemesis_interval=2.5,
    time_limit=60.0,
    rate=60.0,
    concurrency=6,
    db_options=(("mode", "broker"),),
    shuffle=True,
)
UPGRADE_CAMPAIGN = Campaign(
    workload="queue",
    nemesis=("partition", "kill", "upgrade"),
    profiles=(),
    nemesis_interval=3.0,
    time_limit=70.0,
    rate=60.0,
    concurrency=6,
    db_options=(("mode", "broker"), ("upgrade_from", "ha")),
    nemesis_options=(("overlap", 2),),
)
"""The broker reached the way operators reach it: a mode-ha group holding data, switched
node by node under load. Measured apart from BROKER_CAMPAIGN because the switch takes a
good part of a run: the broker's own bugs (a deposed master, an uncommitted tail at a
restart) then meet too few leader kills, and escaped it (docs/zoo.md)."""
# A node that writes everything to the OS but never fsyncs loses nothing to kill -9:
# only the loss of the OS's page cache shows it: a VM lab's power cut, or the lazy
# fs of the default campaign's "disk" profile (so no bug needs this one any more;
# it stays for VM labs, where the two must agree: docs/disk-faults.md).
POWER_CAMPAIGN = Campaign(
    workload="append",
    nemesis=("power",),
    profiles=(),
    nemesis_interval=15.0,
    time_limit=60.0,
    rate=20.0,
    concurrency=5,
    nemesis_options=(("power_targets", "all"),),
    needs_vm=True,
)
CAMPAIGNS = {
    "dledger": DEFAULT_CAMPAIGN,
    "ha": HA_CAMPAIGN,
    "broker": BROKER_CAMPAIGN,
    "upgrade": UPGRADE_CAMPAIGN,
    "power": POWER_CAMPAIGN,
}
POWER_BUGS: frozenset[str] = frozenset()
"""Seeded bugs only a VM's power cut exposes (docs/vm-faults.md): none since the lazy fs
(``skip-fsync`` meets the default campaign's ``disk`` profile on any FUSE host)."""
NO_CAMPAIGN_YET: frozenset[str] = frozenset()
"""Seeded bugs no campaign can reach yet (none since the rolling ``upgrade`` fault)."""
QUICK_TIME_LIMIT = 16.0


Target = tuple[str, "str | None"]
"""(mode, bug); bug None is the correct node of that mode."""


def zoo_bugs() -> list[str]:
    """The reference node's seeded bugs, both modes, in the node's own order."""
    from node_impl.bugs import BROKER_BUGS, BUGS, HA_BUGS

    broker = [b for b in BROKER_BUGS if b not in NO_CAMPAIGN_YET]
    return [*BUGS, *HA_BUGS, *broker]


def bug_mode(bug: str) -> str:
    """The campaign a seeded bug meets: by the mode it lives in (``node_impl.bugs`` names
    mode-ha bugs ``ha-*``, mode-broker bugs ``broker-*``), and ``upgrade`` for a broker
    bug of the switch from mode ha (``broker-divided-*``), ``power`` for a bug only a
    power cut exposes."""
    if bug in POWER_BUGS:
        return "power"
    if bug.startswith("broker-divided-"):
        return "upgrade"
    if bug.startswith("broker-"):
        return "broker"
    return "ha" if bug.startswith("ha-") else "dledger"


def split_vm_targets(targets: Sequence[Target], vm: bool) -> tuple[list[Target], list[str]]:
    """The targets a lab can run, and the bugs left out because they need VM hosts.

    A bug left out is named by the caller (never a silent skip): on a namespace lab
    it would only ever "escape".
    """
    if vm:
        return list(targets), []
    kept = [t for t in targets if not CAMPAIGNS[t[0]].needs_vm]
    return kept, [b for m, b in targets if CAMPAIGNS[m].needs_vm and b is not None]


def target_label(mode: str, bug: str | None) -> str:
    return bug or (CORRECT if mode == "dledger" else f"(correct, {mode})")


def select_targets(available: Sequence[str], requested: str | None) -> list[Target]:
    """Per mode, its correct node first, then its requested bugs (all when None), in list order.

    A mode runs only when one of its bugs is chosen (a false alarm is judged on the
    campaigns the bugs met, not on one nobody asked for); with no bug at all, mode
    dledger's correct node runs alone. ``requested`` is ``a,b,...``; ``none`` or ``correct`` alone
    runs only the correct node. An unknown name is a :class:`ConfigError` naming
    it and the known ones.
    """
    if requested is None:
        chosen = list(available)
    else:
        names = [p.strip() for p in requested.split(",") if p.strip()]
        if not names:
            raise ConfigError("--bugs is empty; name bugs or leave the option out", field="bugs")
        chosen = []
        for name in names:
            if name in ("none", "correct", CORRECT):
                continue
            if name not in available:
                raise ConfigError(
                    f"unknown bug {name!r} (known: {', '.join(available)})", field="bugs"
                )
            if name not in chosen:
                chosen.append(name)
        chosen.sort(key=available.index)
    out: list[Target] = []
    for mode in CAMPAIGNS:
        mine = [b for b in chosen if bug_mode(b) == mode]
        if mine or (mode == "dledger" and not chosen):
            out += [(mode, None), *((mode, b) for b in mine)]
    return out


def run_seeds(base: int, runs: int) -> list[int]:
    """Seed of run i is ``base + i``: every bug meets the same fault schedules, run by run."""
    return [base + i for i in range(runs)]


def campaign_command(
    c: Campaign, *, lab: str | None = None, bug: str | None = None, seed: int | None = None
) -> str:
    """The command line that reproduces one zoo run (the correct node runs too)."""
    parts = ["splitbrain zoo", "--runs 1"]
    if c.time_limit != DEFAULT_CAMPAIGN.time_limit:
        parts.append(f"--time-limit {c.time_limit:g}")
    if c.profiles and (c.profiles, c.shuffle) != (
        DEFAULT_CAMPAIGN.profiles,
        DEFAULT_CAMPAIGN.shuffle,
    ):
        parts.append(f"--profiles {','.join(c.profiles)}")
    parts.append(f"--bugs {bug}" if bug else "--bugs none")
    node_src = dict(c.db_options).get("node_src")
    if node_src is not None:
        parts.append(f"--node-src {node_src}")
    if seed is not None:
        parts.append(f"--seed {seed}")
    if lab:
        parts.append(f"--lab {lab}")
    return " ".join(parts)


def describe_campaign(c: Campaign) -> str:
    """One line saying what every run does."""
    wl = "".join(f", {k}={v}" for k, v in c.workload_options)
    db = "".join(f", {k}={v}" for k, v in c.db_options)
    if c.deck and not c.profiles:
        faults = (
            f"the deck of every fault script the DB can take, shuffled "
            f"(basic hold {c.nemesis_interval:g} s)"
        )
        if c.passes is not None:
            return (
                f"db dledger{db}; workload {c.workload}{wl}; concurrency {c.concurrency}, "
                f"{c.rate:g} ops/s; {faults}; the load ends after {c.passes} pass(es) "
                f"(at most {c.time_limit:g} s)"
            )
    elif c.profiles:
        how = "drawn as a seeded deck" if c.shuffle else "cycled"
        faults = f"fault scripts {','.join(c.profiles)} {how} (basic hold {c.nemesis_interval:g} s)"
    else:
        opts = "".join(f", {k}={v}" for k, v in c.nemesis_options)
        faults = f"faults {','.join(c.nemesis)} (interval {c.nemesis_interval:g} s{opts})"
    return (
        f"db dledger{db}; workload {c.workload}{wl}; concurrency {c.concurrency}, "
        f"{c.rate:g} ops/s; {faults}; time limit {c.time_limit:g} s"
    )


def build_zoo_package(c: Campaign, hosts: Sequence[Host], seed: int) -> NemesisPackage:
    """The nemesis package one zoo run of ``c`` gets (the runner builds the same from
    :func:`zoo_spec`'s spec; this is for callers that want it in hand)."""
    from harness.run.runner import build_package_for

    return build_package_for(zoo_spec(c, hosts, "dledger", None, seed))


def zoo_spec(c: Campaign, hosts: Sequence[Host], mode: str, bug: str | None, seed: int) -> TestSpec:
    """The test of one zoo run. A deck campaign records its deck (``options.deck``: the
    scripts the DB and hosts can take, and what was left out) as ``splitbrain run`` does."""
    name = f"zoo-{bug or 'correct'}" + ("" if mode == "dledger" or bug else f"-{mode}")
    nemesis = c.nemesis
    options: dict[str, Any] = {
        **dict(c.workload_options),
        "db": dict(c.db_options),
        "nemesis": dict(c.nemesis_options),
    }
    if c.deck or c.profiles:
        from harness.dbs import get_db

        deck = deck_for(get_db("dledger", dict(c.db_options)), hosts, c.profiles or None)
        deck = replace(deck, hold=c.nemesis_interval, shuffle=c.shuffle, passes=c.passes)
        nemesis = deck.faults
        options["deck"] = deck.to_json()
    return TestSpec(
        name=name,
        nodes=tuple(h.name for h in hosts),
        db="dledger",
        workload=c.workload,
        nemesis=nemesis,
        time_limit=c.time_limit,
        concurrency=c.concurrency,
        rate=c.rate,
        seed=seed,
        bug=bug,
        nemesis_interval=c.nemesis_interval,
        options=options,
    )
