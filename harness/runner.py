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

Workers are threads bound round-robin to nodes. Each owns a logical process id;
after an ``info`` completion it takes a fresh one (process + concurrency) and
reopens its client, so a process never has two operations open.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cleanup import DirtyClusterError, clean_start, clear_db_node, journal_db_node
from harness.control.base import Host, Remote
from harness.errors import ConfigError, SplitbrainError
from harness.exitcodes import exit_code_for
from harness.history import NEMESIS, HistoryWriter, Op
from harness.progress import Counters, Progress
from harness.store import RunStore
from harness.test import RunContext, TestSpec
from harness.validate import ValidatingClient, ValidatingNemesis

__all__ = ["RunResult", "run_test", "exit_code_for", "RunOptions", "parallel",
           "NullNemesisPackage"]

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    store_dir: Path
    results: dict[str, Any]
    interrupted: bool = False
    reason: str | None = None
    ops: int = 0

    @property
    def valid(self) -> Any:
        return self.results.get("valid", "unknown")

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.valid)


@dataclass
class RunOptions:
    """Knobs of the runner that are not part of the test's meaning."""

    client_timeout: float | None = 10.0
    recovery_s: float = 3.0
    final_timeout_s: float = 60.0
    join_timeout_s: float = 15.0
    nemesis_join_timeout_s: float = 60.0
    leave_db_running: bool = False
    engine: str = "local"
    check: bool = True
    check_timeout: float | None = 300.0
    report: bool = True
    progress: bool = True


# --------------------------------------------------------------------------
# small helpers


def parallel(fn: Callable[[str], Any], items: Sequence[str], *, what: str) -> dict[str, Any]:
    """Run ``fn`` on every item in threads; all run to the end, then the first error is raised."""
    if not items:
        return {}
    out: dict[str, Any] = {}
    errors: list[tuple[str, Exception]] = []
    with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix=what) as pool:
        futs = {item: pool.submit(fn, item) for item in items}
        for item, fut in futs.items():
            try:
                out[item] = fut.result()
            except Exception as e:  # re-raised below; a KeyboardInterrupt goes at once
                errors.append((item, e))
    for item, e in errors:
        log.error("%s on %s failed: %s", what, item, e)
    if errors:
        raise errors[0][1]
    return out


class _SignalGuard:
    """SIGINT/SIGTERM become KeyboardInterrupt in the main thread, once.

    After cleanup has begun, further signals are logged and ignored: a second
    Ctrl-C must not cut a heal in half and leave a partition behind.
    """

    def __init__(self) -> None:
        self.cleaning = False
        self.received: str | None = None
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.cleaning:
            log.warning("%s received while cleaning up; finishing the cleanup first", name)
            return
        self.received = name
        raise KeyboardInterrupt(name)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


class NullNemesisPackage:
    """No faults: for runs with an empty --nemesis and for benchmarks."""

    class _Nemesis:
        def setup(self, ctx: RunContext) -> None:
            pass

        def invoke(self, ctx: RunContext, op: Op) -> Op:
            return op.complete("info", value=op.value)

        def teardown(self, ctx: RunContext) -> None:
            pass

    class _Schedule:
        def next(self, ctx: RunContext) -> None:
            return None

    def __init__(self) -> None:
        self.nemesis = self._Nemesis()
        self.schedule = self._Schedule()
        self.final_ops: list[Op] = []


# --------------------------------------------------------------------------
# workers


