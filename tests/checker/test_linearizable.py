"""The WGL search: hand-made histories, a brute-force oracle, partitions, timeouts."""

from __future__ import annotations

import itertools
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from checker.counterexample import render_text
from checker.linearizable import check_linearizable, check_partition, make_entries
from checker.models import UNKNOWN, get_model
from harness.core.history import Op


def hist(*rows: tuple[Any, ...]) -> list[Op]:
    """Rows of (process, type, f, value[, key]) in history order."""
    return [
        Op(type=r[1], process=r[0], f=r[2], value=r[3], key=r[4] if len(r) > 4 else None, index=i)
        for i, r in enumerate(rows)
    ]


REG = get_model("cas-register")


def test_stale_read_counterexample_names_the_read() -> None:
    h = hist(
        (0, "invoke", "write", 1),
        (0, "ok", "write", 1),
        (1, "invoke", "write", 2),
        (1, "ok", "write", 2),
        (2, "invoke", "read", None),
        (2, "ok", "read", 1),
    )
    res = check_linearizable(h, REG)
    assert res["valid"] is False and res["failures"] == [None]
    cex = res["counterexample"]
    assert cex["op"]["index"] == 4 and cex["op"]["result"] == 1
    assert cex["window"] == [4]
    assert [p["index"] for p in cex["prefix"]] == [0, 2] and cex["prefix"][-1]["state"] == "2"
    text = render_text(cex)
    assert "cannot linearize op 4" in text and "read" in text and "state it meets: 2" in text


def test_concurrent_ops_are_in_the_window() -> None:
    # write 1 is concurrent with both reads; read 1 then read nil cannot both hold
    h = hist(
        (0, "invoke", "write", 1),
        (1, "invoke", "read", None),
        (1, "ok", "read", 1),
        (2, "invoke", "read", None),
        (2, "ok", "read", None),
        (0, "ok", "write", 1),
    )
    res = check_linearizable(h, REG)
    assert res["valid"] is False
    cex = res["counterexample"]
    assert cex["op"]["index"] == 3
    assert set(cex["window"]) == {0, 3}


def test_completion_semantics() -> None:
    w_info = hist(
        (0, "invoke", "write", 5),
        (0, "info", "write", None),
        (1, "invoke", "read", None),
        (1, "ok", "read", 5),
    )
    assert check_linearizable(w_info, REG)["valid"] is True
    w_fail = hist(
        (0, "invoke", "write", 5),
        (0, "fail", "write", None),
        (1, "invoke", "read", None),
        (1, "ok", "read", 5),
    )
    assert check_linearizable(w_fail, REG)["valid"] is False
    pending = hist(
        (0, "invoke", "write", 5),
        (1, "invoke", "read", None),
        (1, "ok", "read", 5),
        (2, "invoke", "read", None),
        (2, "ok", "read", None),
    )
    # the pending write took effect before the first read: the later nil read is stale
    assert check_linearizable(pending, REG)["valid"] is False
    never = hist((0, "invoke", "write", 5), (1, "invoke", "read", None), (1, "ok", "read", None))
    assert check_linearizable(never, REG)["valid"] is True
    mutex = get_model("mutex")
    two_pending = hist(
        (0, "invoke", "acquire", None),
        (0, "ok", "acquire", None),
        (1, "invoke", "acquire", None),
        (2, "invoke", "acquire", None),
    )
    assert check_linearizable(two_pending, mutex)["valid"] is True


def test_keys_partition_and_stop_at_first_failure() -> None:
    good = [
        (0, "invoke", "write", 1, "a"),
        (0, "ok", "write", 1, "a"),
        (0, "invoke", "read", None, "a"),
        (0, "ok", "read", 1, "a"),
    ]
    bad = [
        (1, "invoke", "write", 1, "b"),
        (1, "ok", "write", 1, "b"),
        (1, "invoke", "read", None, "b"),
        (1, "ok", "read", 2, "b"),
    ]
    h = hist(*good, *bad)
    res = check_linearizable(h, REG)
    assert res["keys"] == 2 and res["failures"] == ["b"] and res["valid"] is False
    assert res["counterexample"]["key"] == "b"
    # unpartitioned: the same verdict through the lifted map model
    assert check_linearizable(h, REG, keys=False)["valid"] is False
    assert check_linearizable(hist(*good), REG, keys=False)["valid"] is True


def _hard(n: int, key: str | None = None) -> list[Op]:
    """n concurrent writes, then a read of a value nobody wrote: exhaustive and slow."""
    rows: list[tuple[Any, ...]] = [(p, "invoke", "write", p, key) for p in range(n)]
    rows += [(p, "ok", "write", p, key) for p in range(n)]
    rows += [(n, "invoke", "read", None, key), (n, "ok", "read", 999, key)]
    return hist(*rows)


