"""The local engine: every applicable check, in this process, on a history in memory.

The history is paired once (:class:`~harness.core.paired.PairedHistory`); each op's
:class:`~harness.core.checker.OpShape` is put to every selected checker's ``claims``
(once per distinct shape), and each checker then runs on its share under
:func:`checker.base.check_spec_safe`. The verdict is the worst of theirs
(:func:`checker.results.compose_results`, shared with the Spark engine).

A Parquet history goes through :func:`check_local_columns` first: the same plan, asked
per distinct shape of its columns, and each checker's ``columnar`` implementation over
Arrow columns, with no :class:`Op` per record (building those was most of a 1M-record log
check's time and memory). Where that cannot be done (a malformed history, a checker
without ``columnar``, an old file without typed columns) the ops are read as before.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.base import check_spec_safe, crash_result
from checker.families import is_log, is_queue, is_set, lin_family
from checker.registry import Settings, checkers, parse_settings
from checker.results import compose_results
from harness.core.checker import ALL, CheckerSpec, OpShape
from harness.core.op import NEMESIS, Op
from harness.core.paired import PairedHistory
from harness.core.parquet import ColumnarHistory

__all__ = [
    "Planned",
    "classify",
    "check_local",
    "check_local_columns",
    "column_shapes",
    "plan",
    "run_name",
    "shapes",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Planned:
    """One checker run: which checker, on which part, under which results.json name, and
    the numbers of the pairs it takes (:meth:`PairedHistory.pair_positions`)."""

    name: str
    spec: CheckerSpec
    part: str
    pairs: tuple[int, ...]


def shapes(history: PairedHistory) -> list[OpShape]:
    """Each op's shape, in pair order."""
    has_adds = any(inv.f == "add" for inv, _ in history.pairs())
    return [OpShape.of(inv, comp, has_adds=has_adds) for inv, comp in history.pairs()]


def run_name(checker: str, part: str, parts: Iterable[str]) -> str:
    """The results.json name of a checker's part: the checker's own name when the history
    has one part of it, ``<checker>-<part>`` when several (both engines use this)."""
    return checker if len(set(parts)) <= 1 else f"{checker}-{part}"


def plan(
    history: PairedHistory,
    settings: Settings,
    specs: Mapping[str, CheckerSpec],
    fault_fs: frozenset[str] = frozenset(),
) -> list[Planned]:
    """The checker runs this history needs, in registry order, parts by name.

    ``fault_fs``: the ``f`` of the history's fault records (a checker judging one of
    them runs even if it claims no client op)."""
    return [
        Planned(name, spec, part, tuple(ns))
        for name, spec, part, ns in _assign(shapes(history), settings, specs, fault_fs)
    ]


def _assign(
    shapes: Iterable[OpShape],
    settings: Settings,
    specs: Mapping[str, CheckerSpec],
    fault_fs: frozenset[str] = frozenset(),
) -> list[tuple[str, CheckerSpec, str, list[int]]]:
    """Which of ``shapes`` (numbered in order) each selected checker claims, by part:
    ``(results name, spec, part, shape numbers)``, asking ``claims`` once per distinct
    shape. Both local paths plan with it: per op, or per distinct shape of the columns.
    A checker judging fault records the history holds runs at least once (part ALL)."""
    chosen = settings.selected(specs)
    configs = {s.name: settings.config(s.name) for s in chosen}
    memo: dict[OpShape, list[tuple[str, str]]] = {}
    taken: dict[str, dict[str, list[int]]] = {s.name: {} for s in chosen}
    for n, shape in enumerate(shapes):
        claims = memo.get(shape)
        if claims is None:
            claims = []
            for s in chosen:
                part = s.claims(shape, configs[s.name])
                if part is not None:
                    claims.append((s.name, part))
            memo[shape] = claims
        for name, part in claims:
            taken[name].setdefault(part, []).append(n)
    out = []
    for s in chosen:
        parts = taken[s.name]
        if not parts and s.on_faults_alone and s.faults & fault_fs:
            parts[ALL] = []
        for part in sorted(parts):
            out.append((run_name(s.name, part, parts), s, part, parts[part]))
    return out