class _Worker(threading.Thread):
    """Drives one logical process at a time against one node.

    Client calls run directly on this thread (a hand-off to a helper thread per
    op would halve the harness's throughput); the run's watchdog enforces the
    client timeout instead, by :meth:`abandon`-ing a worker whose op overruns
    and starting a replacement under a fresh process.
    """

    def __init__(self, run: _Run, worker: int, node: str, *, generator: Any,
                 gen_lock: threading.Lock, stop: threading.Event, interval: float,
                 process: int, process_step: int, deadline: float | None = None,
                 client: ValidatingClient | None = None, pending_poll: float = 0.01,
                 label: str = "worker") -> None:
        super().__init__(name=f"{label}-{worker}-{node}", daemon=True)
        self.run_ = run
        self.worker = worker
        self.node = node
        self.generator = generator
        self.gen_lock = gen_lock
        self.stop = stop
        self.interval = interval
        self.process = process
        self.process_step = process_step
        self.deadline = deadline
        self.rng = random.Random(run.rng.random())
        self.proto = client or run.client
        self.pending_poll = pending_poll
        self.label = label
        self.client: ValidatingClient | None = None
        self.did_setup = False
        self.error: BaseException | None = None
        # Guards the open invocation so that an abandoning watchdog and a late
        # completion never both complete it.
        self._open_lock = threading.Lock()
        self._open: Op | None = None
        self._open_since = 0.0
        self.abandoned = False

    def successor(self) -> _Worker:
        """A fresh worker taking over this one's slot under a new process id."""
        w = _Worker(self.run_, self.worker, self.node, generator=self.generator,
                    gen_lock=self.gen_lock, stop=self.stop, interval=self.interval,
                    process=self.process + self.process_step, process_step=self.process_step,
                    deadline=self.deadline, client=self.proto, pending_poll=self.pending_poll,
                    label=self.label)
        w.did_setup = self.did_setup
        return w

    def overdue(self, now: float, timeout: float) -> bool:
        return self._open is not None and now - self._open_since > timeout

    def _gen_ctx(self) -> Any:
        from workloads.base import GenContext

        return GenContext(time_ns=self.run_.history.now(), process=self.process,
                          worker=self.worker, node=self.node, rng=self.rng,
                          nodes=self.run_.node_list, lull=self.run_.ctx.writes.lull)

    def _open_client(self) -> bool:
        ctx = self.run_.ctx
        try:
            self.client = self.proto.open(ctx, self.node)
            if not self.did_setup:
                self.client.setup(ctx)
                self.did_setup = True
            return True
        except Exception as e:
            log.info("%s: opening a client to %s failed: %s", self.name, self.node, e)
            self.client = None
            return False

    def _close_client(self) -> None:
        if self.client is None:
            return
        try:
            self.client.close(self.run_.ctx)
        except Exception as e:
            log.debug("%s: close failed: %s", self.name, e)
        self.client = None

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - reported by the runner
            self.error = e
            log.exception("%s crashed", self.name)
        finally:
            if self.client is not None and self.did_setup and not self.abandoned:
                try:
                    self.client.teardown(self.run_.ctx)
                except Exception as e:
                    log.debug("%s: client teardown failed: %s", self.name, e)
            self._close_client()

    def _complete(self, comp: Op) -> None:
        """Record a completion, count it, and tell the generator."""
        if comp.time or comp.index != -1:
            comp = comp.replace(time=0, index=-1)
        comp = self.run_.history.append(comp)
        self.run_.counters.record(comp)
        with self.gen_lock:
            self.generator.update(self._gen_ctx(), comp)

    def _loop(self) -> None:
        from workloads.base import PENDING

        history = self.run_.history
        ctx = self.run_.ctx
        hosts = ctx.hosts
        next_at = time.monotonic()
        while not self.stop.is_set() and not self.abandoned:
            if self.deadline is not None and time.monotonic() > self.deadline:
                log.warning("%s: deadline passed", self.name)
                return
            if self.interval > 0:
                now = time.monotonic()
                # Never build up a backlog to burst through after a slow op.
                next_at = max(next_at, now - self.interval)
                if next_at > now and self.stop.wait(next_at - now):
                    return
                next_at += self.rng.uniform(0, 2 * self.interval)
            if self.client is None and not self._open_client():
                if self.stop.wait(0.5):
                    return
                continue
            with self.gen_lock:
                op = self.generator.op(self._gen_ctx())
            if op is None:
                return
            if op is PENDING:
                if self.stop.wait(self.pending_poll):
                    return
                continue
            if not isinstance(op, Op):
                raise ConfigError(f"generator produced {type(op).__name__}, not an Op",
                                  field="workload")
            if op.f not in self.proto.read_fs and not self._wait_for_writes():
                return
            node = op.node if op.node in hosts else self.node
            with self._open_lock:
                if self.abandoned:
                    return
                if (op.type != "invoke" or op.process != self.process or op.node != node
                        or op.time or op.index != -1):
                    op = Op(type="invoke", process=self.process, f=op.f, value=op.value,
                            key=op.key, node=node)
                inv = history.append(op)
                self._open_since = time.monotonic()
                self._open = inv
            comp = self.client.invoke(ctx, inv)
            with self._open_lock:
                if self.abandoned:
                    return
                self._open = None
                self._complete(comp)
            if comp.type == "info":
                self.process += self.process_step
                self._close_client()
            elif self.client.broken:
                self._close_client()

    def _wait_for_writes(self) -> bool:
        """Hold a write through a lull (not yet recorded, so it is simply sent later).

        False when the run stops meanwhile. Lull-aware generators propose reads
        during a lull, so only the others' writes wait here.
        """
        gate = self.run_.ctx.writes
        while not gate.wait_open(0.05):
            if self.stop.is_set() or self.abandoned:
                return False
        return True

    def abandon(self, why: str) -> bool:
        """Close the open invocation as ``info`` and forbid this worker any later write.

        Returns True when an op was open (so a successor is worth starting).
        """
        with self._open_lock:
            self.abandoned = True
            if self._open is None:
                return False
            self._complete(self._open.complete("info", error=why))
            self._open = None
            return True