def test_timeout_gives_unknown_never_a_verdict() -> None:
    h = _hard(18)
    t = time.monotonic()
    res = check_linearizable(h, REG, timeout=0.2)
    assert time.monotonic() - t < 2
    assert res["valid"] == "unknown" and res["unknown_keys"] == [None] and res["failures"] == []
    verdict, _ = check_partition(make_entries(h, REG), REG, time.monotonic() + 0.05)
    assert verdict == "unknown"


def test_round_robin_finds_a_cheap_failure_beside_a_hard_key() -> None:
    hard = _hard(18, key="hard")
    cheap = hist((50, "invoke", "read", None, "cheap"), (50, "ok", "read", 3, "cheap"))
    h = [op.replace(index=i) for i, op in enumerate(hard + cheap)]
    res = check_linearizable(h, REG, timeout=20)
    assert res["valid"] is False and res["failures"] == ["cheap"]
    assert res["unchecked_keys"] == ["hard"]


# ---------------------------------------------------------------- brute-force oracle


def brute(ops: list[Op], model: Any) -> bool:
    """Linearizable by enumeration: every subset of the pending ops, every real-time order."""
    calls: dict[Any, int] = {}
    items = []
    for pos, op in enumerate(ops):
        if op.type == "invoke":
            calls[op.process] = pos
        elif op.process in calls:
            inv = calls.pop(op.process)
            if op.type == "ok":
                items.append((inv, pos, (op.f, ops[inv].value), op.value, True))
            elif op.type == "info":
                items.append((inv, 10**9, (op.f, ops[inv].value), None, False))
    for inv in calls.values():
        items.append((inv, 10**9, (ops[inv].f, ops[inv].value), None, False))
    required = [it for it in items if it[4]]
    optional = [it for it in items if not it[4]]
    for k in range(len(optional) + 1):
        for extra in itertools.combinations(optional, k):
            chosen = required + list(extra)
            for perm in itertools.permutations(chosen):
                if any(
                    perm[j][1] < perm[i][0]
                    for i in range(len(perm))
                    for j in range(i + 1, len(perm))
                ):
                    continue
                s = model.init()
                for _, _, inp, out, known in perm:
                    ok, s2 = model.step(s, inp, out if known else UNKNOWN)
                    if not ok:
                        break
                    s = s2
                else:
                    return True
    return False


@st.composite
def histories(draw: Any) -> list[Op]:
    n_proc = draw(st.integers(1, 3))
    n_ops = draw(st.integers(1, 6))
    rows: list[tuple[Any, ...]] = []
    open_: dict[int, tuple[str, Any]] = {}
    next_proc = list(range(n_proc))
    fresh = n_proc
    started = 0
    while started < n_ops or open_:
        if started < n_ops:
            slot = draw(st.integers(0, n_proc - 1))
        else:
            slot = next_proc.index(draw(st.sampled_from(sorted(open_))))
            if draw(st.integers(0, 4)) == 0:  # leave this op open forever
                open_.pop(next_proc[slot])
                continue
        p = next_proc[slot]
        if p in open_:
            f, v = open_.pop(p)
            kind = draw(st.sampled_from(["ok", "ok", "ok", "info", "fail"]))
            if kind == "ok":
                out = draw(st.one_of(st.none(), st.integers(0, 2))) if f == "read" else v
                rows.append((p, "ok", f, out))
            else:
                rows.append((p, kind, f, None if kind == "info" else v))
                if kind == "info":
                    next_proc[slot] = fresh
                    fresh += 1
        else:
            f = draw(st.sampled_from(["read", "write", "cas"]))
            v = (
                None
                if f == "read"
                else draw(st.integers(0, 2))
                if f == "write"
                else [draw(st.integers(0, 2)), draw(st.integers(0, 2))]
            )
            open_[p] = (f, v)
            rows.append((p, "invoke", f, v))
            started += 1
    return hist(*rows)


@settings(max_examples=100, deadline=None)
@given(histories())
def test_search_agrees_with_brute_force(h: list[Op]) -> None:
    assert check_linearizable(h, REG)["valid"] == brute(h, REG)


def test_counterexample_is_the_earliest_unexplainable_completion() -> None:
    h = hist(
        (0, "invoke", "write", 1),
        (0, "ok", "write", 1),
        (1, "invoke", "read", None),
        (1, "ok", "read", 2),  # first impossible read
        (0, "invoke", "write", 3),
        (0, "ok", "write", 3),
        (1, "invoke", "read", None),
        (1, "ok", "read", 5),
    )
    cex = check_linearizable(h, REG)["counterexample"]
    assert cex["op"]["index"] == 2 and cex["state"] == "1"


def test_all_keys_lists_every_failure() -> None:
    rows = []
    for k in ("a", "b", "c"):
        rows += [(0, "invoke", "read", None, k), (0, "ok", "read", 1 if k != "b" else None, k)]
    res = check_linearizable(hist(*rows), REG, all_keys=True)
    assert res["failures"] == ["a", "c"] and res["unchecked_keys"] == []
