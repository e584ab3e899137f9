"""Water marks and the commit rule (spec §7.2-7.3), as pure functions.

The leader keeps one mark per peer for the current term (its own is durableEnd).
The index held durably by a quorum is the (N//2)-th highest mark; it may commit
only if the entry there was written in the current term: older entries commit
with it (Raft §5.4.2). ``by_count`` is DLedger 0.2's rule and the seeded bug
``commit-old-term``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["quorum_index", "next_committed", "follower_commit"]


def quorum_index(marks: Mapping[str, int] | Iterable[int], n: int) -> int:
    """The highest index that at least N//2+1 of the N nodes hold; missing marks are -1."""
    vals = list(marks.values()) if isinstance(marks, Mapping) else list(marks)
    if len(vals) > n:
        raise ValueError(f"{len(vals)} marks for {n} nodes")
    vals += [-1] * (n - len(vals))
    vals.sort(reverse=True)
    return vals[n // 2]


def next_committed(
    committed: int, qindex: int, qterm: int, current_term: int, *, by_count: bool = False
) -> int:
    """New leader commit index: raised to qindex only if it is higher and of the current term."""
    if qindex <= committed:
        return committed
    if not by_count and qterm != current_term:
        return committed
    return qindex


def follower_commit(
    committed: int, leader_commit: int, match_index: int, *, assign: bool = False
) -> int:
    """Follower rule (§6.4): raise to min(leader commit, matchIndex); never lower.

    ``assign`` is the seeded bug ``commit-regress``: take the value even when lower.
    """
    v = min(leader_commit, match_index)
    if assign:
        return v
    return max(committed, v)
