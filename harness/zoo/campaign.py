"""``splitbrain zoo``: evidence that the harness finds real bugs, and cries wolf never.

A checker that says "valid" proves little unless the same campaign says
"invalid" when the database really is broken. The zoo runs ONE default campaign
per node mode, the same for everyone in that mode (workload, fault mix, targets,
rates, interval, time limit), against the correct reference node and against
every seeded bug the node lists at run time (``node_impl.bugs``; the ``ha-*``
bugs meet the mode-``ha`` campaign beside a correct mode-``ha`` node), N times
each with recorded seeds, and tabulates how often each bug was caught and how
soon.

There is deliberately no per-bug configuration: a bug that only a tailored
campaign catches says more about the tailor than about the harness.

The verdict: exit 1 if some bug was never found (in runs that finished) or if
the correct node was ever reported invalid (a false alarm); 2 if some runs
ended unknown and nothing else failed; 0 otherwise.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from harness.core.errors import ConfigError
from harness.core.layout import HISTORY_JSONL
from harness.core.spec import RunContext
from harness.core.verdict import word as verdict_word

__all__ = [
    "Campaign", "DEFAULT_CAMPAIGN", "HA_CAMPAIGN", "CAMPAIGNS", "QUICK_TIME_LIMIT", "CORRECT",
    "RunRecord", "Row", "zoo_bugs", "bug_mode", "target_label", "select_targets", "run_seeds", "first_anomaly_seconds", "anomaly_indexes",
    "summarize", "zoo_exit_code", "render_table", "summary_json", "campaign_command",
    "describe_campaign", "profile_steps", "ProfileSchedule", "build_zoo_package", "PROFILES",
    "read_op_times", "zoo",
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

    def with_time_limit(self, seconds: float) -> Campaign:
        return replace(self, time_limit=seconds)

    def with_profiles(self, names: Sequence[str]) -> Campaign:
        """Only these fault profiles (for tuning one, or reproducing a run); none known is an error."""
        unknown = [n for n in names if n not in PROFILES]
        if unknown or not names:
            raise ConfigError(f"unknown fault profile(s) {', '.join(unknown) or '(none given)'} "
                              f"(known: {', '.join(PROFILES)})", field="profiles")
        return replace(self, profiles=tuple(names)) if self.profiles else self

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["nemesis"] = list(self.nemesis)
        d["profiles"] = list(self.profiles)
        d["workload_options"] = dict(self.workload_options)
        d["db_options"] = dict(self.db_options)
        d["nemesis_options"] = dict(self.nemesis_options)
        return d


# The fault program (docs/zoo.md has the measurements). Jepsen's combined
# nemesis overlaps faults; the stock `splitbrain run` schedule applies one fault
# at a time, which can never isolate a leader whose wall clock is skewed. So
# the zoo cycles a few fault *profiles*, each a short scripted overlap with
# seeded details, the same for every bug:
#   lease   every clock set back, then the leader isolated, healed: the
#           old leader's wall-clock lease outlives its leadership (wallclock-lease).
#           Any leader isolation under load also exposes ack-before-quorum,
#           no-truncate, ok-on-term-change and commit-regress.
#   crash   kill -9 every node right after acks, restart at once, and again
#           during the election that follows (no-fsync; forget-vote:
#           restarted voters forget whom they chose this term).
#   bridge  one node sees both halves (lax-push-term).
#   lag     a minority cut off while the majority commits, then the heal and a
#           kill -9 of the leader together: a lagging node may win the next
#           election (vote-without-log-check); leader changes with old-term
#           entries in flight are commit-old-term's chance (Figure 8).
# "mixed" runs the append log and per-key registers at once, with the status
# sampler, so log safety (I2-I4), linearizability (I7) and the sampled
# invariants (I1, I5, I6) are checked in every run; reads served by followers
# and isolated leaders expose stale-read. Two workers per node keep reads
# flowing on an isolated leader while its writes hang.
PROFILES = ("lease", "rejoin", "crash", "lag", "bridge", "figure8")
DEFAULT_CAMPAIGN = Campaign(
    workload="mixed",
    nemesis=("partition-leader", "partition-bridge", "partition-majority", "kill", "pause", "clock",
             "lull"),
    profiles=PROFILES,
    nemesis_interval=2.5,
    time_limit=60.0,
    rate=60.0,
    concurrency=15,
    workload_options=(("mixed_weights", (1, 2)), ("read_fraction", 0.25)),
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
CAMPAIGNS = {"dledger": DEFAULT_CAMPAIGN, "ha": HA_CAMPAIGN}
QUICK_TIME_LIMIT = 16.0


# --------------------------------------------------------------------------
# pure logic


Target = tuple[str, "str | None"]
"""(mode, bug); bug None is the correct node of that mode."""


def zoo_bugs() -> list[str]:
    """The reference node's seeded bugs as it lists them now, both modes.

    Read at run time (another developer may be adding bugs), never a copy.
    """
    import importlib

    bugs = importlib.import_module("node_impl.bugs")
    return [*getattr(bugs, "BUGS", {}), *getattr(bugs, "HA_BUGS", {})]


def bug_mode(bug: str) -> str:
    """The node mode a seeded bug lives in (``node_impl.bugs`` names mode-ha bugs ``ha-*``)."""
    return "ha" if bug.startswith("ha-") else "dledger"


def target_label(mode: str, bug: str | None) -> str:
    return bug or (CORRECT if mode == "dledger" else f"(correct, {mode})")


def select_targets(available: Sequence[str], requested: str | None) -> list[Target]:
    """Per mode, its correct node first, then its requested bugs (all when None), in list order.

    Mode dledger always runs its correct node; mode ha runs only when one of its
    bugs is chosen. ``requested`` is ``a,b,...``; ``none`` or ``correct`` alone
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
                raise ConfigError(f"unknown bug {name!r} (known: {', '.join(available)})",
                                  field="bugs")
            if name not in chosen:
                chosen.append(name)
        chosen.sort(key=available.index)
    out: list[Target] = []
    for mode in CAMPAIGNS:
        mine = [b for b in chosen if bug_mode(b) == mode]
        if mode == "dledger" or mine:
            out += [(mode, None), *((mode, b) for b in mine)]
    return out


