"""Linearizability: the Wing-Gong/Lowe search as Porcupine runs it.

The history of one object becomes a doubly linked list of call and return
events in real-time order. The search walks it from the head: at a call it tries
to linearize that op next (``step`` must be legal), splicing the op's call and
return out of the list (``lift``) and pushing it on a stack; at a return it has
reached an op that had to take effect already, so it backtracks (``unlift``) and
tries the next candidate. A cache of ``(linearized set, state)`` pairs prunes
configurations already explored; the set is a Python ``int`` used as a bitset.

Completions follow Knossos: ``ok`` happened with its output; ``fail`` did not
happen and is dropped (or, with a model whose ``fails="observe"``, is kept as an
observation); ``info`` or no completion may take effect at any time after its
invocation or never: its return event is placed after every other event, its
output is not checked, and an illegal transition is a no-op.

Linearizability is compositional, so a history is split by ``key`` (and the
model's ``partition``) and each part searched alone under one shared deadline.
A part that runs out of time is ``"unknown"``, never valid.

Beyond Porcupine, four prunings, each exact (the verdict never changes):
pending reads are dropped (they fit anywhere); pending ops with equal inputs
are interchangeable, so they go in call order; a legal read that may go now
goes now with no alternative (moving a read earlier changes nothing), found in
O(1) through per-state read lists; and once every completed op is placed, the
pending rest fit at the end. Each is checked against a brute-force oracle in
``tests/checker/test_linearizable.py``.
"""

from __future__ import annotations

import json
import operator
import os
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from checker.families import is_log, is_queue, is_set, lin_family
from checker.models import NOT_A_READ, UNKNOWN, Fail, Model, RegisterOps, freeze, get_model
from checker.results import AUTO_MODELS, key_order, shape_linearizable
from harness.core.checker import CheckConfig, CheckerSpec, OpShape
from harness.core.errors import HistoryError
from harness.core.op import NEMESIS, Op
from harness.core.paired import pair_positions

__all__ = [
    "LINEARIZABLE",
    "Entry",
    "model_of",
    "make_entries",
    "search",
    "prepared_search",
    "check_partition",
    "check_linearizable",
    "partition_ops",
    "lift_keys",
    "check_key",
    "merge_keys",
    "ops_of_rows",
    "KEY_COLUMNS",
    "FAST",
]


@dataclass(frozen=True, slots=True)
class Entry:
    """One op of a partition, as the search sees it.

    ``call`` and ``ret`` order events (positions in the history, pending returns
    after all). ``index``/``ret_index`` are history indexes, for reports.
    ``type`` is the completion type, ``"pending"`` when there was none.
    """

    id: int
    inp: Any
    out: Any
    call: int
    ret: int
    index: int
    ret_index: int | None
    process: Any
    type: str
    key: Any = None


def make_entries(ops: Sequence[Op], model: Model, *, keyed: bool = False) -> list[Entry]:
    """Entries for one partition (ops of one key, in history order).

    Nemesis ops are ignored; fails are dropped unless ``model.fails ==
    "observe"``; so are ops with an unknown output that ``model.pure`` calls
    side-effect free. With ``keyed=True`` each input becomes ``(key, (f, value))``
    for a model made with :func:`lift_keys`. Raises HistoryError on a
    malformed history (double invoke, orphan completion).
    """
    client = [op for op in ops if op.process != NEMESIS]
    pairs = pair_positions(client)
    n = len(client)
    entries: list[Entry] = []
    pending = 0
    for inv_pos in sorted(pairs):
        comp_pos = pairs[inv_pos]
        inv = client[inv_pos]
        comp = None if comp_pos is None else client[comp_pos]
        ctype = "pending" if comp is None else comp.type
        if ctype == "fail" and model.fails != "observe":
            continue
        if ctype == "ok":
            out = comp.value  # type: ignore[union-attr]
            ret = comp_pos
        elif ctype == "fail":
            out = Fail(comp.value)  # type: ignore[union-attr]
            ret = comp_pos
        else:
            if model.pure is not None and model.pure((inv.f, inv.value)):
                continue  # an unobserved read fits anywhere: leave it out
            out = UNKNOWN
            ret = n + pending
            pending += 1
        inp: Any = (inv.f, inv.value)
        if keyed:
            inp = (inv.key, inp)
        entries.append(
            Entry(
                len(entries),
                inp,
                out,
                inv_pos,
                ret,  # type: ignore[arg-type]
                inv.index,
                None if comp is None else comp.index,
                inv.process,
                ctype,
                inv.key,
            )
        )
    return entries


def lift_keys(model: Model) -> Model:
    """A map of independent ``model`` objects, for checking a keyed history unpartitioned.

    Only useful to measure what partitioning buys (Porcupine's unpartitioned kv
    test); the state is a sorted tuple of ``(key, state)`` pairs.
    """
    init = model.init

    def compile(inp: Any, out: Any) -> Callable[[Any], tuple[bool, Any]]:
        key, sub = inp
        fn = model.step_fn(sub, out)

        def step(s: Any) -> tuple[bool, Any]:
            d = dict(s)
            ok, ns = fn(d[key] if key in d else init())
            if not ok:
                return False, s
            d[key] = ns
            return True, tuple(sorted(d.items(), key=lambda kv: str(kv[0])))

        return step

    return Model(
        name=model.name,
        init=tuple,
        step=lambda s, i, o: compile(i, o)(s),
        compile=compile,
        fails=model.fails,
        params=model.params,
        describe_op=lambda inp, out: f"[{inp[0]}] " + model.describe_op(inp[1], out),
        describe_state=lambda s: (
            "{" + ", ".join(f"{k}: {model.describe_state(v)}" for k, v in s) + "}"
        ),
    )


