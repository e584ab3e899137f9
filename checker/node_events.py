"""Invariants judged from the nodes' own events, not from what clients saw.

A history shows what clients and the 10 Hz sampler saw; a node that votes twice in a
term, or two leaders of one term that never overlap with a sample, leave no trace
there until data is lost, and often not even then. A DB whose logs report their
events (:class:`harness.core.events.ReportsEvents`) says which invariants they keep
(:attr:`event_invariants`, from :data:`harness.core.events.INVARIANTS`); this module
judges those, and only those, so no DB is held to another's promises:

- ``event-double-vote`` (``one-vote-per-term``): one member granted its vote in one term
  to two candidates. A member is the identity the log names (a host re-added wiped runs
  a new member, which may vote again); a restart of the same member does not reset its
  vote, since the vote must survive it.
- ``event-two-leaders`` (``one-leader-per-term``): two members were leader of one term.
- ``event-leader-incomplete`` (``leader-completeness``): a leader of term T lacks an entry
  a leader committed in an earlier term. Seen two ways, neither needing clocks: a node
  ``elected`` leader of T with a log ending before the entry, or ending in a term older
  than the entry's; or a follower cutting away (``truncate``, in term T) an entry of the
  same index and term as one committed in a term at or before T, and not known to be
  in the leader of T's log (a leader may have a follower cut entries it holds and
  re-send them, after a stale APPEND of its own; see :func:`_cut_not_held`; nor past
  where a leader re-elected in its own term rewrote it, :func:`_rewritten_after`). Only
  leaders' commits count as committed here: a follower's commit beyond its match is the
  next anomaly, not this one.
- ``event-commit-beyond-match`` (``follower-commit-bound``): a follower raised its commit
  index beyond the last index its log was known to share with its leader's (``match``),
  so it may call committed an entry of its own that the leader never had.
- ``node-safety-check``: a node logged that one of its own invariant checks failed, for
  any DB that reports such lines (the reference node's ``SAFETY``).

Pure: events in, one checker result out (the shape every checker's result has:
``valid``, ``anomalies`` with capped examples, ``stats`` with the true counts).
``stats.checked`` says how much each judged invariant rested on (:func:`checked_counts`):
an invariant that held over no votes, or no elections, said nothing.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.core.events import NodeEvent

__all__ = [
    "ANOMALIES",
    "NAME",
    "check_node_events",
    "checked_counts",
    "merge_node_events",
    "summary_line",
]

NAME = "node-events"
"""The key of this check in ``results.json``'s ``checkers``."""

ANOMALIES = (
    "event-double-vote", "event-two-leaders", "event-leader-incomplete",
    "event-commit-beyond-match", "node-safety-check",
)  # fmt: skip

EXAMPLES = 10
"""Examples kept per anomaly kind; ``stats.anomaly_counts`` has the true counts."""


def _stamp(ev: NodeEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"node": ev.node, "member": ev.member or ev.node}
    if ev.time is not None:
        out["time"] = ev.time
    if ev.wall_s is not None:
        out["wall_s"] = ev.wall_s
    return out


def _double_votes(events: Iterable[NodeEvent]) -> list[dict[str, Any]]:
    granted: dict[tuple[str, int], NodeEvent] = {}
    found: list[dict[str, Any]] = []
    seen: set[tuple[str, int, str]] = set()
    for ev in events:
        if ev.kind != "vote" or ev.term is None or ev.candidate is None:
            continue
        key = (ev.member or ev.node, ev.term)
        first = granted.setdefault(key, ev)
        if first.candidate != ev.candidate and (*key, ev.candidate) not in seen:
            seen.add((*key, ev.candidate))
            found.append(
                {
                    "member": key[0],
                    "term": ev.term,
                    "candidates": [first.candidate, ev.candidate],
                    "votes": [_stamp(first), _stamp(ev)],
                    "why": f"{key[0]} voted for {first.candidate} and then for "
                    f"{ev.candidate} in term {ev.term}",
                }
            )
    return found


def _two_leaders(events: Iterable[NodeEvent]) -> list[dict[str, Any]]:
    leaders: dict[int, dict[str, NodeEvent]] = defaultdict(dict)
    for ev in events:
        if ev.kind == "role" and ev.role == "leader" and ev.term is not None:
            leaders[ev.term].setdefault(ev.member or ev.node, ev)
    return [
        {
            "term": term,
            "leaders": sorted(who),
            "became": [_stamp(who[m]) for m in sorted(who)],
            "why": f"{' and '.join(sorted(who))} each became leader of term {term}",
        }
        for term, who in sorted(leaders.items())
        if len(who) > 1
    ]


