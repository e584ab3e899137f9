"""The threads that drive clients: one logical process at a time, bound to one node.

Workers are threads bound round-robin to nodes. Each owns a logical process id;
after an ``info`` completion it takes a fresh one (process + concurrency) and
reopens its client, so a process never has two operations open. A group holds
the workers that start and stop together (the pool, the samplers, the final
reads); the run's watchdog may replace a worker whose op overran.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Protocol

from harness.core.errors import ConfigError
from harness.core.history import HistoryWriter, Op
from harness.core.spec import RunContext
from harness.core.workload import PENDING, GenContext, Generator
from harness.run.progress import Counters
from harness.run.validate import ValidatingClient

__all__ = ["Driver", "Worker", "WorkerGroup"]

log = logging.getLogger(__name__)


class Driver(Protocol):
    """What a worker needs from the run that started it."""

    rng: random.Random
    client: ValidatingClient
    history: HistoryWriter
    counters: Counters
    ctx: RunContext
    node_list: list[str]


class Worker(threading.Thread):
    """Drives one logical process at a time against one node.

    Client calls run directly on this thread (a hand-off to a helper thread per
    op would halve the harness's throughput); the run's watchdog enforces the
    client timeout instead, by :meth:`abandon`-ing a worker whose op overruns
    and starting a replacement under a fresh process.
    """

    def __init__(
        self,
        run: Driver,
        worker: int,
        node: str,
        *,
        generator: Generator,
        gen_lock: threading.Lock,
        stop: threading.Event,
        interval: float,
        process: int,
        process_step: int,
        deadline: float | None = None,
        client: ValidatingClient | None = None,
        pending_poll: float = 0.01,
        label: str = "worker",
        extra: bool = False,
    ) -> None:
        super().__init__(name=f"{label}-{worker}-{node}", daemon=True)
        self.extra = extra
        """An extra worker (a sampler): its ops are not client ops in the counts."""
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

    def successor(self) -> Worker:
        """A fresh worker taking over this one's slot under a new process id."""
        w = Worker(
            self.run_,
            self.worker,
            self.node,
            generator=self.generator,
            gen_lock=self.gen_lock,
            stop=self.stop,
            interval=self.interval,
            process=self.process + self.process_step,
            process_step=self.process_step,
            deadline=self.deadline,
            client=self.proto,
            pending_poll=self.pending_poll,
            label=self.label,
            extra=self.extra,
        )
        w.did_setup = self.did_setup
        return w

    def overdue(self, now: float, timeout: float) -> bool:
        return self._open is not None and now - self._open_since > timeout

    def _gen_ctx(self) -> GenContext:
        # Built twice per op (for ``op`` and ``update``): positional, one lookup of the run.
        run = self.run_
        return GenContext(
            run.history.now(),
            self.process,
            self.worker,
            self.node,
            self.rng,
            run.node_list,
            run.ctx.writes.lull,
        )

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
        self.run_.counters.record(comp, extra=self.extra)
        with self.gen_lock:
            self.generator.update(self._gen_ctx(), comp)

    def _loop(self) -> None:
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
            client = self.client
            if client is None:
                if not self._open_client() or self.client is None:
                    if self.stop.wait(0.5):
                        return
                    continue
                client = self.client
            with self.gen_lock:
                op = self.generator.op(self._gen_ctx())
            if op is None:
                return
            if op is PENDING:
                if self.stop.wait(self.pending_poll):
                    return
                continue
            if not isinstance(op, Op):
                raise ConfigError(
                    f"generator produced {type(op).__name__}, not an Op", field="workload"
                )
            if op.f not in self.proto.read_fs and not self._wait_for_writes():
                return
            node = op.node if op.node in hosts else self.node
            with self._open_lock:
                if self.abandoned:
                    return
                if (
                    op.type != "invoke"
                    or op.process != self.process
                    or op.node != node
                    or op.time
                    or op.index != -1
                ):
                    op = Op(
                        type="invoke",
                        process=self.process,
                        f=op.f,
                        value=op.value,
                        key=op.key,
                        node=node,
                    )
                inv = history.append(op)
                self._open_since = time.monotonic()
                self._open = inv
            comp = client.invoke(ctx, inv)
            with self._open_lock:
                if self.abandoned:
                    return
                self._open = None
                self._complete(comp)
            if comp.type == "info":
                self.process += self.process_step
                self._close_client()

    def _wait_for_writes(self) -> bool:
        """Hold a write through a lull (not yet recorded, so it is simply sent later).

        False when the run stops meanwhile. Lull-aware generators propose reads
        during a lull, so only the others' writes wait here.
        """
        gate = self.run_.ctx.writes
        if not gate.lull:  # no lull: an attribute read, not the event's condition lock
            return True
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


class WorkerGroup:
    """Worker slots that run together and stop together (pool, samplers, final reads).

    A slot's worker may be replaced by the watchdog; ``all`` keeps every worker
    ever started so that process ids stay unique and errors are not lost.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.stop = threading.Event()
        self.slots: list[Worker] = []
        self.all: list[Worker] = []
        self.lock = threading.Lock()

    def add(self, w: Worker) -> None:
        with self.lock:
            self.slots.append(w)
            self.all.append(w)

    def start(self) -> None:
        for w in list(self.slots):
            w.start()

    def replace(self, old: Worker, new: Worker) -> None:
        with self.lock:
            self.slots[self.slots.index(old)] = new
            self.all.append(new)
        new.start()

    def alive(self) -> bool:
        return any(w.is_alive() for w in list(self.slots))

    def max_process(self) -> int:
        return max((w.process for w in list(self.all)), default=-1)

    def errors(self) -> list[Worker]:
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