class _Group:
    """Worker slots that run together and stop together (pool, samplers, final reads).

    A slot's worker may be replaced by the watchdog; ``all`` keeps every worker
    ever started so that process ids stay unique and errors are not lost.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.stop = threading.Event()
        self.slots: list[_Worker] = []
        self.all: list[_Worker] = []
        self.lock = threading.Lock()

    def add(self, w: _Worker) -> None:
        with self.lock:
            self.slots.append(w)
            self.all.append(w)

    def start(self) -> None:
        for w in list(self.slots):
            w.start()

    def replace(self, old: _Worker, new: _Worker) -> None:
        with self.lock:
            self.slots[self.slots.index(old)] = new
            self.all.append(new)
        new.start()

    def alive(self) -> bool:
        return any(w.is_alive() for w in list(self.slots))

    def max_process(self) -> int:
        return max((w.process for w in list(self.all)), default=-1)

    def errors(self) -> list[_Worker]:
        return [w for w in list(self.all) if w.error is not None]

    def join(self, timeout: float, why: str) -> None:
        """Stop asking for ops, wait for in-flight ones, record stragglers as info."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        for w in list(self.slots):
            if w.ident is not None:  # started
                w.join(max(0.0, deadline - time.monotonic()))
            if w.is_alive() and w.abandon(why):
                log.warning("%s: op still running after %gs; recorded as info", w.name, timeout)


# --------------------------------------------------------------------------
# the run


