"""Situations consensus bugs need, each detected by a pure function of what a run observed.

A VALID verdict says nothing was seen, not that nothing is wrong: a bug that needs two
candidates in one term cannot show in a run that never had them. This module names such
situations (issue 27) and finds them in a run's records, so a run and a campaign can say
what they reached, and, as important, what they could not see at all.

What a run observes (:class:`Observed`):

- ``history``: client and nemesis ops (docs/architecture.md §3), always there;
- ``samples``: the sampler's ``sample`` completions (role, term, leader, begin, end,
  committed, incarnation), a few per second per node, when the workload runs one;
- ``events:<kind>``: what the nodes logged (:mod:`harness.core.events`: ``start``,
  ``role``, ``vote``, ``truncate``, ``candidacy``, ``vote-refused``, ``read-refused``),
  when the DB reports events.

Which faults kill, pause, move a clock or cut the network is what each fault declares
(``Fault.effects``, read through :func:`nemesis.registry.timeline`), never a list of fault
names here: a plugin's fault that kills is counted like ``kill``.

Each :class:`Situation` declares alternative sets of sources it can be detected from
(``needs``); when none is available the coverage says "not observable" and why, never
"not reached". Detectors return the history times (ns) of each occurrence. Situations
before the first client op (the DB's own start-up election) are not the campaign's
doing and are not counted.

Roles come from the node events when the DB logs role changes (every change is logged,
so a leadership is known from its first to its last instant) and from the samples (a
leadership is then known between its first and last sample; detectors count a
situation only when the samples prove it). Events win where both saw a leadership;
samples fill in what the events lost (a node log rolled back by a disk fault).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.core.events import NodeEvent
from harness.core.history import Op
from harness.core.periods import FaultOf, Timeline, timeline

__all__ = [
    "Observed",
    "Situation",
    "Tenure",
    "SITUATIONS",
    "coverage",
    "observed_from",
    "situation",
]

WRITE_FS = frozenset({"append", "write", "cas", "add", "send"})
"""Client ops whose ``ok`` means a leader committed something."""
READ_FS = frozenset({"read", "pull"})
END_OF_TIME = 2**62


def _ns(t: float) -> int:
    return int(t * 1e9)


@dataclass(frozen=True)
class Obs:
    """One role observation: ``node`` was ``role`` in ``term`` (following ``leader``)."""

    time: int
    node: str
    term: int | None
    role: str | None  # leader, follower, candidate; "down" for a kill, a start
    leader: str | None


@dataclass(frozen=True)
class Tenure:
    """One node's leadership in one term, as observed.

    ``start``: first observation as leader; ``start_lo``: the contrary observation just
    before (it may have led since then). ``end_lo``: the last instant it surely still
    believed it led; ``end_hi``: the first contrary observation (a role change, a kill,
    a restart), or never (``END_OF_TIME``) when nothing ended it. ``deposed``: when a leader of a higher term was
    first seen (or its own step-down), None if it never was while it led.
    """

    node: str
    term: int
    start: int
    start_lo: int
    end_lo: int
    end_hi: int
    deposed: int | None
    killed: bool = False


@dataclass(frozen=True)
class Observed:
    """Everything a detector may look at; all times on the history's clock (ns)."""

    ops: Sequence[Op]
    samples: Sequence[Op] = ()
    events: Sequence[NodeEvent] = ()
    event_kinds: frozenset[str] = frozenset()
    nodes: Sequence[str] = ()
    election_s: float = 1.0
    faults: FaultOf | None = None
    """The fault of an op kind, for its effects; None: the registered faults'."""

    # -- sources ------------------------------------------------------------------

    @functools.cached_property
    def sources(self) -> frozenset[str]:
        have = {"history"}
        if self.samples:
            have.add("samples")
        have.update(f"events:{k}" for k in self.event_kinds)
        return frozenset(have)

    @functools.cached_property
    def load_start(self) -> int:
        """The first client op's invocation: the campaign's window opens here."""
        return min((op.time for op in self.client_ops if op.type == "invoke"), default=0)

    @functools.cached_property
    def end_time(self) -> int:
        times = [op.time for op in self.ops] + [op.time for op in self.samples]
        times += [e.time for e in self.events if e.time is not None]
        return max(times, default=0)

    @functools.cached_property
    def client_ops(self) -> list[Op]:
        return [op for op in self.ops if op.process != "nemesis" and op.f != "sample"]

    @functools.cached_property
    def faults_seen(self) -> Timeline:
        """What the faults did, when and where, as each declares (:mod:`harness.core.periods`)."""
        if self.faults is not None:
            return timeline(self.ops, self.faults, end_time=END_OF_TIME)
        from nemesis.registry import fault_of

        return timeline(self.ops, fault_of, end_time=END_OF_TIME)

    @functools.cached_property
    def pairs(self) -> list[tuple[Op, Op | None]]:
        """Client (invoke, completion or None) pairs, in invocation order."""
        open_: dict[Any, Op] = {}
        out: list[list[Any]] = []
        slot: dict[Any, int] = {}
        for op in sorted(self.client_ops, key=lambda o: (o.time, o.index)):
            if op.type == "invoke":
                open_[op.process] = op
                slot[op.process] = len(out)
                out.append([op, None])
            elif op.process in open_:
                out[slot.pop(op.process)][1] = op
                del open_[op.process]
        return [(a, b) for a, b in out]

    @functools.cached_property
    def kills(self) -> list[tuple[int, int, list[str]]]:
        """(invoke time, completion time, nodes) of every fault that killed DB processes:
        kills, power cuts, the disk faults (which SIGKILL the node first), any fault that
        declares it kills."""
        return [(x.invoked, x.time, x.nodes) for x in self.faults_seen.landed("kills") if x.hit]

    # -- roles --------------------------------------------------------------------

    @functools.cached_property
    def role_source(self) -> str | None:
        """``events`` when the DB logs role changes, else ``samples``, else None."""
        if "role" in self.event_kinds:
            return "events"
        if self.samples:
            return "samples"
        return None

    @functools.cached_property
    def event_obs(self) -> list[Obs]:
        """Role observations from the node events, plus kills (role ``down``)."""
        if "role" not in self.event_kinds:
            return []
        obs = [
            Obs(e.time, e.node, e.term, "down" if e.kind == "start" else e.role, e.leader)
            for e in self.events
            if e.time is not None and e.kind in ("role", "start")
        ]
        return self._with_kills(obs)

    @functools.cached_property
    def sample_obs(self) -> list[Obs]:
        """Role observations from the samples, plus kills (role ``down``)."""
        obs = []
        for smp in self.samples:
            v = smp.value if isinstance(smp.value, Mapping) else {}
            term, r, leader = v.get("term"), v.get("role"), v.get("leader")
            obs.append(
                Obs(
                    smp.time,
                    str(smp.node),
                    term if isinstance(term, int) else None,
                    r if isinstance(r, str) else None,
                    leader if isinstance(leader, str) else None,
                )
            )
        return self._with_kills(obs) if obs else []

    def _with_kills(self, obs: list[Obs]) -> list[Obs]:
        for _t0, t1, nodes in self.kills:
            obs.extend(Obs(t1, n, None, "down", None) for n in nodes)
        obs.sort(key=lambda o: o.time)
        return obs

    @functools.cached_property
    def observations(self) -> list[Obs]:
        """Every role observation, events and samples together, in time order."""
        return sorted(self.event_obs + self.sample_obs, key=lambda o: o.time)

    @functools.cached_property
    def term_first_seen(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for o in self.observations:
            if o.term is not None and o.role != "down":
                out.setdefault(o.term, o.time)
        return out

    @functools.cached_property
    def leader_seen(self) -> dict[int, int]:
        """Term → the first time any node was seen leading it or following its leader."""
        out: dict[int, int] = {}
        for o in self.observations:
            if o.term is None or o.role == "down":
                continue
            if o.role == "leader" or o.leader is not None:
                out.setdefault(o.term, o.time)
        return out

    @functools.cached_property
    def tenures(self) -> list[Tenure]:
        """Every leadership, from the events where they tell, else from the samples.

        Events are exact but can be incomplete: a node log in a directory that a disk
        fault rolls back loses its latest lines, and with them whole leaderships. A
        leadership the samples saw that no event leadership of the same node and term
        overlaps in time is therefore added from the samples.
        """
        exact = self._tenures_from(self.event_obs, exact=True)

        def known(x: Tenure) -> bool:
            return any(
                e.node == x.node
                and e.term == x.term
                and e.start <= x.end_hi
                and x.start <= e.end_hi
                for e in exact
            )

        approx = [x for x in self._tenures_from(self.sample_obs, exact=False) if not known(x)]
        return sorted(exact + approx, key=lambda t: t.start)

    def _tenures_from(self, observations: Sequence[Obs], *, exact: bool) -> list[Tenure]:
        by_node: dict[str, list[Obs]] = {}
        for o in observations:
            by_node.setdefault(o.node, []).append(o)
        higher = sorted(self.leader_seen.items())
        out: list[Tenure] = []
        for node, obs in by_node.items():
            cur: tuple[int, int, int, int] | None = None  # term, start, start_lo, last seen
            prev_contrary = 0
            for o in obs:
                leads = o.role == "leader" and o.term is not None
                if cur is not None and leads and o.term == cur[0]:
                    cur = (cur[0], cur[1], cur[2], o.time)
                    continue
                if cur is not None:
                    out.append(self._tenure(node, cur, o, higher, exact))
                    cur = None
                if leads:
                    assert o.term is not None
                    cur = (o.term, o.time, prev_contrary, o.time)
                else:
                    prev_contrary = o.time
            if cur is not None:
                out.append(self._tenure(node, cur, None, higher, exact))
        return out

    def _tenure(
        self,
        node: str,
        cur: tuple[int, int, int, int],
        contrary: Obs | None,
        higher: Sequence[tuple[int, int]],
        exact: bool,
    ) -> Tenure:
        term, start, start_lo, last = cur
        end_hi = contrary.time if contrary is not None else END_OF_TIME  # still leads
        # With events every change is logged: the belief lasts until the next line.
        end_lo = end_hi if exact else last
        killed = contrary is not None and contrary.role == "down"
        successor = [max(t, start) for tt, t in higher if tt > term]
        deposed = min(successor, default=None)
        if deposed is not None and deposed > end_hi:
            deposed = None
        if deposed is None and contrary is not None and not killed:
            deposed = contrary.time  # it stepped down (a higher term, a lost quorum)
        return Tenure(node, term, start, start_lo, end_lo, end_hi, deposed, killed)

    def tenures_of(self, node: str) -> list[Tenure]:
        return [t for t in self.tenures if t.node == node]

    def led_at(self, node: str, t: int) -> bool:
        """``node`` believed it led at ``t``: seen leading by then, nothing contrary yet.

        A paused or cut-off leader answers no samples, so only a contrary observation
        (after it wakes, or its kill) ends what it believes.
        """
        return any(x.start <= t < x.end_hi for x in self.tenures_of(node))

    def surely_not_leader_during(self, node: str, lo: int, hi: int) -> bool:
        """At no instant of ``[lo, hi]`` could ``node`` have been the leader: every one of
        its leaderships (stretched back to the last contrary observation) ended, or was
        deposed, before ``lo`` or began after ``hi``."""
        for x in self.tenures_of(node):
            last = x.end_hi if x.deposed is None else min(x.end_hi, x.deposed)
            if x.start_lo <= hi and lo < last:
                return False
        return True

    # -- what the history alone says about leaders ---------------------------------

    @functools.cached_property
    def write_acks(self) -> list[tuple[int, str]]:
        """(time, node) of every acknowledged write: a leader committed there."""
        return sorted(
            (c.time, str(c.node))
            for _i, c in self.pairs
            if c is not None and c.type == "ok" and c.f in WRITE_FS and c.node is not None
        )

    def history_leader(self, t: int, within_ns: int) -> str | None:
        """The node that acknowledged the last write before ``t`` (within ``within_ns``)."""
        times = [a[0] for a in self.write_acks]
        k = bisect.bisect_right(times, t)
        if k == 0 or t - self.write_acks[k - 1][0] > within_ns:
            return None
        return self.write_acks[k - 1][1]

    def leader_at(self, node: str, t: int) -> bool:
        """``node`` led at ``t``: from roles when the run has them, else the last write ack."""
        if self.role_source is not None:
            return self.led_at(node, t)
        return self.history_leader(t, _ns(max(self.election_s, 1.0))) == node


@dataclass(frozen=True)
class Situation:
    """A named situation: what it is, what it can be seen from, and its detector."""

    name: str
    title: str  # a few words for summary lines
    doc: str
    needs: tuple[frozenset[str], ...]  # alternatives: any one set of sources suffices
    detect: Callable[[Observed], list[int]] = field(repr=False, compare=False)

    def missing(self, have: frozenset[str]) -> str | None:
        """Why this cannot be observed with ``have``, or None when it can."""
        if any(alt <= have for alt in self.needs):
            return None
        alts = [" + ".join(sorted(a - have)) for a in self.needs]
        return "needs " + " or ".join(alts) + ", which this run did not have"


SITUATIONS: list[Situation] = []


def situation(
    name: str, title: str, *needs: Iterable[str]
) -> Callable[[Callable[[Observed], list[int]]], Callable[[Observed], list[int]]]:
    """Register a detector; its docstring is the situation's doc."""

    def wrap(fn: Callable[[Observed], list[int]]) -> Callable[[Observed], list[int]]:
        doc = " ".join((fn.__doc__ or "").split())
        SITUATIONS.append(Situation(name, title, doc, tuple(frozenset(n) for n in needs), fn))
        return fn

    return wrap


# ---------------------------------------------------------------------------- detectors


def _candidacies(obs: Observed) -> dict[int, dict[str, int]]:
    """Term → candidate → when it was first seen asking for votes in that term."""
    out: dict[int, dict[str, int]] = {}
    if "candidacy" in obs.event_kinds:
        # The node's own line: every term it asked in, whoever answered.
        for e in obs.events:
            if e.kind == "candidacy" and e.term is not None and e.time is not None:
                d = out.setdefault(e.term, {})
                d[e.node] = min(d.get(e.node, e.time), e.time)
        if out:
            return out
    if "vote" in obs.event_kinds:
        # Every vote granted names a candidate that asked in that term, and a candidate
        # votes for itself first, so even a candidate nobody else voted for shows.
        for e in obs.events:
            if e.kind == "vote" and e.term is not None and e.candidate and e.time is not None:
                d = out.setdefault(e.term, {})
                d[e.candidate] = min(d.get(e.candidate, e.time), e.time)
        return out
    src: Iterable[Obs] = obs.observations
    for o in src:
        if o.role == "candidate" and o.term is not None:
            d = out.setdefault(o.term, {})
            d.setdefault(o.node, o.time)
    return out


@situation(
    "concurrent-candidates",
    "concurrent candidates",
    ["events:candidacy"],
    ["events:vote"],
    ["events:role"],
    ["samples"],
)
def concurrent_candidates(obs: Observed) -> list[int]:
    """Two or more nodes were candidates in the same term: the election a node that can
    vote twice in one term needs to elect two leaders. Seen from granted votes (each names
    its candidate, own votes included) or the candidacies the nodes logged, else from role
    changes or samples showing
    ``candidate`` (samples miss short elections). Once per term, when the second candidate
    appeared."""
    hits = []
    for _term, cands in _candidacies(obs).items():
        if len(cands) >= 2:
            hits.append(sorted(cands.values())[1])
    return hits


@situation("split-vote", "split vote", ["events:vote"])
def split_vote(obs: Observed) -> list[int]:
    """Two or more candidates of one term each won a vote from another node: the voters
    were divided, so some voter was asked by a second candidate after it had voted, which
    is what a double-voting node needs to hand out two majorities. Needs the votes each
    node granted. Once per term, when the second candidate got its first outside vote."""
    firsts: dict[int, dict[str, int]] = {}
    for e in obs.events:
        if e.kind != "vote" or e.term is None or not e.candidate or e.time is None:
            continue
        if e.candidate == e.node:
            continue
        d = firsts.setdefault(e.term, {})
        d[e.candidate] = min(d.get(e.candidate, e.time), e.time)
    return [sorted(d.values())[1] for d in firsts.values() if len(d) >= 2]


@situation(
    "voter-asked-twice", "voter asked by a second candidate", ["events:vote", "events:vote-refused"]
)
def voter_asked_twice(obs: Observed) -> list[int]:
    """A node that had voted in a term was asked for its vote by another candidate of the
    same term: the request a correct voter refuses ("already voted") and a voter that can
    vote twice grants, handing out two majorities. Needs the votes nodes granted and
    refused. Once per (voter, term), when the second candidate asked."""
    asked: dict[tuple[str, int], dict[str, int]] = {}
    for e in obs.events:
        if e.kind not in ("vote", "vote-refused") or e.term is None or e.time is None:
            continue
        if not e.candidate or (e.kind == "vote-refused" and e.why not in _ALREADY_VOTED):
            continue
        d = asked.setdefault((e.node, e.term), {})
        d[e.candidate] = min(d.get(e.candidate, e.time), e.time)
    return [sorted(d.values())[1] for d in asked.values() if len(d) >= 2]


_ALREADY_VOTED = frozenset({"REJECT_ALREADY_VOTED", "REJECT_ALREADY_HAS_LEADER"})
"""A voter's refusals that mean "I voted for someone else in this term" (voting.py)."""


@situation("leaderless-term", "leaderless term > E", ["events:role"], ["samples"])
def leaderless_term(obs: Observed) -> list[int]:
    """A term went without a leader for longer than the election timeout E, from its first
    sighting until a leader of it (or a later term) appeared: elections that fail, time
    out and retry, where stale candidates and split votes live. Once per term, at the
    moment it had lasted E."""
    e_ns = _ns(obs.election_s)
    first = obs.term_first_seen
    terms = sorted(first)
    hits = []
    for k, term in enumerate(terms):
        t0 = first[term]
        ends = [obs.leader_seen[term]] if term in obs.leader_seen else []
        ends += [first[t] for t in terms[k + 1 :]]
        end = min(ends, default=obs.end_time)
        if end - t0 > e_ns:
            hits.append(t0 + e_ns)
    return hits


def _talks_to(inv: Op, done: Op | None, node: str) -> bool:
    return inv.node == node or (done is not None and done.node == node)


@situation("deposed-leader-with-clients", "deposed leader with clients",
           ["events:role"], ["samples"])  # fmt: skip
def deposed_with_clients(obs: Observed) -> list[int]:
    """A leader was deposed (a leader of a higher term appeared, or it stepped down) while
    client ops were open to it, or clients kept sending to it before it learned: the
    moment a deposed leader may still answer. Once per deposed leadership, at the
    deposition."""
    hits = []
    for x in obs.tenures:
        if x.deposed is None:
            continue
        for inv, done in obs.pairs:
            if not _talks_to(inv, done, x.node):
                continue
            end = done.time if done is not None else END_OF_TIME
            in_flight = inv.time < x.deposed < end
            sticky = x.deposed <= inv.time < x.end_hi and inv.node == x.node
            if in_flight or sticky:
                hits.append(x.deposed)
                break
    return hits


def _is_read(op: Op) -> bool:
    if op.f not in READ_FS:
        return False
    v = op.value
    return not (isinstance(v, Mapping) and v.get("final"))


@situation("read-from-non-leader", "read answered by a non-leader",
           ["events:role"], ["samples"])  # fmt: skip
def read_from_non_leader(obs: Observed) -> list[int]:
    """A read (not a final one) was answered ``ok`` by a node that was surely not the leader
    at any instant the read was open: deposed before it was sent, or not leading at all.
    A read the node might have served while it still led does not count. The stale read
    a weakened read-index gives needs exactly this. Once per read, at its completion."""
    hits = []
    for inv, done in obs.pairs:
        if done is None or done.type != "ok" or not _is_read(inv) or done.node is None:
            continue
        if obs.surely_not_leader_during(str(done.node), inv.time, done.time):
            hits.append(done.time)
    return hits


@situation("read-to-deposed-leader", "read sent to a deposed leader",
           ["events:role"], ["samples"])  # fmt: skip
def read_to_deposed_leader(obs: Observed) -> list[int]:
    """A read was sent to a node that still believed it led although a leader of a higher
    term already existed (or it was about to step down): the request a deposed leader
    must refuse, and a weakened read-index answers with stale data. Once per read, at
    its invocation."""
    hits = []
    deposed = [x for x in obs.tenures if x.deposed is not None]
    for inv, _done in obs.pairs:
        if not _is_read(inv) or inv.node is None:
            continue
        for x in deposed:
            assert x.deposed is not None
            if x.node == inv.node and x.deposed <= inv.time <= x.end_lo:
                hits.append(inv.time)
                break
    return hits


@situation("read-refused-by-leader", "read refused by an unconfirmed leader",
           ["events:read-refused"])  # fmt: skip
def read_refused_by_leader(obs: Observed) -> list[int]:
    """A node that believed it led refused a client read because its read-index check
    failed (no quorum confirmed it, or it was deposed while waiting): the very read a
    weakened confirmation answers from stale state. Needs the refusals the nodes logged.
    Once per refusal."""
    return [
        e.time
        for e in obs.events
        if e.kind == "read-refused"
        and e.time is not None
        and e.why in ("confirm-failed", "deposed")
    ]


def _pauses(obs: Observed) -> list[tuple[int, int, str]]:
    """(paused at, resumed at, node) for every pause (a fault that declares it pauses) that
    landed and was resumed."""
    return [
        (p.start, p.end, p.node)
        for p in obs.faults_seen.during("pauses")
        if p.end is not None and p.node is not None
    ]


@situation("resumed-after-successor-commit", "paused leader resumed after a successor commit",
           ["history"])  # fmt: skip
def resumed_after_commit(obs: Observed) -> list[int]:
    """A node paused while it led was resumed after another node had acknowledged a write
    during the pause: the old leader wakes up believing it leads, behind a newer commit.
    Who led comes from roles when the run has them, else from who acknowledged the last
    write before the pause. Once per resume, at the resume."""
    hits = []
    for t0, t1, node in _pauses(obs):
        if not obs.leader_at(node, t0):
            continue
        if any(t0 < t < t1 and n != node for t, n in obs.write_acks):
            hits.append(t1)
    return hits


@situation("kill-with-ops-in-flight", "kill with acks in flight", ["history"])
def kill_with_ops_in_flight(obs: Observed) -> list[int]:
    """A node was killed (its power cut, or crashed by a disk fault) while client ops sent
    to it were still open: acknowledgements in flight, where a lost or duplicated ack
    shows. Once per kill, at the kill."""
    hits = []
    for t0, t1, nodes in obs.kills:
        for inv, done in obs.pairs:
            end = done.time if done is not None else END_OF_TIME
            if inv.time < t1 and end > t0 and any(_talks_to(inv, done, n) for n in nodes):
                hits.append(t0)
                break
    return hits


@situation("whole-cluster-restart", "restart of every node", ["history"])
def whole_cluster_restart(obs: Observed) -> list[int]:
    """Every node was down at once (kills, power cuts, disk faults' crashes) and then
    started again: recovery from disk alone, nobody's memory left to lean on. Once per
    time all were down."""
    nodes = set(obs.nodes)
    if not nodes:
        return []
    changes: dict[int, list[tuple[bool, str]]] = {}  # time → (down?, node), in time order
    for p in obs.faults_seen.during("kills"):
        if p.node is None:
            continue
        changes.setdefault(p.start, []).append((True, p.node))
        if p.end is not None and p.end < END_OF_TIME:
            changes.setdefault(p.end, []).append((False, p.node))
    down: dict[str, int] = {}  # node → how many killing faults hold it down
    hits = []
    for t in sorted(changes):
        before = nodes <= set(down)
        for is_down, n in changes[t]:
            down[n] = down.get(n, 0) + (1 if is_down else -1)
            if down[n] <= 0:
                del down[n]
        if nodes <= set(down) and not before:
            hits.append(t)
    return hits


def _entries_seen(obs: Observed) -> Iterable[tuple[int, int, Any, Any]]:
    """(time, index, term, payload) of every log entry an ok append or read showed."""
    for _inv, done in obs.pairs:
        if done is None or done.type != "ok" or not isinstance(done.value, Mapping):
            continue
        v = done.value
        if done.f == "append" and isinstance(v.get("index"), int):
            yield done.time, v["index"], v.get("term"), v.get("payload")
        for e in v.get("entries") or ():
            if isinstance(e, (list, tuple)) and len(e) >= 3 and isinstance(e[0], int):
                yield done.time, e[0], e[1], e[2]


@situation("follower-truncation", "truncation on a follower",
           ["events:truncate"], ["history"])  # fmt: skip
def follower_truncation(obs: Observed) -> list[int]:
    """A node cut entries off its log because a leader's log differed: uncommitted
    entries thrown away, where a careless cut loses committed ones. From the nodes'
    truncation events when the DB logs them; else from the history (one index seen with
    two different entries) and the samples (a node's ``end`` going down within one
    process lifetime), which see far fewer. Once per truncation."""
    if "truncate" in obs.event_kinds:
        return [e.time for e in obs.events if e.kind == "truncate" and e.time is not None]
    hits = []
    seen: dict[int, tuple[Any, Any]] = {}
    for t, i, term, payload in sorted(_entries_seen(obs), key=lambda x: x[0]):
        if i not in seen:
            seen[i] = (term, payload)
        elif seen[i] != (term, payload):
            seen[i] = (term, payload)
            hits.append(t)
    last: dict[str, tuple[Any, int]] = {}
    for s in sorted(obs.samples, key=lambda o: o.time):
        v = s.value if isinstance(s.value, Mapping) else {}
        inc, end = v.get("incarnation"), v.get("end")
        if not isinstance(end, int):
            continue
        prev = last.get(str(s.node))
        if prev is not None and prev[0] == inc and end < prev[1]:
            hits.append(s.time)
        last[str(s.node)] = (inc, end)
    return hits


def _minority(grudge: Mapping[str, Any], nodes: Sequence[str]) -> set[str]:
    """Nodes that, under ``grudge`` (node → peers it drops), reach fewer than a majority
    (themselves included) in both directions."""
    drops = {str(k): {str(p) for p in (v or ())} for k, v in grudge.items()}
    majority = len(nodes) // 2 + 1
    out = set()
    for n in nodes:
        reach = {
            p for p in nodes if p == n or (p not in drops.get(n, ()) and n not in drops.get(p, ()))
        }
        if len(reach) < majority:
            out.add(n)
    return out


@situation("healed-minority-uncommitted", "partition healed with uncommitted minority entries",
           ["history", "samples"])  # fmt: skip
def healed_minority_uncommitted(obs: Observed) -> list[int]:
    """A partition was healed while a node on its minority side held entries beyond its
    commit index (its last sample in the partition had ``end`` > ``committed``): those
    entries must be thrown away, never committed, when it rejoins. Once per heal."""
    by_node: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for s in obs.samples:
        if isinstance(s.value, Mapping):
            by_node.setdefault(str(s.node), []).append((s.time, s.value))
    for seq in by_node.values():
        seq.sort(key=lambda x: x[0])
    hits = []
    for cut_at, healed, grudge in _cuts(obs):
        for n in _minority(grudge, obs.nodes):
            inside = [x for t, x in by_node.get(n, ()) if cut_at <= t <= healed]
            if not inside:
                continue
            end, com = inside[-1].get("end"), inside[-1].get("committed")
            if isinstance(end, int) and isinstance(com, int) and end > com:
                hits.append(healed)
                break
    return hits


def _cuts(obs: Observed) -> list[tuple[int, int, Mapping[str, Any]]]:
    """(cut at, healed at, grudge) of every healed network cut that dropped something."""
    return [
        (p.start, p.end, p.detail)
        for p in obs.faults_seen.during("cuts_network")
        if p.end is not None and p.end < END_OF_TIME and isinstance(p.detail, Mapping) and p.detail
    ]


@situation("clock-jump-on-leader", "clock jump during a lease", ["history"])
def clock_jump_on_leader(obs: Observed) -> list[int]:
    """A clock fault (bump, strobe, reset) hit the node that led at that moment: a lease
    or leader timeout computed from the wall clock then lies. Who led comes from roles
    when the run has them, else from who acknowledged the last write. Once per fault."""
    return [
        x.time
        for x in obs.faults_seen.landed("moves_clock")
        if any(obs.leader_at(n, x.time) for n in x.nodes)
    ]


# ---------------------------------------------------------------------------- the report


def observed_from(
    history: Iterable[Op],
    *,
    events: Sequence[NodeEvent] = (),
    event_kinds: frozenset[str] = frozenset(),
    nodes: Sequence[str] = (),
    election_s: float = 1.0,
    faults: FaultOf | None = None,
) -> Observed:
    """Split a history into ops and ok samples, ready for the detectors (``faults``: the
    fault of an op kind; by default the registered faults)."""
    ops: list[Op] = []
    samples: list[Op] = []
    for op in history:
        if op.f == "sample" and op.process != "nemesis":
            if op.type == "ok":
                samples.append(op)
        else:
            ops.append(op)
    node_set = list(nodes) or sorted({str(s.node) for s in samples if s.node is not None})
    return Observed(ops, samples, events, event_kinds, node_set, election_s, faults)


def coverage(obs: Observed, situations: Sequence[Situation] | None = None) -> dict[str, Any]:
    """``{name: {"count", "first_s"}, ..., "unobservable": {name: why}, "sources": [...]}``.

    A situation that cannot be observed with the run's sources is only in
    ``unobservable``; one that can but did not happen has ``count`` 0 and ``first_s``
    None. Only occurrences from the first client op on are counted.
    """
    out: dict[str, Any] = {}
    unobservable: dict[str, str] = {}
    for s in situations if situations is not None else SITUATIONS:
        why = s.missing(obs.sources)
        if why is not None:
            unobservable[s.name] = why
            continue
        times = sorted(t for t in s.detect(obs) if t >= obs.load_start)
        out[s.name] = {
            "count": len(times),
            "first_s": round(times[0] / 1e9, 3) if times else None,
        }
    out["unobservable"] = unobservable
    out["sources"] = sorted(obs.sources)
    return out
