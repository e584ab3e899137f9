"""The membership rules as pure functions (docs/membership.md M1-M8, M11).

Each seeded membership bug that is a rule (``reconfig-before-term-commit``,
``config-on-commit``) is shown here changing the outcome of a crafted scenario:
two different entries committed at one index, or a commit without a majority of
the configuration in the committing leader's log.
"""

from __future__ import annotations

import pytest

from node_impl.config import ConfigError as ArgError
from node_impl.config import parse_args
from node_impl.kv import entry_view
from node_impl.membership import (
    CONFIG_PREFIX,
    Config,
    ConfigError,
    add_learner,
    caught_up,
    change_precondition,
    committed_config,
    config_in_force,
    config_of_entry,
    decode_config,
    encode_config,
    promote,
    quorum_of,
    remove,
    single_server_change,
    voter_quorum_index,
)
from node_impl.quorum import next_committed
from node_impl.store import MAGIC_NOOP, MAGIC_NORMAL, Entry, encode_body
from node_impl.voting import (
    ACCEPT,
    REJECT_ALREADY_HAS_LEADER,
    REJECT_ALREADY_VOTED,
    VoteRequest,
    VoterState,
    decide_vote,
)

A = "127.0.0.1:1"


def cfg(*voters: str, learners: tuple[str, ...] = ()) -> Config:
    return Config.of({v: A for v in voters}, {v: A for v in learners})


def entry(index: int, term: int, body: bytes, magic: int = MAGIC_NORMAL) -> Entry:
    return Entry(index, term, magic, 0, 48 + len(body), 0, 0, body)


# ---------------------------------------------------------------- encoding (M1)


def test_config_entry_round_trips_and_is_recognised_by_prefix() -> None:
    c = cfg("n1", "n2", learners=("n3",))
    body = encode_config(c)
    assert body.startswith(CONFIG_PREFIX)
    assert decode_config(body) == c
    assert config_of_entry(entry(4, 1, body)) == c
    view = entry_view(entry(4, 1, body))
    assert view[2] == "config" and view[3] == {"voters": {"n1": A, "n2": A}, "learners": {"n3": A}}


@pytest.mark.parametrize(
    "body",
    [
        encode_body({"op": "append", "p": "config"}),
        encode_body({"op": "config", "voters": {"n1": 7}, "learners": {}}),  # bad address
        encode_body({"op": "config", "voters": [], "learners": {}}),
        CONFIG_PREFIX + b"\xc1",  # garbage after the prefix
        b"",
    ],
)
def test_other_bodies_are_not_configs(body: bytes) -> None:
    assert decode_config(body) is None


def test_noop_is_not_a_config() -> None:
    assert config_of_entry(entry(0, 1, b"", MAGIC_NOOP)) is None


# ---------------------------------------------------------------- config in force (M2)

START = cfg("n1", "n2", "n3")
C1 = cfg("n1", "n2", "n3", learners=("n4",))
C2 = cfg("n1", "n2", "n3", "n4")
HISTORY = [(5, C1), (9, C2)]


@pytest.mark.parametrize(
    ("end", "committed", "want"),
    [
        (3, 3, (-1, START)),  # no config entry in the log: the startup peer list
        (5, 0, (5, C1)),  # in force once in the log, uncommitted
        (12, 6, (9, C2)),  # the last one wins
        (8, 6, (5, C1)),  # config 9 truncated away: back to the previous one
        (4, 4, (-1, START)),  # both truncated: back to the startup list
    ],
)
def test_config_in_force_is_the_last_in_the_log(end, committed, want) -> None:
    assert config_in_force(HISTORY, START, end, committed) == want


def test_bug_config_on_commit_takes_only_committed_configs() -> None:
    assert config_in_force(HISTORY, START, 12, 6, on_commit=True) == (5, C1)
    assert config_in_force(HISTORY, START, 12, 4, on_commit=True) == (-1, START)
    assert committed_config(HISTORY, START, 9) == (9, C2)


# ---------------------------------------------------------------- quorum (M5)


def test_learners_do_not_count_toward_a_quorum() -> None:
    marks = {"n1": 10, "n2": 2, "n3": 2, "n4": 10}
    assert voter_quorum_index(marks, C1.voter_ids) == 2  # n4 is a learner in C1
    assert voter_quorum_index(marks, C2.voter_ids) == 2  # 3 of 4 voters needed
    marks["n2"] = 10
    assert voter_quorum_index(marks, C2.voter_ids) == 10


def test_a_leader_removing_itself_does_not_count_its_own_mark() -> None:
    marks = {"n1": 10, "n2": 10, "n3": 4}
    assert voter_quorum_index(marks, {"n2", "n3"}) == 4
    assert voter_quorum_index(marks, {"n1", "n2", "n3"}) == 10
    assert voter_quorum_index({}, set()) == -1


def test_quorum_of_counts_only_voters() -> None:
    assert quorum_of({"a", "b", "c"}, {"a", "b"})
    assert not quorum_of({"a", "b", "c"}, {"a", "x", "y"})
    assert not quorum_of({"a", "b", "c", "d"}, {"a", "b"})
    assert not quorum_of(set(), {"a"})


