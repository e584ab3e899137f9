"""The quorum index and the commit rules (spec §6.4, §7.2-7.3)."""

from __future__ import annotations

import pytest

from node_impl.quorum import follower_commit, next_committed, quorum_index


@pytest.mark.parametrize(
    ("marks", "n", "want"),
    [
        ({"n1": 10, "n2": 7, "n3": 3}, 3, 7),
        ({"n1": 10, "n2": -1, "n3": -1}, 3, -1),
        ({"n1": 10}, 3, -1),  # missing marks count as -1
        ({"n1": 4}, 1, 4),  # N = 1: the leader's own durable end
        ({"a": 9, "b": 8, "c": 7, "d": 2, "e": 1}, 5, 7),
        ({"a": 9, "b": 9, "c": 1, "d": 1}, 4, 1),  # N = 4 needs 3 holders
    ],
)
def test_quorum_index(marks, n, want) -> None:
    assert quorum_index(marks, n) == want


def test_quorum_index_rejects_extra_marks() -> None:
    with pytest.raises(ValueError):
        quorum_index([1, 2, 3, 4], 3)


def test_commit_requires_a_current_term_entry() -> None:
    # quorum holds index 7, written in term 2; we lead term 3: not committable (Figure 8)
    assert next_committed(4, 7, 2, 3) == 4
    assert next_committed(4, 7, 3, 3) == 7
    # the seeded bug commit-old-term commits it by counting
    assert next_committed(4, 7, 2, 3, by_count=True) == 7


def test_commit_never_goes_down() -> None:
    assert next_committed(9, 7, 3, 3) == 9
    assert next_committed(9, 7, 3, 3, by_count=True) == 9


def test_follower_commit_is_bounded_by_match_and_monotonic() -> None:
    assert follower_commit(3, 10, 6) == 6  # only what is known to match
    assert follower_commit(3, 5, 9) == 5
    assert follower_commit(8, 5, 9) == 8  # a lower leader value is ignored
    assert follower_commit(8, 10, -1) == 8  # after a term change nothing matches yet
    # the seeded bug commit-regress assigns
    assert follower_commit(8, 5, 9, assign=True) == 5
