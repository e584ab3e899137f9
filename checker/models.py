"""Sequential specifications for the linearizability search, Porcupine style.

A :class:`Model` is a record of pure functions. The search never looks inside a
state: it only calls ``step`` and compares states with ``equal``/``hash``, so a
model is free to pick the cheapest immutable representation.

What the search hands to a model:

* ``inp`` is ``(f, value)``: the op's function and its invocation value. For an
  ``ok`` txn the completion's value is used instead, as Knossos copies the
  result into the invocation so that reads "know" what they read.
* ``out`` is the ``ok`` completion's value; :data:`UNKNOWN` for an op that ended
  ``info`` or never completed (the output was not observed, so it is not
  checked); or ``Fail(value)`` for a ``fail`` completion kept as an observation
  (``fails="observe"``: Porcupine's etcd reading of a failed cas).

``step`` returns ``(legal, new_state)``. For an ``UNKNOWN`` output the search
itself turns an illegal transition into a no-op (Knossos' rule that a pending
op may never take effect), so models need not special-case that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import CheckerError

__all__ = [
    "UNKNOWN",
    "NOT_A_READ",
    "Fail",
    "Model",
    "get_model",
    "known_models",
    "etcd_cas_register",
    "knossos_cas_register",
    "register",
    "cas_register",
    "kv",
    "multi_register",
    "mutex",
    "append_log",
    "set_model",
    "freeze",
]


class _NotARead:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_A_READ"


NOT_A_READ: Any = _NotARead()
"""``Model.read_state``'s answer for an op that is not a plain equality read."""


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
"""The output of an op whose completion was not observed."""


@dataclass(frozen=True, slots=True)
class Fail:
    """A ``fail`` completion kept as an observation (``fails="observe"``)."""

    value: Any


StepFn = Callable[[Any, Any, Any], "tuple[bool, Any]"]


def _describe_op(inp: Any, out: Any) -> str:
    f, value = inp
    if out is UNKNOWN:
        return f"{f}({_show(value)}) -> ?"
    if isinstance(out, Fail):
        return f"{f}({_show(value)}) -> fail"
    return f"{f}({_show(value)}) -> {_show(out)}"


def _show(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(_show(x) for x in v) + "]"
    if isinstance(v, frozenset):
        return "#{" + " ".join(sorted(_show(x) for x in v)) + "}"
    if isinstance(v, str):
        return repr(v)
    return str(v)


@dataclass(frozen=True, kw_only=True)
class Model:
    """A sequential object: the spec a concurrent history must be explainable by.

    Only ``name``, ``init`` and ``step`` are required. ``compile(inp, out)``, if
    given, returns a one-argument ``state -> (legal, new_state)`` closure for one
    op; the search precomputes one per op, which spares it re-dispatching on
    ``f`` at every step (the hot loop). ``hash``/``equal`` default to Python's
    own; give them when states are not hashable or equality is coarser than
    ``==``. ``partition(ops)``, if given, splits one key's ops further into
    independent sub-histories. ``fails`` says what a ``fail`` completion means:
    ``"drop"`` (it did not happen, Knossos) or ``"observe"`` (keep it as an
    observation, Porcupine's etcd model). ``pure(inp)`` says that an op with
    this input and an unknown output can neither change the state nor be
    illegal (a read): the search then leaves it out, since it fits anywhere.
    ``read_state(inp, out)``, if given, returns the one state in which this op
    is legal, for an op that never changes the state, or :data:`NOT_A_READ`;
    the search then compares states inline instead of calling ``step`` (most
    of its steps are reads that do not fit). ``native(inp, out)``, if given,
    names an op whose step is simple enough for the compiled search loop to do
    itself, without calling ``step``: ``("set", v)`` (always legal, the state
    becomes ``v``), ``("concat", v)`` (the state is a str, ``v`` is appended),
    ``("cas", a, b)`` (legal iff the state == ``a``, then ``b``), ``("cas-not",
    a)`` (legal iff the state != ``a``, unchanged), ``("noop",)`` (always
    legal, unchanged); None for any other op, and None for every op that
    ``read_state`` names. It must agree with ``step``
    (``tests/checker/test_fast_path.py`` holds the built-in models to it).
    """

    name: str
    init: Callable[[], Any]
    step: StepFn
    equal: Callable[[Any, Any], bool] | None = None
    hash: Callable[[Any], int] | None = None
    partition: Callable[[Sequence[Any]], list[list[Any]]] | None = None
    compile: Callable[[Any, Any], Callable[[Any], tuple[bool, Any]]] | None = None
    describe_op: Callable[[Any, Any], str] = _describe_op
    describe_state: Callable[[Any], str] = _show
    fails: str = "drop"
    fs: frozenset[str] = frozenset()
    pure: Callable[[Any], bool] | None = None
    read_state: Callable[[Any, Any], Any] | None = None
    native: Callable[[Any, Any], tuple[Any, ...] | None] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def step_fn(self, inp: Any, out: Any) -> Callable[[Any], tuple[bool, Any]]:
        """The closure for one op; raises CheckerError for an op this model cannot judge."""
        f = inp[0]
        if self.fs and f not in self.fs:
            raise CheckerError(f"model {self.name!r} has no operation {f!r} "
                               f"(it knows {', '.join(sorted(self.fs))})")
        if self.compile is not None:
            return self.compile(inp, out)
        step = self.step
        return lambda s: step(s, inp, out)


def freeze(x: Any) -> Any:
    """A hashable twin of a JSON value (lists -> tuples, dicts -> sorted pairs)."""
    if isinstance(x, (list, tuple)):
        return tuple(freeze(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, freeze(v)) for k, v in x.items()))
    return x


