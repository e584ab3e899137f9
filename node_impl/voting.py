"""Election decisions as pure functions (spec §4).

The elector (``election.py``) owns timers, sockets and persistence; everything that
decides *what* to answer or *what* to do next lives here, so each row of the spec's
tables is one unit test and the seeded bug ``vote-without-log-check`` is one flag.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ACCEPT",
    "REJECT_UNKNOWN_LEADER",
    "REJECT_UNEXPECTED_LEADER",
    "REJECT_EXPIRED_LEDGER_TERM",
    "REJECT_SMALL_LEDGER_END_INDEX",
    "REJECT_EXPIRED_VOTE_TERM",
    "REJECT_ALREADY_HAS_LEADER",
    "REJECT_ALREADY_VOTED",
    "REJECT_TERM_NOT_READY",
    "REJECT_TERM_SMALL_THAN_LEDGER",
    "LOG_CHECK_REJECTS",
    "VoterState",
    "VoteRequest",
    "VoteDecision",
    "decide_vote",
    "Tally",
    "tally_votes",
    "CandidateOutcome",
    "candidate_outcome",
    "HeartbeatDecision",
    "decide_heartbeat",
    "is_quorum",
]

ACCEPT = "ACCEPT"
REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
LOG_CHECK_REJECTS = frozenset({REJECT_EXPIRED_LEDGER_TERM, REJECT_SMALL_LEDGER_END_INDEX})


def is_quorum(count: int, n: int) -> bool:
    """quorum(x) per spec: x >= N//2 + 1 over the configured peers."""
    return count >= n // 2 + 1


@dataclass(frozen=True)
class VoterState:
    self_id: str
    peers: frozenset[str]
    term: int
    voted_for: str | None
    leader_id: str | None
    ledger_end_index: int
    ledger_end_term: int
    config_term: int = -1
    """Term of the entry holding the configuration in force (-1: the startup one)."""


@dataclass(frozen=True)
class VoteRequest:
    term: int
    candidate: str
    ledger_end_index: int
    ledger_end_term: int


@dataclass(frozen=True)
class VoteDecision:
    result: str
    reply_term: int
    grant: bool = False  # set votedFor = candidate and persist before replying
    step_to_candidate: bool = False  # become candidate of req.term, needIncreaseTerm


def decide_vote(
    s: VoterState, r: VoteRequest, *, from_self: bool, skip_log_check: bool = False
) -> VoteDecision:
    """The voter's rules, first match wins (spec §4 Voter)."""
    if r.candidate not in s.peers:
        return VoteDecision(REJECT_UNKNOWN_LEADER, s.term)
    if not from_self and r.candidate == s.self_id:
        return VoteDecision(REJECT_UNEXPECTED_LEADER, s.term)
    if not skip_log_check:
        if r.ledger_end_term < s.ledger_end_term:
            return VoteDecision(REJECT_EXPIRED_LEDGER_TERM, s.term)
        if r.ledger_end_term == s.ledger_end_term and r.ledger_end_index < s.ledger_end_index:
            return VoteDecision(REJECT_SMALL_LEDGER_END_INDEX, s.term)
    if r.term < s.term:
        return VoteDecision(REJECT_EXPIRED_VOTE_TERM, s.term)
    if r.term == s.term:
        if s.voted_for is not None and s.voted_for != r.candidate:
            if s.leader_id is not None:
                return VoteDecision(REJECT_ALREADY_HAS_LEADER, s.term)
            return VoteDecision(REJECT_ALREADY_VOTED, s.term)
    else:
        return VoteDecision(REJECT_TERM_NOT_READY, s.term, step_to_candidate=True)
    if r.term < s.ledger_end_term:
        return VoteDecision(REJECT_TERM_SMALL_THAN_LEDGER, s.ledger_end_term)
    # (ours, docs/membership.md M17) No vote yet in this term, but following its leader,
    # which changed the configuration in this term: the new configuration's voters need
    # not include any that elected that leader, so they may not elect a second one.
    follows_another = s.leader_id is not None and s.leader_id != r.candidate
    changed_this_term = s.config_term == r.term
    if not from_self and s.voted_for is None and follows_another and changed_this_term:
        return VoteDecision(REJECT_ALREADY_HAS_LEADER, s.term)
    return VoteDecision(ACCEPT, s.term, grant=True)