# ---------------------------------------------------------------- preconditions (M3)


def test_change_waits_for_an_entry_of_the_leaders_term() -> None:
    # the election NOOP at 7 is not committed yet
    assert change_precondition(committed=6, ready_index=7, config_index=3) == "LEADER_NOT_READY"
    assert change_precondition(committed=7, ready_index=7, config_index=3) is None
    # seeded bug reconfig-before-term-commit skips that check
    assert (
        change_precondition(committed=6, ready_index=7, config_index=3, skip_term_commit=True)
        is None
    )


def test_one_change_at_a_time_and_not_during_a_transfer() -> None:
    assert (
        change_precondition(committed=7, ready_index=2, config_index=8) == "CONFIG_CHANGE_PENDING"
    )
    assert (
        change_precondition(committed=9, ready_index=2, config_index=8, transferring=True)
        == "LEADER_TRANSFERRING"
    )


# ---------------------------------------------------------------- catch-up (M4)


@pytest.mark.parametrize(
    ("mark", "committed", "end", "want"),
    [
        (100, 100, 100, True),
        (99, 100, 100, False),  # misses a committed entry
        (100, 100, 164, True),  # 64 behind the end: close enough
        (100, 100, 165, False),
        (-1, -1, 0, True),  # empty cluster log
    ],
)
def test_learner_catch_up_rule(mark, committed, end, want) -> None:
    assert caught_up(mark, committed, end, 64) is want


# ---------------------------------------------------------------- changes


def test_single_server_changes() -> None:
    c = add_learner(START, "n4", A)
    assert c.learner_ids == {"n4"} and c.voter_ids == START.voter_ids
    p = promote(c, "n4")
    assert p.voter_ids == {"n1", "n2", "n3", "n4"} and not p.learners
    assert single_server_change(START, p) and single_server_change(c, p)
    r = remove(p, "n1")
    assert r.voter_ids == {"n2", "n3", "n4"}
    assert not single_server_change(START, r)  # n1 out and n4 in: two changes
    with pytest.raises(ConfigError):
        add_learner(START, "n1", A)
    with pytest.raises(ConfigError):
        promote(START, "n1")
    with pytest.raises(ConfigError):
        remove(START, "n9")
    with pytest.raises(ConfigError):
        remove(cfg("n1"), "n1")


# ---------------------------------------------------------------- seeded bugs (M11)


def _vote(voter: str, config: Config, term: int, log: list, cand: str, cand_log: list) -> bool:
    """decide_vote for a voter whose state is (term, log); logs are lists of terms."""
    r = VoteRequest(term, cand, len(cand_log) - 1, cand_log[-1])
    # a higher term first answers TERM_NOT_READY; the revote in the adopted term decides
    s = VoterState(voter, config.voter_ids, term, None, None, len(log) - 1, log[-1])
    return decide_vote(s, r, from_self=voter == cand).result == ACCEPT


@pytest.mark.parametrize("bug", [False, True])
def test_bug_reconfig_before_term_commit_commits_two_entries_at_one_index(bug: bool) -> None:
    """The 2015 single-server counterexample, replayed on our rules.

    C0 = {S1..S4}. Term 1: S1 leads, index 0 (its NOOP) is committed everywhere, and
    S1 appends C1 = C0 + S5 at index 1, which reaches S5 only. Term 2: S2 is elected
    by S2, S3, S4 (none holds C1), appends its NOOP at 1 and at once C2 = C0 - S1 at
    2; S3 takes both, and {S2, S3} is a majority of C2, the config in force on S2.
    Term 3: S1, whose config in force is C1, is elected by S1, S4, S5 and commits
    with them: index 1 is now committed twice, with different entries.
    The fix stops S2 at C2: its NOOP is not committed, so no change may start.
    """
    c0 = cfg("S1", "S2", "S3", "S4")
    c1 = cfg("S1", "S2", "S3", "S4", "S5")
    c2 = cfg("S2", "S3", "S4")
    # term 2: S2 elected by S2, S3, S4 (its config in force is C0)
    t1_log = [1]  # index 0: the term-1 NOOP, committed everywhere
    assert all(_vote(v, c0, 2, t1_log, "S2", t1_log) for v in ("S2", "S3", "S4"))
    assert quorum_of(c0.voter_ids, {"S2", "S3", "S4"})
    # S2 appended its NOOP at 1; may it append C2 at 2 before the NOOP commits?
    why = change_precondition(committed=0, ready_index=1, config_index=-1, skip_term_commit=bug)
    if not bug:
        assert why == "LEADER_NOT_READY"
        return
    assert why is None
    s2_history = [(2, c2)]
    _, in_force = config_in_force(s2_history, c0, end=2, committed=0)
    assert in_force == c2
    marks = {"S2": 2, "S3": 2, "S4": 0, "S1": 0}
    q = voter_quorum_index(marks, in_force.voter_ids)
    committed_s2 = next_committed(0, q, 2, 2)
    assert committed_s2 == 2  # S2's NOOP (term 2) at index 1 is committed
    # term 3: S1 (log: NOOP1, C1) asks S4 (log: NOOP1) and S5 (log: NOOP1, C1)
    s1_log = [1, 1]
    _, s1_config = config_in_force([(1, c1)], c0, end=1, committed=0)
    assert s1_config == c1
    assert _vote("S4", c0, 3, t1_log, "S1", s1_log)
    assert _vote("S5", c1, 3, s1_log, "S1", s1_log)
    assert quorum_of(s1_config.voter_ids, {"S1", "S4", "S5"})
    # S1 appends its NOOP at 2, replicates to S4 and S5 and commits index 2 (term 3):
    marks = {"S1": 2, "S4": 2, "S5": 2, "S2": -1, "S3": -1}
    committed_s1 = next_committed(0, voter_quorum_index(marks, s1_config.voter_ids), 3, 3)
    assert committed_s1 == 2
    # index 1 committed on S2's side holds S2's NOOP (term 2), on S1's side C1 (term 1)
    s2_entry_1, s1_entry_1 = ("noop", 2), ("config C1", 1)
    assert s2_entry_1 != s1_entry_1


