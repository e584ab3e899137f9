"""The models' step functions: pure, and the semantics each corpus documents."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checker.models import UNKNOWN, Fail, Model, get_model, known_models
from harness.core.errors import CheckerError


def run(model: Model, f: str, value: object, out: object, state: object) -> tuple[bool, object]:
    return model.step(state, (f, value), out)


def test_cas_register_etcd_semantics() -> None:
    m = get_model("cas-register")
    assert m.init() is None
    assert run(m, "read", None, None, None) == (True, None)
    assert run(m, "read", None, None, 3) == (False, 3)  # nil means "never written"
    assert run(m, "read", None, 3, 3) == (True, 3)
    assert run(m, "write", 4, 4, 3) == (True, 4)
    assert run(m, "cas", [3, 5], [3, 5], 3) == (True, 5)
    assert run(m, "cas", [3, 5], [3, 5], 4)[0] is False
    assert run(m, "cas", [3, 5], UNKNOWN, 3) == (True, 5)
    obs = get_model("cas-register", fails="observe")
    assert run(obs, "cas", [3, 5], Fail([3, 5]), 4) == (True, 4)
    assert run(obs, "cas", [3, 5], Fail([3, 5]), 3)[0] is False


def test_knossos_cas_register_reads_nil_anywhere() -> None:
    m = get_model("knossos-cas-register")
    assert m.init() == 0
    assert run(m, "read", None, None, 7) == (True, 7)
    assert run(m, "read", None, 0, 7)[0] is False


def test_kv_multi_register_mutex_set() -> None:
    kv = get_model("kv")
    assert kv.init() == ""
    assert run(kv, "append", "x 1 y", "x 1 y", "a") == (True, "ax 1 y")
    assert run(kv, "get", None, "ab", "ab") == (True, "ab")
    assert run(kv, "get", None, "a", "ab")[0] is False
    assert run(kv, "put", "z", "z", "ab") == (True, "z")
    mr = get_model("multi-register", initial={"x": 0, "y": 0})
    s0 = mr.init()
    ok, s1 = run(
        mr,
        "txn",
        [["write", "x", 2], ["read", "y", None]],
        [["write", "x", 2], ["read", "y", 0]],
        s0,
    )
    assert ok and dict(s1) == {"x": 2, "y": 0}
    assert run(mr, "txn", [["read", "x", None]], [["read", "x", 1]], s1)[0] is False
    assert run(mr, "txn", [["read", "x", None]], UNKNOWN, s1) == (True, s1)
    mu = get_model("mutex")
    assert run(mu, "acquire", None, None, False) == (True, True)
    assert run(mu, "acquire", None, None, True)[0] is False
    assert run(mu, "release", None, None, False)[0] is False
    se = get_model("set")
    ok, s = run(se, "add", 1, 1, frozenset())
    assert ok and run(se, "read", None, [1], s) == (True, s)
    assert run(se, "read", None, [], s)[0] is False


def test_append_log_model() -> None:
    m = get_model("append-log")
    ok, s = run(m, "append", {"payload": "a"}, {"payload": "a", "index": 1, "term": 1}, m.init())
    ok2, s = run(m, "append", {"payload": "b"}, {"payload": "b", "index": 2, "term": 1}, s)
    assert ok and ok2
    assert (
        run(m, "append", {"payload": "c"}, {"payload": "c", "index": 2, "term": 1}, s)[0] is False
    )
    assert run(m, "read", {}, {"entries": [[1, 1, "a"], [2, 1, "b"]]}, s)[0] is True
    assert run(m, "read", {}, {"entries": [[1, 1, "a"], [3, 1, "b"]]}, s)[0] is False
    assert run(m, "read", {}, {"entries": [[1, 1, "b"], [2, 1, "a"]]}, s)[0] is False


def test_get_model_errors_and_model_shape() -> None:
    with pytest.raises(CheckerError, match="unknown model 'nope'.*cas-register.*mutex"):
        get_model("nope")
    with pytest.raises(CheckerError, match="bad parameters"):
        get_model("mutex", initial=3)
    assert {
        "register",
        "cas-register",
        "kv",
        "multi-register",
        "mutex",
        "append-log",
        "set",
    } <= set(known_models())
    m = get_model("register")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Model("x", lambda: 0, lambda s, i, o: (True, s))  # type: ignore[misc]
    with pytest.raises(CheckerError, match="no operation 'txn'"):
        m.step_fn(("txn", []), None)


ops = st.one_of(
    st.tuples(st.just("read"), st.none(), st.one_of(st.none(), st.integers(0, 3))),
    st.tuples(st.just("write"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(
        st.just("cas"), st.lists(st.integers(0, 3), min_size=2, max_size=2), st.just(UNKNOWN)
    ),
)


@given(st.lists(ops, max_size=12), st.one_of(st.none(), st.integers(0, 3)))
def test_register_step_is_pure_and_matches_a_reference(seq: list, initial: object) -> None:
    """step never mutates and agrees with a direct simulation of a register."""
    m = get_model("cas-register", initial=initial)
    state = m.init()
    for f, v, out in seq:
        before = state
        ok, new = m.step(state, (f, v), out)
        assert state == before
        if f == "read":
            assert ok == (out == state or out is UNKNOWN) and new == state
        elif f == "write":
            assert ok and new == v
        else:
            assert ok == (state == v[0]) and new == (v[1] if ok else state)
        if ok:
            state = new
