"""Fault motifs: generic, composable fault scripts, none built around one seeded bug.

The per-bug profiles (:mod:`nemesis.profiles`) each stage what one known bug
needs. A user's bugs are not on that list, so the zoo's default campaign also
draws from motifs: short scripts of the situations where consensus code tends
to be wrong, whatever the code is:

  restart-all     every node killed, every node started at once: all state is
                  rebuilt from disk, all timers start together.
  elections       concurrent candidacies: every node paused past its election
                  timeout and resumed at once; or the leader killed, or cut off
                  from everyone at once, so every follower's timer runs out
                  together (one variant drawn per use).
  stopped-leader  the leader SIGSTOPped long enough for a new one to be
                  elected and commit (but less than a client's timeout), then
                  resumed: reads sticky clients queued on it are waiting. Half
                  the time it is also cut off from its peers while it sleeps and
                  wakes up alone (clients still reach it), so nothing from the
                  new leader tells it first that it was deposed.
  rolling         every node in turn killed and restarted, a new leader each
                  time the leader goes.
  overlap         a partition, a kill and a pause overlapping, healed in a
                  random order.
  clock-split     a partition, then clock jumps (forward or back) on some
                  nodes while it holds, healed in a random order.
  deposed-crash   the leader cut off until the others elect and commit, killed
                  and restarted while still cut off (it reloads a tail the new
                  leader replaced), then healed. Half the time a minority of
                  followers goes with it: a deposed leader that still hears some
                  acks (just not a majority's) and is held longer before the kill,
                  so clients keep reading from it while the new leader commits.

For DBs that can change their membership (``Reconfigurable``) four more, in
:data:`MEMBERSHIP_MOTIFS` (apart, so the stock motifs' seeds are unchanged; the deck of
:mod:`nemesis.deck` leaves them out, and says so, for a DB that is not ``Reconfigurable``):

  reconfig-partition  a partition (a minority cut off, drawn), then a membership
                  change while it holds (a follower removed, or removed and added
                  back wiped), the change healed, then the partition.
  reconfig-race   the single-server change race of 2015 staged by the membership
                  fault's ``race`` variant (docs/membership.md M3), then healed:
                  an even voter set, a lagging voter, an old leader holding a
                  change nobody else has, and a new leader asked for a change
                  the moment it wins.
  reconfig-linger a follower removed while the clients' writes are held and left
                  running, its log as long as anyone's: only the protocol keeps a
                  removed node from campaigning and winning (the membership fault's
                  ``linger`` variant, docs/membership.md M7.3).
  reconfig-transfer  twice, leadership transferred to a follower that lags: it is killed
                  for a while under the write load, and the transfer asked as soon as
                  it is back and follows the leader, its log behind, its term unchanged
                  (M9.2: the leader must bring it up to date before telling it to
                  campaign; the ``transfer`` checker judges the answer, M16).
                  The one membership motif a DB that only declares
                  ``TransfersLeadership`` (no membership change) also plays
                  (:func:`script_refusal`).

Each motif is a pure function of the nodes, the seeded rng and the basic hold:
plain :class:`~nemesis.schedules.Step` data, with ``leader`` left for the
nemesis to resolve when the step lands. Every fault a motif starts, it stops.
The fault kinds are the stock ones (partition, kill, pause, clock), so the
history records them as any other fault, the journal notes them before they
land, and the package's final ops heal them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import nemesis.grudge as g
from harness.core.errors import ConfigError
from nemesis.schedules import Step, leader_within, scaled, start, stop

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = [
    "MOTIFS",
    "MOTIF_KINDS",
    "MEMBERSHIP_MOTIFS",
    "MEMBERSHIP_MOTIF_KINDS",
    "motif_steps",
    "script_refusal",
]

MOTIFS = (
    "restart-all",
    "elections",
    "stopped-leader",
    "rolling",
    "overlap",
    "clock-split",
    "deposed-crash",
)

MOTIF_KINDS = frozenset({"partition", "kill", "pause", "clock"})
"""The fault kinds motifs use: a campaign drawing motifs must enable all of them."""

MEMBERSHIP_MOTIFS = ("reconfig-partition", "reconfig-race", "reconfig-linger", "reconfig-transfer")
"""Motifs for a DB declaring ``Reconfigurable`` (harness/core/db.py) only."""

MEMBERSHIP_MOTIF_KINDS = frozenset({"membership", "partition"})
"""The fault kinds the membership motifs use (both must be enabled with them)."""

TRANSFER_ONLY_MOTIFS = frozenset({"reconfig-transfer"})
"""Membership motifs that change no membership: a DB that can hand over leadership but not
change its members (``TransfersLeadership`` without ``Reconfigurable``) plays these."""


def script_refusal(name: str, db: object) -> str | None:
    """Why membership motif ``name`` cannot play on ``db`` beyond what its faults say, or
    None. The membership fault takes a DB that only transfers leadership; of the motifs
    that play it, only those of :data:`TRANSFER_ONLY_MOTIFS` ask nothing more of it."""
    from harness.core.db import Reconfigurable, TransfersLeadership

    if name not in MEMBERSHIP_MOTIFS or isinstance(db, Reconfigurable):
        return None
    if name in TRANSFER_ONLY_MOTIFS and isinstance(db, TransfersLeadership):
        return None
    return (
        f"{name} changes the membership: it needs a DB that declares Reconfigurable; "
        f"{type(db).__name__} does not"
    )


StepsFn = Callable[[list[str], random.Random, float], list[Step]]


def _all(nodes: Sequence[str], why: str) -> dict[str, Any]:
    return {"target": "all", "nodes": list(nodes), "why": why}


def _leader(why: str) -> dict[str, Any]:
    return {"target": "leader", "why": why}


def _shape(kind: str, nodes: Sequence[str], rng: random.Random) -> dict[str, Any]:
    return {"shape": kind, "grudge": g.grudge_to_json(g.build_shape(kind, list(nodes), rng))}


def _gap(rng: random.Random, hold: float) -> float:
    """The quiet before a motif: the cluster settles and reads see what the last one left."""
    return scaled(rng, hold, 0.4, 0.8)


class _Remembered:
    """The leader when a motif's first step lands, kept for its later steps.

    Later steps name that node, not whoever leads when they land: on a loaded
    machine a step can land after the others elected someone else, and hitting
    the new leader would be another motif. With nobody leading, a seeded pick.
    """

    def __init__(self, nodes: list[str], rng: random.Random) -> None:
        self.nodes, self.rng = nodes, rng
        self.lead: str | None = None
        self.deadlines: dict[str, float] = {}

    def node(self, ctx: RunContext) -> str:
        if self.lead is None:
            got = leader_within(ctx, self.rng, None, self.deadlines, "now")
            self.lead = got if isinstance(got, str) else self.rng.choice(self.nodes)
        return self.lead

    def target(self, why: str) -> Callable[[RunContext], dict[str, Any]]:
        """A kill or pause of the remembered leader."""
        return lambda ctx: {"target": "leader", "nodes": [self.node(ctx)], "why": why}

    def cut(self, shape: str, companions: int = 0) -> Callable[[RunContext], dict[str, Any]]:
        """A partition of the remembered leader from every peer (its clients still reach it),
        or from all but ``companions`` followers (seeded picks) that stay on its side."""

        def build(ctx: RunContext) -> dict[str, Any]:
            lead = self.node(ctx)
            others = [n for n in self.nodes if n != lead]
            side = [lead, *sorted(self.rng.sample(others, min(companions, len(others))))]
            grudge = g.complete_grudge([side, [n for n in self.nodes if n not in side]])
            out = {"shape": shape, "isolated": lead, "grudge": g.grudge_to_json(grudge)}
            if companions:
                out["with"] = side[1:]
            return out

        return build


def _restart_all(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    return [
        start(_gap(rng, hold), "kill", _all(nodes, "restart-all")),
        stop(scaled(rng, hold, 0.1, 0.3), "kill"),
    ]


def _elections(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    gap = _gap(rng, hold)
    variant = rng.choice(("pause-all", "kill-leader", "cut-leader"))
    if variant == "pause-all":
        # Past every node's election timeout (E = 1 s, randomised up to 2E): on
        # resume every node campaigns at once, in the same term.
        return [
            start(gap, "pause", _all(nodes, "elections-pause-all")),
            stop(scaled(rng, hold, 0.9, 1.1), "pause"),
        ]
    if variant == "kill-leader":
        # The followers heard the last heartbeat together; their timers run out together.
        return [
            start(gap, "kill", _leader("elections-kill-leader")),
            stop(scaled(rng, hold, 0.6, 1.0), "kill"),
        ]
    # Cut off from everyone at once, then killed just as the followers' timers run
    # out (the node cut off, whoever leads by then), and the network healed in the
    # same breath: the old leader comes back into an election it can join.
    cut = _Remembered(nodes, rng)
    return [
        start(gap, "partition", cut.cut("leader")),
        start(scaled(rng, hold, 0.35, 0.5), "kill", cut.target("elections-cut-leader")),
        stop(0.0, "partition"),
        stop(scaled(rng, hold, 0.3, 0.6), "kill"),
    ]


def _stopped_leader(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    # 3-4 s at the default hold: long enough for an election and commits
    # elsewhere (the default campaign's writes give up after 2 s and find the new
    # leader). Sticky clients keep re-sending their reads to the frozen leader
    # (they give up after 0.5 s), so some, invoked after the new leader
    # committed, are still waiting for an answer when it wakes up.
    gap = _gap(rng, hold)
    if rng.random() < 0.5:
        return [
            start(gap, "pause", _leader("stopped-leader")),
            stop(scaled(rng, hold, 1.2, 1.6), "pause"),
        ]
    # Alone: the new leader's heartbeats, queued in the sleeper's sockets, would
    # otherwise depose it the moment it wakes, before it reads its clients'
    # requests. The cut names the node paused (asked who leads *before* the
    # pause: a sleeping node cannot answer, and whoever leads later is another).
    sleeper = _Remembered(nodes, rng)
    return [
        start(gap, "pause", sleeper.target("stopped-leader-alone")),
        start(scaled(rng, hold, 0.1, 0.2), "partition", sleeper.cut("stopped-leader-cut")),
        stop(scaled(rng, hold, 1.1, 1.4), "pause"),
        stop(scaled(rng, hold, 0.6, 1.0), "partition"),
    ]


def _deposed_crash(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    # The leader cut off long enough for the others to elect and commit, killed
    # while still cut off, and started again before the cut heals: it reloads
    # from its own disk a tail of writes it never committed and that the new
    # leader has replaced, and keeps it (with whatever it derived from it:
    # indexes, queues, a state machine) until it rejoins and is truncated.
    #
    # With a minority of followers (half the time, on five nodes or more): a deposed
    # leader that still gets some heartbeat acks is the case a miscounted quorum or a
    # stale lease lets keep leading; alone, it hears nothing and any count fails. It is
    # held longer (5-6.5 s at the default hold), so the majority elects and commits while
    # clients still read from it: on a loaded 2-core lab the election alone took 2.5 s
    # and the first commit 3 s, which left under a second of a 4 s hold.
    cut = _Remembered(nodes, rng)
    minority = (len(nodes) - 1) // 2
    gap = _gap(rng, hold)
    if minority >= 2 and rng.random() < 0.5:
        side, held = cut.cut("leader-minority", minority - 1), scaled(rng, hold, 2.0, 2.6)
    else:
        side, held = cut.cut("leader"), scaled(rng, hold, 1.0, 1.4)
    return [
        start(gap, "partition", side),
        start(held, "kill", cut.target("deposed-crash")),
        stop(scaled(rng, hold, 0.2, 0.4), "kill"),
        stop(scaled(rng, hold, 0.5, 0.9), "partition"),
    ]


def _rolling(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    order = list(nodes)
    rng.shuffle(order)
    steps: list[Step] = []
    for n in order:
        steps += [
            start(scaled(rng, hold, 0.3, 0.6), "kill", {"nodes": [n], "why": "rolling"}),
            stop(scaled(rng, hold, 0.05, 0.2), "kill"),
        ]
    return steps


def _overlap(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    shape = rng.choice(("majority", "halves", "bridge", "majorities-ring", "leader"))
    part = {"shape": "leader"} if shape == "leader" else _shape(shape, nodes, rng)
    killed, paused = rng.sample(nodes, 2)
    faults = [
        start(scaled(rng, hold, 0.2, 0.5), "kill", {"nodes": [killed], "why": "overlap"}),
        start(scaled(rng, hold, 0.2, 0.5), "pause", {"nodes": [paused], "why": "overlap"}),
    ]
    rng.shuffle(faults)
    heals = [stop(0.0, "partition"), stop(0.0, "kill"), stop(0.0, "pause")]
    rng.shuffle(heals)
    spaced = [s._replace(wait=scaled(rng, hold, 0.2, 0.5)) for s in heals]
    return [
        start(_gap(rng, hold), "partition", part),
        *faults,
        spaced[0]._replace(wait=scaled(rng, hold, 0.6, 1.0)),
        *spaced[1:],
    ]


def _clock_split(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    shape = rng.choice(("majority", "leader", "halves"))
    part = {"shape": "leader"} if shape == "leader" else _shape(shape, nodes, rng)
    k = rng.randint(1, len(nodes))
    skewed = sorted(rng.sample(nodes, k), key=nodes.index)
    ms = rng.uniform(2.0, 20.0) * 1000 * rng.choice((-1, 1))
    clock = {
        "target": "all" if k == len(nodes) else "random",
        "nodes": skewed,
        "mode": "bump",
        "offset_ms": round(ms),
    }
    heals = [stop(0.0, "partition"), stop(0.0, "clock")]
    rng.shuffle(heals)
    return [
        start(_gap(rng, hold), "partition", part),
        start(scaled(rng, hold, 0.1, 0.4), "clock", clock),
        heals[0]._replace(wait=scaled(rng, hold, 0.8, 1.4)),
        heals[1]._replace(wait=scaled(rng, hold, 0.1, 0.5)),
    ]


def _reconfig_partition(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    # The partition is drawn first so the change lands while it holds; the change's own
    # side choice (whom to remove) comes from its seeded ranking of the nodes.
    part = _shape("majority", nodes, rng)
    order = list(nodes)
    rng.shuffle(order)
    variant = rng.choice(("remove-add", "remove-leader"))
    change = {"variant": variant, "order": order, "hold": round(scaled(rng, hold, 0.4, 0.8), 3)}
    return [
        start(_gap(rng, hold), "partition", part),
        start(scaled(rng, hold, 0.2, 0.4), "membership", change),
        stop(scaled(rng, hold, 0.4, 0.8), "partition"),
        stop(scaled(rng, hold, 0.2, 0.4), "membership"),
    ]


def _membership_round(
    variant: str,
    nodes: list[str],
    rng: random.Random,
    hold: float,
    span: tuple[float, float],
    **extra: Any,
) -> list[Step]:
    """One membership variant on a seeded ranking of the nodes, after a quiet gap, healed."""
    order = list(nodes)
    rng.shuffle(order)
    change = {
        "variant": variant,
        **extra,
        "order": order,
        "hold": round(scaled(rng, hold, *span), 3),
    }
    return [
        start(_gap(rng, hold), "membership", change),
        stop(scaled(rng, hold, 0.3, 0.6), "membership"),
    ]


def _reconfig_race(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    return _membership_round("race", nodes, rng, hold, (0.6, 1.0))


def _reconfig_linger(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    return _membership_round("linger", nodes, rng, hold, (0.6, 1.0))


def _reconfig_transfer(nodes: list[str], rng: random.Random, hold: float) -> list[Step]:
    # Lagging by a kill, not a cut: a follower cut off campaigns and raises its term, and
    # its higher term, not the transfer, would then decide the next election. Two rounds,
    # each to its own follower: a target that has caught up by the time it follows the
    # leader again (a loaded machine restarts it slowly) tests nothing, and that was one
    # round in three at load 11 (docs/membership.md M16).
    return [
        *_membership_round("transfer", nodes, rng, hold, (0.4, 0.8), lag="kill"),
        *_membership_round("transfer", nodes, rng, hold, (0.4, 0.8), lag="kill"),
    ]


_BUILDERS: dict[str, StepsFn] = {
    "restart-all": _restart_all,
    "elections": _elections,
    "stopped-leader": _stopped_leader,
    "rolling": _rolling,
    "overlap": _overlap,
    "clock-split": _clock_split,
    "deposed-crash": _deposed_crash,
    "reconfig-partition": _reconfig_partition,
    "reconfig-race": _reconfig_race,
    "reconfig-linger": _reconfig_linger,
    "reconfig-transfer": _reconfig_transfer,
}


def motif_steps(name: str, nodes: Sequence[str], rng: random.Random, hold: float) -> list[Step]:
    """One motif's steps: every rng draw happens here, in a fixed order, so a seed replays it."""
    fn = _BUILDERS.get(name)
    if fn is None:
        raise ConfigError(
            f"unknown fault motif {name!r} (known: {', '.join(MOTIFS + MEMBERSHIP_MOTIFS)})",
            field="motifs",
        )
    if len(nodes) < 2:
        raise ConfigError(
            f"fault motif {name!r} needs at least 2 nodes, got {len(nodes)}", field="nodes"
        )
    return fn(list(nodes), rng, hold)