def _unknown_step(fn: Callable[[Any], tuple[bool, Any]]) -> Callable[[Any], tuple[bool, Any]]:
    def step(s: Any) -> tuple[bool, Any]:
        ok, ns = fn(s)
        return (True, ns) if ok else (True, s)

    return step


SLICE = 4096
"""Search iterations between two looks at the clock (and two turns of the round robin)."""


@dataclass(slots=True)
class _Layout:
    """One partition laid out for the search loop (see :func:`_layout`).

    Shared by the pure-Python loop and the compiled one, so that both search
    the very same structure and only the loop differs.
    """

    n: int
    tail: int
    nxt: list[int]
    prv: list[int]
    nid: list[int]
    match: list[int]
    steps: list[Any]
    bits: list[int]
    prereq: list[int]
    prereq_id: list[int]
    pure: list[bool]
    reads: list[Any]
    need: list[bool]
    remaining: int
    simple_cache: bool
    rn: list[int]
    rp: list[int]
    rhead: dict[Any, int]
    is_eqread: list[bool]
    init: Any
    native: list[Any] | None


def _layout(entries: Sequence[Entry], model: Model) -> _Layout:
    """The doubly linked event list and the per-node tables the search loop reads."""
    n = len(entries)
    # Nodes: 0 head, 1..2n events in real-time order, 2n+1 tail.
    events = sorted(
        [(e.call, e.id, True) for e in entries] + [(e.ret, e.id, False) for e in entries]
    )
    tail = 2 * n + 1
    nxt = list(range(1, 2 * n + 2)) + [tail]
    prv = [0] + list(range(0, 2 * n + 1))
    nid = [0] * (2 * n + 2)
    match = [-1] * (2 * n + 2)
    ret_node = [0] * n
    call_node = [0] * n
    for pos, (_, oid, is_call) in enumerate(events, 1):
        nid[pos] = oid
        if is_call:
            call_node[oid] = pos
        else:
            ret_node[oid] = pos
    for oid in range(n):
        match[call_node[oid]] = ret_node[oid]
    # Per node, not per op: the hot loop then indexes one list.
    steps: list[Any] = [None] * (2 * n + 2)
    bits = [0] * (2 * n + 2)
    # Symmetry: pending ops with equal inputs are interchangeable (their returns
    # are all at the end), so only let one go after its earlier twins.
    prereq = [0] * (2 * n + 2)
    prereq_id = [-1] * (2 * n + 2)
    last_twin: dict[Any, int] = {}
    for e in sorted(entries, key=lambda e: e.call):
        fn = model.step_fn(e.inp, e.out)
        node = call_node[e.id]
        steps[node] = _unknown_step(fn) if e.out is UNKNOWN else fn
        bits[node] = 1 << e.id
        if e.out is UNKNOWN:
            twin = freeze(e.inp)
            prev = last_twin.get(twin, -1)
            if prev >= 0:
                prereq[node] = 1 << prev
                prereq_id[node] = prev
            last_twin[twin] = e.id

    # Reads (ops that never change the state) need no branching: if a read is
    # legal and may go now, some linearization puts it now if any exists at
    # all, so once that choice fails, the configuration has failed.
    pure = [False] * (2 * n + 2)
    if model.pure is not None:
        for e in entries:
            pure[call_node[e.id]] = bool(model.pure(e.inp))
    reads: list[Any] = [NOT_A_READ] * (2 * n + 2)
    if model.read_state is not None and model.equal is None:
        for e in entries:
            reads[call_node[e.id]] = model.read_state(e.inp, e.out)
    # Ops that must be linearized; once they all are, the pending rest fit at the end.
    need = [False] * (2 * n + 2)
    for e in entries:
        if e.out is not UNKNOWN:
            need[call_node[e.id]] = True
    simple_cache = model.hash is None and model.equal is None

    # Equality reads (legal in exactly one state) leave the event list: their
    # calls go into one list per required state, in call order, so that on
    # arriving at a configuration the read that may go now, if any, is found
    # in O(1) (the head of the list for the current state, if its call comes
    # before the first pending return). Their returns stay in the event list.
    # Both lists use the same O(1) splice/unsplice, undone in stack order.
    n_nodes = 2 * n + 2
    rn = list(range(n_nodes))
    rp = list(range(n_nodes))
    rhead: dict[Any, int] = {}
    is_eqread = [False] * n_nodes
    if simple_cache:
        for node in range(1, 2 * n + 1):
            rv = reads[node]
            if match[node] < 0 or rv is NOT_A_READ:
                continue
            try:
                hv = rhead.get(rv)
            except TypeError:  # unhashable read value: keep it in the walk
                continue
            if hv is None:
                hv = rhead[rv] = len(rn)
                rn.append(hv)
                rp.append(hv)
            last = rp[hv]  # append node at the end of the circular list
            rn[last] = node
            rp[node] = last
            rn[node] = hv
            rp[hv] = node
            is_eqread[node] = True
            p, q = prv[node], nxt[node]  # and take its call out of the event list
            nxt[p] = q
            prv[q] = p
    native: list[Any] | None = None
    if model.native is not None:
        native = [None] * n_nodes
        for e in entries:
            native[call_node[e.id]] = model.native(e.inp, e.out)
    return _Layout(
        n,
        tail,
        nxt,
        prv,
        nid,
        match,
        steps,
        bits,
        prereq,
        prereq_id,
        pure,
        reads,
        need,
        sum(need),
        simple_cache,
        rn,
        rp,
        rhead,
        is_eqread,
        model.init(),
        native,
    )


