"""Fault profiles: short scripted overlaps of faults, for bugs one fault at a time never meets.

Jepsen's combined nemesis overlaps faults; the stock schedule
(:mod:`nemesis.package`) applies one at a time, which can never isolate a
leader whose wall clock is skewed. So the zoo cycles a few fault *profiles*,
each a short script with seeded details, the same for every bug
(docs/zoo.md has the measurements):

  lease    every clock set back, then the leader isolated, healed: the old
           leader's wall-clock lease outlives its leadership (wallclock-lease).
           Any leader isolation under load also exposes ack-before-quorum,
           no-truncate, ok-on-term-change and commit-regress.
  rejoin   a minority sleeps through an election, then a voter restarts
           (forget-vote: see :func:`_rejoin_steps`).
  crash    kill -9 every node right after acks, restart at once, and again
           during the election that follows (no-fsync; forget-vote:
           restarted voters forget whom they chose this term).
  lag      a minority cut off while the majority commits, then the heal and a
           kill -9 of the leader together: a lagging node may win the next
           election (vote-without-log-check); leader changes with old-term
           entries in flight are commit-old-term's chance.
  bridge   one node sees both halves (lax-push-term).
  figure8  Raft's Figure 8, staged (commit-old-term: see :func:`_figure8_steps`).
  disk     power lost with un-fsynced writes, a torn last write, a flipped bit and a
           rolled-back term file (skip-fsync, trust-torn-tail, skip-crc,
           trust-term-file: see :func:`nemesis.disk.disk_steps`). Made of parts
           (:data:`SCRIPT_PARTS`): a DB or hosts that refuse one fault lose that part.

The zoo's default campaign mixes these with the generic fault motifs of
:mod:`nemesis.motifs` (:data:`SCRIPTS` names both), drawn as a seeded deck:
every script once per deck, in a shuffled order, then a fresh shuffle.

Profiles are data (:class:`~nemesis.schedules.Step` lists) and pure like every
schedule: where a step must wait for an election, its builder answers
:class:`~nemesis.schedules.Retry` and the runner asks again shortly.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import nemesis.grudge as g
from harness.core.db import HasPrimaries
from harness.core.errors import ConfigError
from harness.core.nemesis import NemesisPackage
from harness.core.roles import roles_now
from nemesis.disk import DISK_PARTS, disk_steps
from nemesis.motifs import MEMBERSHIP_MOTIFS, MOTIFS, motif_steps
from nemesis.package import build_package
from nemesis.role_motifs import ROLE_MOTIFS, role_steps
from nemesis.schedules import Retry, Step, StepSchedule, leader_within, scaled, start, stop
from nemesis.steering import Steering

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = [
    "PROFILES",
    "SCRIPTS",
    "ALL_SCRIPTS",
    "SCRIPT_PARTS",
    "profile_steps",
    "aim_without_leader",
    "ProfileSchedule",
    "build_profile_package",
]

PROFILES = ("lease", "rejoin", "crash", "lag", "bridge", "figure8", "disk")
"""The per-bug profiles, each staged after studying one seeded bug."""

SCRIPTS = PROFILES + MOTIFS + MEMBERSHIP_MOTIFS
"""Every fault script a campaign may name: the profiles, then the generic motifs (the
membership ones last: only a ``Reconfigurable`` DB's deck draws them)."""
ALL_SCRIPTS = SCRIPTS + ROLE_MOTIFS
"""With the role scripts (nemesis/role_motifs.py), which the deck adds for a DB that
declares ``HasRoles`` only, so the decks of the others are what they were."""
SCRIPT_PARTS: Mapping[str, tuple[frozenset[str], ...]] = {"disk": DISK_PARTS}
"""Scripts made of parts that play without one another, each part the fault kinds whose
steps make sense only together. When the DB or hosts refuse a kind, the deck drops the
part holding it and keeps the rest (:func:`nemesis.deck.deck_for`). A script not named
here, or a kind outside every part, is one staged situation: a refusal leaves it out
whole (a lease script without its clock bump is just a leader partition)."""


def profile_steps(
    name: str,
    nodes: Sequence[str],
    rng: random.Random,
    hold: float,
    roles: Mapping[str, Sequence[str]] | None = None,
    drop: Collection[str] = (),
) -> list[Step]:
    """One profile's steps; every fault it starts, it stops. ``roles`` (the DB's
    ``HasRoles`` answer at the draw) only shapes the role scripts. The steps of the
    kinds in ``drop`` (the deck's ``dropped`` for this script) are left out, both
    ``start-K`` and ``stop-K``: the one place a dropped part leaves a script.

    The rng draws happen here, in a fixed order (then in the builders, when
    they land), so a seed replays the same script: the zoo's findings are
    reproduced by seed. Dropped steps are built before they are left out, so what
    stays draws what it would have drawn in the whole script.
    """
    steps = _script_steps(name, nodes, rng, hold, roles)
    if not drop:
        return steps
    gone = {f"{p}-{k}" for k in drop for p in ("start", "stop")}
    return [s for s in steps if s.f not in gone]


def _script_steps(
    name: str,
    nodes: Sequence[str],
    rng: random.Random,
    hold: float,
    roles: Mapping[str, Sequence[str]] | None,
) -> list[Step]:
    if name in MOTIFS or name in MEMBERSHIP_MOTIFS:
        return motif_steps(name, nodes, rng, hold)
    if name in ROLE_MOTIFS:
        return role_steps(name, nodes, rng, hold, roles)

    def shape(kind: str) -> dict[str, Any]:
        return {"shape": kind, "grudge": g.grudge_to_json(g.build_shape(kind, list(nodes), rng))}

    gap = scaled(rng, hold, 0.1, 0.3)
    if name == "lease":
        # Every clock, not just the leader's: leadership may move between two
        # nemesis ops on a loaded machine, and the node isolated next must be skewed.
        back_ms = -round(rng.uniform(14.0, 18.0) * 1000)
        return [
            start(
                gap,
                "clock",
                {"target": "all", "nodes": list(nodes), "mode": "bump", "offset_ms": back_ms},
            ),
            start(0.1, "partition", {"shape": "leader"}),
            stop(scaled(rng, hold, 3.6, 4.0), "partition"),
            stop(0.1, "clock"),
        ]
    everyone = {"target": "all", "nodes": list(nodes)}
    if name == "crash":
        # Twice: the second kill lands in the election that follows the first restart.
        return [
            start(gap, "kill", everyone),
            stop(scaled(rng, hold, 0.2, 0.3), "kill"),
            start(scaled(rng, hold, 0.1, 0.3), "kill", everyone),
            stop(scaled(rng, hold, 0.2, 0.3), "kill"),
        ]
    if name == "bridge":
        return [
            start(gap, "partition", shape("bridge")),
            stop(scaled(rng, hold, 0.8, 1.0), "partition"),
        ]
    if name == "lag":
        # The cut-off minority keeps campaigning; with the leader gone at the
        # heal, the first candidate of the next term may be a lagging one.
        return [
            start(gap, "partition", shape("majority")),
            start(scaled(rng, hold, 0.8, 1.0), "kill", {"target": "leader"}),
            stop(0.0, "partition"),
            stop(scaled(rng, hold, 0.4, 0.6), "kill"),
        ]
    if name == "rejoin":
        return _rejoin_steps(list(nodes), rng, hold, gap)
    if name == "figure8":
        return _figure8_steps(list(nodes), rng, hold, gap)
    if name == "disk":
        return disk_steps(list(nodes), rng, hold, gap)
    raise ConfigError(
        f"unknown fault profile {name!r} (known: {', '.join(SCRIPTS)})", field="profiles"
    )


def _split_value(shape: str, nodes: Sequence[str], side: Sequence[str]) -> dict[str, Any]:
    rest = [n for n in nodes if n not in side]
    return {"shape": shape, "grudge": g.grudge_to_json(g.complete_grudge([list(side), rest]))}


def _rejoin_steps(nodes: list[str], rng: random.Random, hold: float, gap: float) -> list[Step]:
    """A minority around the leader sleeps through an election; then one of the voters restarts.

    1. The leader and ``k - 1`` others (k = the largest minority) are paused
       (SIGSTOP); the rest, exactly a quorum, must all vote for the new leader A
       of term T.
    2. Resume: the paused nodes learn T from A's heartbeats, so they follow A
       without having voted in T. (A partition would not do: cut-off nodes
       keep polling, and after the heal their first poll makes them vote for
       themselves in T, whereas a paused node's sockets stay open and it wakes
       up to A's queued messages.)
    3. Cut off A with all its voters but Y, which stays with the k nodes of
       step 1; kill -9 Y and start it again at once. Y's persisted vote for A forbids it to
       vote for itself in T, so a correct node moves to T+1; a node that forgot
       its vote (forget-vote) can win T with the nodes of step 1, and term T
       then has two leaders.

    Steps 1 and 3 pick their sides when they land (``leader`` is whoever leads
    then); the values in the history name every node. The whole is played twice: step 3
    is a race (the voter must be back before its new side votes for itself), which a
    loaded machine lost in two runs of three (docs/zoo.md).
    """
    return [
        *_rejoin_round(nodes, rng, hold, gap),
        *_rejoin_round(nodes, rng, hold, scaled(rng, hold, 0.4, 0.8)),
    ]


def _rejoin_round(nodes: list[str], rng: random.Random, hold: float, gap: float) -> list[Step]:
    k = max(1, (len(nodes) - 1) // 2)
    memo: dict[str, list[str]] = {}
    deadlines: dict[str, float] = {}

    def leader(ctx: RunContext) -> str | None:
        lead = leader_within(ctx, rng, None, deadlines, "now")
        return lead if isinstance(lead, str) else None

    def pause_leader_side(ctx: RunContext) -> dict[str, Any]:
        lead = leader(ctx) or rng.choice(nodes)
        side = [lead, *rng.sample([n for n in nodes if n != lead], k - 1)]
        memo["side"] = side
        return {"nodes": side, "why": "rejoin-leader-side"}

    def cut_new_leader(ctx: RunContext) -> dict[str, Any]:
        first = memo.get("side") or rng.sample(nodes, k)
        voters = [n for n in nodes if n not in first]
        lead = leader(ctx)
        if lead not in voters:
            lead = rng.choice(voters)
        others = [n for n in voters if n != lead]
        rng.shuffle(others)
        memo["victims"] = others[k - 1 :]
        return _split_value("rejoin-cut", nodes, [lead, *others[: k - 1]])

    def restart_voter(ctx: RunContext) -> dict[str, Any]:
        return {"nodes": memo.get("victims") or [rng.choice(nodes)], "why": "rejoin-voter"}

    # The cut comes first, so the voter's log is as long as its new side's; it
    # must then be back and polling before that side loses patience (E) and
    # votes for itself, hence no waits.
    return [
        start(gap, "pause", pause_leader_side),
        stop(scaled(rng, hold, 1.4, 1.8), "pause"),
        start(scaled(rng, hold, 0.4, 0.6), "partition", cut_new_leader),
        start(0.0, "kill", restart_voter),
        stop(0.0, "kill"),
        stop(scaled(rng, hold, 1.0, 1.2), "partition"),
    ]


def _figure8_steps(nodes: list[str], rng: random.Random, hold: float, gap: float) -> list[Step]:
    """Raft's Figure 8, staged with kills, pauses, one cut and two lulls in the writes.

    1. Kill a majority M that leaves out the leader A and ``k - 1`` others (the
       old side O). A keeps taking writes for about a second (its lease), so O
       holds a tail of old-term entries nobody else has.
    2. Writes stop (a lull; reads go on). O is paused, M restarts and elects L
       of a new term; L is cut off alone, writes resume for about a second,
       so L holds its own entries at the same indexes, on L only.
    3. Writes stop again; O wakes up beside M minus L. A correct L has replicated
       its election NOOP to M, so M's newer last term keeps O out and O's tail
       is cut away. A node that writes nothing on election and commits by
       counting (commit-old-term) lets A (or its O partner) win, copy the tail
       to M and commit it, with no entry of its own term; the lull's readers
       read the tail as committed.
    4. Once someone leads there, O is killed as L comes back. Only L and M minus
       L are left, and only L can win: M's nodes need L's vote, and L refuses
       them (its last term is newer). With the bug, L overwrites the committed
       tail, which later reads show.

    Without the lulls, the first client write of step 3's leader would reach M
    within milliseconds and make L unelectable, far faster than any fault over
    SSH: quiet spells are where this bug lives.

    Steps 2 and 4 wait for an election (up to ``3 * hold`` and ``2 * hold``)
    by answering :class:`Retry` until someone leads or the time is up.
    """
    k = max(1, (len(nodes) - 1) // 2)
    memo: dict[str, Any] = {}
    deadlines: dict[str, float] = {}

    def kill_majority(ctx: RunContext) -> dict[str, Any]:
        lead = leader_within(ctx, rng, None, deadlines, "a")
        lead = lead if isinstance(lead, str) else rng.choice(nodes)
        old = [lead, *rng.sample([n for n in nodes if n != lead], k - 1)]
        memo["old"] = old
        memo["new"] = [n for n in nodes if n not in old]
        return {"nodes": memo["new"], "why": "figure8-majority"}

    def pause_old(ctx: RunContext) -> dict[str, Any]:
        return {"nodes": memo.get("old") or rng.sample(nodes, k), "why": "figure8-old-side"}

    def cut_new_leader(ctx: RunContext) -> dict[str, Any] | Retry:
        new = memo.get("new") or list(nodes)
        lead = leader_within(ctx, rng, new, deadlines, "l", 3 * hold)
        if isinstance(lead, Retry):
            return lead
        lead = lead or rng.choice(new)
        memo["cut"] = lead
        return _split_value("figure8-cut", nodes, [lead])

    def kill_old(ctx: RunContext) -> dict[str, Any] | Retry:
        # Once someone leads beside the cut node, give the readers a moment
        # there. Then only L and M minus L are left: L must win (a leader
        # elected by M would need L's vote, which a longer last term refuses).
        if not memo.pop("lingered", False):
            lead = leader_within(
                ctx, rng, [n for n in nodes if n != memo.get("cut")], deadlines, "beside", 2 * hold
            )
            if isinstance(lead, Retry):
                return lead
            if lead:
                memo["lingered"] = True
                return Retry(hold * 0.6)
        return {"nodes": memo.get("old") or rng.sample(nodes, k), "why": "figure8-old-side"}

    lull = {"why": "figure8"}
    return [
        start(gap, "kill", kill_majority),
        start(scaled(rng, hold, 0.5, 0.6), "lull", lull),
        start(0.2, "pause", pause_old),
        stop(0.0, "kill"),
        start(0.0, "partition", cut_new_leader),
        stop(0.0, "lull"),
        start(scaled(rng, hold, 0.45, 0.55), "lull", lull),
        stop(0.2, "pause"),
        start(hold * 0.4, "kill", kill_old),
        stop(0.0, "partition"),
        stop(scaled(rng, hold, 1.2, 1.4), "lull"),
        stop(scaled(rng, hold, 0.3, 0.5), "kill"),
    ]


def aim_without_leader(step: Step, nodes: Sequence[str], rng: random.Random) -> Step:
    """``step`` for a DB that cannot say who leads: what it aims at the leader hits a
    seeded random node instead, named in the value (``aimed``), so the history tells.

    A kill or pause of ``target: leader`` names one node; a ``shape: leader`` partition
    cuts one node off from the rest. Builders are wrapped, their answer rewritten when
    they land (the motifs' remembered leader already falls back to a seeded pick).
    """
    value = step.value
    if value is None:
        return step
    if callable(value):
        build = value

        def rebuilt(ctx: RunContext) -> dict[str, Any] | Retry:
            got = build(ctx)
            return got if isinstance(got, Retry) else _unaimed(got, nodes, rng)

        return step._replace(value=rebuilt)
    return step._replace(value=_unaimed(value, nodes, rng))


def _unaimed(value: dict[str, Any], nodes: Sequence[str], rng: random.Random) -> dict[str, Any]:
    aimed = "a seeded random node: the DB reports no leader"
    if value.get("target") == "leader" and value.get("nodes") is None:
        return {**value, "target": "one", "nodes": [rng.choice(list(nodes))], "aimed": aimed}
    if value.get("shape") == "leader" and value.get("grudge") is None:
        one = rng.choice(list(nodes))
        return {**_split_value("one", nodes, [one]), "aimed": aimed}
    return value


class ProfileSchedule(StepSchedule):
    """Plays the scripts forever; the runner stops it at the time limit.

    In order, cycling; or with ``shuffle``, as a seeded deck: each pass plays
    every script once in an order drawn from ``rng``, so a short run still
    meets most scripts and no script comes twice before the others came once.
    Its choices come from the seeded rng and ``ctx.nodes`` only; ``leader``
    and the sides picked around the leader are resolved when the step lands.
    """

    def __init__(
        self,
        profiles: Sequence[str],
        *,
        hold: float,
        rng: random.Random,
        shuffle: bool = False,
        passes: int | None = None,
        dropped: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        if not profiles:
            raise ConfigError("a zoo campaign needs at least one fault profile", field="profiles")
        unknown = [p for p in profiles if p not in ALL_SCRIPTS]
        if unknown:
            raise ConfigError(
                f"unknown fault profile(s) {', '.join(unknown)} (known: {', '.join(ALL_SCRIPTS)})",
                field="profiles",
            )
        super().__init__()
        self.profiles = list(profiles)
        self.hold = hold
        self.rng = rng
        self.shuffle = shuffle
        self.passes = passes
        self.passes_begun = 0
        self.dropped = {k: tuple(v) for k, v in (dropped or {}).items()}
        """Script name to the fault kinds its steps go without (the deck's ``dropped``)."""
        self.deck: list[str] = []
        self.played: list[str] = []
        """Every script's name in the order played (for tests and the log)."""
        self.steering = Steering(self.profiles) if shuffle and passes is not None else None
        """A deck that ends its load: its spare time goes to unreached situations."""

    @property
    def ends_load(self) -> bool:
        """Whether the run's load ends when this schedule does (after its passes)."""
        return self.passes is not None

    def more(self, ctx: RunContext) -> list[Step]:
        if not self.deck:
            if self.passes is not None and self.passes_begun >= self.passes:
                steered = self.steering.next_script(ctx) if self.steering else None
                if steered is None:
                    return []  # the schedule is over; the runner ends the load (ends_load)
                self.deck = [steered]  # nemesis/steering.py
            else:
                self.passes_begun += 1
                self.deck = list(self.profiles)
                if self.shuffle:
                    self.rng.shuffle(self.deck)
        name = self.deck.pop(0)
        self.played.append(name)
        roles = roles_now(ctx.db, ctx) if name in ROLE_MOTIFS else None
        steps = profile_steps(
            name, list(ctx.nodes), self.rng, self.hold, roles, self.dropped.get(name, ())
        )
        if isinstance(ctx.db, HasPrimaries):
            return steps
        return [aim_without_leader(s, list(ctx.nodes), self.rng) for s in steps]


def build_profile_package(
    faults: Sequence[str],
    profiles: Sequence[str],
    *,
    interval: float,
    rng: random.Random,
    shuffle: bool = False,
    passes: int | None = None,
    dropped: Mapping[str, Collection[str]] | None = None,
    **options: Any,
) -> NemesisPackage:
    """The stock nemeses and heal ops for ``faults``, driven by the profiles (``interval`` = hold).

    Without profiles it is the stock package, options and all. ``shuffle``
    draws the scripts as a seeded deck (:class:`ProfileSchedule`); ``passes`` ends the
    schedule, and the load, after that many passes; ``dropped`` names, per script, the
    fault kinds it plays without.
    """
    base = build_package(list(faults), interval=interval, rng=rng, **options)
    if not profiles:
        return base
    return NemesisPackage(
        nemesis=base.nemesis,
        schedule=ProfileSchedule(
            profiles, hold=interval, rng=rng, shuffle=shuffle, passes=passes, dropped=dropped
        ),
        final_ops=base.final_ops,
    )
