"""From a test's spec to its roles and its checker options, touching no host.

One path for the three places that need it, so they cannot disagree:

* ``splitbrain run`` calls :func:`prepare` before it resolves the inventory, so a misspelt
  ``--workload-option`` or ``--db-option`` (or a bad ``--client-timeout``) exits 3 before
  any lab is contacted;
* the runner (:func:`harness.run.runner.run_test`) builds its DB and workload here and
  checks the history with :func:`checker_options`;
* ``splitbrain check RUN_DIR`` (:func:`recheck`) reads ``test.json`` back into a
  :class:`TestSpec` and rebuilds the checker options through the same
  :func:`checker_options`, so a re-check judges the history as the run did (mode ``ha``'s
  loss window included).

The checker options are the workload's ``Workload.checker`` (what to check: ``model``,
``model_params``, ``keys``, ``checks``) merged with what the DB declares the checker must
know (``{checker name: {option: value}}``; see :class:`harness.core.db.InformsChecker` and
``DLedgerOptions.checker_options`` in harness/dbs/builtin.py), under ``options``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core import plugins
from harness.core.db import (
    DB,
    HasDefaultWorkload,
    HasWorkloadDefaults,
    InformsChecker,
    WorkloadChoice,
)
from harness.core.errors import ConfigError
from harness.core.layout import RESULTS, TEST
from harness.core.options import declared_options, parse_options
from harness.core.spec import TestSpec
from harness.core.verdict import normalize
from harness.core.workload import Workload

__all__ = [
    "Roles",
    "prepare",
    "build_db",
    "build_workload",
    "default_workload",
    "db_checker_options",
    "checker_options",
    "load_spec",
    "recheck",
    "RECHECK",
]

RECHECK = "recheck.json"
"""What ``splitbrain check RUN_DIR`` writes beside the run's own ``results.json``."""


@dataclass
class Roles:
    """A test's DB and workload, built and checked, and the options its checker gets."""

    db: DB
    workload: Workload
    checker: dict[str, Any]


def build_db(spec: TestSpec) -> DB:
    """The spec's DB, its ``--db-option`` parsed (an unknown key is a ConfigError)."""
    from harness.dbs import get_db

    return get_db(spec.db, spec.db_options)


def build_workload(spec: TestSpec) -> Workload:
    """The spec's workload, given only its own options (never the DB's or the run's)."""
    from workloads import get_workload

    return get_workload(spec.workload, spec.workload_options)


def default_workload(db: str, db_options: Mapping[str, Any]) -> WorkloadChoice:
    """The workload ``db`` names as its strongest (``HasDefaultWorkload``).

    The DB is built from its options (an unknown one is a ConfigError, as in
    :func:`prepare`); declaring a workload needs no connection. A DB that names none gets
    a ConfigError asking for ``-w``: guessing a workload whose client speaks another
    protocol would fail every op and judge nothing.
    """
    from harness.dbs import get_db

    built = get_db(db, db_options)
    if not isinstance(built, HasDefaultWorkload):
        from workloads import workload_names

        raise ConfigError(
            f"db {db} names no default workload (HasDefaultWorkload); choose one with -w "
            f"(known: {', '.join(workload_names())})",
            field="workload",
        )
    choice = built.default_workload()
    if not isinstance(choice, WorkloadChoice):
        raise ConfigError(
            f"db {db}: default_workload() returned {choice!r}, not a WorkloadChoice",
            field="workload",
        )
    return choice


def workload_defaults(db: str, db_options: Mapping[str, Any], workload: str) -> dict[str, Any]:
    """The options ``db`` gives the workload the user named (``HasWorkloadDefaults``),
    checked to be a mapping; empty for a DB that declares none."""
    from harness.dbs import get_db

    built = get_db(db, db_options)
    if not isinstance(built, HasWorkloadDefaults):
        return {}
    given = built.workload_defaults(workload)
    if not isinstance(given, Mapping):
        raise ConfigError(
            f"db {db}: workload_defaults({workload!r}) returned {given!r}, not a mapping",
            field="workload",
        )
    return dict(given)


def prepare(spec: TestSpec) -> Roles:
    """Every role of ``spec`` built and every option checked, before any host is contacted."""
    spec.client_timeout  # noqa: B018 - raises ConfigError on a bad value
    db = build_db(spec)
    workload = build_workload(spec)
    checker = checker_options(spec, workload=workload, db=db)
    from checker.registry import parse_settings

    parse_settings(checker)  # an unknown check or checker option: exit 3 before the load
    return Roles(db, workload, checker)


def _declared_db_options(spec: TestSpec) -> object | None:
    """The DB's parsed options when its factory declares a dataclass (no DB is built)."""
    plugin, argument = plugins.resolve("db", spec.db)
    cls = declared_options(plugin.load())
    if cls is None:
        return None
    raw = plugins.with_argument(spec.db_options, argument)
    return parse_options(cls, raw, role=f"db {spec.db}")


def db_checker_options(spec: TestSpec, db: DB | None = None) -> dict[str, dict[str, Any]]:
    """What the DB declares the checker must know, ``{checker name: {option: value}}``.

    Asked of ``db`` itself when it implements ``checker_options`` (a plugin's DB), else of
    the DB's declared options class (the built-ins: no DB is built, so a re-check needs none
    of the files the DB's construction may look for), else of the DB built from the spec.
    """
    if db is not None and isinstance(db, InformsChecker):
        return _per_checker(db.checker_options())
    declared = _declared_db_options(spec)
    if declared is not None:
        fn = getattr(declared, "checker_options", None)
        return _per_checker(fn()) if callable(fn) else {}
    if db is None:
        db = build_db(spec)
    return _per_checker(db.checker_options()) if isinstance(db, InformsChecker) else {}