try:
    from checker import _wgl
except ImportError:  # no compiler at install time: the pure-Python loop does it all
    _wgl = None  # type: ignore[assignment]

FAST = _wgl is not None
"""Whether :func:`search` uses the compiled loop by default (``checker/_wgl.c``).

``SPLITBRAIN_CHECKER_ENGINE=python`` in the environment turns it off; the
pure-Python loop is the reference the compiled one is tested against.
"""
if os.environ.get("SPLITBRAIN_CHECKER_ENGINE", "").lower() == "python":
    FAST = False


def search(
    entries: Sequence[Entry], model: Model, *, fast: bool | None = None
) -> Generator[None, None, tuple[bool, dict[str, Any]]]:
    """The search of one partition as a generator that yields every :data:`SLICE` iterations.

    Yielding lets one thread interleave many partitions (as Porcupine races one
    goroutine per partition) and check a deadline. The generator's return value
    is ``(True | False, info)``, see :func:`check_partition`. ``fast`` picks the
    compiled loop (default :data:`FAST`); it is used only where it applies (a
    model with Python's own equality and hashable states) and makes exactly the
    moves of the pure-Python loop, so verdict, ``steps`` and ``longest`` agree.
    """
    if not entries:
        return True, {"steps": 0}
    lay = _layout(entries, model)
    if lay.remaining == 0:
        return True, {"steps": 0}
    if fast is None:
        fast = FAST
    if fast and _wgl is not None:
        compiled = _compile(lay)
        if compiled is not None:
            return (yield from _search_c(*compiled))
    return (yield from _search_py(lay, model))


def _compile(lay: _Layout) -> tuple[Any, list[Any]] | None:
    """The compiled search over ``lay`` and its state table, or None where it does not apply."""
    if not lay.simple_cache or _wgl is None:
        return None
    if any(
        rv is not NOT_A_READ and not eq for rv, eq in zip(lay.reads, lay.is_eqread, strict=True)
    ):
        return None  # an unhashable read value stays in the walk: the Python loop handles it
    objs: list[Any] = [lay.init]
    try:
        intern: dict[Any, int] = {lay.init: 0}
        for rv in lay.rhead:
            if rv not in intern:
                intern[rv] = len(objs)
                objs.append(rv)
    except TypeError:  # an unhashable state: the compiled loop interns states
        return None
    rhead = [-1] * len(objs)
    for rv, head in lay.rhead.items():
        rhead[intern[rv]] = head
    reads = [-1 if rv is NOT_A_READ else intern[rv] for rv in lay.reads]
    # The built-in models' steps (Model.native): done in C, never calling the model.
    size = len(lay.steps)
    kind, karg, karg2, args = [0] * size, [0] * size, [0] * size, [None] * size
    unk = [False] * size
    if lay.native is not None:
        for node, nat in enumerate(lay.native):
            if nat is not None:
                kind[node], karg[node], karg2[node], args[node] = _encode(nat, intern, objs)
                unk[node] = lay.need[node] is False
    core = _wgl.Search(
        n_ops=lay.n,
        nxt=lay.nxt,
        prv=lay.prv,
        match=lay.match,
        nid=lay.nid,
        prereq=lay.prereq_id,
        reads=reads,
        need=lay.need,
        pure=lay.pure,
        is_eqread=lay.is_eqread,
        rn=lay.rn,
        rp=lay.rp,
        rhead=rhead,
        steps=lay.steps,
        intern=intern,
        objs=objs,
        init=0,
        remaining=lay.remaining,
        kind=kind,
        karg=karg,
        karg2=karg2,
        unk=unk,
        args=args,
    )
    return core, objs


_KINDS = {"set": 1, "concat": 2, "cas": 3, "cas-not": 4, "noop": 5}
"""``Model.native`` answers as the compiled loop's step kinds (0: call the model)."""


def _encode(
    nat: tuple[Any, ...], intern: dict[Any, int], objs: list[Any]
) -> tuple[int, int, int, Any]:
    """``(kind, arg, arg2, str suffix)`` for one ``Model.native`` answer; kind 0 if it cannot be."""

    what = nat[0]
    try:
        if what == "set":
            a = intern.get(nat[1])
            if a is None:
                a = intern[nat[1]] = len(objs)
                objs.append(nat[1])
            return 1, a, 0, None
        if what == "concat" and isinstance(nat[1], str):
            return 2, 0, 0, nat[1]
        if what == "noop":
            return 5, 0, 0, None
        if what in ("cas", "cas-not"):
            ids = []
            for v in nat[1:]:
                i = intern.get(v)
                if i is None:
                    i = intern[v] = len(objs)
                    objs.append(v)
                ids.append(i)
            return (3, ids[0], ids[1], None) if what == "cas" else (4, ids[0], 0, None)
    except TypeError:  # an unhashable value: the model's own step handles this op
        pass
    return 0, 0, 0, None