def run_seeds(base: int, runs: int) -> list[int]:
    """Seed of run i is ``base + i``: every bug meets the same fault schedules, run by run."""
    return [base + i for i in range(runs)]


def anomaly_indexes(anomalies: Mapping[str, Any]) -> set[int]:
    """Every history index that an anomaly example names (its ``indexes``)."""
    out: set[int] = set()
    for examples in anomalies.values():
        if not isinstance(examples, list):
            continue
        for ex in examples:
            if isinstance(ex, Mapping):
                for i in ex.get("indexes") or ():
                    if isinstance(i, int) and not isinstance(i, bool):
                        out.add(i)
    return out


def first_anomaly_seconds(anomalies: Mapping[str, Any], times: Mapping[int, int]) -> float | None:
    """Seconds from test start to the earliest op any anomaly example names; None if none."""
    ts = [times[i] for i in anomaly_indexes(anomalies) if i in times]
    return min(ts) / 1e9 if ts else None


@dataclass
class RunRecord:
    """One run of the campaign against one target."""

    bug: str | None
    run: int
    seed: int
    valid: Any
    kinds: list[str] = field(default_factory=list)
    first_anomaly_s: float | None = None
    store: str | None = None
    seconds: float = 0.0
    reason: str | None = None
    mode: str = "dledger"

    @property
    def label(self) -> str:
        return target_label(self.mode, self.bug)


@dataclass
class Row:
    """One line of the table: a target over all its runs."""

    bug: str | None
    runs: int
    invalid: int
    valid: int
    unknown: int
    median_first_s: float | None
    kinds: list[str]
    stores: list[str]
    status: str
    mode: str = "dledger"

    @property
    def label(self) -> str:
        return target_label(self.mode, self.bug)


