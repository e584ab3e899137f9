"""The compiled search loop (``checker/_wgl.c``) against the pure-Python reference.

The compiled loop must make exactly the moves of the Python loop, so not only
the verdict but the step count and the longest linearizable prefix must be
identical, on random histories of every built-in model and on every partition
of the shared corpora. ``prepared_search`` (the one-pass setup for models with
native steps) must give the same as ``search`` over ``make_entries``.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checker import linearizable as lin
from checker.models import UNKNOWN, Fail, Model, get_model
from harness.core.history import Op

pytest.importorskip("checker._wgl", reason="the compiled loop was not built")

CORPORA = Path(__file__).parents[3] / "shared" / "corpora"
ABSENT = {"jepsen/etcd_095.log", "mutex/bad/hazelcast.edn"}

MODELS: dict[str, Model] = {
    "cas-register": get_model("cas-register"),
    "cas-observe": get_model("cas-register", fails="observe"),
    "knossos": get_model("knossos-cas-register"),
    "register": get_model("register"),
    "mutex": get_model("mutex"),
    "kv": get_model("kv"),
}
FS = {
    "cas-register": ["read", "write", "cas"],
    "cas-observe": ["read", "write", "cas"],
    "knossos": ["read", "write", "cas"],
    "register": ["read", "write"],
    "mutex": ["acquire", "release"],
    "kv": ["get", "put", "append"],
}


def drain(gen: Generator[None, None, Any], cap: int | None = None) -> Any:
    """Run a search generator to its end (None if it needs more than ``cap`` slices)."""
    n = 0
    try:
        while True:
            next(gen)
            n += 1
            if cap is not None and n > cap:
                gen.close()
                return None
    except StopIteration as stop:
        return stop.value


def value_for(kind: str, f: str, draw: Any) -> Any:
    small = st.integers(0, 2)
    if kind == "kv":
        return None if f == "get" else draw(st.sampled_from(["a", "b", "ab"]))
    if f in ("read", "acquire", "release"):
        return None
    if f == "write":
        return draw(small)
    return [draw(small), draw(small)]


def result_for(kind: str, f: str, v: Any, draw: Any) -> Any:
    if kind == "kv" and f == "get":
        return draw(st.sampled_from(["", "a", "b", "ab", "aab"]))
    if f == "read":
        return draw(st.one_of(st.none(), st.integers(0, 2)))
    return v


@st.composite
def histories(draw: Any) -> tuple[str, list[Op]]:
    """A random history for a random built-in model: ok, fail, info and never-completed ops."""
    kind = draw(st.sampled_from(sorted(MODELS)))
    n_proc = draw(st.integers(1, 4))
    n_ops = draw(st.integers(1, 9))
    rows: list[tuple[Any, ...]] = []
    open_: dict[int, tuple[str, Any]] = {}
    procs = list(range(n_proc))
    fresh = n_proc
    started = 0
    while started < n_ops or open_:
        if started < n_ops:
            slot = draw(st.integers(0, n_proc - 1))
        else:
            slot = procs.index(draw(st.sampled_from(sorted(open_))))
            if draw(st.integers(0, 4)) == 0:
                open_.pop(procs[slot])
                continue
        p = procs[slot]
        if p in open_:
            f, v = open_.pop(p)
            how = draw(st.sampled_from(["ok", "ok", "ok", "info", "fail"]))
            if how == "ok":
                rows.append((p, "ok", f, result_for(kind, f, v, draw)))
            else:
                rows.append((p, how, f, None if how == "info" else v))
                if how == "info":
                    procs[slot] = fresh
                    fresh += 1
        else:
            f = draw(st.sampled_from(FS[kind]))
            v = value_for(kind, f, draw)
            open_[p] = (f, v)
            rows.append((p, "invoke", f, v))
            started += 1
    return kind, [
        Op(type=r[1], process=r[0], f=r[2], value=r[3], index=i) for i, r in enumerate(rows)
    ]


def all_three(ops: list[Op], model: Model, cap: int | None = None) -> tuple[Any, Any, Any]:
    """(Python reference, compiled over the Python layout, compiled from the one-pass setup)."""
    entries = lin.make_entries(ops, model)
    ref = drain(lin.search(entries, model, fast=False), cap)
    fast = drain(lin.search(entries, model, fast=True))
    gen = lin.prepared_search(ops, model)
    assert gen is not None
    return ref, fast, drain(gen)


@settings(max_examples=300, deadline=None)
@given(histories())
def test_compiled_loop_makes_the_same_moves(case: tuple[str, list[Op]]) -> None:
    kind, ops = case
    ref, fast, prepared = all_three(ops, MODELS[kind])
    assert fast == ref
    assert prepared == ref
    py_pass = lin.prepared_search(ops, MODELS[kind], c_pass=False)
    assert py_pass is not None and drain(py_pass) == ref


@pytest.mark.parametrize("corpus", ["porcupine", "knossos"])
def test_every_corpus_partition_searches_alike(corpus: str) -> None:
    """Every part of every corpus file: identical result (the Python side capped where it is slow)."""
    from harness.bench.checker_data import MODELS as _MODELS
    from harness.core.history import read_history

    manifest = CORPORA / corpus / "manifest.csv"
    if not manifest.exists():
        pytest.skip(f"no corpus at {manifest}")
    compared = 0
    with open(manifest, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["file"] not in ABSENT]
    for r in rows:
        name, params = _MODELS[r["model"]]
        model = get_model(name, **params)
        ops = read_history(CORPORA / corpus / r["file"])
        for part in lin.partition_ops(ops, model).values():
            entries = lin.make_entries(part, model)
            # some kv parts take millions of steps to refute; a slice cap keeps this quick
            fast = drain(lin.search(entries, model, fast=True), cap=100)
            if fast is None:
                continue
            gen = lin.prepared_search(part, model)
            prepared = fast if gen is None else drain(gen)
            assert prepared == fast, r["file"]
            ref = drain(lin.search(entries, model, fast=False), cap=8)
            if ref is not None:
                assert ref == fast, r["file"]
                compared += 1
    assert compared > len(rows) // 2


def test_native_steps_agree_with_the_models_step() -> None:
    """Each built-in model's ``native`` encoding steps as its Python ``step`` does."""
    rng = random.Random(7)
    vals: list[Any] = [None, 0, 1, 2, "", "a", "ab", False, True]
    for kind, model in MODELS.items():
        assert model.native is not None
        for _ in range(2000):
            f = rng.choice(FS[kind])
            v: Any = rng.choice(vals) if f != "cas" else [rng.choice(vals), rng.choice(vals)]
            if kind == "kv" and f == "append":
                v = rng.choice(["", "a", "ab"])
            out = rng.choice([UNKNOWN, Fail(v), v, rng.choice(vals)])
            nat = model.native((f, v), out)
            if nat is None:
                continue
            s = (
                rng.choice([False, True])
                if kind == "mutex"
                else rng.choice(["", "a", "b"] if kind == "kv" else vals)
            )
            ok, ns = model.step(s, (f, v), out)
            what = nat[0]
            if what == "set":
                want = (True, nat[1])
            elif what == "concat":
                want = (True, s + nat[1])
            elif what == "cas":
                want = (True, nat[2]) if s == nat[1] else (False, s)
            elif what == "cas-not":
                want = (s != nat[1], s)
            else:
                want = (True, s)
            assert want[0] == ok, (kind, f, v, out, s)
            if ok:
                assert want[1] == ns, (kind, f, v, out, s)