def column_shapes(history: ColumnarHistory) -> tuple[list[OpShape], Any]:
    """The distinct op shapes of a columnar history and each pair's shape number: the
    shape's columns combined into one integer per pair, made unique by numpy, so
    ``claims`` is asked per distinct shape with no Python step per op."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    inv, comp = history.inv, history.comp
    has = comp >= 0
    cpos = pa.array(np.where(has, comp, 0))
    ipos = pa.array(inv)

    def codes(arr: Any, valid: Any = None) -> tuple[Any, list[Any]]:
        enc = pc.dictionary_encode(arr)
        c = pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        if valid is not None:
            c = np.where(valid, c, 0)
        return c, [None, *enc.dictionary.to_pylist()]

    f, f_names = codes(history.column("f").take(ipos))
    keyed = pc.is_valid(history.column("key").take(ipos)).to_numpy(zero_copy_only=False)
    ik, ik_names = codes(history.column("v_kind").take(ipos))
    ct, ct_names = codes(history.column("type").take(cpos), has)
    ck, ck_names = codes(history.column("v_kind").take(cpos), has)
    key = f
    for c, names in (
        (keyed.astype(np.int64), [0, 1]),
        (ik, ik_names),
        (ct, ct_names),
        (ck, ck_names),
    ):
        key = key * len(names) + c
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    has_adds = "add" in f_names
    out = [
        OpShape(
            f_names[f[n]],
            bool(keyed[n]),
            ik_names[ik[n]] or "null",
            ct_names[ct[n]],
            ck_names[ck[n]],
            has_adds,
        )
        for n in first
    ]
    return out, inverse


def check_local_columns(
    path: str | os.PathLike[str],
    *,
    model: str | None = None,
    timeout: float | None = None,
    opts: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """:func:`check_local` over a Parquet (or JSONL) history's columns (no Op per record), or None
    when it cannot be done so: a file without the typed columns, a malformed history
    (pairing ops names the error), or a selected checker that claims ops but has no
    ``columnar`` implementation or declines this history. The caller then reads ops."""
    import numpy as np

    t0 = time.monotonic()
    specs = checkers()
    settings = parse_settings(opts, model=model, timeout=timeout, specs=specs)
    if Path(path).suffix.lower() == ".jsonl":
        history = ColumnarHistory.from_jsonl(path, strict=True)
    else:
        history = ColumnarHistory.read(path, strict=True)
    if history is None:
        return None
    distinct, of_pair = column_shapes(history)
    runs = _assign(distinct, settings, specs, history.fault_fs)
    if any(spec.faults & history.fault_fs for _, spec, _, _ in runs):
        return None  # it reads the fault records, which only the ops carry
    if any(spec.columnar is None for _, spec, _, _ in runs):
        return None
    results = {}
    for name, spec, part, shape_ns in runs:
        assert spec.columnar is not None
        config = settings.config(spec.name, part)
        share = history.subset(np.flatnonzero(np.isin(of_pair, shape_ns)))
        try:
            res = spec.columnar(share, config)
        except Exception as e:  # as check_spec_safe: one checker's bug hides no verdict
            log.warning("checker %s crashed", spec.name, exc_info=True)
            res = crash_result(spec.name, e)
        if res is None:
            return None
        if not isinstance(res, dict) or "valid" not in res:
            res = {"valid": "unknown", "error": f"checker {spec.name} returned no verdict"}
        results[name] = res
    return compose_results(
        results,
        engine="local",
        started=t0,
        cap=settings.cap,
        client_records=lambda: len(history),
    )


def classify(ops: Sequence[Op]) -> dict[str, list[Op]]:
    """Client records grouped by op family (:mod:`checker.families`: ``queue``, ``log``,
    ``set``, ``register``, ``kv``, ``txn``, ``mutex``, ``other``), for inspection; the
    engines ask the checkers' ``claims`` instead."""
    history = PairedHistory.of(ops)
    keep: dict[str, list[int]] = {}
    for n, s in enumerate(shapes(history)):
        if is_queue(s):
            family = "queue"
        elif is_log(s):
            family = "log"
        elif is_set(s):
            family = "set"
        else:
            family = lin_family(s) or "other"
        keep.setdefault(family, []).append(n)
    return {family: list(history.subset(ns)) for family, ns in keep.items()}


def check_local(
    ops: Sequence[Op],
    *,
    model: str | None = None,
    timeout: float | None = None,
    opts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run every applicable check; the results.json map (docs/architecture.md §4).

    ``opts`` is the checker-options mapping (:mod:`harness.core.checker`); HistoryError
    on a malformed history, ConfigError on bad options.
    """
    t0 = time.monotonic()
    specs = checkers()
    settings = parse_settings(opts, model=model, timeout=timeout, specs=specs)
    faults = tuple(op for op in ops if op.process == NEMESIS)
    history = PairedHistory.of(ops, strict=True)
    fault_fs = frozenset(op.f for op in faults)
    results = {
        p.name: check_spec_safe(
            p.spec,
            history.subset(p.pairs),
            settings.config(p.spec.name, p.part, faults=faults if p.spec.faults else ()),
        )
        for p in plan(history, settings, specs, fault_fs)
    }
    return compose_results(
        results,
        engine="local",
        started=t0,
        cap=settings.cap,
        client_records=lambda: len(history),
    )