class _Run:
    def __init__(self, spec: TestSpec, hosts: Sequence[Host], store: RunStore,
                 opts: RunOptions, *, db: Any, workload: Any, package: Any,
                 connect_fn: Callable[[Host], Remote]) -> None:
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
        self.groups: list[_Group] = []
        self.pool: _Group | None = None
        self.extras: _Group | None = None
        self.finished = threading.Event()
        self.nemesis_thread: threading.Thread | None = None
        self.phase = "setup"
        self.db_set_up: set[str] = set()
        self.nemesis_set_up = False
        self.progress: Progress | None = None

    def _phase(self, name: str) -> None:
        self.phase = name
        if self.progress is not None:
            self.progress.phase = name
        log.info("phase: %s", name)

    # --- setup --------------------------------------------------------------
    def connect(self) -> None:
        self._phase("connect")
        remotes = parallel(lambda n: self.connect_fn(self.hosts[n]), list(self.spec.nodes),
                           what="connect")
        self.ctx = RunContext(spec=self.spec, hosts=self.hosts, remotes=remotes, db=self.db,
                              history=self.history, rng=self.rng, store_dir=str(self.store.path),
                              state={"client_addrs": {}})
        self.ctx.state["stop"] = self.stop

    def setup(self) -> None:
        self._phase("clean-start")  # harness/cleanup.py: earlier runs' faults and clusters go first
        clean_start(self.ctx)
        self._phase("nemesis-setup")
        self.nemesis_set_up = True  # teardown must run even if setup fails halfway
        self.nemesis.setup(self.ctx)
        self._phase("db-setup")

        def one(node: str) -> None:
            self.db_set_up.add(node)
            journal_db_node(self.ctx, node)
            self.db.setup(self.ctx, node)

        parallel(one, list(self.spec.nodes), what="db-setup")
        ready = getattr(self.db, "wait_ready", None)
        if ready is not None:
            ready(self.ctx)

    # --- main phase ---------------------------------------------------------
    def record_nemesis(self, op: Op) -> Op:
        inv = self.history.append(op.replace(type="invoke", process=NEMESIS, time=0, index=-1))
        comp = self.nemesis.invoke(self.ctx, inv)
        comp = self.history.append(comp.replace(time=0, index=-1))
        self.counters.record(comp)
        log.info("nemesis %s %s -> %s", inv.f, inv.value, comp.value if comp.error is None
                 else f"error: {comp.error}")
        return comp

    def _nemesis_loop(self) -> None:
        schedule = self.package.schedule
        try:
            while not self.stop.is_set():
                nxt = schedule.next(self.ctx)
                if nxt is None:
                    return
                delay, op = nxt
                if self.stop.wait(max(0.0, float(delay))):
                    return
                if callable(op):
                    # A fault that depends on the cluster at the moment it lands
                    # (who leads now) is built only after the wait.
                    op = op(self.ctx)
                    if op is None:
                        continue
                self.record_nemesis(op)
        except Exception:
            log.exception("nemesis schedule crashed; no further faults this run")

    def _watchdog(self) -> None:
        """Enforce the client timeout without a per-op thread hand-off.

        An op open longer than the timeout is completed ``info`` here; its
        worker is abandoned (its late answer is dropped) and a successor with a
        fresh process takes the slot, as Jepsen does when a client times out.
        """
        timeout = self.opts.client_timeout
        if not timeout:
            return
        while not self.finished.wait(min(0.25, timeout / 4)):
            now = time.monotonic()
            for group in self.groups:
                if group.stop.is_set():
                    continue
                for w in list(group.slots):
                    if w.overdue(now, timeout) and w.abandon(
                            f"timeout: no completion within {timeout:g} s"):
                        log.info("%s: op overran %gs; new process %d takes over", w.name,
                                 timeout, w.process + w.process_step)
                        group.replace(w, w.successor())

    def _new_group(self, name: str) -> _Group:
        g = _Group(name)
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
            pool.add(_Worker(self, w, nodes[w % len(nodes)], generator=self.workload.generator,
                             gen_lock=gen_lock, stop=pool.stop, interval=interval, process=w,
                             process_step=conc))
        self._start_extra_workers()
        self.nemesis_thread = threading.Thread(target=self._nemesis_loop, name="nemesis",
                                               daemon=True)
        threading.Thread(target=self._watchdog, name="watchdog", daemon=True).start()
        pool.start()
        self.nemesis_thread.start()
        deadline = time.monotonic() + self.spec.time_limit
        while time.monotonic() < deadline:
            if not pool.alive():
                log.info("every worker finished before the time limit")
                break
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        self.stop_load()
        crashed = pool.errors()
        if crashed:
            e = crashed[0].error
            raise e if isinstance(e, SplitbrainError) else RuntimeError(
                f"{crashed[0].name} crashed: {e!r}")

    def _start_extra_workers(self) -> None:
        """Dedicated workers (status samplers) that run until final reads begin."""
        make = getattr(self.workload, "extra_workers", None)
        if make is None:
            return
        extras = self.extras = self._new_group("extra")
        for i, ew in enumerate(make(list(self.spec.nodes))):
            extras.add(_Worker(self, i, ew.node, generator=ew.generator,
                               gen_lock=threading.Lock(), stop=extras.stop, interval=0.0,
                               process=ew.process_base, process_step=ew.process_stride,
                               client=ValidatingClient(ew.client), pending_poll=0.005,
                               label=ew.name))
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
                log.error("nemesis still applying a fault after %ss; healing anyway",
                          self.opts.nemesis_join_timeout_s)

    # --- end phases ---------------------------------------------------------
    def heal(self) -> None:
        self._phase("heal")
        for op in list(getattr(self.package, "final_ops", None) or []):
            self.record_nemesis(op)

    def recover(self) -> None:
        self._phase("recover")
        time.sleep(self.opts.recovery_s)

    def final_reads(self) -> None:
        self.stop_extra_workers()
        gen = self.workload.final_generator
        if gen is None:
            return
        self._phase("final-reads")
        nodes = self.node_list
        base = 1 + max([g.max_process() for g in self.groups], default=0)
        gen_lock = threading.Lock()
        deadline = time.monotonic() + self.opts.final_timeout_s
        finals = self._new_group("final")
        for i, node in enumerate(nodes):
            finals.add(_Worker(self, i, node, generator=gen, gen_lock=gen_lock, stop=finals.stop,
                               interval=0.0, process=base + i, process_step=len(nodes),
                               deadline=deadline, label="final"))
        finals.start()
        while finals.alive() and time.monotonic() < deadline:
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
                parallel(down, sorted(self.db_set_up), what="db-teardown")
            except BaseException as e:  # noqa: BLE001
                problems.append(f"db teardown: {e}")
        elif self.opts.leave_db_running:
            log.warning("leaving the DB running on %s", ", ".join(sorted(self.db_set_up)))
        for remote in self.ctx.remotes.values():
            try:
                remote.close()
            except Exception:
                log.debug("closing a remote failed", exc_info=True)
        return problems

    def _fetch_logs(self, problems: list[str]) -> None:
        from harness.db import HasLogFiles

        if not isinstance(self.db, HasLogFiles) or not self.db_set_up:
            return

        def fetch(node: str) -> None:
            dest = self.store.node_dir(node)
            for path in self.db.log_files(self.ctx, node):
                local = dest / Path(path).name
                try:
                    self.ctx.remotes[node].download(path, str(local))
                except Exception as e:
                    log.info("%s: could not fetch %s: %s", node, path, e)

        try:
            parallel(fetch, sorted(self.db_set_up), what="fetch-logs")
        except BaseException as e:  # noqa: BLE001
            problems.append(f"fetching logs: {e}")