def test_models_without_native_steps_still_use_the_compiled_loop() -> None:
    """A model with plain Python states and no ``native`` runs compiled, through its step."""
    m = get_model("multi-register", initial={"x": 0})
    ops = [
        Op(type="invoke", process=0, f="txn", value=[["write", "x", 1]], index=0),
        Op(type="ok", process=0, f="txn", value=[["write", "x", 1]], index=1),
        Op(type="invoke", process=1, f="txn", value=[["read", "x", None]], index=2),
        Op(type="ok", process=1, f="txn", value=[["read", "x", 0]], index=3),
    ]
    entries = lin.make_entries(ops, m)
    assert lin._compile(lin._layout(entries, m)) is not None
    assert drain(lin.search(entries, m, fast=True)) == drain(lin.search(entries, m, fast=False))
    assert lin.check_linearizable(ops, m)["valid"] is False


def test_own_equality_falls_back_to_python() -> None:
    """A model with its own equal/hash (here: list states) is searched by the Python loop."""

    def compile(inp: Any, out: Any) -> Any:
        f, v = inp
        if f == "write":
            return lambda s: (True, [v])
        return lambda s: (s == [out], s)

    m = Model(
        name="boxed",
        init=lambda: [0],
        step=lambda s, i, o: compile(i, o)(s),
        compile=compile,
        equal=lambda a, b: a == b,
        hash=lambda s: hash(tuple(s)),
    )
    ops = [
        Op(type="invoke", process=0, f="write", value=1, index=0),
        Op(type="ok", process=0, f="write", value=1, index=1),
        Op(type="invoke", process=1, f="read", value=None, index=2),
        Op(type="ok", process=1, f="read", value=0, index=3),
    ]
    assert lin._compile(lin._layout(lin.make_entries(ops, m), m)) is None
    assert lin.check_linearizable(ops, m)["valid"] is False


def test_compiled_search_still_yields_and_times_out() -> None:
    """The deadline is checked between slices, so a hard part gives "unknown", never a verdict."""
    rows = [Op(type="invoke", process=p, f="write", value=p, index=p) for p in range(26)]
    rows += [Op(type="ok", process=p, f="write", value=p, index=26 + p) for p in range(26)]
    rows += [
        Op(type="invoke", process=99, f="read", value=None, index=52),
        Op(type="ok", process=99, f="read", value=999, index=53),
    ]
    res = lin.check_linearizable(rows, get_model("cas-register"), timeout=0.2)
    assert res["valid"] == "unknown" and res["unknown_keys"] == [None]


def test_counterexample_from_the_compiled_path() -> None:
    """An invalid part found by the compiled loop still gets its counterexample."""
    m = get_model("cas-register")
    ops = [
        Op(type="invoke", process=0, f="write", value=1, index=0),
        Op(type="ok", process=0, f="write", value=1, index=1),
        Op(type="invoke", process=1, f="read", value=None, index=2),
        Op(type="ok", process=1, f="read", value=2, index=3),
    ]
    res = lin.check_linearizable(ops, m)
    assert res["valid"] is False
    assert res["counterexample"]["op"]["index"] == 2
