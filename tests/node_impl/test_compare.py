"""The leader's COMPARE table (spec §5.2) and the follower's push gate (§6.1)."""

from __future__ import annotations

import pytest

from node_impl.follower import gate
from node_impl.replication import compare_decision


@pytest.mark.parametrize(
    ("c", "lb", "le", "ok", "fb", "fe", "want"),
    [
        (9, 0, 9, True, 0, 9, ("append", 9)),  # match at the follower's end
        (9, 0, 9, True, 0, 12, ("truncate", 9)),  # longer dirty suffix
        (9, 0, 9, False, -1, -1, ("truncate", 0)),  # empty follower: disjoint
        (9, 5, 9, False, 0, 3, ("truncate", 5)),  # follower ends before our begin
        (3, 0, 9, False, 12, 20, ("truncate", 0)),  # follower begins after our end
        (3, 0, 9, False, 5, 8, ("truncate", 0)),  # c below the follower's begin
        (9, 0, 9, False, 0, 4, ("compare", 4)),  # follower behind: jump to its end
        (9, 0, 9, False, 0, 12, ("compare", 8)),  # divergent suffix: step back
        (0, 0, 9, False, 0, 12, ("truncate", 0)),  # stepped below our begin
    ],
)
def test_compare_rows(c, lb, le, ok, fb, fe, want) -> None:
    assert compare_decision(c, lb, le, ok, fb, fe) == want


def test_compare_walk_converges_on_the_common_prefix() -> None:
    leader = [(i, 1 if i < 5 else 3) for i in range(10)]  # (index, term)
    follower = [(i, 1 if i < 5 else 2) for i in range(12)]
    c, steps = 9, 0
    while True:
        steps += 1
        ok = c < len(follower) and follower[c] == leader[c]
        action, x = compare_decision(c, 0, 9, ok, 0, len(follower) - 1)
        if action != "compare":
            break
        c = x
    assert (action, x) == ("truncate", 4)  # common prefix ends at 4; cut the rest
    assert steps == 6


@pytest.mark.parametrize(
    ("role", "term", "leader", "rt", "rl", "want"),
    [
        ("follower", 5, "n2", 5, "n2", None),
        ("follower", 5, "n2", 4, "n2", "EXPIRED_TERM"),
        ("follower", 5, "n2", 6, "n2", "INCONSISTENT_TERM"),
        ("follower", 5, "n2", 5, "n3", "INCONSISTENT_LEADER"),
        ("candidate", 5, None, 5, "n2", "NOT_FOLLOWER"),
        ("leader", 5, "n1", 5, "n2", "INCONSISTENT_LEADER"),
    ],
)
def test_gate(role, term, leader, rt, rl, want) -> None:
    assert gate(role, term, leader, rt, rl) == want
