"""The local engine: every applicable check, in this process, on a history in memory.

Which checks apply follows from the ops (ARCHITECTURE §2), unless a model is
named: keyed ``read``/``write``/``cas`` -> linearizability against a
cas-register (initial nil); ``get``/``put``/keyed ``append`` -> linearizability
against the kv model; ``txn`` -> multi-register; ``acquire``/``release`` ->
mutex; unkeyed ``append``, log reads and ``sample`` -> log safety; ``add`` and
its list reads -> the set checker; ``send``/``pull``/``commit-offset`` -> the
queue checker. Each runs under :func:`checker.base.check_safe`
and the verdict is the worst of theirs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from checker.base import FnChecker, check_safe
from checker.linearizable import check_linearizable
from checker.log_safety import check_log_safety
from checker.models import Model, get_model
from checker.queue import QUEUE_FS, check_queue
from checker.results import CAP, auto_linearizable, compose_results, shape_linearizable
from checker.sets import check_set
from harness.core.history import NEMESIS, Op, pair_ops

__all__ = ["classify", "check_local", "plan_checks"]


def classify(ops: Sequence[Op]) -> dict[str, list[Op]]:
    """Group client op records by the check they feed: register, kv, txn, mutex, log, set, other.

    Invocation and completion always land in the same group (decided on the
    invocation and, for reads, the completion's value).
    """
    ops = sorted(ops, key=lambda o: o.index) if any(
        ops[i].index > ops[i + 1].index for i in range(len(ops) - 1)) else list(ops)
    has_adds = any(op.f == "add" for op in ops)
    groups: dict[str, list[tuple[int, Op]]] = {}
    for inv_pos, comp_pos in pair_ops(ops).items():
        inv = ops[inv_pos]
        comp = None if comp_pos is None else ops[comp_pos]
        f = inv.f
        log_read = f == "read" and inv.key is None and (
            isinstance(inv.value, dict)
            or (comp is not None and comp.type == "ok" and isinstance(comp.value, dict)))
        if f in QUEUE_FS:  # send/pull/commit-offset: the queue workload (checker/queue.py)
            g = "queue"
        elif f == "sample" or (f == "append" and inv.key is None) or log_read:
            g = "log"
        elif f == "add" or (f == "read" and inv.key is None and has_adds
                            and (comp is None or comp.type != "ok" or isinstance(comp.value, list))):
            g = "set"
        elif f in ("read", "write", "cas"):
            g = "register"
        elif f in ("get", "put", "append"):
            g = "kv"
        elif f == "txn":
            g = "txn"
        elif f in ("acquire", "release"):
            g = "mutex"
        else:
            g = "other"
        bucket = groups.setdefault(g, [])
        bucket.append((inv_pos, inv))
        if comp is not None:
            bucket.append((comp_pos, comp))  # type: ignore[arg-type]
    return {g: [op for _, op in sorted(b, key=lambda t: t[0])] for g, b in groups.items()}


def _lin_checker(model: Model, ops: list[Op], timeout: float | None,
                 keys: bool) -> FnChecker:
    return FnChecker(lambda _: shape_linearizable(
        check_linearizable(ops, model, timeout=timeout, keys=keys), model))


def plan_checks(ops: Sequence[Op], *, model: str | None = None, timeout: float | None = None,
                opts: Mapping[str, Any] | None = None) -> dict[str, FnChecker]:
    """The checkers that apply to this history, by name (raises CheckerError on a bad model)."""
    opts = dict(opts or {})
    groups = classify(ops)
    keys = bool(opts.get("keys", True))
    checks: dict[str, FnChecker] = {}
    if model is not None:
        m = get_model(model, **dict(opts.get("model_params") or {}))
        want = {"append-log": ("log",), "set": ("set",)}.get(
            m.name, ("register", "kv", "txn", "mutex", "other"))
        lin_ops = sorted((op for g in want for op in groups.get(g, []) if op.f in m.fs),
                         key=lambda o: o.index)
        checks["linearizable"] = _lin_checker(m, lin_ops, timeout, keys)
    else:
        for name, g, model_name in auto_linearizable(g for g, v in groups.items() if v):
            checks[name] = _lin_checker(get_model(model_name), groups[g], timeout, keys)
    if groups.get("log"):
        log_ops = groups["log"]
        ha = opts.get("ha")  # mode ha (workloads/append.py sets it)
        checks["log-safety"] = FnChecker(lambda _: check_log_safety(log_ops, ha=ha))
    if groups.get("queue"):
        queue_ops = groups["queue"]
        checks["queue"] = FnChecker(lambda _: check_queue(queue_ops))
    if groups.get("set") and (model is None or model != "set"):
        set_ops = groups["set"]
        checks["set"] = FnChecker(lambda _: check_set(set_ops))
    return checks


def check_local(ops: Sequence[Op], *, model: str | None = None, timeout: float | None = None,
                opts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run every applicable check; the results.json map (ARCHITECTURE §3)."""
    t0 = time.monotonic()
    opts = dict(opts or {})
    checks = plan_checks(ops, model=model, timeout=timeout, opts=opts)
    checkers = {name: check_safe(c, {}, ops, opts) for name, c in checks.items()}
    return compose_results(checkers, engine="local", started=t0, cap=int(opts.get("cap", CAP)),
                           client_records=lambda: sum(1 for op in ops if op.process != NEMESIS))