def _done(
    result: tuple[bool, dict[str, Any]],
) -> Generator[None, None, tuple[bool, dict[str, Any]]]:
    return result
    yield  # pragma: no cover  (makes this a generator)


def prepared_search(
    ops: Sequence[Op], model: Model, *, clients_only: bool = False, c_pass: bool = True
) -> Generator[None, None, tuple[bool, dict[str, Any]]] | None:
    """:func:`search` of ``make_entries(ops, model)`` without building the entries, or None.

    On a small history most of the time went into Python objects per op (an
    Entry, closures, the node tables); for a model with ``native`` steps this
    makes one pass over the ops, straight into the per-op arrays the compiled
    loop lays out itself. Same entries (same ids, same order), same search,
    same result; None where the compiled loop is off or does not apply (the
    caller then takes the general path, which raises the same errors).
    ``clients_only`` says ``ops`` hold no nemesis op (``partition_ops`` output).
    For the built-in registers the pass itself runs in C unless ``c_pass`` is
    False (the Python pass is its reference in the tests).
    """
    native = model.native
    if (
        not FAST
        or _wgl is None
        or native is None
        or model.hash is not None
        or model.equal is not None
    ):
        return None
    client = ops if clients_only else [op for op in ops if op.process != NEMESIS]
    if c_pass and isinstance(native, RegisterOps):
        fast = _register_search(client, model, native)
        if fast is not None:
            return fast
    pairs = pair_positions(client)
    n_client = len(client)
    observe = model.fails == "observe"
    fs, pure_fn, read_state = model.fs, model.pure, model.read_state
    init = model.init()
    try:
        intern: dict[Any, int] = {init: 0}
    except TypeError:
        return None
    objs: list[Any] = [init]
    # one tuple per op, transposed at the end: (call, ret, kind, arg, arg2, unknown, pure,
    # read state, twin prerequisite, step, str suffix)
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    last_twin: dict[Any, int] = {}
    pending = 0
    try:
        for inv_pos, comp_pos in pairs.items():
            inv = client[inv_pos]
            if comp_pos is not None:
                comp = client[comp_pos]
                ctype = comp.type
                if ctype == "ok":
                    out = comp.value
                elif ctype == "fail":
                    if not observe:
                        continue
                    out = Fail(comp.value)
                else:
                    comp_pos = None
            inp = (inv.f, inv.value)
            if fs and inp[0] not in fs:
                return None
            pure = pure_fn(inp) if pure_fn is not None else False
            if comp_pos is None:
                if pure:
                    continue  # an unobserved read fits anywhere: left out
                out = UNKNOWN
                comp_pos = n_client + pending
                pending += 1
                twin = freeze(inp)
                pre = last_twin.get(twin, -1)
                last_twin[twin] = len(rows)
                unknown = True
            else:
                pre = -1
                unknown = False
            # Model.native never names an op that read_state names, so ask it first
            nat = native(inp, out)
            if nat is not None:
                k, a, b, suffix = _encode(nat, intern, objs)
                if k:
                    append((inv_pos, comp_pos, k, a, b, unknown, pure, -1, pre, None, suffix))
                    continue
            rv = read_state(inp, out) if read_state is not None else NOT_A_READ
            if rv is not NOT_A_READ:
                i = intern.get(rv)
                if i is None:
                    i = intern[rv] = len(objs)
                    objs.append(rv)
                append((inv_pos, comp_pos, 0, 0, 0, unknown, pure, i, pre, None, None))
                continue
            fn = model.step_fn(inp, out)
            append(
                (
                    inv_pos,
                    comp_pos,
                    0,
                    0,
                    0,
                    unknown,
                    pure,
                    -1,
                    pre,
                    _unknown_step(fn) if unknown else fn,
                    None,
                )
            )
    except TypeError:  # an unhashable value: the general path copes
        return None
    remaining = len(rows) - pending
    if not rows or not remaining:
        return _done((True, {"steps": 0}))
    call_pos, ret_pos, kinds, kargs, kargs2, unks, pures, reads, prereq, steps, args = (
        list(c) for c in zip(*rows, strict=True)
    )
    core = _wgl.build(
        call_pos=call_pos,
        ret_pos=ret_pos,
        kind=kinds,
        karg=kargs,
        karg2=kargs2,
        unk=unks,
        pure=pures,
        need=[not u for u in unks],
        reads=reads,
        prereq=prereq,
        steps=steps,
        args=args,
        intern=intern,
        objs=objs,
        init=0,
        remaining=remaining,
    )
    return _search_c(core, objs)


def _register_search(
    client: Sequence[Op], model: Model, native: RegisterOps
) -> Generator[None, None, tuple[bool, dict[str, Any]]] | None:
    """:func:`prepared_search`'s pass done in C for the built-in registers, or None (then Python's)."""
    assert _wgl is not None
    init = model.init()
    try:
        intern: dict[Any, int] = {init: 0}
    except TypeError:
        return None
    objs: list[Any] = [init]
    core = _wgl.encode_register(
        client, native.read_nil_any, model.fails == "observe", "cas" in model.fs, intern, objs
    )
    if core is None:
        return None
    if core is True:
        return _done((True, {"steps": 0}))
    return _search_c(core, objs)