def _leader_commits(events: Iterable[NodeEvent]) -> list[NodeEvent]:
    return [
        ev
        for ev in events
        if ev.kind == "commit"
        and ev.role == "leader"
        and ev.term is not None
        and ev.index is not None
        and ev.index >= 0
        and ev.entry_term is not None
    ]


def _commit_view(ev: NodeEvent) -> dict[str, Any]:
    return {**_stamp(ev), "index": ev.index, "entry_term": ev.entry_term, "term": ev.term}


class _Committed:
    """Leaders' commits, indexed for the two questions leader completeness asks: the
    furthest commit made in a term before T, and the furthest commit of an entry of term
    t made in a term at or before T (both as prefix maxima over the committing term)."""

    def __init__(self, commits: Sequence[NodeEvent]) -> None:
        by_term = sorted(commits, key=lambda c: c.term or 0)
        self._terms = [c.term or 0 for c in by_term]
        self._best: list[NodeEvent] = []  # furthest (index, entry term) up to here
        for c in by_term:
            prev = self._best[-1] if self._best else None
            key = (c.index or -1, c.entry_term or -1)
            keep = prev is not None and (prev.index or -1, prev.entry_term or -1) >= key
            self._best.append(prev if keep and prev is not None else c)
        self._top_term: list[NodeEvent] = []  # highest entry term up to here
        for c in by_term:
            prev = self._top_term[-1] if self._top_term else None
            better = prev is None or (c.entry_term or -1) > (prev.entry_term or -1)
            self._top_term.append(c if better or prev is None else prev)
        self._of: dict[int, tuple[list[int], list[NodeEvent]]] = {}
        for c in by_term:
            terms, best = self._of.setdefault(c.entry_term or -1, ([], []))
            prev = best[-1] if best else None
            terms.append(c.term or 0)
            best.append(c if prev is None or (c.index or -1) > (prev.index or -1) else prev)

    def before(self, term: int) -> tuple[NodeEvent | None, NodeEvent | None]:
        """The furthest commit, and the one of the highest entry term, made before ``term``."""
        i = bisect_left(self._terms, term)
        return (self._best[i - 1], self._top_term[i - 1]) if i else (None, None)

    def of_term_by(self, entry_term: int, term: int) -> NodeEvent | None:
        """The furthest commit of an entry of ``entry_term`` made in ``term`` or earlier."""
        terms, best = self._of.get(entry_term, ([], []))
        i = bisect_right(terms, term)
        return best[i - 1] if i else None


def _held_by_leaders(events: Iterable[NodeEvent]) -> dict[int, dict[int, set[int]]]:
    """Entries the leader of each term is known to hold, ``{term: {entry term: {index}}}``:
    the last entry of its log when ``elected`` and every entry it committed as leader of
    that term (a commit event names the entry at the index it reached)."""
    held: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for ev in events:
        leads = ev.kind == "elected" or (ev.kind == "commit" and ev.role == "leader")
        known = ev.term is not None and ev.entry_term is not None and ev.index is not None
        if leads and known and ev.index is not None and ev.index >= 0:
            assert ev.term is not None and ev.entry_term is not None
            held[ev.term][ev.entry_term].add(ev.index)
    return held


def _cut_not_held(
    term: int, runs: Sequence[tuple[int, int, int]], held: Mapping[int, Mapping[int, set[int]]]
) -> list[tuple[int, int, int]]:
    """The part of a cut, in ``term``, that the leader of ``term`` may lack.

    A follower's cut is evidence against its leader only for entries that leader does not
    hold, and a leader may ask to cut entries it holds: a stale APPEND of its own,
    delivered after a later COMPARE on another connection, lengthens the follower's log,
    and the COMPARE table then truncates after the matched entry (the leader re-sends
    them). Two things rule entries out: an entry of the leader's own term is always in its
    log while it leads; and an entry the leader is known to hold, found among the cut
    ones at index j, means both logs were equal up to j (log matching), so every cut
    entry up to j is the leader's too.
    """
    mine = held.get(term, {})
    upto = -1
    for t, first, last in runs:
        for j in mine.get(t, ()):
            if first <= j <= last:
                upto = max(upto, j)
    return [(t, max(first, upto + 1), last) for t, first, last in runs if t != term and last > upto]


