"""What a checker is: one registered object, :class:`CheckerSpec` (Jepsen's checker protocol,
plus everything both engines need to run it).

A checker judges the ops of a history it claims and returns a result map whose
``"valid"`` is a verdict (:mod:`harness.core.verdict`). It is pure: no I/O, and it
never mutates the history, so the same history can be judged again, by another
engine, and give the same answer.

Everything about one checker lives in its :class:`CheckerSpec`, registered as an
entry point of the group ``splitbrain.checkers`` (built-ins in splitbrain's
``pyproject.toml``, plugins in theirs); nothing else in the tree names it:

- ``claims(shape, config) -> part | None``: which ops it takes. One pure function of an
  op's :class:`OpShape`, called by the local engine per distinct shape and by the Spark
  engine over every shape the history can hold (it becomes a lookup column, no UDF), so
  the two engines cannot disagree on who gets which op. An op may be claimed by several
  checkers. A checker that runs separately on parts of the history (linearizability: one
  model per op family) returns the part's name; others return :data:`ALL`. When a
  history has several parts of one checker, each is a result named ``<name>-<part>``.
- ``anomalies`` (and ``notes``): every kind its results may hold, listed once here.
- ``options``: a frozen dataclass of its own options, parsed with
  :func:`harness.core.options.parse_options` (a misspelt key is a ConfigError).
- ``local(history, config)``: the implementation, over a :class:`PairedHistory` of the
  ops it claimed (a ``Sequence[Op]``, by index, every op paired once).
- ``columnar(history, config)``: optional, a second local implementation over columns:
  ``history`` is a :class:`harness.core.parquet.ColumnarHistory` (the history's client
  records as Arrow columns with the typed ``v_*`` columns, paired, with the pairs this
  checker claimed), and it returns the result map ``local`` would, or None when it cannot
  judge this history from columns (``local`` then runs, on ops). The local engine uses
  it when the history is a Parquet or JSONL file and every checker that claims ops has
  one, so that no :class:`Op` is built per record; otherwise it reads ops and runs
  ``local``, as before. Both must give the same results (a checker that has one tests
  that they do).
- ``spark(session, records, config)``: optional; ``records`` is a DataFrame of the
  claimed records (columns of the Parquet history, typed ``v_*`` columns included).
  Given as the function or as its ``"module:function"`` name, imported when the Spark
  engine first runs it (so registering a checker never imports Spark code, and a Spark
  module may import its checker's module). Without one the Spark engine collects the
  claimed records to the driver and runs ``local``. The records' columns:
  ``index``, ``type``, ``process``, ``f``, ``key``, ``value`` (JSON text), ``node`` and
  the typed ``v_*`` columns of docs/architecture.md §3 (no ``time``, no ``error``).
- ``faults``: optional, the fault records (by ``f``) the checker reads besides client
  ops; both engines hand them over in ``CheckConfig.faults`` when the history holds one
  (checker/txn.py: a failover's loss window). With ``on_faults_alone`` it runs on them
  even without client ops of its own (checker/transfer.py: a leadership transfer's answer).
- ``examples``: histories with planted anomalies; the engine-agreement test runs them on
  both engines for every registered checker.

Example (a plugin's module; its ``pyproject.toml`` declares
``[project.entry-points."splitbrain.checkers"] no-dup = "my_pkg.checks:NO_DUP"``)::

    @dataclass(frozen=True)
    class NoDupOptions:
        limit: int = option(0, "duplicates tolerated", minimum=0)

    def _claims(shape: OpShape, config: CheckConfig) -> str | None:
        return ALL if shape.f == "put" else None

    def _check(history: PairedHistory, config: CheckConfig) -> dict[str, Any]:
        seen, dups = set(), []
        for inv, comp in history.pairs():
            if comp is not None and comp.type == "ok":
                if inv.value in seen:
                    dups.append({"indexes": [inv.index, comp.index], "value": inv.value})
                seen.add(inv.value)
        bad = len(dups) > config.options.limit
        return {"valid": not bad, "anomalies": {"duplicate-put": dups} if bad else {}}

    NO_DUP = CheckerSpec(
        name="no-dup",
        claims=_claims,
        anomalies=("duplicate-put",),
        options=NoDupOptions,
        local=_check,
    )

Checker options reach every checker through one mapping (what
``checker.dispatch.check_history(opts=...)`` takes and a workload's
``Workload.checker`` gives)::

    {"checks": [names],          # optional; absent: every checker that claims ops
     "model": str | None,        # linearizability model (None: by op family)
     "model_params": {...},
     "keys": bool,               # per-key linearizability (default true)
     "cap": int,                 # examples kept per anomaly kind
     "options": {checker name: {...its options...}}}

:class:`Checker` is the older, engine-free protocol (a whole history in, a result out);
``checker.base.check_safe`` runs one, ``checker.base.check_spec_safe`` a spec's ``local``,
both turning a crash into ``unknown`` with an error naming the checker (and the history
index it was looking at, when it can tell).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.core.op import Op
from harness.core.paired import PairedHistory
from harness.core.record import json_kind

__all__ = [
    "ALL",
    "JSON_KINDS",
    "COMPLETION_TYPES",
    "Checker",
    "CheckerSpec",
    "CheckConfig",
    "OpShape",
    "Claims",
    "LocalCheck",
    "ColumnarCheck",
    "KeyedCheck",
    "SparkCheck",
    "Example",
    "Examples",
    "json_kind",
]

ALL = "all"
"""The part a single-part checker returns from ``claims``."""

JSON_KINDS = ("null", "boolean", "number", "string", "array", "object")
"""The kinds of JSON value, as the Parquet history's ``v_kind`` column names them."""

