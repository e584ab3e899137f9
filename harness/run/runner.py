"""Runs one campaign, Jepsen's ``run!``: set up, drive load and faults, heal, check.

Phases, each recorded in ``splitbrain.log``::

    store dir + test.json -> connect -> nemesis setup (heals leftovers) -> db setup
    -> workers + sampler + nemesis for time-limit -> heal (final ops) -> recovery wait
    -> final reads on every node
    finally: nemesis teardown -> fetch node logs -> db teardown -> close history
    -> Parquet -> checker -> results.json -> report

The ``finally`` is the point of this module: whatever happens (an exception, a
SIGINT, a SIGTERM), faults are healed, nodes are stopped and wiped, and the
history on disk is a valid, checkable prefix. A run that did not reach its end
is recorded as ``valid: "unknown"`` with the reason.

The pieces live beside this module: :mod:`~harness.run.phases` (the run's
phases and its cleanup), :mod:`~harness.run.workers` (client threads),
:mod:`~harness.run.analysis` (checking after cleanup), :mod:`~harness.run.signals`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from harness.core.db import DB
from harness.core.errors import ConfigError, SplitbrainError
from harness.core.nemesis import NemesisPackage, null_package
from harness.core.remote import Host, Remote
from harness.core.spec import TestSpec
from harness.core.workload import Workload
from harness.run.analysis import analyse
from harness.run.cleanup import DirtyClusterError
from harness.run.configurations import cover_configuration
from harness.run.options import RunOptions, RunResult
from harness.run.phases import Run
from harness.run.progress import Progress
from harness.run.roles import build_db, build_workload, checker_options
from harness.run.signals import SignalGuard
from harness.run.store import RunStore

__all__ = ["RunResult", "RunOptions", "run_test", "build_package_for"]

log = logging.getLogger(__name__)


def build_package_for(spec: TestSpec) -> NemesisPackage:
    """The spec's nemeses: its deck's scripts when it has one, else the stock schedule.

    The rng is the seed's own (``seed ^ 0x5EED``), so a seed replays the same faults.
    """
    rng = random.Random(spec.seed ^ 0x5EED)
    if not spec.nemesis:
        return null_package()
    from nemesis.profiles import build_profile_package

    recorded = spec.options.get("deck")
    if recorded:
        from nemesis.deck import Deck

        deck = Deck.from_json(recorded)
        return build_profile_package(
            list(spec.nemesis),
            deck.scripts,
            interval=deck.hold,
            rng=rng,
            shuffle=deck.shuffle,
            passes=deck.passes,
            dropped=deck.dropped,
            **spec.nemesis_options,
        )
    return build_profile_package(
        list(spec.nemesis), (), interval=spec.nemesis_interval, rng=rng, **spec.nemesis_options
    )


def resolve_artifacts(db: DB) -> dict | None:
    """What a DB that builds its programs will run (harness/core/db.py ResolvesArtifacts)."""
    from harness.core.db import ResolvesArtifacts

    if not isinstance(db, ResolvesArtifacts):
        return None
    return dict(db.resolve_artifacts())


def _write_schedule(store: RunStore) -> None:
    """schedule.json from the closed history (issue 26): written even for an interrupted
    run, before the check, since replaying a run must not depend on the run having ended."""
    from harness.run.schedule_file import write_schedule

    try:
        write_schedule(store.path)
    except Exception as e:  # a missing schedule must never cost the run its verdict
        log.warning("schedule.json not written: %s", e)


def run_test(
    spec: TestSpec,
    hosts: Iterable[Host],
    *,
    store_root: str | Path = "store",
    db: DB | None = None,
    workload: Workload | None = None,
    nemesis_package: NemesisPackage | None = None,
    options: RunOptions | None = None,
    connect_fn: Callable[[Host], Remote] | None = None,
    progress_stream: IO[str] | None = None,
) -> RunResult:
    """Run one test and return where it was stored and what the checker said."""
    opts = options or RunOptions()
    hosts = list(hosts)
    by_name = {h.name: h for h in hosts}
    missing = [n for n in spec.nodes if n not in by_name]
    if missing:
        raise ConfigError(
            f"nodes {', '.join(missing)} are not in the inventory "
            f"({', '.join(by_name) or 'empty'})",
            field="nodes",
        )
    if not spec.nodes:
        raise ConfigError("a test needs at least one node", field="nodes")
    if connect_fn is None:
        from harness.control import connect

        connect_fn = connect
    spec.client_timeout  # noqa: B018 - a bad value is a ConfigError before anything starts
    if db is None:
        db = build_db(spec)
        # the default campaign covers the DB's configurations over its seeds
        covered = cover_configuration(spec, db)
        if covered is not spec:
            spec, db = covered, build_db(covered)
    if workload is None:
        workload = build_workload(spec)
    # The same function `splitbrain check` calls on test.json (harness/run/roles.py).
    checker_opts = checker_options(spec, workload=workload, db=db)
    if nemesis_package is None:
        nemesis_package = build_package_for(spec)

    artifacts = resolve_artifacts(db)
    store = RunStore.create(store_root, spec.name)
    guard = SignalGuard()
    interrupted, reason = False, None
    with store.capture_log():
        log.info("run %s: store %s", spec.name, store.path)
        store.write_test(
            {
                **spec.to_json(),
                "engine": opts.engine,
                "leave_db_running": opts.leave_db_running,
                **({"artifacts": artifacts} if artifacts is not None else {}),
                "hosts": [
                    {"name": h.name, "address": h.address, "port": h.port, "user": h.user}
                    for h in hosts
                    if h.name in spec.nodes
                ],
            }
        )
        # Replaced at the end; if the harness is killed outright, this is what remains.
        store.write_results(
            {
                "valid": "unknown",
                "checkers": {},
                "anomalies": {},
                "interrupted": True,
                "reason": "the run did not finish (still running, or the harness was killed)",
            }
        )
        run = Run(
            spec,
            hosts,
            store,
            opts,
            db=db,
            workload=workload,
            package=nemesis_package,
            connect_fn=connect_fn,
        )
        progress = Progress(run.counters, stream=progress_stream, enabled=opts.progress)
        run.progress = progress
        guard.install()
        problems: list[str] = []
        try:
            progress.start()
            run.connect()
            run.setup()
            run.main_phase()
            run.heal()
            run.recover()
            run.final_reads()
            run._phase("done")
        except KeyboardInterrupt as e:
            interrupted, reason = True, f"interrupted by {e.args[0] if e.args else 'SIGINT'}"
            log.warning("%s during phase %s", reason, run.phase)
        except Exception as e:
            if isinstance(e, DirtyClusterError):  # exit 3: nothing ran, nothing to check
                store.write_results(
                    {
                        "valid": "unknown",
                        "checkers": {},
                        "anomalies": {},
                        "interrupted": True,
                        "reason": str(e),
                    }
                )
                guard.restore()
                raise
            interrupted = True
            reason = f"{type(e).__name__} during {run.phase}: {e}"
            log.error("run failed: %s", reason, exc_info=not isinstance(e, SplitbrainError))
        finally:
            guard.cleaning = True
            try:
                problems = run.cleanup()
            finally:
                run.history.close()
                progress.stop()
        n_ops = len(run.history)
        if run.history.failure is not None:  # the store refused the history (full, read-only)
            interrupted, reason = True, str(run.history.failure)
        _write_schedule(store)
        try:
            results = analyse(run, store, checker_opts, opts, guard, interrupted, reason, problems)
        finally:
            guard.restore()
        interrupted = bool(results["run"]["interrupted"])
        reason = results["run"]["reason"]
        log.info("run %s: valid=%s (%s)", spec.name, results["valid"], store.path)
    return RunResult(
        store_dir=store.path, results=results, interrupted=interrupted, reason=reason, ops=n_ops
    )
