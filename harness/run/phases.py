"""One run's phases, Jepsen's ``run!`` body: connect, set up, load and faults, heal, read.

    connect -> nemesis setup (heals leftovers) -> db setup -> workers + sampler +
    nemesis for time-limit -> heal (final ops) -> recovery wait (the DB's own
    ``Converges`` wait when it declares one, else a fixed sleep) -> final reads
    cleanup (always): stop load -> nemesis teardown -> fetch node logs -> db teardown

:meth:`Run.cleanup` is the point of this module: whatever happens before it, it
heals, stops and wipes, and every step of it runs even if an earlier one fails.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.db import (
    DB,
    Addressable,
    Converges,
    HasLogFiles,
    WaitsReady,
    runs_under_faketime,
)
from harness.core.errors import SplitbrainError
from harness.core.fanout import each_or_raise
from harness.core.history import NEMESIS, HistoryWriter, Op
from harness.core.nemesis import NemesisPackage
from harness.core.remote import Host, Remote
from harness.core.spec import RunContext, TestSpec
from harness.core.workload import Workload
from harness.run.cleanup import (
    clean_start,
    clear_db_node,
    heal_deadline_s,
    journal_db_node,
    retry_heals,
    run_journal,
    unreachable_in,
)
from harness.run.converge import CONVERGE, convergence_text, wait_for_convergence
from harness.run.preload import without_preload
from harness.run.progress import Counters, Progress
from harness.run.store import RunStore
from harness.run.validate import ValidatingClient, ValidatingNemesis
from harness.run.workers import Worker, WorkerGroup

if TYPE_CHECKING:
    from harness.run.options import RunOptions

__all__ = ["Run", "watchdog_limit"]

log = logging.getLogger(__name__)

FINAL_GROUP = "final"
"""The worker group of the final reads, whose ops the watchdog allows longer."""
SETTLE_S = 5.0
"""Seconds of load after a schedule that ends the load has played its last fault."""


def watchdog_limit(spec: TestSpec, opts: RunOptions) -> float | None:
    """Seconds an op may stay open before the watchdog records it ``info`` (None/0: never)."""
    if opts.client_timeout is not None:
        return opts.client_timeout
    return 2 * spec.client_timeout


class Run:
    def __init__(
        self,
        spec: TestSpec,
        hosts: Sequence[Host],
        store: RunStore,
        opts: RunOptions,
        *,
        db: DB,
        workload: Workload,
        package: NemesisPackage,
        connect_fn: Callable[[Host], Remote],
    ) -> None:
        self.spec = spec
        self.hosts = {h.name: h for h in hosts}
        self.store = store
        self.opts = opts
        self.db = db
        self.workload = workload
        self.package = package
        self.connect_fn = connect_fn
        self.rng = random.Random(spec.seed)
        self.history = HistoryWriter(store.history_path)
        self.counters = Counters()
        # The timeout is the watchdog's (see _watchdog), not a per-op thread hand-off.
        self.client = ValidatingClient(workload.client)
        self.nemesis = ValidatingNemesis(package.nemesis)
        self.ctx: RunContext = None  # type: ignore[assignment]
        self.stop = threading.Event()
        self.node_list = list(spec.nodes)
        self.groups: list[WorkerGroup] = []
        self.pool: WorkerGroup | None = None
        self.extras: WorkerGroup | None = None
        self.finished = threading.Event()
        self.nemesis_thread: threading.Thread | None = None
        self.phase = "setup"
        self.db_set_up: set[str] = set()
        self.nemesis_set_up = False
        self.progress: Progress | None = None
        self._schedule_ended_at: float | None = None
        self.convergence: dict[str, object] | None = None
        """The ``converge`` op's value (harness/run/converge.py); None when there was no wait."""
        self.unconfirmed_heals: list[str] = []
        """Heals that could not be confirmed, each naming host and fault: the verdict is
        then unknown (harness/run/analysis.py), and the journal keeps the fault."""

    def _phase(self, name: str) -> None:
        self.phase = name
        if self.progress is not None:
            self.progress.phase = name
        log.info("phase: %s", name)

    # --- setup --------------------------------------------------------------
    def connect(self) -> None:
        self._phase("connect")
        remotes = each_or_raise(
            list(self.spec.nodes), lambda n: self.connect_fn(self.hosts[n]), what="connect"
        )
        if not runs_under_faketime(self.db):  # e.g. a JVM: no libfaketime preload (preload.py)
            remotes = without_preload(remotes)
        self.ctx = RunContext(
            spec=self.spec,
            hosts=self.hosts,
            remotes=remotes,
            db=self.db,
            history=self.history,
            rng=self.rng,
            store_dir=str(self.store.path),
            stop=self.stop,
        )
        if isinstance(self.db, Addressable):
            self.ctx.addresses.update(self.db.addresses(self.ctx))

    def setup(self) -> None:
        self._phase("clean-start")  # earlier runs' faults and clusters go first (cleanup.py)
        clean_start(self.ctx)
        self.ctx.journal = run_journal(self.ctx)  # every fault from here on is journaled
        self._phase("nemesis-setup")
        self.nemesis_set_up = True  # teardown must run even if setup fails halfway
        self.nemesis.setup(self.ctx)
        self._phase("db-setup")

        def one(node: str) -> None:
            self.db_set_up.add(node)
            journal_db_node(self.ctx, node)
            self.db.setup(self.ctx, node)

        each_or_raise(list(self.spec.nodes), one, what="db-setup")
        if isinstance(self.db, WaitsReady):
            self.db.wait_ready(self.ctx)

    # --- main phase ---------------------------------------------------------
    def record_nemesis(self, op: Op) -> Op:
        inv = self.history.append(op.replace(type="invoke", process=NEMESIS, time=0, index=-1))
        comp = self.nemesis.invoke(self.ctx, inv)
        comp = self.history.append(comp.replace(time=0, index=-1))
        self.counters.record(comp)
        log.info(
            "nemesis %s %s -> %s",
            inv.f,
            inv.value,
            comp.value if comp.error is None else f"error: {comp.error}",
        )
        return comp

    def _nemesis_loop(self) -> None:
        schedule = self.package.schedule
        try:
            while not self.stop.is_set():
                nxt = schedule.next(self.ctx)
                if nxt is None:
                    return
                delay, planned = nxt
                if self.stop.wait(max(0.0, float(delay))):
                    return
                # A fault that depends on the cluster at the moment it lands
                # (who leads now) is built only after the wait.
                op = planned if isinstance(planned, Op) else planned(self.ctx)
                if op is not None:
                    self.record_nemesis(op)
        except Exception:
            log.exception("nemesis schedule crashed; no further faults this run")

    def _watchdog(self) -> None:
        """Enforce the client timeout without a per-op thread hand-off.

        An op open longer than the timeout is completed ``info`` here; its
        worker is abandoned (its late answer is dropped) and a successor with a
        fresh process takes the slot, as Jepsen does when a client times out.
        The limit is twice the test's client timeout (an op may make two calls, a
        redirect, each bounded by it), unless ``RunOptions.client_timeout`` overrides it.
        """
        load_limit = watchdog_limit(self.spec, self.opts)
        if not load_limit:
            return
        while not self.finished.wait(min(0.25, load_limit / 4)):
            now = time.monotonic()
            for group in self.groups:
                if group.stop.is_set():
                    continue
                timeout = (
                    max(load_limit, self.opts.final_op_timeout_s)
                    if group.name == FINAL_GROUP
                    else load_limit
                )
                for w in list(group.slots):
                    if w.overdue(now, timeout) and w.abandon(
                        f"timeout: no completion within {timeout:g} s"
                    ):
                        log.info(
                            "%s: op overran %gs; new process %d takes over",
                            w.name,
                            timeout,
                            w.process + w.process_step,
                        )
                        group.replace(w, w.successor())

    def _new_group(self, name: str) -> WorkerGroup:
        g = WorkerGroup(name)
        self.groups.append(g)
        return g

    def main_phase(self) -> None:
        self._phase("run")
        conc = max(1, self.spec.concurrency)
        interval = conc / self.spec.rate if self.spec.rate and self.spec.rate > 0 else 0.0
        gen_lock = threading.Lock()
        nodes = self.node_list
        pool = self.pool = self._new_group("pool")
        for w in range(conc):
            pool.add(
                Worker(
                    self,
                    w,
                    nodes[w % len(nodes)],
                    generator=self.workload.generator,
                    gen_lock=gen_lock,
                    stop=pool.stop,
                    interval=interval,
                    process=w,
                    process_step=conc,
                )
            )
        self._start_extra_workers()
        self.nemesis_thread = threading.Thread(
            target=self._nemesis_loop, name="nemesis", daemon=True
        )
        threading.Thread(target=self._watchdog, name="watchdog", daemon=True).start()
        pool.start()
        self.nemesis_thread.start()
        deadline = time.monotonic() + self.spec.time_limit
        while time.monotonic() < deadline:
            if not pool.alive():
                log.info("every worker finished before the time limit")
                break
            if self._schedule_over():
                log.info("the fault schedule played every pass it was given: the load ends")
                break
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        self.stop_load()
        crashed = pool.errors()
        if crashed:
            e = crashed[0].error
            raise (
                e
                if isinstance(e, SplitbrainError)
                else RuntimeError(f"{crashed[0].name} crashed: {e!r}")
            )

    def _schedule_over(self) -> bool:
        """A schedule that ends the load (a deck of ``passes``) has ended, and the cluster
        has had :data:`SETTLE_S` without faults since, so the last script's effects reach
        the clients before the final phase."""
        if not getattr(self.package.schedule, "ends_load", False):
            return False
        thread = self.nemesis_thread
        if thread is None or thread.is_alive():
            return False
        if self._schedule_ended_at is None:
            self._schedule_ended_at = time.monotonic()
        return time.monotonic() - self._schedule_ended_at >= SETTLE_S

    def _start_extra_workers(self) -> None:
        """Dedicated workers (status samplers) that run until final reads begin."""
        make = self.workload.extra_workers
        if make is None:
            return
        extras = self.extras = self._new_group("extra")
        for i, ew in enumerate(make(list(self.spec.nodes))):
            extras.add(
                Worker(
                    self,
                    i,
                    ew.node,
                    generator=ew.generator,
                    gen_lock=threading.Lock(),
                    stop=extras.stop,
                    interval=0.0,
                    process=ew.process_base,
                    process_step=ew.process_stride,
                    client=ValidatingClient(ew.client),
                    pending_poll=0.005,
                    label=ew.name,
                    extra=True,
                )
            )
        extras.start()

    def stop_extra_workers(self) -> None:
        if self.extras is not None:
            self.extras.join(self.opts.join_timeout_s, "harness stopped waiting for this op")

    def stop_load(self) -> None:
        """Stop the pool and the nemesis schedule; wait for in-flight ops and faults."""
        if self.pool is not None:
            self.pool.join(self.opts.join_timeout_s, "harness stopped waiting for this op")
        self.stop.set()
        if self.nemesis_thread is not None and self.nemesis_thread.is_alive():
            # A fault being applied must finish before teardown heals, or the heal
            # could run first and the fault land after it.
            self.nemesis_thread.join(self.opts.nemesis_join_timeout_s)
            if self.nemesis_thread.is_alive():
                log.error(
                    "nemesis still applying a fault after %ss; healing anyway",
                    self.opts.nemesis_join_timeout_s,
                )

    # --- end phases ---------------------------------------------------------
    def heal(self) -> None:
        """The final heal; a heal a host's lost control link refused is retried (bounded).

        The final reads must read a healed cluster: a heal that still fails at the
        deadline is an unconfirmed heal, and the verdict is unknown whatever happens later.
        """
        self._phase("heal")
        deadline = time.monotonic() + heal_deadline_s()
        for op in list(self.package.final_ops):
            comp = self.record_nemesis(op)
            delay = 0.5
            while (lost := unreachable_in(comp.error, self.node_list)) and (
                left := deadline - time.monotonic()
            ) > 0:
                log.warning("final heal %s: %s unreachable; retrying", op.f, ", ".join(lost))
                time.sleep(min(delay, left))
                delay = min(delay * 2, 5.0)
                for n in lost:
                    reset = getattr(self.ctx.remotes.get(n), "reset", None)
                    if callable(reset):
                        reset()
                comp = self.record_nemesis(op)
            lost = unreachable_in(comp.error, self.node_list)
            if lost:
                self.unconfirmed_heals.append(f"final {op.f} not confirmed: {comp.error}")

    def recover(self) -> None:
        self._phase("recover")
        if isinstance(self.db, WaitsReady) and any(h.emulated_cpu for h in self.ctx.hosts.values()):
            # On emulated CPUs (VM guests under TCG) a node restarted by the heal takes
            # tens of seconds to serve again; final reads from the one node still up
            # would see a stale commit index and report acknowledged writes as lost.
            try:
                self.db.wait_ready(self.ctx)
            except Exception as e:  # noqa: BLE001 - the final reads judge what is left
                log.warning("cluster not ready again after the heal: %s", e)
        if isinstance(self.db, Converges) and self.opts.converge_timeout_s > 0:
            self.converge(self.opts.converge_timeout_s)
        else:
            time.sleep(self.opts.recovery_s)

    def converge(self, timeout: float) -> None:
        """Wait, bounded, until the DB says its replicas agree; record what it saw.

        In place of the fixed recovery sleep: the final reads then read the outcome of the
        heal, not a moment of it, and the history says which (docs/architecture.md §3).
        """
        self._phase("converge")
        self.history.append(
            Op(type="invoke", process=NEMESIS, f=CONVERGE, value={"timeout_s": timeout})
        )
        report = wait_for_convergence(self.db, self.ctx, timeout)
        value: dict[str, object] = {**report.to_json(), "timeout_s": timeout}
        self.history.append(
            Op(
                type="info",
                process=NEMESIS,
                f=CONVERGE,
                value=value,
                error=None if report.converged else f"not converged: {report.why or '?'}",
            )
        )
        self.convergence = value  # not a fault: kept out of the progress line's faults
        log.info("converge: %s", convergence_text(value))

    def final_reads(self) -> None:
        self.stop_extra_workers()
        gen = self.workload.final_generator
        if gen is None:
            return
        self._phase("final-reads")
        nodes = self.node_list
        base = 1 + max([g.max_process() for g in self.groups], default=0)
        gen_lock = threading.Lock()
        # A stall limit, not a total: an hour-long run's log takes minutes to read back,
        # and a final read cut short leaves acks unjudged. Still bounded, by the load's
        # own length, so a generator that never ends cannot hold the run.
        stall = self.opts.final_timeout_s
        started = time.monotonic()
        cap = started + stall + self.spec.time_limit
        finals = self._new_group(FINAL_GROUP)
        for i, node in enumerate(nodes):
            finals.add(
                Worker(
                    self,
                    i,
                    node,
                    generator=gen,
                    gen_lock=gen_lock,
                    stop=finals.stop,
                    interval=0.0,
                    process=base + i,
                    process_step=len(nodes),
                    deadline=cap,
                    label="final",
                )
            )
        finals.start()
        seen, progress_at = len(self.history), started
        while finals.alive():
            now = time.monotonic()
            if len(self.history) != seen:
                seen, progress_at = len(self.history), now
            elif now - progress_at > stall:
                log.warning("final reads: nothing completed for %g s; stopping them", stall)
                break
            if now > cap:
                log.warning("final reads: still reading after %g s; stopping them", now - started)
                break
            time.sleep(0.05)
        finals.join(self.opts.join_timeout_s, "final read did not finish in time")
        crashed = finals.errors()
        if crashed:
            raise RuntimeError(f"{crashed[0].name} crashed: {crashed[0].error!r}")

    # --- cleanup ------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """Heal, fetch logs, stop nodes. Every step runs even if an earlier one fails."""
        problems: list[str] = []
        self._phase("cleanup")
        try:
            self.stop_load()
            for g in self.groups:
                g.join(self.opts.join_timeout_s, "harness stopped waiting for this op")
        except BaseException as e:  # noqa: BLE001
            problems.append(f"stopping load: {e}")
        finally:
            self.finished.set()
        if self.ctx is None:
            return problems
        if self.nemesis_set_up:
            try:
                self.nemesis.teardown(self.ctx)
            except BaseException as e:  # noqa: BLE001
                log.exception("nemesis teardown failed")
                problems.append(f"nemesis teardown: {e}")
        self._fetch_logs(problems)
        if self.db_set_up and not self.opts.leave_db_running:

            def down(node: str) -> None:
                self.db.teardown(self.ctx, node)
                clear_db_node(self.ctx, node)

            try:
                each_or_raise(sorted(self.db_set_up), down, what="db-teardown")
            except BaseException as e:  # noqa: BLE001
                problems.append(f"db teardown: {e}")
        elif self.opts.leave_db_running:
            log.warning("leaving the DB running on %s", ", ".join(sorted(self.db_set_up)))
        try:  # what the journal still holds was never confirmed healed: retried, bounded
            self.unconfirmed_heals += retry_heals(
                self.ctx, deadline_s=heal_deadline_s(), keep_db_nodes=self.opts.leave_db_running
            )
        except BaseException as e:  # noqa: BLE001
            problems.append(f"confirming heals: {e}")
            self.unconfirmed_heals.append(f"heals not confirmed: {e}")
        for remote in self.ctx.remotes.values():
            try:
                remote.close()
            except Exception:
                log.debug("closing a remote failed", exc_info=True)
        return problems

    def _fetch_logs(self, problems: list[str]) -> None:
        db = self.db
        if not isinstance(db, HasLogFiles) or not self.db_set_up:
            return

        def fetch(node: str) -> None:
            dest = self.store.node_dir(node)
            for path in db.log_files(self.ctx, node):
                local = dest / Path(path).name
                try:
                    self.ctx.remotes[node].download(path, str(local))
                except Exception as e:
                    log.info("%s: could not fetch %s: %s", node, path, e)

        try:
            each_or_raise(sorted(self.db_set_up), fetch, what="fetch-logs")
        except BaseException as e:  # noqa: BLE001
            problems.append(f"fetching logs: {e}")