COMPLETION_TYPES = ("ok", "fail", "info")


@dataclass(frozen=True, slots=True)
class OpShape:
    """All a checker may look at to claim an op: few enough values that the Spark engine
    can ask ``claims`` about every combination and turn the answers into a lookup column.

    ``has_adds`` is a property of the whole history (does it hold any ``add`` op): a
    keyless ``read`` of a list is a set read in a set history, a register read otherwise.
    """

    f: str
    keyed: bool
    inv_kind: str
    """:func:`json_kind` of the invocation's value."""
    comp_type: str | None
    """``ok``, ``fail``, ``info``, or None when the op never completed."""
    comp_kind: str | None
    """:func:`json_kind` of the completion's value (None without a completion)."""
    has_adds: bool

    @classmethod
    def of(cls, inv: Op, comp: Op | None, *, has_adds: bool) -> OpShape:
        return cls(
            inv.f,
            inv.key is not None,
            json_kind(inv.value),
            None if comp is None else comp.type,
            None if comp is None else json_kind(comp.value),
            has_adds,
        )

    @property
    def ok_kind(self) -> str | None:
        """The completion's value kind if it is ``ok``, else None."""
        return self.comp_kind if self.comp_type == "ok" else None


@dataclass(frozen=True)
class CheckConfig:
    """What a checker runs with: the run-wide settings and its own parsed options."""

    options: Any = None
    """An instance of the spec's ``options`` dataclass (None when it has none)."""
    model: str | None = None
    """The linearizability model named by the workload or ``--model`` (None: by op family)."""
    model_params: Mapping[str, Any] = field(default_factory=dict)
    keys: bool = True
    cap: int = 20
    timeout: float | None = None
    """Seconds the whole check may take (searches that run out are ``unknown``)."""
    part: str = ALL
    """The part being checked (what ``claims`` returned for these ops)."""
    shared: Mapping[str, Any] = field(default_factory=dict)
    """Intermediate results an engine already has (the Spark engine's first pass), which
    built-in implementations reuse; plugins must not rely on any key being there."""
    faults: Sequence[Op] = ()
    """The history's fault records (process ``nemesis``: invocations and completions, in
    history order), given to a checker whose spec names some in ``faults``; empty for
    the others."""


Claims = Callable[[OpShape, CheckConfig], "str | None"]
LocalCheck = Callable[[PairedHistory, CheckConfig], "dict[str, Any]"]
ColumnarCheck = Callable[[Any, CheckConfig], "dict[str, Any] | None"]
"""``(ColumnarHistory of the claimed pairs, config) -> result map``: the same result as the
checker's ``local``, from columns (see ``CheckerSpec.columnar``)."""
KeyedCheck = Callable[[Iterable[tuple[Any, list[Op]]], CheckConfig], "dict[str, Any] | None"]
"""``((key, that key's ops in history order), ..., config) -> result map``, the keys in any
order: the same result as ``local`` for a checker whose verdict is each key's alone (see
``CheckerSpec.keyed``); None when this config is not judged key by key."""
SparkCheck = Callable[[Any, Any, CheckConfig], "dict[str, Any]"]
"""``(SparkSession, DataFrame of the claimed records, config) -> result map``."""
Example = tuple[Sequence[Op], Mapping[str, Any], tuple[str, ...]]
"""A history, the checker options to check it with, and the anomaly kinds it must show."""
Examples = Callable[[], Mapping[str, Example]]


@dataclass(frozen=True, kw_only=True)
class CheckerSpec:
    """One checker, registered as an entry point of ``splitbrain.checkers``.

    ``name`` is its results.json key (and what ``checks`` selects); ``anomalies`` and
    ``notes`` list every kind its results may carry, and no two checkers may share one.
    """

    name: str
    claims: Claims
    anomalies: tuple[str, ...]
    local: LocalCheck | None
    spark: SparkCheck | str | None = None
    columnar: ColumnarCheck | None = None
    """The local engine's columnar path (module docstring); None: ``local`` only."""
    keyed: KeyedCheck | None = None
    """The local engine's path for a history too big to hold (``checker.keyed``): the
    claimed records split by ``key`` on disk and handed over one key at a time, so memory
    holds a key's ops, never the history's. None: the checker needs its share whole."""
    options: type | None = None
    notes: tuple[str, ...] = ()
    doc: str = ""
    faults: frozenset[str] = frozenset()
    """The fault records this checker reads, by ``f`` (``start-failover``): a history
    holding one gives the checker every fault record in ``CheckConfig.faults`` (the txn
    checker places a failover's loss window by them). A checker that reads none leaves
    it empty."""
    on_faults_alone: bool = False
    """Runs whenever the history holds one of its ``faults``, whether or not ``claims``
    takes any client op: for what a DB answered to the harness's own requests (a
    leadership transfer), which only the nemesis's records hold. False: it runs only on
    the client ops it claims, as every other checker."""
    examples: Examples | str | None = None
    """Histories with planted anomalies, for the engine-agreement test
    (tests/checker/test_engines_agree.py runs every registered checker's on both engines
    and fails for a checker without any): a function returning ``{label: (ops, options,
    kinds)}``, where ``options`` is the checker-options mapping to check with and
    ``kinds`` the anomaly kinds the history must show (empty: a valid history), or its
    ``"module:function"`` name."""


@runtime_checkable
class Checker(Protocol):
    """Judges a whole history. Pure: no I/O, never mutates the history."""

    def check(
        self, test: Mapping[str, Any], history: Sequence[Op], opts: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A result map with at least ``"valid"``."""
        ...