def _check(store: RunStore, workload: Any, engine: str,
           timeout: float | None = None) -> dict[str, Any]:
    """Run the checker on the stored history; a crash is ``unknown``, never a pass."""
    try:
        from checker.dispatch import check_history
    except ImportError as e:
        return {"valid": "unknown", "checkers": {}, "anomalies": {},
                "error": f"checker not available: {e}"}
    wc = dict(getattr(workload, "checker", {}) or {})
    model = wc.pop("model", None)
    try:
        # The store directory, not a list of ops: the Spark engine reads the Parquet itself.
        results = check_history(str(store.path), model=model, engine=engine, timeout=timeout,
                                opts=wc)
    except Exception as e:
        log.exception("checker crashed")
        return {"valid": "unknown", "checkers": {}, "anomalies": {},
                "error": f"checker crashed: {type(e).__name__}: {e}"}
    if not isinstance(results, dict) or "valid" not in results:
        return {"valid": "unknown", "checkers": {}, "anomalies": {},
                "error": "checker returned no verdict"}
    results.setdefault("checkers", {})
    results.setdefault("anomalies", {})
    return results


def _build_package(spec: TestSpec, db: Any, rng: random.Random) -> Any:
    if not spec.nemesis:
        return NullNemesisPackage()
    from nemesis.package import build_package

    opts = dict(spec.options.get("nemesis", {}) or {})
    return build_package(list(spec.nemesis), interval=spec.nemesis_interval, rng=rng, **opts)