def _generic_step(compile: Callable[[Any, Any], Callable[[Any], tuple[bool, Any]]]) -> StepFn:
    return lambda s, inp, out: compile(inp, out)(s)


def _f_is(name: str) -> Callable[[Any], bool]:
    return lambda inp: inp[0] == name


def _ok_true(s: Any) -> tuple[bool, Any]:
    return True, s


# --------------------------------------------------------------------------- registers

class RegisterOps:
    """A register's ops for the compiled loop (``Model.native``), exactly as ``compile`` steps them.

    A class rather than a closure so that the search can recognise the built-in
    registers and encode their histories in C in one pass
    (``checker._wgl.encode_register``, tested against the Python pass).
    """

    __slots__ = ("read_nil_any",)

    def __init__(self, read_nil_any: bool) -> None:
        self.read_nil_any = read_nil_any

    def __call__(self, inp: Any, out: Any) -> tuple[Any, ...] | None:
        f, v = inp
        if f == "read":
            if out is UNKNOWN or isinstance(out, Fail) or (out is None and self.read_nil_any):
                return ("noop",)
            return None                   # an equality read: Model.read_state covers it
        if f == "write":
            return ("set", v)
        if f == "cas" and isinstance(v, (list, tuple)) and len(v) == 2:
            return ("cas-not", v[0]) if isinstance(out, Fail) else ("cas", v[0], v[1])
        return None


def _kv_native(inp: Any, out: Any) -> tuple[Any, ...] | None:
    """kv's ops for the compiled loop, exactly as kv's ``compile`` steps them."""
    f, v = inp
    if f == "get":
        return ("noop",) if out is UNKNOWN or isinstance(out, Fail) else None
    if f == "put":
        return ("set", v)
    if f == "append" and isinstance(v, str):
        return ("concat", v)
    return None


def _mutex_native(inp: Any, out: Any) -> tuple[Any, ...] | None:
    """The lock's ops for the compiled loop: on its two states, acquire and release are cas."""
    f = inp[0]
    if f == "acquire":
        return ("cas", False, True)
    if f == "release":
        return ("cas", True, False)
    return None


def cas_register(*, initial: Any = None, read_nil_any: bool = False, fails: str = "drop",
                 name: str = "cas-register") -> Model:
    """A register with read, write and compare-and-set.

    ``initial=None, read_nil_any=False`` is Porcupine's etcd model and our own
    histories (nil means "never written"). Knossos' cas-register uses
    ``initial=0, read_nil_any=True``: a read whose value is nil carries no
    information and is always legal.
    """

    def compile(inp: Any, out: Any) -> Callable[[Any], tuple[bool, Any]]:
        f, v = inp
        if f == "read":
            if out is UNKNOWN or isinstance(out, Fail) or (out is None and read_nil_any):
                return _ok_true
            return lambda s: (s == out, s)
        if f == "write":
            return lambda s: (True, v)
        if f == "cas":
            if not (isinstance(v, (list, tuple)) and len(v) == 2):
                raise CheckerError(f"cas value must be [old, new], got {v!r}")
            a, b = v
            if isinstance(out, Fail):
                return lambda s: (s != a, s)
            return lambda s: (True, b) if s == a else (False, s)
        raise CheckerError(f"cas-register has no operation {f!r}")

    def read_state(inp: Any, out: Any) -> Any:
        if inp[0] != "read" or out is UNKNOWN or isinstance(out, Fail) or (
                out is None and read_nil_any):
            return NOT_A_READ
        return out

    return Model(name=name, init=lambda: initial, step=_generic_step(compile), compile=compile,
                 fails=fails, fs=frozenset({"read", "write", "cas"}), pure=_f_is("read"),
                 read_state=read_state, native=RegisterOps(read_nil_any),
                 params={"initial": initial, "read_nil_any": read_nil_any, "fails": fails})