def _rewritten_after(events: Iterable[NodeEvent]) -> dict[int, int]:
    """Per term, the index past which two different entries of that term may exist.

    A DLedger node re-runs for leader in its persisted term after a restart (spec §4:
    "a restarted node first polls in its persisted term") and may win it again with a
    shorter log than its first leadership had sent (an unflushed tail lost): it then
    writes new entries of the same term at the same indexes, and a follower still holds
    the old ones, which the next leader has it cut. The full-entry COMPARE repairs that,
    but (index, term) no longer names one entry there, so a cut beyond the shortest
    re-election's log end is no evidence of a committed entry lost (seed 7317: n2.1
    leader of term 3 three times; n5's old entry 273 of term 3 cut, the committed 273
    and 274 of term 3 in the new leader's log)."""
    seen: dict[int, int] = defaultdict(int)
    after: dict[int, int] = {}
    for ev in events:
        if ev.kind != "elected" or ev.term is None or ev.index is None:
            continue
        seen[ev.term] += 1
        if seen[ev.term] > 1:
            after[ev.term] = min(after.get(ev.term, ev.index), ev.index)
    return after


def _leader_incomplete(events: Sequence[NodeEvent]) -> list[dict[str, Any]]:
    committed = _Committed(_leader_commits(events))
    held = _held_by_leaders(events)
    rewritten = _rewritten_after(events)
    found: list[dict[str, Any]] = []
    for ev in events:
        if ev.kind == "elected" and ev.term is not None and ev.index is not None:
            end, end_term = ev.index, ev.entry_term if ev.entry_term is not None else -1
            furthest, newest = committed.before(ev.term)
            worst = None
            if furthest is not None and (furthest.index or -1) > end:
                worst = furthest
            elif newest is not None and (newest.entry_term or -1) > end_term:
                worst = newest
            if worst is not None:
                found.append(
                    {
                        "how": "elected",
                        "leader": ev.member or ev.node,
                        "term": ev.term,
                        "log_end": end,
                        "log_end_term": end_term,
                        "elected": _stamp(ev),
                        "committed": _commit_view(worst),
                        "why": f"{ev.member or ev.node} became leader of term {ev.term} with a "
                        f"log ending at {end} (term {end_term}), but {worst.member or worst.node} "
                        f"had committed index {worst.index} (term {worst.entry_term}) as leader "
                        f"of term {worst.term}",
                    }
                )
        elif ev.kind == "truncate" and ev.term is not None and ev.removed:
            hit: tuple[tuple[int, int, int], NodeEvent] | None = None
            for term, first, cut_last in _cut_not_held(ev.term, ev.removed, held):
                last = min(cut_last, rewritten.get(term, cut_last))
                if last < first:
                    continue  # entries of a term its leader wrote twice: no evidence
                c = committed.of_term_by(term, ev.term)
                if c is not None and c.index is not None and c.index >= first:
                    hit = hit or ((term, first, min(last, c.index)), c)
            if hit is not None:
                (term, first, last), c = hit
                found.append(
                    {
                        "how": "truncated",
                        "member": ev.member or ev.node,
                        "term": ev.term,
                        "cut": [first, last],
                        "cut_term": term,
                        "truncated": _stamp(ev),
                        "committed": _commit_view(c),
                        "why": f"{ev.member or ev.node} cut entries {first}-{last} of term "
                        f"{term} in term {ev.term}, but {c.member or c.node} had committed "
                        f"index {c.index} of term {term} as leader of term {c.term}: the "
                        f"leader of term {ev.term} did not hold them",
                    }
                )
    return found


def _beyond_match(events: Iterable[NodeEvent]) -> list[dict[str, Any]]:
    return [
        {
            **_stamp(ev),
            "term": ev.term,
            "commit": ev.index,
            "match": ev.match,
            "why": f"{ev.member or ev.node} took commit index {ev.index} as follower in term "
            f"{ev.term} with its log known to match its leader's only up to {ev.match}",
        }
        for ev in events
        if ev.kind == "commit"
        and ev.role == "follower"
        and ev.index is not None
        and ev.match is not None
        and ev.index > ev.match
    ]


def _safety(events: Iterable[NodeEvent]) -> list[dict[str, Any]]:
    return [
        {**_stamp(ev), "check": ev.why, "term": ev.term, "why": f"{ev.node} logged {ev.why}"}
        for ev in events
        if ev.kind == "safety"
    ]