def _status(bug: str | None, invalid: int, valid: int, unknown: int) -> str:
    if bug is None:
        if invalid:
            return "FALSE ALARM"
        return "unknown" if unknown else "ok"
    if invalid:
        return "found"
    # Runs that could not finish say nothing about whether the bug escapes.
    return "ESCAPED" if valid else "unknown"


def summarize(records: Iterable[RunRecord]) -> list[Row]:
    """Rows in first-seen target order."""
    by: dict[Target, list[RunRecord]] = {}
    for r in records:
        by.setdefault((r.mode, r.bug), []).append(r)
    rows = []
    for (mode, bug), rs in by.items():
        invalid = sum(1 for r in rs if r.valid is False)
        valid = sum(1 for r in rs if r.valid is True)
        unknown = len(rs) - invalid - valid
        firsts = [r.first_anomaly_s for r in rs if r.valid is False and r.first_anomaly_s is not None]
        kinds = sorted({k for r in rs if r.valid is False for k in r.kinds})
        rows.append(Row(bug=bug, runs=len(rs), invalid=invalid, valid=valid, unknown=unknown,
                        median_first_s=statistics.median(firsts) if firsts else None,
                        kinds=kinds, stores=[r.store for r in rs if r.store],
                        status=_status(bug, invalid, valid, unknown), mode=mode))
    return rows


def zoo_exit_code(rows: Sequence[Row]) -> int:
    """1: a bug escaped or a false alarm; 2: some runs unknown, nothing else wrong; 0: all good."""
    if any(r.status in ("ESCAPED", "FALSE ALARM") for r in rows):
        return 1
    if not rows or any(r.unknown for r in rows):
        return 2
    return 0