def register(*, initial: Any = None, read_nil_any: bool = False) -> Model:
    """A read/write register (a cas-register without cas)."""
    m = cas_register(initial=initial, read_nil_any=read_nil_any, name="register")
    return Model(name="register", init=m.init, step=m.step, compile=m.compile,
                 fs=frozenset({"read", "write"}), params=m.params, pure=_f_is("read"),
                 read_state=m.read_state, native=m.native)


def kv(*, initial: str = "") -> Model:
    """One key of Porcupine's kv store: a string with get, put and append."""

    def compile(inp: Any, out: Any) -> Callable[[Any], tuple[bool, Any]]:
        f, v = inp
        if f == "get":
            if out is UNKNOWN or isinstance(out, Fail):
                return _ok_true
            return lambda s: (s == out, s)
        if f == "put":
            return lambda s: (True, v)
        if f == "append":
            return lambda s: (True, s + v)
        raise CheckerError(f"kv has no operation {f!r}")

    return Model(name="kv", init=lambda: initial, step=_generic_step(compile), compile=compile,
                 fs=frozenset({"get", "put", "append"}), params={"initial": initial},
                 pure=_f_is("get"),
                 read_state=lambda inp, out: NOT_A_READ if inp[0] != "get" or out is UNKNOWN
                 or isinstance(out, Fail) else out, native=_kv_native)


def multi_register(*, initial: Mapping[str, Any] | None = None) -> Model:
    """Knossos' multi-register: txns of ``[f k v]`` micro-ops over several registers.

    The state is a sorted tuple of ``(k, v)`` pairs (hashable, cheap to compare).
    A micro-op read of nil is always legal, as in Knossos.
    """
    init_state = tuple(sorted((initial or {}).items()))

    def compile(inp: Any, out: Any) -> Callable[[Any], tuple[bool, Any]]:
        f, v = inp
        if f != "txn":
            raise CheckerError(f"multi-register has no operation {f!r}")
        mops = out if isinstance(out, list) else v
        if not isinstance(mops, list) or not all(
                isinstance(m, (list, tuple)) and len(m) == 3 for m in mops):
            raise CheckerError(f"txn value must be a list of [f k v] micro-ops, got {mops!r}")
        if out is UNKNOWN:  # reads of an unobserved txn are unknown
            mops = [[mf, k, None if mf == "read" else x] for mf, k, x in mops]
        writes = any(m[0] == "write" for m in mops)

        def step(s: Any) -> tuple[bool, Any]:
            d = dict(s)
            for mf, k, x in mops:
                if mf == "read":
                    if x is not None and d.get(k) != x:
                        return False, s
                elif mf == "write":
                    d[k] = x
                else:
                    return False, s
            return True, (tuple(sorted(d.items())) if writes else s)

        return step

    return Model(name="multi-register", init=lambda: init_state, step=_generic_step(compile),
                 compile=compile, fs=frozenset({"txn"}), params={"initial": dict(initial or {})},
                 pure=lambda inp: isinstance(inp[1], list) and all(
                     isinstance(m, (list, tuple)) and m and m[0] == "read" for m in inp[1]),
                 describe_state=lambda s: "{" + ", ".join(f"{k} {_show(v)}" for k, v in s) + "}")


def mutex() -> Model:
    """A lock: acquire needs it free, release needs it held."""

    def compile(inp: Any, out: Any) -> Callable[[Any], tuple[bool, Any]]:
        f = inp[0]
        if f == "acquire":
            return lambda s: (not s, True)
        if f == "release":
            return lambda s: (s, False)
        raise CheckerError(f"mutex has no operation {f!r}")

    return Model(name="mutex", init=lambda: False, step=_generic_step(compile), compile=compile,
                 fs=frozenset({"acquire", "release"}), native=_mutex_native,
                 describe_state=lambda s: "locked" if s else "free")


