"""What the zoo runs: one campaign per node mode, the targets (bugs) it meets, and their seeds.

There is deliberately no per-bug configuration: a bug that only a tailored
campaign catches says more about the tailor than about the harness. The fault
profiles themselves are nemesis schedules (:mod:`nemesis.profiles`); this
module only picks which ones a campaign cycles.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from harness.core.errors import ConfigError
from harness.core.nemesis import NemesisPackage
from harness.core.spec import TestSpec
from nemesis.disk import DISK_KINDS
from nemesis.motifs import MOTIFS
from nemesis.profiles import PROFILES, SCRIPTS, build_profile_package

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
    needs_vm: bool = False
    """Its faults need VM hosts (``Host.machine``): it runs only with ``zoo --vm``."""

    def with_time_limit(self, seconds: float) -> Campaign:
        return replace(self, time_limit=seconds)

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
        return replace(self, profiles=tuple(names), shuffle=False) if self.profiles else self

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["nemesis"] = list(self.nemesis)
        d["profiles"] = list(self.profiles)
        d["workload_options"] = dict(self.workload_options)
        d["db_options"] = dict(self.db_options)
        d["nemesis_options"] = dict(self.nemesis_options)
        return d


# Mode dledger draws fault scripts as a seeded deck, the same for every bug:
# the per-bug profiles of nemesis/profiles.py and the generic motifs of
# nemesis/motifs.py (docs/zoo.md has the measurements).
# "mixed" runs the append log and per-key registers at once, with the status
# sampler, so log safety (I2-I4), linearizability (I7) and the sampled
# invariants (I1, I5, I6) are checked in every run; reads served by followers
# and isolated leaders expose stale-read. Two workers per node keep reads
# flowing on an isolated leader while its writes hang. The workloads that
# read the past ride along: archive keys written once and read for the rest of
# the run, retired register keys still read, a set in the kv map read back
# from every node, and clients that stick to the node that last answered.
SCRIPT_FAULTS = (
    "partition-leader",
    "partition-bridge",
    "partition-majority",
    "kill",
    "pause",
    "clock",
)
"""The fault kinds the motifs and profiles drive (profiles also hold writes: ``lull``)."""
# The disk faults (issue 28, docs/disk-faults.md) are driven by the "disk" profile
# only: they mount a lazy fs over every node's directory, so hosts need FUSE.
DEFAULT_CAMPAIGN = Campaign(
    workload="mixed",
    nemesis=(*SCRIPT_FAULTS, "lull", *DISK_KINDS),
    profiles=SCRIPTS,
    nemesis_interval=2.5,
    time_limit=90.0,
    rate=60.0,
    concurrency=15,
    workload_options=(
        ("mixed_weights", (1, 2, 2, 0.25)),
        ("read_fraction", 0.25),
        ("ops_per_key", 100),
        ("retired_reads", 0.1),
        ("sticky_ops", 20),
        # About two workers in three stuck at a time (a stint of 20 ops, then ~10
        # free ones): the free ones find the new leader and write while the old
        # one sleeps, the stuck ones read from the sleeper.
        ("sticky_fraction", 0.1),
        # Both below stopped-leader's 3-4 s pause, as real clients' are: writes
        # trapped on the frozen leader give up and find the new one, which then
        # commits while the sleeper still sleeps; a sticky worker re-sends its read
        # to the sleeper every 0.5 s, so the one still waiting when it wakes was
        # invoked after those commits (docs/zoo.md, M3b).
        ("client_timeout", 2.0),
        ("read_timeout", 0.5),
    ),
    shuffle=True,
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
    nemesis=SCRIPT_FAULTS,
    profiles=MOTIFS,
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
    if c.profiles:
        how = "drawn as a seeded deck" if c.shuffle else "cycled"
        faults = f"fault scripts {','.join(c.profiles)} {how} (basic hold {c.nemesis_interval:g} s)"
    else:
        opts = "".join(f", {k}={v}" for k, v in c.nemesis_options)
        faults = f"faults {','.join(c.nemesis)} (interval {c.nemesis_interval:g} s{opts})"
    return (
        f"db dledger{db}; workload {c.workload}{wl}; concurrency {c.concurrency}, "
        f"{c.rate:g} ops/s; {faults}; time limit {c.time_limit:g} s"
    )


def build_zoo_package(c: Campaign, seed: int) -> NemesisPackage:
    """The stock nemeses and heal ops for the campaign's faults, driven by its profiles.

    A campaign without profiles keeps the stock schedule (with its nemesis options).
    The rng is derived from the seed as the runner derives its own, so run i of
    every target meets the same faults.
    """
    return build_profile_package(
        list(c.nemesis),
        c.profiles,
        interval=c.nemesis_interval,
        rng=random.Random(seed ^ 0x5EED),
        shuffle=c.shuffle,
        **dict(c.nemesis_options),
    )


def zoo_spec(c: Campaign, nodes: Sequence[str], mode: str, bug: str | None, seed: int) -> TestSpec:
    """The test of one zoo run; ``zoo_profiles`` in its options records the profiles in test.json."""
    name = f"zoo-{bug or 'correct'}" + ("" if mode == "dledger" or bug else f"-{mode}")
    return TestSpec(
        name=name,
        nodes=tuple(nodes),
        db="dledger",
        workload=c.workload,
        nemesis=c.nemesis,
        time_limit=c.time_limit,
        concurrency=c.concurrency,
        rate=c.rate,
        seed=seed,
        bug=bug,
        nemesis_interval=c.nemesis_interval,
        options={
            **dict(c.workload_options),
            "db": dict(c.db_options),
            "nemesis": dict(c.nemesis_options),
            "zoo_profiles": list(c.profiles),
            "zoo_shuffle": c.shuffle,
        },
    )