def _fmt_s(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


def render_table(rows: Sequence[Row], *, full_paths: bool = True) -> str:
    """A plain-text table; the correct node's "found" column counts its false alarms."""
    head = ("bug", "found", "median 1st anomaly (s)", "anomaly kinds", "status", "stores")
    lines = []
    for r in rows:
        found = f"{r.invalid}/{r.runs}"
        if r.unknown:
            found += f" ({r.unknown} unknown)"
        stores = ", ".join(r.stores if full_paths else [Path(s).name for s in r.stores])
        lines.append((r.label, found, _fmt_s(r.median_first_s), ", ".join(r.kinds) or "-",
                      r.status, stores or "-"))
    widths = [max(len(head[i]), *(len(x[i]) for x in lines)) if lines else len(head[i])
              for i in range(len(head) - 1)]
    out = []
    for cells in (head, *lines):
        out.append("  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=True)) + "  " + cells[-1])
        if cells is head:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * len(head[-1]))
    return "\n".join(out)


def campaign_command(c: Campaign, *, lab: str | None = None, bug: str | None = None,
                     seed: int | None = None) -> str:
    """The command line that reproduces one zoo run (the correct node runs too)."""
    parts = ["splitbrain zoo", "--runs 1"]
    if c.time_limit != DEFAULT_CAMPAIGN.time_limit:
        parts.append(f"--time-limit {c.time_limit:g}")
    if c.profiles and c.profiles != DEFAULT_CAMPAIGN.profiles:
        parts.append(f"--profiles {','.join(c.profiles)}")
    parts.append(f"--bugs {bug}" if bug else "--bugs none")
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
        faults = (f"fault profiles {','.join(c.profiles)} cycled "
                  f"(basic hold {c.nemesis_interval:g} s)")
    else:
        opts = "".join(f", {k}={v}" for k, v in c.nemesis_options)
        faults = f"faults {','.join(c.nemesis)} (interval {c.nemesis_interval:g} s{opts})"
    return (f"db dledger{db}; workload {c.workload}{wl}; concurrency {c.concurrency}, "
            f"{c.rate:g} ops/s; {faults}; time limit {c.time_limit:g} s")


# --------------------------------------------------------------------------
# the fault program


Step = tuple[float, str, "dict[str, Any] | Callable[[Any], dict[str, Any]] | None"]
"""(wait before, op f, op value); a callable value is computed when the op lands."""


def profile_steps(name: str, nodes: Sequence[str], rng: random.Random,
                  hold: float) -> list[Step]:
    """One profile as (wait before, op f, op value) steps; every fault it starts, it stops."""
    import nemesis.grudge as g

    def shape(kind: str) -> dict[str, Any]:
        return {"shape": kind, "grudge": g.grudge_to_json(g.build_shape(kind, list(nodes), rng))}

    gap = hold * rng.uniform(0.1, 0.3)
    if name == "lease":
        # Every clock, not just the leader's: leadership may move between two
        # nemesis ops on a loaded machine, and the node isolated next must be skewed.
        back_ms = -round(rng.uniform(14.0, 18.0) * 1000)
        return [(gap, "start-clock", {"target": "all", "nodes": list(nodes), "mode": "bump",
                                      "offset_ms": back_ms}),
                (0.1, "start-partition", {"shape": "leader"}),
                (hold * rng.uniform(3.6, 4.0), "stop-partition", None),
                (0.1, "stop-clock", None)]
    everyone = {"target": "all", "nodes": list(nodes)}
    if name == "crash":
        # Twice: the second kill lands in the election that follows the first restart.
        return [(gap, "start-kill", everyone), (hold * rng.uniform(0.2, 0.3), "stop-kill", None),
                (hold * rng.uniform(0.1, 0.3), "start-kill", everyone),
                (hold * rng.uniform(0.2, 0.3), "stop-kill", None)]
    if name == "bridge":
        return [(gap, "start-partition", shape("bridge")),
                (hold * rng.uniform(0.8, 1.0), "stop-partition", None)]
    if name == "lag":
        # The cut-off minority keeps campaigning; with the leader gone at the
        # heal, the first candidate of the next term may be a lagging one.
        return [(gap, "start-partition", shape("majority")),
                (hold * rng.uniform(0.8, 1.0), "start-kill", {"target": "leader"}),
                (0.0, "stop-partition", None),
                (hold * rng.uniform(0.4, 0.6), "stop-kill", None)]
    if name == "rejoin":
        return _rejoin_steps(list(nodes), rng, hold, gap)
    if name == "figure8":
        return _figure8_steps(list(nodes), rng, hold, gap)
    raise ConfigError(f"unknown fault profile {name!r} (known: {', '.join(PROFILES)})",
                      field="profiles")


def _pause(ctx: RunContext, seconds: float) -> None:
    """Sleep inside a profile step, cut short when the run stops."""
    ctx.stop.wait(seconds)


def _current_leader(ctx: RunContext, rng: random.Random, among: Sequence[str] | None = None, *,
                    wait: float = 0.0) -> str | None:
    """Who leads now (one of ``among``), by the DB's own account; None when nobody claims to.

    With ``wait``, keep asking that long for one (an election here takes 1-6 s).
    A DB that cannot say answers None at once: waiting would not change that.
    """
    from harness.core.errors import NemesisError
    from nemesis.base import leader_now

    deadline = time.monotonic() + wait
    while True:
        try:
            leaders = leader_now(ctx, rng, among)
        except NemesisError:
            return None
        except Exception:  # a node that cannot answer is no leader; the profile goes on
            leaders = []
        if leaders or time.monotonic() >= deadline or ctx.stop.is_set():
            return leaders[0] if leaders else None
        _pause(ctx, 0.2)


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
    then); the values in the history name every node.
    """
    k = max(1, (len(nodes) - 1) // 2)
    memo: dict[str, list[str]] = {}

    def pause_leader_side(ctx: Any) -> dict[str, Any]:
        lead = _current_leader(ctx, rng) or rng.choice(nodes)
        side = [lead, *rng.sample([n for n in nodes if n != lead], k - 1)]
        memo["side"] = side
        return {"nodes": side, "why": "rejoin-leader-side"}

    def cut_new_leader(ctx: Any) -> dict[str, Any]:
        first = memo.get("side") or rng.sample(nodes, k)
        voters = [n for n in nodes if n not in first]
        lead = _current_leader(ctx, rng)
        if lead not in voters:
            lead = rng.choice(voters)
        others = [n for n in voters if n != lead]
        rng.shuffle(others)
        memo["victims"] = others[k - 1:]
        return _split_value("rejoin-cut", nodes, [lead, *others[: k - 1]])

    def restart_voter(ctx: Any) -> dict[str, Any]:
        return {"nodes": memo.get("victims") or [rng.choice(nodes)], "why": "rejoin-voter"}

    # The cut comes first, so the voter's log is as long as its new side's; it
    # must then be back and polling before that side loses patience (E) and
    # votes for itself, hence no waits.
    return [(gap, "start-pause", pause_leader_side),
            (hold * rng.uniform(1.4, 1.8), "stop-pause", None),
            (hold * rng.uniform(0.4, 0.6), "start-partition", cut_new_leader),
            (0.0, "start-kill", restart_voter),
            (0.0, "stop-kill", None),
            (hold * rng.uniform(1.0, 1.2), "stop-partition", None)]


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
    """
    k = max(1, (len(nodes) - 1) // 2)
    memo: dict[str, Any] = {}

    def kill_majority(ctx: Any) -> dict[str, Any]:
        lead = _current_leader(ctx, rng) or rng.choice(nodes)
        old = [lead, *rng.sample([n for n in nodes if n != lead], k - 1)]
        memo["old"] = old
        memo["new"] = [n for n in nodes if n not in old]
        return {"nodes": memo["new"], "why": "figure8-majority"}

    def pause_old(ctx: Any) -> dict[str, Any]:
        return {"nodes": memo.get("old") or rng.sample(nodes, k), "why": "figure8-old-side"}

    def cut_new_leader(ctx: Any) -> dict[str, Any]:
        new = memo.get("new") or list(nodes)
        lead = _current_leader(ctx, rng, new, wait=3 * hold) or rng.choice(new)
        memo["cut"] = lead
        return _split_value("figure8-cut", nodes, [lead])

    def kill_old(ctx: Any) -> dict[str, Any]:
        # Once someone leads beside the cut node, give the readers a moment
        # there. Then only L and M minus L are left: L must win (a leader
        # elected by M would need L's vote, which a longer last term refuses).
        if _current_leader(ctx, rng, [n for n in nodes if n != memo.get("cut")], wait=2 * hold):
            _pause(ctx, hold * 0.6)
        return {"nodes": memo.get("old") or rng.sample(nodes, k), "why": "figure8-old-side"}

    lull = {"why": "figure8"}
    return [(gap, "start-kill", kill_majority),
            (hold * rng.uniform(0.5, 0.6), "start-lull", lull),
            (0.2, "start-pause", pause_old),
            (0.0, "stop-kill", None),
            (0.0, "start-partition", cut_new_leader),
            (0.0, "stop-lull", None),
            (hold * rng.uniform(0.45, 0.55), "start-lull", lull),
            (0.2, "stop-pause", None),
            (hold * 0.4, "start-kill", kill_old),
            (0.0, "stop-partition", None),
            (hold * rng.uniform(1.2, 1.4), "stop-lull", None),
            (hold * rng.uniform(0.3, 0.5), "stop-kill", None)]


def _split_value(shape: str, nodes: Sequence[str], side: Sequence[str]) -> dict[str, Any]:
    import nemesis.grudge as g

    rest = [n for n in nodes if n not in side]
    return {"shape": shape, "grudge": g.grudge_to_json(g.complete_grudge([list(side), rest]))}


class ProfileSchedule:
    """Cycles the campaign's profiles in order, forever; the runner stops it at the time limit.

    Pure like the stock schedule: its choices come from the seeded rng and
    ``ctx.nodes`` only (``leader`` stays symbolic, resolved when applied).
    """

    def __init__(self, profiles: Sequence[str], *, hold: float, rng: random.Random) -> None:
        if not profiles:
            raise ConfigError("a zoo campaign needs at least one fault profile", field="profiles")
        self.profiles = list(profiles)
        self.hold = hold
        self.rng = rng
        self.turn = 0
        self.pending: list[Step] = []

    def next(self, ctx: Any) -> tuple[float, Any]:
        from harness.core.history import NEMESIS, Op

        if not self.pending:
            name = self.profiles[self.turn % len(self.profiles)]
            self.turn += 1
            self.pending = profile_steps(name, list(ctx.nodes), self.rng, self.hold)
        wait, f, value = self.pending.pop(0)
        if callable(value):
            make = value

            def at_apply(ctx: Any) -> Op:
                return Op(type="invoke", process=NEMESIS, f=f, value=make(ctx))

            return wait, at_apply
        return wait, Op(type="invoke", process=NEMESIS, f=f, value=value)


def build_zoo_package(c: Campaign, seed: int) -> Any:
    """The stock nemeses and heal ops for the campaign's faults, driven by the profile schedule.

    A campaign without profiles keeps the stock schedule (with its nemesis options).
    """
    from nemesis.package import NemesisPackage, build_package

    rng = random.Random(seed ^ 0x5EED)
    base = build_package(list(c.nemesis), interval=c.nemesis_interval, rng=rng,
                         **dict(c.nemesis_options))
    if not c.profiles:
        return base
    return NemesisPackage(nemesis=base.nemesis,
                          schedule=ProfileSchedule(c.profiles, hold=c.nemesis_interval, rng=rng),
                          final_ops=base.final_ops)


def summary_json(rows: Sequence[Row], records: Sequence[RunRecord], *, campaign: Campaign,
                 base_seed: int, runs: int, exit_code: int, lab: str | None,
                 aborted: str | None = None, seconds: float = 0.0,
                 campaigns: Mapping[str, Campaign] | None = None) -> dict[str, Any]:
    """The --json document for CI: the verdict, the table and every run with its seed.

    ``campaign`` is mode dledger's (kept for older readers); ``campaigns`` has every mode run.
    """
    every = dict(campaigns or {"dledger": campaign})
    return {
        "exit_code": exit_code,
        "verdict": {0: "ok", 1: "failed", 2: "unknown"}.get(exit_code, "error"),
        "escaped": [r.bug for r in rows if r.status == "ESCAPED"],
        "false_alarms": sum(r.invalid for r in rows if r.bug is None),
        "aborted": aborted,
        "seconds": round(seconds, 1),
        "seed": base_seed,
        "runs_per_target": runs,
        "campaign": campaign.to_json(),
        "campaign_text": describe_campaign(campaign),
        "campaigns": {m: {**c.to_json(), "text": describe_campaign(c)} for m, c in every.items()},
        "command": campaign_command(campaign, lab=lab),
        "rows": [{"bug": r.bug, "mode": r.mode, "label": r.label, "runs": r.runs, "found": r.invalid,
                  "valid": r.valid, "unknown": r.unknown, "status": r.status,
                  "median_first_anomaly_s": r.median_first_s, "kinds": r.kinds,
                  "stores": r.stores} for r in rows],
        "runs": [{"bug": r.bug, "mode": r.mode, "run": r.run, "seed": r.seed, "valid": r.valid,
                  "kinds": r.kinds,
                  "first_anomaly_s": r.first_anomaly_s, "store": r.store,
                  "seconds": round(r.seconds, 1), "reason": r.reason} for r in records],
    }


# --------------------------------------------------------------------------
# I/O edge


def read_op_times(store_dir: str | Path, wanted: set[int] | None = None) -> dict[int, int]:
    """``index -> time`` (ns since test start) from a run's history.jsonl.

    Only the ops in ``wanted`` are kept when given; torn or foreign lines are skipped
    (a crashed harness leaves a checkable prefix, and a time is all we need).
    """
    path = Path(store_dir) / HISTORY_JSONL
    out: dict[int, int] = {}
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                obj = json.loads(line)
                i, t = obj["index"], obj["time"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(i, int) and isinstance(t, int) and (wanted is None or i in wanted):
                out[i] = t
    return out


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _run_one(campaign: Campaign, hosts: Sequence[Any], bug: str | None, run: int, seed: int,
             store_root: str, mode: str = "dledger") -> tuple[RunRecord, bool]:
    """One run; returns its record and whether the user interrupted it."""
    from harness.core.spec import TestSpec
    from harness.run.runner import RunOptions, run_test

    name = f"zoo-{bug or 'correct'}" + ("" if mode == "dledger" or bug else f"-{mode}")
    spec = TestSpec(name=name, nodes=tuple(h.name for h in hosts),
                    db="dledger", workload=campaign.workload, nemesis=campaign.nemesis,
                    time_limit=campaign.time_limit, concurrency=campaign.concurrency,
                    rate=campaign.rate, seed=seed, bug=bug,
                    nemesis_interval=campaign.nemesis_interval,
                    options={**dict(campaign.workload_options), "db": dict(campaign.db_options),
                             "nemesis": dict(campaign.nemesis_options),
                             "zoo_profiles": list(campaign.profiles)})
    # No HTML report per run: it costs seconds, and `splitbrain report PATH` makes one later.
    opts = RunOptions(progress=False)
    t0 = time.monotonic()
    result = run_test(spec, hosts, store_root=store_root, options=opts,
                      nemesis_package=build_zoo_package(campaign, seed))
    res = result.results
    anomalies = res.get("anomalies") or {}
    valid = res.get("valid", "unknown")
    first = None
    if valid is False:
        first = first_anomaly_seconds(anomalies,
                                      read_op_times(result.store_dir, anomaly_indexes(anomalies)))
    reason = res.get("reason") or res.get("error") or result.reason
    rec = RunRecord(bug=bug, run=run, seed=seed, valid=valid, kinds=sorted(anomalies),
                    first_anomaly_s=first, store=_rel(result.store_dir),
                    seconds=time.monotonic() - t0, reason=reason, mode=mode)
    user_stop = bool(result.interrupted and (result.reason or "").startswith("interrupted"))
    return rec, user_stop


def _progress_line(rec: RunRecord, k: int, total: int, runs: int) -> str:
    word = verdict_word(rec.valid, loud=False)
    bits = [f"[{k}/{total}] {rec.label} run {rec.run + 1}/{runs} seed {rec.seed}: {word}"]
    if rec.kinds:
        bits.append(", ".join(rec.kinds))
    if rec.first_anomaly_s is not None:
        bits.append(f"first anomaly at {rec.first_anomaly_s:.1f}s")
    if rec.valid not in (True, False) and rec.reason:
        bits.append(f"reason: {rec.reason}")
    bits.append(f"{rec.seconds:.0f}s")
    bits.append(str(rec.store))
    return "; ".join(bits)


@click.command(name="zoo")
@click.option("--quick", is_flag=True,
              help=f"One run per target with a {QUICK_TIME_LIMIT:g} s time limit.")
@click.option("--runs", type=click.IntRange(min=1), default=None,
              help="Runs per target.  [default: 3, or 1 with --quick]")
@click.option("--bugs", default=None, metavar="A,B,...",
              help="Only these seeded bugs (the correct node always runs).  [default: all]")
@click.option("--time-limit", type=click.FloatRange(min=1.0), default=None,
              help=f"Seconds of load and faults per run.  [default: {DEFAULT_CAMPAIGN.time_limit:g}, "
                   f"{QUICK_TIME_LIMIT:g} with --quick]")
@click.option("--profiles", default=None, metavar="P,Q,...",
              help=f"Only these fault profiles of the DLedger campaign, cycled in this order "
                   f"(known: {', '.join(PROFILES)}).  [default: all]")
@click.option("--lab", default="default", show_default=True,
              help="Embedded lab to run on (`splitbrain lab up --name NAME`).")
@click.option("--store", "store_root", default="store", show_default=True,
              type=click.Path(file_okay=False), help="Results store directory.")
@click.option("--seed", type=int, default=None,
              help="Base seed; run i uses seed+i.  [default: random, and printed]")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write a JSON summary here (for CI).")
def zoo(quick: bool, runs: int | None, bugs: str | None, time_limit: float | None,
        profiles: str | None, lab: str, store_root: str, seed: int | None,
        json_path: str | None) -> int:
    """Run the default campaigns on the correct node and on every seeded bug; tabulate catches.

    Mode dledger's bugs meet one campaign, mode ha's another (with its own correct node).

    Exit 1 if a bug is never found or the correct node is ever reported invalid,
    2 if runs ended unknown and nothing else failed, 0 otherwise.
    """
    from harness.inventory.resolve import resolve_hosts

    targets = select_targets(zoo_bugs(), bugs)
    n = runs if runs is not None else (1 if quick else 3)
    limit = time_limit if time_limit is not None else (QUICK_TIME_LIMIT if quick else None)
    campaigns = {m: c if limit is None else c.with_time_limit(limit) for m, c in CAMPAIGNS.items()
                 if any(tm == m for tm, _ in targets)}
    if profiles is not None:
        names = [p.strip() for p in profiles.split(",") if p.strip()]
        campaigns = {m: c.with_profiles(names) for m, c in campaigns.items()}
    campaign = campaigns["dledger"]
    if json_path is not None and Path(json_path).is_dir():
        raise click.BadParameter(f"{json_path} is a directory", param_hint="--json")
    hosts = resolve_hosts(lab=lab, nodes_file=None, vagrant=None, docker=False, insecure=False)
    base = seed if seed is not None else random.SystemRandom().randrange(2**31)
    seeds = run_seeds(base, n)
    total = len(targets) * n
    n_bugs = sum(1 for _, b in targets if b)
    click.echo(f"zoo: {n_bugs} bugs + the correct node of {len(campaigns)} mode(s), {n} run(s) "
               f"each ({total} runs), base seed {base}", err=True)
    for m, c in campaigns.items():
        click.echo(f"zoo: campaign, mode {m}: {describe_campaign(c)}", err=True)
    records: list[RunRecord] = []
    aborted: str | None = None
    t0 = time.monotonic()
    k = 0
    for mode, bug in targets:
        for i, s in enumerate(seeds):
            k += 1
            rec, user_stop = _run_one(campaigns[mode], hosts, bug, i, s, store_root, mode)
            records.append(rec)
            click.echo(_progress_line(rec, k, total, n), err=True)
            if user_stop:
                aborted = rec.reason or "interrupted"
                break
        if aborted:
            break
    rows = summarize(records)
    rc = zoo_exit_code(rows)
    if aborted and rc == 0:
        rc = 2
    click.echo(render_table(rows))
    escaped = [r.label for r in rows if r.status == "ESCAPED"]
    alarms = sum(r.invalid for r in rows if r.bug is None)
    verdict = [f"zoo: exit {rc}"]
    if escaped:
        verdict.append(f"escaped: {', '.join(escaped)}")
    if alarms:
        verdict.append(f"false alarms on the correct node: {alarms}")
    if aborted:
        verdict.append(f"stopped early ({aborted})")
    verdict.append(f"{time.monotonic() - t0:.0f}s, base seed {base}")
    click.echo("; ".join(verdict))
    if json_path is not None:
        doc = summary_json(rows, records, campaign=campaign, base_seed=base, runs=n,
                           exit_code=rc, lab=lab, aborted=aborted, seconds=time.monotonic() - t0,
                           campaigns=campaigns)
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    sys.stdout.flush()
    return rc