def _search_c(core: Any, objs: list[Any]) -> Generator[None, None, tuple[bool, dict[str, Any]]]:
    """Drive the compiled loop a slice at a time; state indexes back to the model's states."""
    while True:
        res = core.run(SLICE)
        if res is not None:
            break
        yield
    valid, steps, longest = res
    if valid:
        return True, {"steps": steps}
    return False, {"steps": steps, "longest": [(eid, objs[sid]) for eid, sid in longest]}


def _search_py(lay: _Layout, model: Model) -> Generator[None, None, tuple[bool, dict[str, Any]]]:
    """The reference loop: the search in plain Python, over the layout."""
    tail, nxt, prv, nid, match = lay.tail, lay.nxt, lay.prv, lay.nid, lay.match
    steps, bits, prereq, pure, reads, need = (
        lay.steps,
        lay.bits,
        lay.prereq,
        lay.pure,
        lay.reads,
        lay.need,
    )
    rn, rp, rhead, is_eqread = lay.rn, lay.rp, lay.rhead, lay.is_eqread
    remaining = lay.remaining
    simple_cache = lay.simple_cache
    cache: set[tuple[int, Any]] = set()
    buckets: dict[tuple[int, int], list[Any]] = {}
    hsh = model.hash or hash
    eq = model.equal or (lambda a, b: a == b)
    rget = rhead.get

    state = lay.init
    lin = 0
    # The stack is a chain of frames (entry, state before it, parent frame), so
    # that remembering the deepest configuration costs O(1): keep its frame.
    top: Any = None
    depth = 0
    best = -1
    best_top: Any = None
    best_state: Any = None
    count = 0
    budget = SLICE
    arrived = True
    entry = nxt[0]
    while nxt[0] != tail:
        budget -= 1
        if not budget:
            count += SLICE
            budget = SLICE
            yield
        failed = False
        if arrived:
            arrived = False
            entry = nxt[0]
            hv = rget(state) if rhead else None
            if hv is not None and rn[hv] != hv:
                h = rn[hv]
                r = entry
                while match[r] >= 0:
                    r = nxt[r]
                if h < r:
                    # A legal read may go now: it goes, with no alternative.
                    nl = lin | bits[h]
                    key = (nl, state)
                    if key in cache:
                        failed = True
                    else:
                        cache.add(key)
                        if need[h]:
                            remaining -= 1
                            if not remaining:
                                return True, {"steps": count + SLICE - budget}
                        top = (h, state, top)
                        depth += 1
                        lin = nl
                        p, q = rp[h], rn[h]
                        rn[p] = q
                        rp[q] = p
                        m = match[h]
                        p, q = prv[m], nxt[m]
                        nxt[p] = q
                        prv[q] = p
                        if depth > best:
                            best, best_top, best_state = depth, top, state
                        arrived = True
                        continue
        if not failed:
            m = match[entry]
            if m >= 0:
                if prereq[entry] and not lin & prereq[entry]:
                    entry = nxt[entry]
                    continue
                rv = reads[entry]
                if rv is NOT_A_READ:
                    ok, ns = steps[entry](state)
                    if not ok:
                        entry = nxt[entry]
                        continue
                elif state != rv:
                    entry = nxt[entry]
                    continue
                else:
                    ns = state
                nl = lin | bits[entry]
                if simple_cache:
                    key = (nl, ns)
                    fresh = key not in cache
                    if fresh:
                        cache.add(key)
                else:
                    bucket = buckets.setdefault((nl, hsh(ns)), [])
                    fresh = not any(eq(ns, x) for x in bucket)
                    if fresh:
                        bucket.append(ns)
                if fresh:
                    if need[entry]:
                        remaining -= 1
                        if not remaining:
                            return True, {"steps": count + SLICE - budget}
                    top = (entry, state, top)
                    depth += 1
                    state, lin = ns, nl
                    p, q = prv[entry], nxt[entry]
                    nxt[p] = q
                    prv[q] = p
                    p, q = prv[m], nxt[m]
                    nxt[p] = q
                    prv[q] = p
                    if depth > best:
                        best, best_top, best_state = depth, top, state
                    arrived = True
                    continue
                if not pure[entry]:
                    entry = nxt[entry]
                    continue
                # A legal read leading to a failed configuration: this one fails too.
        # Backtrack: the current configuration failed. Popping a read frame
        # means its parent failed as well (a legal read could have gone first).
        while True:
            if top is None:
                return False, {
                    "steps": count + SLICE - budget,
                    "longest": _unwind(best_top, best_state, nid),
                }
            entry, state, top = top
            depth -= 1
            if need[entry]:
                remaining += 1
            lin ^= bits[entry]
            m = match[entry]
            p = prv[m]
            nxt[p] = m
            q = nxt[m]
            prv[q] = m
            if is_eqread[entry]:
                p = rp[entry]
                rn[p] = entry
                q = rn[entry]
                rp[q] = entry
                continue
            p = prv[entry]
            nxt[p] = entry
            q = nxt[entry]
            prv[q] = entry
            if not pure[entry]:
                break
        entry = nxt[entry]
    return True, {"steps": count + SLICE - budget}