def set_model() -> Model:
    """A grow-only set: add an element; a read returns the whole set."""

    def compile(inp: Any, out: Any) -> Callable[[Any], tuple[bool, Any]]:
        f, v = inp
        if f == "add":
            e = freeze(v)
            return lambda s: (True, s | {e})
        if f == "read":
            if out is UNKNOWN or isinstance(out, Fail):
                return _ok_true
            if not isinstance(out, list):
                raise CheckerError(f"set read must return a list, got {out!r}")
            want = frozenset(freeze(x) for x in out)
            return lambda s: (s == want, s)
        raise CheckerError(f"set has no operation {f!r}")

    return Model(name="set", init=frozenset, step=_generic_step(compile), compile=compile,
                 fs=frozenset({"add", "read"}), pure=_f_is("read"))


def append_log(*, fails: str = "drop") -> Model:
    """A log that clients append to and read ranges of (the append workload, small histories).

    The state is the tuple of ``(payload, index)`` of appends that took effect,
    in log order (index None when the ack was not seen). An ok append must get
    an index above every known one. An ok read's non-NOOP entries must be
    payloads in the state, at their acked index, in log order, and the read may
    not skip a known entry inside the span it returned.
    """

    def compile(inp: Any, out: Any) -> Callable[[Any], tuple[bool, Any]]:
        f, v = inp
        if f == "append":
            p = freeze(v.get("payload") if isinstance(v, dict) else v)
            idx = out.get("index") if isinstance(out, dict) else None

            def app(s: Any) -> tuple[bool, Any]:
                if idx is not None:
                    known = [i for _, i in s if i is not None]
                    if known and idx <= max(known):
                        return False, s
                return True, s + ((p, idx),)

            return app
        if f == "read":
            if out is UNKNOWN or isinstance(out, Fail):
                return _ok_true
            entries = out.get("entries") if isinstance(out, dict) else None
            if not isinstance(entries, list):
                raise CheckerError(f"log read must return {{'entries': [...]}}, got {out!r}")
            seen = sorted((e[0], freeze(e[2])) for e in entries if e[2] is not None)
            lo = seen[0][0] if seen else None
            hi = seen[-1][0] if seen else None

            def rd(s: Any) -> tuple[bool, Any]:
                pos = {p: (k, i) for k, (p, i) in enumerate(s)}
                last = -1
                got = set()
                for i, p in seen:
                    hit = pos.get(p)
                    if hit is None or (hit[1] is not None and hit[1] != i) or hit[0] <= last:
                        return False, s
                    last = hit[0]
                    got.add(p)
                if lo is not None:
                    for p, i in s:
                        if i is not None and lo <= i <= hi and p not in got:
                            return False, s
                return True, s

            return rd
        raise CheckerError(f"append-log has no operation {f!r}")

    return Model(name="append-log", init=tuple, step=_generic_step(compile), compile=compile,
                 fails=fails, fs=frozenset({"append", "read"}), pure=_f_is("read"))


# --------------------------------------------------------------------------- registry
# Names are entry points of the group ``splitbrain.models`` (pyproject.toml, and any
# plugin's): a factory takes the model's parameters as keywords and returns a Model.


def etcd_cas_register(**kw: Any) -> Model:
    """A CAS register whose unwritten value reads as null (etcd, Porcupine)."""
    return cas_register(**{"initial": None, **kw})


def knossos_cas_register(**kw: Any) -> Model:
    """Knossos' CAS register: starts at 0 and a null read matches anything."""
    return cas_register(**{"initial": 0, "read_nil_any": True, **kw})


def known_models() -> list[str]:
    from harness.core import plugins

    return plugins.names("model")


def get_model(name: str, **params: Any) -> Model:
    """A model by name (or ``module:factory``); params go to its factory (e.g. ``initial=0``).

    Every failure (unknown name, broken plugin, bad parameter, not a Model) is a
    one-line CheckerError naming the model.
    """
    from harness.core import plugins
    from harness.core.errors import ConfigError

    try:
        m: Model = plugins.build("model", name, lambda f, arg: f(**params), Model,
                                 error=CheckerError)
    except ConfigError as e:  # unknown name, import failure: a checker error for callers
        raise CheckerError(str(e).removeprefix("field 'model': ")) from None
    return m