def checked_counts(events: Sequence[NodeEvent]) -> dict[str, dict[str, int]]:
    """What each invariant was judged on, by the events it reads.

    ``one-vote-per-term``: votes granted, the (member, term) pairs and the terms they were
    in; ``one-leader-per-term``: the terms with a leader and the (member, term)
    leaderships; ``leader-completeness``: the elections and the truncations held against
    the leaders' commits, and those commits; ``follower-commit-bound``: the follower
    commits whose match was known; ``safety-checks``: the node's own failed checks.
    """
    votes = [ev for ev in events if ev.kind == "vote" and ev.term is not None and ev.candidate]
    leaderships = {
        (ev.member or ev.node, ev.term)
        for ev in events
        if ev.kind == "role" and ev.role == "leader" and ev.term is not None
    }
    return {
        "one-vote-per-term": {
            "votes": len(votes),
            "member_terms": len({(ev.member or ev.node, ev.term) for ev in votes}),
            "terms": len({ev.term for ev in votes}),
        },
        "one-leader-per-term": {
            "terms": len({t for _, t in leaderships}),
            "leaderships": len(leaderships),
        },
        "leader-completeness": {
            "elections": sum(
                1
                for ev in events
                if ev.kind == "elected" and ev.term is not None and ev.index is not None
            ),
            "truncations": sum(
                1 for ev in events if ev.kind == "truncate" and ev.term is not None and ev.removed
            ),
            "leader_commits": len(_leader_commits(events)),
        },
        "follower-commit-bound": {
            "follower_commits": sum(
                1
                for ev in events
                if ev.kind == "commit"
                and ev.role == "follower"
                and ev.index is not None
                and ev.match is not None
            ),
        },
        "safety-checks": {"lines": sum(1 for ev in events if ev.kind == "safety")},
    }


def check_node_events(
    events: Iterable[NodeEvent], kinds: frozenset[str], invariants: frozenset[str]
) -> dict[str, Any]:
    """Judge ``events`` by the ``invariants`` the DB declares (``kinds``: what it reports).

    Valid is True when every declared invariant held in the events read, False on any
    anomaly. What could not be judged is said in ``stats.not_judged`` (an invariant
    whose events the DB does not report), never counted as held.
    """
    evs = list(events)
    found: dict[str, list[dict[str, Any]]] = {}
    judged: list[str] = []
    not_judged: dict[str, str] = {}
    if "one-vote-per-term" in invariants:
        if "vote" in kinds:
            judged.append("one-vote-per-term")
            found["event-double-vote"] = _double_votes(evs)
        else:
            not_judged["one-vote-per-term"] = "the DB's logs report no votes"
    if "one-leader-per-term" in invariants:
        if "role" in kinds:
            judged.append("one-leader-per-term")
            found["event-two-leaders"] = _two_leaders(evs)
        else:
            not_judged["one-leader-per-term"] = "the DB's logs report no roles"
    has_commits = any(ev.kind == "commit" for ev in evs)
    if "leader-completeness" in invariants:
        if not {"commit", "elected", "truncate"} <= kinds:
            not_judged["leader-completeness"] = "the DB's logs report no commits or elections"
        elif not has_commits:
            not_judged["leader-completeness"] = "no commit events were read"
        else:
            judged.append("leader-completeness")
            found["event-leader-incomplete"] = _leader_incomplete(evs)
    if "follower-commit-bound" in invariants:
        if "commit" not in kinds:
            not_judged["follower-commit-bound"] = "the DB's logs report no commits"
        elif not has_commits:
            not_judged["follower-commit-bound"] = "no commit events were read"
        else:
            judged.append("follower-commit-bound")
            found["event-commit-beyond-match"] = _beyond_match(evs)
    if "safety" in kinds:
        judged.append("safety-checks")
        found["node-safety-check"] = _safety(evs)
    counts = {k: len(v) for k, v in found.items() if v}
    checked = checked_counts(evs)
    return {
        "valid": not counts,
        "anomalies": {k: v[:EXAMPLES] for k, v in found.items() if v},
        "stats": {
            "events": len(evs),
            "judged": judged,
            "not_judged": not_judged,
            "anomaly_counts": counts,
            "checked": {name: checked[name] for name in judged},
        },
    }


def summary_line(result: Mapping[str, Any]) -> str:
    """One line for the log: what was judged and what was found."""
    stats = result.get("stats") or {}
    counts = stats.get("anomaly_counts") or {}
    found = ", ".join(f"{k} ({v})" for k, v in sorted(counts.items())) or "nothing"
    return f"node events: {stats.get('events', 0)} read, judged {stats.get('judged')}: {found}"


def merge_node_events(results: dict[str, Any], judged: Mapping[str, Any]) -> None:
    """The node-event judgement as one more checker of ``results``: its anomalies beside
    the others, its verdict merged (an anomaly makes the run invalid; nothing to judge
    leaves the verdict as it was)."""
    from harness.core.verdict import merge

    results.setdefault("checkers", {})[NAME] = dict(judged)
    results.setdefault("anomalies", {}).update(judged.get("anomalies") or {})
    if judged["stats"]["judged"]:
        results["valid"] = merge([results.get("valid", "unknown"), judged["valid"]])