def run_test(spec: TestSpec, hosts: Iterable[Host], *, store_root: str | Path = "store",
             db: Any = None, workload: Any = None, nemesis_package: Any = None,
             options: RunOptions | None = None,
             connect_fn: Callable[[Host], Remote] | None = None,
             progress_stream: Any = None) -> RunResult:
    """Run one test and return where it was stored and what the checker said."""
    opts = options or RunOptions()
    hosts = list(hosts)
    by_name = {h.name: h for h in hosts}
    missing = [n for n in spec.nodes if n not in by_name]
    if missing:
        raise ConfigError(f"nodes {', '.join(missing)} are not in the inventory "
                          f"({', '.join(by_name) or 'empty'})", field="nodes")
    if not spec.nodes:
        raise ConfigError("a test needs at least one node", field="nodes")
    if connect_fn is None:
        from harness.control import connect as connect_fn  # type: ignore[assignment]
    if db is None:
        from harness.dbs import get_db

        db = get_db(spec.db, spec.options.get("db", {}) or {})
    if workload is None:
        from workloads import get_workload

        # Workloads read their knobs from the flat spec.options (workloads/__init__.py).
        workload = get_workload(spec.workload, spec.options)
    if nemesis_package is None:
        nemesis_package = _build_package(spec, db, random.Random(spec.seed ^ 0x5EED))

    store = RunStore.create(store_root, spec.name)
    guard = _SignalGuard()
    interrupted, reason = False, None
    with store.capture_log():
        log.info("run %s: store %s", spec.name, store.path)
        store.write_test({**spec.to_json(), "engine": opts.engine,
                          "leave_db_running": opts.leave_db_running,
                          "hosts": [{"name": h.name, "address": h.address, "port": h.port,
                                     "user": h.user} for h in hosts if h.name in spec.nodes]})
        # Replaced at the end; if the harness is killed outright, this is what remains.
        store.write_results({"valid": "unknown", "checkers": {}, "anomalies": {},
                             "interrupted": True,
                             "reason": "the run did not finish (still running, or the harness "
                                       "was killed)"})
        run = _Run(spec, hosts, store, opts, db=db, workload=workload, package=nemesis_package,
                   connect_fn=connect_fn)  # type: ignore[arg-type]
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
                store.write_results({"valid": "unknown", "checkers": {}, "anomalies": {},
                                     "interrupted": True, "reason": str(e)})
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
        try:
            results = _analyse(run, store, workload, opts, guard, interrupted, reason, problems)
        finally:
            guard.restore()
        interrupted = bool(results["run"]["interrupted"])
        reason = results["run"]["reason"]
        log.info("run %s: valid=%s (%s)", spec.name, results["valid"], store.path)
    return RunResult(store_dir=store.path, results=results, interrupted=interrupted,
                     reason=reason, ops=n_ops)


def _analyse(run: _Run, store: RunStore, workload: Any, opts: RunOptions, guard: _SignalGuard,
             interrupted: bool, reason: str | None, problems: list[str]) -> dict[str, Any]:
    """Parquet, checker, results.json, report: after cleanup, so the cluster is already safe.

    A signal here stops the checker (the verdict is then unknown) but results.json
    is still written.
    """
    try:
        store.write_parquet()
    except Exception as e:
        log.error("converting the history to Parquet failed: %s", e)
        problems.append(f"parquet: {e}")
    results: dict[str, Any]
    if interrupted:
        results = {"valid": "unknown", "checkers": {}, "anomalies": {}, "interrupted": True,
                   "reason": reason}
    elif opts.check:
        run._phase("check")
        guard.cleaning = False  # a Ctrl-C may stop a long check
        try:
            results = _check(store, workload, opts.engine, opts.check_timeout)
        except KeyboardInterrupt as e:
            interrupted = True
            reason = f"interrupted by {e.args[0] if e.args else 'SIGINT'} during the check"
            results = {"valid": "unknown", "checkers": {}, "anomalies": {}, "interrupted": True,
                       "reason": reason}
        finally:
            guard.cleaning = True
    else:
        results = {"valid": "unknown", "checkers": {}, "anomalies": {},
                   "reason": "checker skipped"}
    results["run"] = {"ops": len(run.history), "ok": run.counters.ok,
                      "fail": run.counters.fail, "info": run.counters.info,
                      "interrupted": interrupted, "reason": reason, "cleanup_problems": problems}
    if problems:
        log.error("cleanup problems: %s", "; ".join(problems))
    store.write_results(results)
    if opts.report and not interrupted:
        _report(store)
    return results


def _report(store: RunStore) -> None:
    try:
        from harness.report import write_report
    except ImportError:
        return
    try:
        write_report(store.path)
    except Exception as e:
        log.warning("report failed: %s", e)
