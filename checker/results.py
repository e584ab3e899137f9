"""The result pipeline both engines share: per-checker results in, results.json out.

The local and Spark engines find anomalies in very different ways, but a user
comparing their results.json files must not be able to tell which engine wrote
them (docs/architecture.md §4). Every rule about what a result looks like therefore
lives here, once: which checkers are named what, how a linearizability result
and its counterexample are made JSON-safe and trimmed, how many examples are
kept per kind (for anomalies and notes alike), and how per-checker results
compose into the one map with the worst verdict. The engines only compute.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from checker.models import Model
from harness.core.verdict import merge

__all__ = [
    "CAP",
    "PREFIX_KEPT",
    "AUTO_MODELS",
    "jsonable_key",
    "key_order",
    "lin_example",
    "shape_linearizable",
    "unknown_result",
    "cap_examples",
    "compose_results",
]

CAP = 20
"""Examples kept per anomaly or note kind in results.json; anomaly totals go to
``stats.anomaly_counts``. A history with a systematic fault can hold millions of
examples; the first few (by history index) say everything a reader can act on."""

PREFIX_KEPT = 100
"""Ops of a counterexample's linearizable prefix kept in results.json (the last ones:
those nearest the op that could not be placed)."""

AUTO_MODELS = {"register": "cas-register", "kv": "kv", "txn": "multi-register", "mutex": "mutex"}
"""The model each op family (:data:`checker.families.LIN_FAMILIES`) is checked against when
none is named; the family is the linearizable checker's part, so its results are named
``linearizable-<model>`` when a history has several."""

_EXAMPLE_SECTIONS = ("anomalies", "notes")


def jsonable_key(k: Any) -> Any:
    """A partition key as results.json can hold it (tuples and the like become their text)."""
    return k if k is None or isinstance(k, (str, int)) else str(k)


def key_order(k: Any) -> tuple[int, str]:
    """The order of partition keys in ``failures`` and ``unknown_keys``: the unkeyed part
    first, then by text.

    :func:`checker.linearizable.check_linearizable` lists its keys in this order; the
    Spark engine merges per-key results from many tasks and must list them the same
    way (``tests/checker/test_results.py`` holds the two together).
    """
    return (0 if k is None else 1, str(k))


def lin_example(cex: Mapping[str, Any]) -> dict[str, Any]:
    """The ``nonlinearizable`` anomaly example of a counterexample: where it is and why,
    without the (long) prefix, which stays in the checker's own result."""
    return {
        "key": cex["key"],
        "indexes": cex["window"],
        "op": cex["op"],
        "state": cex["state"],
        "why": cex["why"],
    }


def shape_linearizable(res: dict[str, Any], model: Model) -> dict[str, Any]:
    """A linearizability result made fit for results.json, in place (and returned).

    Keys become JSON-safe, the model's parameters are recorded (a verdict means
    nothing without them), the counterexample's prefix is cut to its last
    :data:`PREFIX_KEPT` ops (its full length kept) and the counterexample becomes
    the ``nonlinearizable`` anomaly.
    """
    for field in ("failures", "unknown_keys", "unchecked_keys"):
        res[field] = [jsonable_key(k) for k in res[field]]
    res["model_params"] = dict(model.params)
    cex = res.get("counterexample")
    if cex is not None:
        cex["key"] = jsonable_key(cex["key"])
        cex["prefix_length"] = len(cex["prefix"])
        del cex["prefix"][:-PREFIX_KEPT]
        res["anomalies"] = {"nonlinearizable": [lin_example(cex)]}
    return res


def unknown_result(e: BaseException) -> dict[str, Any]:
    """The result of a checker whose job failed: unknown, never a pass, and the other
    checkers' verdicts still count. Only the error's first line is kept: a JVM
    error's stack trace belongs in the Spark log, not in results.json."""
    first = (str(e).splitlines() or [""])[0]
    return {"valid": "unknown", "error": f"{type(e).__name__}: {first}"}


def cap_examples(res: dict[str, Any], cap: int = CAP) -> dict[str, Any]:
    """Keep the first ``cap`` examples per kind of anomaly and note, in place (and returned).

    ``stats.anomaly_counts`` gets every anomaly kind's total. A total the checker
    already put there is kept: the Spark engine counts in the cluster and only
    ever brings ``cap`` examples to the driver, so the list length would be wrong.
    """
    anomalies = res.get("anomalies")
    if isinstance(anomalies, dict):
        stats = res.setdefault("stats", {})
        known = stats.get("anomaly_counts") or {}
        stats["anomaly_counts"] = {k: int(known.get(k, len(v))) for k, v in anomalies.items()}
    for section in _EXAMPLE_SECTIONS:
        examples = res.get(section)
        if isinstance(examples, dict):
            for v in examples.values():
                del v[cap:]
    return res


def compose_results(
    checkers: Mapping[str, dict[str, Any]],
    *,
    engine: str,
    started: float,
    cap: int = CAP,
    client_records: Callable[[], int],
) -> dict[str, Any]:
    """The results.json map (docs/architecture.md §4) from each checker's own result.

    Each result is capped (:func:`cap_examples`); anomalies are gathered by kind
    across checkers; the verdict is the worst of theirs, and ``"unknown"`` with an
    ``error`` when no checker applied (nothing checked is not a pass).
    ``started`` is the engine's :func:`time.monotonic` at its start;
    ``client_records`` counts the history's client records, only called for that
    error.
    """
    results = {name: cap_examples(res, cap) for name, res in checkers.items()}
    anomalies: dict[str, list[Any]] = {}
    for res in results.values():
        for kind, ex in (res.get("anomalies") or {}).items():
            anomalies.setdefault(kind, []).extend(ex)
    out: dict[str, Any] = {
        "valid": merge(r["valid"] for r in results.values()) if results else "unknown",
        "checkers": results,
        "anomalies": anomalies,
        "engine": engine,
        "elapsed_s": round(time.monotonic() - started, 3),
    }
    if not results:
        out["error"] = (
            f"no check applies to this history ({client_records()} client op records); "
            "name a model with --model"
        )
    return out