def _unwind(frame: Any, final_state: Any, nid: list[int]) -> list[tuple[int, Any]]:
    """The deepest configuration's ops in order, each with the state after it."""
    out: list[tuple[int, Any]] = []
    after = final_state
    while frame is not None:
        node, before, frame = frame
        out.append((nid[node], after))
        after = before
    out.reverse()
    return out


def check_partition(
    entries: Sequence[Entry], model: Model, deadline: float | None = None
) -> tuple[bool | str, dict[str, Any]]:
    """Search one partition; the unit the Spark engine runs per key.

    ``entries`` come from :func:`make_entries` on one key's ops (ids must be
    0..n-1 in order). ``deadline`` is a ``time.monotonic()`` instant shared by
    all partitions of a check. Returns ``(True | False | "unknown", info)``;
    ``info`` has ``steps`` (search iterations) and, when False, ``longest``: the
    longest linearizable prefix found as ``[(entry id, state after), ...]``, from
    which :func:`checker.counterexample.build_counterexample` builds the report.
    """
    return _drive(search(entries, model), deadline)


def shortest_failing_prefix(
    ops: Sequence[Op], model: Model, *, keyed: bool = False, deadline: float | None = None
) -> tuple[Op, list[Entry], dict[str, Any]] | None:
    """The earliest ``ok`` completion by which a failing partition is already broken.

    (With ``fails="observe"``, fail completions are observations too and count.)

    Linearizability is prefix-closed (cutting a history at any event, ops still
    open becoming pending, keeps it linearizable), so a binary search over the
    ok completions finds the first one that no linearization can explain: the
    canonical "first op that could never be linearized", independent of search
    order. Returns ``(that completion, entries of the cut history, search
    info)``, or None if a probe ran past ``deadline``.
    """
    client = [op for op in ops if op.process != NEMESIS]
    observed = ("ok", "fail") if model.fails == "observe" else ("ok",)
    cuts = [pos for pos, op in enumerate(client) if op.type in observed]
    lo, hi = 0, len(cuts) - 1
    found: tuple[list[Entry], dict[str, Any]] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        entries = make_entries(client[: cuts[mid] + 1], model, keyed=keyed)
        verdict, info = check_partition(entries, model, deadline)
        if verdict == "unknown":
            return None
        if verdict is False:
            found = (entries, info)
            best = mid
            hi = mid - 1
        else:
            lo = mid + 1
    if found is None:
        return None
    return client[cuts[best]], found[0], found[1]


_KEY = operator.attrgetter("key")


def partition_ops(ops: Sequence[Op], model: Model, *, keys: bool = True) -> dict[Any, list[Op]]:
    """Split client ops into independent parts: by ``key``, then by ``model.partition``.

    Part names are the key (``None`` for unkeyed ops), or ``(key, i)`` for the
    i-th sub-part a model's partition function returns.
    """
    if FAST and _wgl is not None:
        client, key_set = _wgl.clients(ops)
    else:
        client = [op for op in ops if op.process != NEMESIS]
        key_set = set(map(_KEY, client))
    if not keys:
        key_set = {None}
    by_key: dict[Any, list[Op]] = {}
    if len(key_set) == 1:  # one part (most histories): no per-op grouping
        by_key[next(iter(key_set))] = client
    else:
        for op in client:
            by_key.setdefault(op.key, []).append(op)
    if model.partition is None:
        return by_key
    out: dict[Any, list[Op]] = {}
    for k, part in by_key.items():
        subs = model.partition(part)
        if len(subs) == 1:
            out[k] = list(subs[0])
        else:
            for i, sub in enumerate(subs):
                out[(k, i)] = list(sub)
    return out


SHRINK_BUDGET = 2.0
"""Seconds the counterexample may spend looking for the earliest failing prefix."""


def _counterexample(
    ops: list[Op],
    entries: list[Entry],
    info: dict[str, Any],
    model: Model,
    name: Any,
    keyed: bool,
    deadline: float | None,
) -> dict[str, Any]:
    from checker.counterexample import build_counterexample

    limit = time.monotonic() + SHRINK_BUDGET
    if deadline is not None:
        limit = min(limit, deadline)
    short = shortest_failing_prefix(ops, model, keyed=keyed, deadline=limit)
    if short is None:
        return build_counterexample(entries, info, model, key=name, ops=ops)
    last, cut_entries, cut_info = short
    return build_counterexample(
        cut_entries, cut_info, model, key=name, ops=ops, first_bad=last.index
    )