def test_a_term_whose_leader_changed_the_configuration_has_no_second_election() -> None:
    """M17, the quickstart's two-leaders-in-term of 2026-11-27. Term 6: n3 was elected in
    {n2, n3, n4} by n3 and n2, then added n1.1 and n5.1 (the configuration in force: an
    entry of term 6; the log ends at 800). n1.1 polls in term 6. n4 and n5.1, following
    n3 without a vote in term 6, would make 3 of the 5 new voters with n1.1's own vote,
    none of whom elected n3; they must refuse."""
    five = cfg("n1.1", "n2", "n3", "n4", "n5.1").voter_ids
    ask = VoteRequest(6, "n1.1", 800, 6)

    def answer(voter: str, voted: str | None, leader: str | None, config_term: int = 6) -> str:
        s = VoterState(voter, five, 6, voted, leader, 800, 6, config_term)
        return decide_vote(s, ask, from_self=voter == "n1.1").result

    assert answer("n4", None, "n3") == REJECT_ALREADY_HAS_LEADER
    assert answer("n5.1", None, "n3") == REJECT_ALREADY_HAS_LEADER
    assert answer("n2", "n3", "n3") == REJECT_ALREADY_HAS_LEADER  # as before: it voted
    # liveness: the candidate's own vote stands, and so does a vote for the leader itself
    assert answer("n1.1", None, None) == ACCEPT
    assert answer("n4", None, "n1.1") == ACCEPT
    # once n3 is gone, the voters time out and vote for themselves: the candidate is
    # refused as already voted and moves to term 7, where the log decides
    assert answer("n4", None, None) == ACCEPT  # following no one: DLedger's rules
    assert answer("n4", "n4", None) == REJECT_ALREADY_VOTED
    s = VoterState("n4", five, 7, None, None, 800, 6, 6)
    assert decide_vote(s, VoteRequest(7, "n1.1", 800, 6), from_self=False).result == ACCEPT
    # a configuration from an earlier term: every majority of it shares a voter with the
    # one that elected n3, who refuses; DLedger's rules as they were
    assert answer("n4", None, "n3", config_term=5) == ACCEPT


@pytest.mark.parametrize("bug", [False, True])
def test_bug_config_on_commit_commits_without_a_majority_of_the_logged_config(
    bug: bool,
) -> None:
    """C0 = {a, b, c}. Leader a appends C1 = C0 + d (a voter after its learner stage)
    at index 5, replicated to b only, and crashes. b is elected (term 2) and appends
    its NOOP at 6, replicated to c. Raft's rule puts C1 in force on b as soon as it is
    logged: a quorum is 3 of {a, b, c, d}, and {b, c} commits nothing. With the bug b
    still counts C0, and {b, c} commits 5 and 6: C1 and the entries after it commit
    with 2 of the 4 voters of the configuration in b's own log.
    """
    c0 = cfg("a", "b", "c")
    c1 = cfg("a", "b", "c", "d")
    history = [(5, c1)]
    _, in_force = config_in_force(history, c0, end=6, committed=4, on_commit=bug)
    assert in_force == (c0 if bug else c1)
    marks = {"b": 6, "c": 6, "a": 4, "d": 4}
    new = next_committed(4, voter_quorum_index(marks, in_force.voter_ids), 2, 2)
    if bug:
        assert new == 6 and not quorum_of(c1.voter_ids, {"b", "c"})
    else:
        assert new == 4


def test_join_flag_parses_and_needs_dledger_mode(tmp_path) -> None:
    base = ["--id", "n4", "--peers", "n1=h:1,n4=h:4", "--data-dir", str(tmp_path)]
    assert parse_args([*base, "--join"]).join is True
    assert parse_args(base).join is False
    with pytest.raises(ArgError, match="--join"):
        parse_args([*base, "--join", "--mode", "ha", "--ha-master", "n1"])
    with pytest.raises(ArgError, match="--join"):
        parse_args(["--id", "n4", "--peers", "n4=h:4", "--data-dir", str(tmp_path), "--join"])