@dataclass(frozen=True)
class Tally:
    """What a candidate learned from one round of vote replies (None = no reply)."""

    term: int
    valid: int = 0
    accepted: int = 0
    not_ready: int = 0
    log_rejects: int = 0
    already_has_leader: bool = False
    max_term: int = 0


def tally_votes(term: int, replies: Iterable[tuple[str, int] | None]) -> Tally:
    """Count (result, reply term) pairs; unreachable peers give None and are not valid."""
    valid = accepted = not_ready = log_rejects = 0
    has_leader = False
    max_term = term
    for rep in replies:
        if rep is None:
            continue
        result, rterm = rep
        valid += 1
        max_term = max(max_term, rterm)
        if result == ACCEPT:
            accepted += 1
        elif result == REJECT_TERM_NOT_READY:
            not_ready += 1
        elif result in LOG_CHECK_REJECTS:
            log_rejects += 1
        elif result == REJECT_ALREADY_HAS_LEADER:
            has_leader = True
    return Tally(term, valid, accepted, not_ready, log_rejects, has_leader, max_term)


@dataclass(frozen=True)
class CandidateOutcome:
    result: str  # WAIT_TO_VOTE_NEXT | WAIT_TO_REVOTE | PASSED | REVOTE_IMMEDIATELY
    delay: str  # "backoff" | "backoff+E" | "backoff+E/2" | "none"
    new_term_hint: int | None = None  # become candidate of this term


def candidate_outcome(t: Tally, n: int) -> CandidateOutcome:
    """The candidate's table, first match wins (spec §4 Candidate loop step 4)."""
    if t.max_term > t.term:
        return CandidateOutcome("WAIT_TO_VOTE_NEXT", "backoff", t.max_term)
    if t.already_has_leader:
        return CandidateOutcome("WAIT_TO_REVOTE", "backoff+E")
    if not is_quorum(t.valid, n):
        return CandidateOutcome("WAIT_TO_REVOTE", "backoff")
    if not is_quorum(t.valid - t.log_rejects, n):
        return CandidateOutcome("WAIT_TO_REVOTE", "backoff+E/2")
    if is_quorum(t.accepted, n):
        return CandidateOutcome("PASSED", "none")
    if is_quorum(t.accepted + t.not_ready, n):
        return CandidateOutcome("REVOTE_IMMEDIATELY", "none")
    return CandidateOutcome("WAIT_TO_VOTE_NEXT", "backoff")


@dataclass(frozen=True)
class HeartbeatDecision:
    code: str
    refresh: bool = False  # same leader: refresh the follower timer
    follow: bool = False  # no leader known: become follower of the sender
    step_to_candidate: bool = False  # higher term: candidate, needIncreaseTerm


def decide_heartbeat(
    self_id: str,
    peers: frozenset[str],
    term: int,
    leader_id: str | None,
    req_term: int,
    req_leader: str,
) -> HeartbeatDecision:
    """The heartbeat receiver's rules (spec §4)."""
    if req_leader not in peers:
        return HeartbeatDecision("UNKNOWN_MEMBER")
    if req_leader == self_id:
        return HeartbeatDecision("UNEXPECTED_MEMBER")
    if req_term < term:
        return HeartbeatDecision("EXPIRED_TERM")
    if req_term > term:
        return HeartbeatDecision("TERM_NOT_READY", step_to_candidate=True)
    if leader_id is None:
        return HeartbeatDecision("SUCCESS", follow=True)
    if leader_id == req_leader:
        return HeartbeatDecision("SUCCESS", refresh=True)
    return HeartbeatDecision("INCONSISTENT_LEADER")