def check_linearizable(
    ops: Sequence[Op],
    model: Model,
    *,
    timeout: float | None = None,
    keys: bool = True,
    all_keys: bool = False,
    counterexample: bool = True,
) -> dict[str, Any]:
    """Check a (possibly keyed) history against ``model``.

    Parts are searched round-robin in one thread, a slice each, as Porcupine
    races a goroutine per part: a cheap failing key is found even when another
    key's search is long. The first failure settles the verdict and stops the
    other searches (they are listed under ``unchecked_keys``) unless
    ``all_keys``. Returns ``{"valid": True | False | "unknown", "model", "keys":
    number of parts, "failures": [part names proven non-linearizable],
    "unknown_keys": [timed out], "unchecked_keys": [...], "counterexample": {...}
    | None, "steps"}``. The counterexample is for the first failure found (see
    :mod:`checker.counterexample`). ``timeout`` (seconds) bounds the whole
    check; ``keys=False`` searches all keys as one object; ``counterexample=False``
    skips building the explanation (which re-searches prefixes of the failing part).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    multi_keys = not keys and len({op.key for op in ops if op.process != NEMESIS}) > 1
    m = lift_keys(model) if multi_keys else model
    parts = partition_ops(ops, model, keys=keys)
    names = sorted(parts, key=key_order)
    entries: dict[Any, list[Entry]] = {}
    running: dict[Any, Generator[None, None, tuple[bool, dict[str, Any]]]] = {}
    for name in names:
        gen = None if multi_keys else prepared_search(parts[name], m, clients_only=True)
        if gen is None:
            entries[name] = make_entries(parts[name], m, keyed=multi_keys)
            gen = search(entries[name], m)
        running[name] = gen
    failures: list[Any] = []
    unknown: list[Any] = []
    cex = None
    total = 0
    try:
        while running and not (failures and not all_keys):
            for name in list(running):
                try:
                    next(running[name])
                except StopIteration as stop:
                    verdict, info = stop.value
                    del running[name]
                    total += info["steps"]
                    if verdict is False:
                        failures.append(name)
                        if cex is None and counterexample:
                            if name not in entries:
                                entries[name] = make_entries(parts[name], m, keyed=multi_keys)
                            cex = _counterexample(
                                parts[name], entries[name], info, m, name, multi_keys, deadline
                            )
                        if not all_keys:
                            break
            if deadline is not None and time.monotonic() > deadline:
                unknown = [n for n in names if n in running]
                break
    finally:
        for gen in running.values():
            gen.close()
    unchecked = [n for n in names if n in running and n not in unknown]
    if failures:
        unknown, unchecked = [], [n for n in names if n in running]
    valid: bool | str = False if failures else ("unknown" if unknown else True)
    return {
        "valid": valid,
        "model": model.name,
        "keys": len(parts),
        "failures": sorted(failures, key=key_order),
        "unknown_keys": unknown,
        "unchecked_keys": unchecked,
        "counterexample": cex,
        "steps": total,
    }


# --------------------------------------------------------------------------- one key at a time
#
# Both engines' paths for histories too big to hold (a Spark task's sorted partition, the local
# engine's key buckets, checker.keyed) hand the search one key's records at a time and merge
# the per-key answers here, so the two cannot word a result differently.

KEY_COLUMNS = ("key", "index", "type", "process", "f", "value", "node")
"""What the search needs of a record: the key, the history order, and the op itself."""

_loads = json.loads


def _value(text: str | None) -> Any:
    """A value column's JSON text decoded, with the texts register histories are made of
    (``null`` and non-negative integers) done without the JSON decoder, which costs a
    tenth of a record's whole search there. Anything else goes through ``json.loads``;
    integers with a sign or leading zeros too, so that what is not JSON still fails."""
    if text is None or text == "null":
        return None
    if text.isascii() and text.isdigit() and (text[0] != "0" or len(text) == 1):
        return int(text)
    if text[:1] == "[" and text[-1:] == "]" and text.isascii():  # a cas's [old,new]
        items = text[1:-1].split(",")
        if all(t.isdigit() and (t[0] != "0" or len(t) == 1) for t in items):
            return [int(t) for t in items]
    return _loads(text)


def ops_of_rows(rows: Sequence[Sequence[Any]]) -> list[Op]:
    """One key's :data:`KEY_COLUMNS` rows, in history order, as :class:`Op`\\ s.

    A value that is not JSON is a :class:`HistoryError` naming the record's index, as the
    op reader raises for the whole history."""
    out: list[Op] = []
    append = out.append
    for key, index, typ, proc, f, val, node in rows:
        try:
            value = _value(val)
        except ValueError as e:
            raise HistoryError(f"record {index}: {e}", index=index, field="value") from None
        # positional: type, process, f, value, key, time, index, node (a third faster)
        append(Op(typ, proc if proc == NEMESIS else int(proc), f, value, key, 0, index, node))
    return out


def _drive(gen: Any, deadline: float | None) -> tuple[bool | str, dict[str, Any]]:
    """A search generator run to its end, or ``"unknown"`` past ``deadline`` (monotonic), as
    :func:`check_partition` runs one."""
    try:
        while True:
            next(gen)
            if deadline is not None and time.monotonic() > deadline:
                gen.close()
                return "unknown", {"reason": "timeout"}
    except StopIteration as stop:
        return stop.value


def check_key(
    ops: list[Op], model: Model, deadline: float | None
) -> tuple[int, int, dict[str, Any] | None]:
    """One key: ``(parts, steps, None)`` when linearizable, else ``(0, 0, result)`` with
    :func:`check_linearizable`'s whole result for the key.

    The common case takes the short road (partition, one search per part, through the
    compiled pass straight from the ops where it applies), with no counterexample
    machinery; anything else is checked again the long way, so failures, timeouts and
    errors come back exactly as :func:`check_linearizable` words them. ``deadline`` is
    wall-clock time (``time.time()``): Spark's executors do not share the driver's
    monotonic clock.
    """
    left = None if deadline is None else deadline - time.time()
    try:
        if left is None or left > 0:
            mono = None if left is None else time.monotonic() + left
            parts = partition_ops(ops, model, keys=True)
            steps = 0
            for name in sorted(parts, key=key_order):
                gen = prepared_search(parts[name], model, clients_only=True)
                if gen is None:
                    gen = search(make_entries(parts[name], model), model)
                verdict, info = _drive(gen, mono)
                if verdict is not True:
                    break
                steps += info["steps"]
            else:
                return len(parts), steps, None
        timeout = None if deadline is None else max(0.001, deadline - time.time())
        return 0, 0, check_linearizable(ops, model, timeout=timeout, keys=True)
    except Exception as e:  # noqa: BLE001 - reported as the local engine's check_safe does
        return 0, 0, {"error": f"{type(e).__name__}: {e}"}


def merge_keys(
    n_parts: int, steps: int, results: Sequence[tuple[Any, dict[str, Any]]], model: Model
) -> dict[str, Any]:
    """The checker's result from per-key answers: the parts and steps of the keys that were
    linearizable, and :func:`check_key`'s whole result for each key that was not
    (``(key, result)``, any order). Every key was searched to its end, so nothing is
    ``unchecked_keys``; the counterexample is the first failing key's, by key order."""
    errors = [r["error"] for _, r in results if "error" in r]
    if errors:
        return {"valid": "unknown", "error": errors[0]}
    failures: list[Any] = []
    unknown: list[Any] = []
    cex = None
    for _key, r in sorted(results, key=lambda kr: key_order(kr[0])):
        n_parts += r["keys"]
        steps += r["steps"]
        failures.extend(r["failures"])
        unknown.extend(r["unknown_keys"])
        if r["counterexample"] is not None and cex is None:
            cex = r["counterexample"]
    failures.sort(key=key_order)
    if failures:
        unknown = []
    valid: bool | str = False if failures else ("unknown" if unknown else True)
    res: dict[str, Any] = {
        "valid": valid,
        "model": model.name,
        "keys": n_parts,
        "failures": failures,
        "unknown_keys": sorted(unknown, key=key_order),
        "unchecked_keys": [],
        "counterexample": cex,
        "steps": steps,
    }
    return shape_linearizable(res, model)


