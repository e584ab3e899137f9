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
- ``node-safety-check``: a node logged that one of its own invariant checks failed, for
  any DB that reports such lines (the reference node's ``SAFETY``).

Pure: events in, one checker result out (the shape every checker's result has:
``valid``, ``anomalies`` with capped examples, ``stats`` with the true counts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from harness.core.events import NodeEvent

__all__ = ["ANOMALIES", "NAME", "check_node_events", "merge_node_events", "summary_line"]

NAME = "node-events"
"""The key of this check in ``results.json``'s ``checkers``."""

ANOMALIES = ("event-double-vote", "event-two-leaders", "node-safety-check")

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


def _safety(events: Iterable[NodeEvent]) -> list[dict[str, Any]]:
    return [
        {**_stamp(ev), "check": ev.why, "term": ev.term, "why": f"{ev.node} logged {ev.why}"}
        for ev in events
        if ev.kind == "safety"
    ]


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
    if "safety" in kinds:
        judged.append("safety-checks")
        found["node-safety-check"] = _safety(evs)
    counts = {k: len(v) for k, v in found.items() if v}
    return {
        "valid": not counts,
        "anomalies": {k: v[:EXAMPLES] for k, v in found.items() if v},
        "stats": {
            "events": len(evs),
            "judged": judged,
            "not_judged": not_judged,
            "anomaly_counts": counts,
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