def _per_checker(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, opts in dict(raw or {}).items():
        if not isinstance(opts, Mapping):
            raise ConfigError(
                f"checker_options must map a checker name to its options, got {name}={opts!r}",
                field="checker_options",
            )
        out[str(name)] = dict(opts)
    return out


def checker_options(
    spec: TestSpec, *, workload: Workload | None = None, db: DB | None = None
) -> dict[str, Any]:
    """The mapping ``checker.dispatch.check_history(opts=...)`` gets for this test.

    THE one place the checker-options shape is produced: ``{"model", "model_params",
    "keys", "checks", "options": {checker name: {...}}}`` (plus whatever else the workload
    set, e.g. ``cap``). Old keys a plugin's workload may still use (``independent``) are
    the checker registry's to translate (``checker/registry.py``), in one place.
    """
    wl = workload if workload is not None else build_workload(spec)
    out: dict[str, Any] = dict(wl.checker)
    out.setdefault("model", None)
    added = [str(c) for c in spec.options.get("checks") or ()]
    if out.get("checks") is not None:
        # `run --check NAME`: a registered check on top of the workload's own selection (a
        # workload that selects nothing already runs every check that claims its ops).
        # The checkers of fault records alone (CheckerSpec.on_faults_alone) judge what
        # the faults asked of the DB, not the workload's ops: its selection cannot know
        # them, so they join it (each runs only on a history holding its records).
        from checker.registry import checkers

        faulted = [name for name, c in checkers().items() if c.on_faults_alone]
        out["checks"] = list(dict.fromkeys([*out["checks"], *added, *faulted]))
    per = {str(k): dict(v) for k, v in dict(out.get("options") or {}).items()}
    for name, opts in db_checker_options(spec, db).items():
        per.setdefault(name, {}).update(opts)
    out["options"] = per
    return out


def load_spec(run_dir: Path) -> TestSpec:
    """The spec a stored run recorded (``test.json``); ConfigError when there is none."""
    path = Path(run_dir) / TEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no test.json: not a run directory", field="path") from None
    except ValueError as e:
        raise ConfigError(f"{path}: not JSON: {e}", field="test.json") from None
    return TestSpec.from_json(data)


def _run_record(run_dir: Path) -> dict[str, Any]:
    """How the run ended, from its own results.json: its ``run`` block, or the placeholder's
    ``interrupted``/``reason`` when the harness died before writing one."""
    try:
        stored = json.loads((Path(run_dir) / RESULTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {
            "interrupted": True,
            "reason": "the run left no readable results.json (the harness was killed)",
        }
    run = stored.get("run")
    if isinstance(run, dict):
        return dict(run)
    return {
        "interrupted": bool(stored.get("interrupted", False)),
        "reason": stored.get("reason"),
        "verdict": stored.get("valid"),
    }


def recheck(
    run_dir: Path,
    *,
    engine: str = "local",
    timeout: float | None = None,
    master: str | None = None,
    model: str | None = None,
    model_params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Check a stored run again, as the run did: the checker options rebuilt from test.json.

    The result carries the run's own ``run`` block; a run that did not finish stays
    ``unknown`` whatever its prefix shows (``checked_valid`` keeps the checker's own word),
    since a history cut short lacks the final reads that lost-write checks rely on.
    ``model``/``model_params`` override the workload's (``check --model``).
    """
    from checker.dispatch import check_history

    spec = load_spec(run_dir)
    opts = checker_options(spec)
    if model is not None:
        opts["model"] = model
        opts["model_params"] = dict(model_params or {})
    results = check_history(
        str(run_dir),
        model=opts.get("model"),
        engine=engine,
        timeout=timeout,
        opts=opts,
        master=master,
    )
    _recheck_node_events(Path(run_dir), spec, results)
    from harness.run.configurations import configuration_of
    from harness.run.evidence import recheck_evidence

    try:
        configuration = configuration_of(build_db(spec))
    except Exception:  # noqa: BLE001 - a DB that needs its run's machine: none said
        configuration = None
    recheck_evidence(Path(run_dir), spec, results, configuration)  # the floor, again
    run = _run_record(run_dir)
    results["run"] = run
    results["recheck"] = {"of": RESULTS, "checker_options": opts}
    if run.get("interrupted"):
        results["checked_valid"] = results.get("valid")
        results["valid"] = "unknown"
        results["reason"] = run.get("reason") or "the run was interrupted"
    else:  # replicas that never converged after the heal: at most unknown, as the run said
        from harness.run.converge import apply_convergence

        apply_convergence(results)
    results["valid"] = normalize(results.get("valid"))
    return results


def _recheck_node_events(run_dir: Path, spec: TestSpec, results: dict[str, Any]) -> None:
    """The node-events check again (checker/node_events.py), from the node logs the run
    fetched, when the DB can be built from ``test.json`` and reports events; otherwise
    the re-check says why it has none (the run's ``results.json`` keeps the run's)."""
    from checker.node_events import check_node_events, merge_node_events
    from harness.core.events import ReportsEvents, event_invariants
    from harness.core.history import iter_history
    from harness.core.layout import history_file
    from harness.run.coverage import run_events

    try:
        db = build_db(spec)
    except Exception as e:  # noqa: BLE001 - a DB that needs its run's machine
        results.setdefault("notes", {})["node-events"] = f"not re-checked: {e}"
        return
    if not isinstance(db, ReportsEvents):
        return
    ops = list(iter_history(history_file(run_dir)))
    events, kinds, why, _ = run_events(run_dir, ops, db)
    if why is None:
        merge_node_events(results, check_node_events(events, kinds, event_invariants(db)))