def _keyed(groups: Iterable[tuple[Any, list[Op]]], config: CheckConfig) -> dict[str, Any] | None:
    """``CheckerSpec.keyed``: the part's records a key at a time, each searched as it comes
    (memory holds one key's ops), merged by :func:`merge_keys`; None for ``keys=False``,
    where the whole history is one object."""
    if not config.keys:
        return None
    m = _model_of(config)
    deadline = None if config.timeout is None else time.time() + config.timeout
    n = steps = 0
    found: list[tuple[Any, dict[str, Any]]] = []
    for key, ops in groups:
        parts, s, res = check_key(ops, m, deadline)
        n += parts
        steps += s
        if res is not None:
            found.append((key, res))
    return merge_keys(n, steps, found, m)


# --------------------------------------------------------------------------- registration


def _model_of(config: CheckConfig) -> Model:
    """The model a part is checked against: the one named, or the family's own."""
    name, params = model_of(config)
    return get_model(name, **params)


_NAMED: dict[tuple[str, str], tuple[str, frozenset[str]]] = {}


def _named(config: CheckConfig) -> tuple[str, frozenset[str]]:
    """(name, fs) of the named model; asked per op shape, so built once per settings."""
    assert config.model is not None
    key = (config.model, repr(sorted(dict(config.model_params).items())))
    if key not in _NAMED:
        m = _model_of(config)
        _NAMED[key] = (m.name, frozenset(m.fs))
    return _NAMED[key]


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    """By op family when no model is named (each family its own model and part: a register
    history is ``linearizable``, a mixed one ``linearizable-cas-register`` and
    ``linearizable-kv``, ...); a named model takes the ops of its fs from the family it
    models (``append-log``: the log's, ``set``: the set's, any other: all but those and the
    queue's)."""
    if config.model is None:
        family = lin_family(shape)
        return None if family is None else AUTO_MODELS[family]
    name, fs = _named(config)
    if shape.f not in fs:
        return None
    if name == "append-log":
        mine = is_log(shape)
    elif name == "set":
        mine = is_set(shape)
    else:
        mine = not (is_log(shape) or is_set(shape) or is_queue(shape))
    return config.model if mine else None


def _local(history: Sequence[Op], config: CheckConfig) -> dict[str, Any]:
    m = _model_of(config)
    res = check_linearizable(history, m, timeout=config.timeout, keys=config.keys)
    return shape_linearizable(res, m)


def model_of(config: CheckConfig) -> tuple[str, dict[str, Any]]:
    """The model name and parameters a part is checked against."""
    if config.model is not None:
        return config.model, dict(config.model_params)
    return config.part, {}


LINEARIZABLE = CheckerSpec(
    name="linearizable",
    claims=_claims,
    anomalies=("nonlinearizable",),
    local=_local,
    keyed=_keyed,
    spark="checker.spark.linearizable:check_linearizable_registered",
    doc="per-key linearizability against a model (Porcupine's search)",
    examples="checker.planted:linearizable",
)
