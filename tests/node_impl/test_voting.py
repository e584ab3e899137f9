"""Every row of the election tables (spec §4) through the pure decision functions."""

from __future__ import annotations

import pytest

from node_impl.voting import (
    ACCEPT,
    REJECT_ALREADY_HAS_LEADER,
    REJECT_ALREADY_VOTED,
    REJECT_EXPIRED_LEDGER_TERM,
    REJECT_EXPIRED_VOTE_TERM,
    REJECT_SMALL_LEDGER_END_INDEX,
    REJECT_TERM_NOT_READY,
    REJECT_TERM_SMALL_THAN_LEDGER,
    REJECT_UNEXPECTED_LEADER,
    REJECT_UNKNOWN_LEADER,
    Tally,
    VoteRequest,
    VoterState,
    candidate_outcome,
    decide_heartbeat,
    decide_vote,
    tally_votes,
)

PEERS = frozenset({"n1", "n2", "n3"})


def voter(term=5, voted=None, leader=None, end=10, end_term=4) -> VoterState:
    return VoterState("n1", PEERS, term, voted, leader, end, end_term)


def req(term=5, cand="n2", end=10, end_term=4) -> VoteRequest:
    return VoteRequest(term, cand, end, end_term)


@pytest.mark.parametrize(
    ("state", "request_", "from_self", "want"),
    [
        (voter(), req(cand="n9"), False, REJECT_UNKNOWN_LEADER),
        (voter(), req(cand="n1"), False, REJECT_UNEXPECTED_LEADER),
        (voter(), req(end_term=3, end=99), False, REJECT_EXPIRED_LEDGER_TERM),
        (voter(), req(end=9), False, REJECT_SMALL_LEDGER_END_INDEX),
        # the log check runs before the term check: a stale candidate with a higher term
        # never makes the voter step down
        (voter(), req(term=9, end=9), False, REJECT_SMALL_LEDGER_END_INDEX),
        (voter(), req(term=4), False, REJECT_EXPIRED_VOTE_TERM),
        (voter(voted="n3", leader="n3"), req(), False, REJECT_ALREADY_HAS_LEADER),
        (voter(voted="n3"), req(), False, REJECT_ALREADY_VOTED),
        (voter(), req(term=6), False, REJECT_TERM_NOT_READY),
        (voter(term=3, end_term=4), req(term=3, end_term=4), False, REJECT_TERM_SMALL_THAN_LEDGER),
        (voter(), req(), False, ACCEPT),
        (voter(voted="n2"), req(), False, ACCEPT),  # a repeated request from our candidate
        (voter(), req(cand="n1"), True, ACCEPT),  # the self-vote uses the same handler
        (voter(), req(end=11, end_term=4), False, ACCEPT),
        (voter(), req(end=0, end_term=5), False, ACCEPT),  # higher end term wins over length
    ],
)
def test_voter_rows(state, request_, from_self, want) -> None:
    assert decide_vote(state, request_, from_self=from_self).result == want


def test_accept_grants_and_not_ready_steps_down() -> None:
    d = decide_vote(voter(), req(), from_self=False)
    assert d.grant and not d.step_to_candidate and d.reply_term == 5
    d = decide_vote(voter(), req(term=8), from_self=False)
    assert d.step_to_candidate and not d.grant and d.reply_term == 5
    d = decide_vote(voter(term=3, end_term=4), req(term=3, end_term=4), from_self=False)
    assert d.reply_term == 4  # carries the voter's ledger end term


def test_vote_without_log_check_grants_to_a_shorter_log() -> None:
    short = req(end=2, end_term=1)
    assert decide_vote(voter(), short, from_self=False).result == REJECT_EXPIRED_LEDGER_TERM
    # seeded bug: the log check is skipped ... but rule 4 still holds here (term 5 >= end term 4)
    d = decide_vote(voter(), short, from_self=False, skip_log_check=True)
    assert d.result == ACCEPT and d.grant


def t(**kw) -> Tally:
    base = dict(
        term=5,
        valid=3,
        accepted=0,
        not_ready=0,
        log_rejects=0,
        already_has_leader=False,
        max_term=5,
    )
    base.update(kw)
    return Tally(**base)


@pytest.mark.parametrize(
    ("tally", "result", "delay"),
    [
        (t(max_term=7, accepted=3), "WAIT_TO_VOTE_NEXT", "backoff"),
        (t(already_has_leader=True, accepted=2), "WAIT_TO_REVOTE", "backoff+E"),
        (t(valid=1, accepted=1), "WAIT_TO_REVOTE", "backoff"),
        (t(valid=3, log_rejects=2, accepted=1), "WAIT_TO_REVOTE", "backoff+E/2"),
        (t(accepted=2), "PASSED", "none"),
        (t(accepted=1, not_ready=1), "REVOTE_IMMEDIATELY", "none"),
        (t(accepted=1), "WAIT_TO_VOTE_NEXT", "backoff"),
    ],
)
def test_candidate_rows(tally, result, delay) -> None:
    out = candidate_outcome(tally, 3)
    assert (out.result, out.delay) == (result, delay)


def test_higher_reply_term_names_the_new_term() -> None:
    assert candidate_outcome(t(max_term=9), 3).new_term_hint == 9


def test_tally_counts_and_ignores_missing_replies() -> None:
    tl = tally_votes(
        5,
        [
            ("ACCEPT", 5),
            None,
            ("REJECT_TERM_NOT_READY", 4),
            ("REJECT_EXPIRED_LEDGER_TERM", 6),
            ("REJECT_ALREADY_HAS_LEADER", 5),
        ],
    )
    assert (tl.valid, tl.accepted, tl.not_ready, tl.log_rejects) == (4, 1, 1, 1)
    assert tl.already_has_leader and tl.max_term == 6


@pytest.mark.parametrize(
    ("term", "leader", "req_term", "req_leader", "code", "flag"),
    [
        (5, None, 5, "n9", "UNKNOWN_MEMBER", None),
        (5, None, 5, "n1", "UNEXPECTED_MEMBER", None),
        (5, "n2", 4, "n2", "EXPIRED_TERM", None),
        (5, "n2", 5, "n2", "SUCCESS", "refresh"),
        (5, None, 5, "n2", "SUCCESS", "follow"),
        (5, "n3", 5, "n2", "INCONSISTENT_LEADER", None),
        (5, "n1", 5, "n2", "INCONSISTENT_LEADER", None),  # we lead this term ourselves
        (5, "n2", 6, "n2", "TERM_NOT_READY", "step_to_candidate"),
    ],
)
def test_heartbeat_rows(term, leader, req_term, req_leader, code, flag) -> None:
    d = decide_heartbeat("n1", PEERS, term, leader, req_term, req_leader)
    assert d.code == code
    for f in ("refresh", "follow", "step_to_candidate"):
        assert getattr(d, f) == (f == flag)
