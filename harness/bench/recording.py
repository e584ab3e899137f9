"""``splitbrain bench harness``: how many ops/s the runner can record, and how true their times are.

Two runs through the real runner (workers, pacing off, validation wrappers,
live JSONL history, store): one against the lab with the reference node, one
with a null client that answers ``ok`` at once and a DB that does nothing. The
null run is the harness's own ceiling; the ratio says how much of a real run's
throughput is the node's and how much is ours.

The null client stamps each answer with the history's clock the moment it has it
(``answered_ns``, in the completion's value); the time the writer then records minus
that stamp is how late the op is stamped (the wait for the writer's lock behind the
other workers, and the harness's own steps in between): ``stamp_skew_ms`` gives its
median, p99 and maximum, and the spread of the workers' medians (one worker stamped
consistently later than another). Beside it, measured in the same command so the
machine's load is the same, the baselines the runner's figures are to be read against:
the history writer alone on one thread, as it is and as the design it replaced (a
buffered text file flushed per line), in appends/s; and ``concurrency`` bare threads
recording null ops (invoke, stamp, completion) through the writer as it is and through
the one-lock design before it (stamp, encode and ``write(2)`` under one lock), each
with its ops/s and stamp delay (p50, p99, max). The one-lock writer's stamps wait
behind a holder that gave up the GIL inside ``write`` and must win it back: on a
loaded machine that is its p99 (harness/core/jsonl.py's HistoryWriter explains).
"""

from __future__ import annotations

import json
import tempfile
import time
from typing import Any

import click

from harness.control.memory import MemoryRemote
from harness.core.layout import HISTORY_JSONL
from harness.core.remote import Host
from harness.dbs.null import NullDB
from workloads.null import CountingGenerator, NullClient

__all__ = ["harness_bench", "measure"]

TARGET_NULL_OPS = 20_000.0
"""Null-client completions per second the recorder must reach (Jepsen's generator claims 20k)."""
TARGET_SKEW_MS = 1.0
"""Stamping delay (p99, ms) the recorder must stay under."""


class StampingClient(NullClient):
    """The null client, but each answer carries the history clock's reading at that moment."""

    def invoke(self, ctx: Any, op: Any) -> Any:
        value = dict(op.value or {})
        value["answered_ns"] = ctx.history.now()
        return op.complete("ok", value)


def stamp_skew(ops: list[Any]) -> dict[str, Any]:
    """How much later than its answer each completion was stamped, in ms, and by worker."""
    import statistics

    late: list[int] = []
    by_worker: dict[int, list[int]] = {}
    for op in ops:
        v = op.value if op.type == "ok" and op.is_client else None
        if isinstance(v, dict) and isinstance(v.get("answered_ns"), int):
            d = op.time - v["answered_ns"]
            late.append(d)
            by_worker.setdefault(int(op.process), []).append(d)
    if not late:
        return {}
    late.sort()
    medians = [statistics.median(x) for x in by_worker.values()]
    ms = 1e-6
    return {
        "p50": round(late[len(late) // 2] * ms, 4),
        "p99": round(late[min(len(late) - 1, int(len(late) * 0.99))] * ms, 4),
        "max": round(late[-1] * ms, 4),
        "worker_median_spread": round((max(medians) - min(medians)) * ms, 4),
        "workers": len(by_worker),
    }


class _BufferedWriter:
    """The writer design this one replaced: a text file, ``write`` then ``flush`` per line."""

    def __init__(self, path: str) -> None:
        import threading

        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()
        self._start = time.monotonic_ns()
        self._next = 0

    def append(self, op: Any) -> Any:
        with self._lock:
            op = op.replace(index=self._next, time=op.time or time.monotonic_ns() - self._start)
            self._fh.write(json.dumps(op.to_dict(), separators=(",", ":"), default=str) + "\n")
            self._fh.flush()
            self._next += 1
            return op

    def close(self) -> None:
        self._fh.close()


class _OneLockWriter:
    """The recorder design the group commit replaced: stamp, encode and ``write(2)``
    under one lock (the history writer of commit 0196f01, failure handling left out)."""

    def __init__(self, path: str) -> None:
        import os
        import threading

        from harness.core.jsonl import _line

        self._encode = _line
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._start = time.monotonic_ns()
        self._next = 0

    def now(self) -> int:
        return time.monotonic_ns() - self._start

    def append(self, op: Any) -> Any:
        import os

        from harness.core.op import Op

        with self._lock:
            index = self._next
            t = op.time or time.monotonic_ns() - self._start
            os.write(
                self._fd,
                self._encode(
                    {
                        "index": index,
                        "time": t,
                        "type": op.type,
                        "process": op.process,
                        "f": op.f,
                        "key": op.key,
                        "value": op.value,
                        "node": op.node,
                        "error": op.error,
                    }
                ),
            )
            self._next = index + 1
        return Op(op.type, op.process, op.f, op.value, op.key, t, index, op.node, op.error)

    def close(self) -> None:
        import os

        os.close(self._fd)


def _threads_recording(writer: Any, threads: int, seconds: float) -> dict[str, float]:
    """``threads`` threads recording null ops through ``writer`` for ``seconds``: an
    invocation, the answer's stamp, its completion; ops/s and the stamp delay in ms."""
    import threading

    from harness.core.op import Op

    late: list[list[int]] = [[] for _ in range(threads)]
    stop = time.monotonic() + seconds

    def loop(p: int) -> None:
        mine, n = late[p], 0
        while time.monotonic() < stop:
            n += 1
            writer.append(Op("invoke", p, "append", {"payload": f"p{n}"}, node="n1"))
            answered = writer.now()
            comp = writer.append(Op("ok", p, "append", {"payload": f"p{n}"}, node="n1"))
            mine.append(comp.time - answered)

    ts = [threading.Thread(target=loop, args=(p,), daemon=True) for p in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    el = time.perf_counter() - t0
    d = sorted(x for xs in late for x in xs)
    if not d:
        return {"ops_per_s": 0.0}
    ms = 1e-6
    return {
        "ops_per_s": round(len(d) / el, 1),
        "stamp_p50_ms": round(d[len(d) // 2] * ms, 4),
        "stamp_p99_ms": round(d[min(len(d) - 1, int(len(d) * 0.99))] * ms, 4),
        "stamp_max_ms": round(d[-1] * ms, 4),
    }


def recorder_baselines(
    root: str, threads: int, seconds: float = 1.0, rounds: int = 2
) -> dict[str, dict[str, float]]:
    """Bare threads recording through the writer and through the one-lock design, in
    alternating rounds (the load weighs on both alike); each design's round with the
    lowest stamp p99."""
    import os

    from harness.core.history import HistoryWriter

    best: dict[str, dict[str, float]] = {}
    for r in range(rounds):
        for name, make in (("threads_writer", HistoryWriter), ("threads_one_lock", _OneLockWriter)):
            path = os.path.join(root, f"baseline-{name}-{r}.jsonl")
            w = make(path)
            try:
                got = _threads_recording(w, threads, seconds)
            finally:
                w.close()
                os.unlink(path)
            old = best.get(name)
            if old is None or got.get("stamp_p99_ms", 0.0) < old.get("stamp_p99_ms", 0.0):
                best[name] = got
    return best


def writer_baselines(root: str, n: int = 100_000, rounds: int = 3) -> dict[str, float]:
    """Appends/s of the history writer alone (one thread), and of the design it replaced:
    the best of ``rounds`` alternating rounds of ``n`` appends each, so a burst of load
    on a shared machine weighs on both alike."""
    import os

    from harness.core.history import HistoryWriter, Op

    op = Op(type="ok", process=1, f="append", value={"payload": "p1234567"}, node="n1")
    best: dict[str, float] = {}
    for r in range(rounds):
        for name, make in (("writer", HistoryWriter), ("buffered_writer", _BufferedWriter)):
            path = os.path.join(root, f"baseline-{name}-{r}.jsonl")
            w = make(path)
            t = time.perf_counter()
            for _ in range(n):
                w.append(op)
            el = time.perf_counter() - t
            w.close()
            os.unlink(path)
            key = f"{name}_appends_per_s"
            best[key] = max(best.get(key, 0.0), round(n / el, 1))
    return best


def measure(
    hosts: list[Host],
    *,
    null: bool,
    seconds: float,
    concurrency: int,
    store_root: str,
    workload_name: str = "append",
    client_timeout: float | None = 10.0,
) -> dict[str, Any]:
    """One run; ops/s counts client completions recorded during the load phase."""
    from harness.core.history import read_jsonl
    from harness.core.spec import TestSpec
    from harness.core.workload import Workload
    from harness.run.runner import RunOptions, run_test

    spec = TestSpec(
        name="bench-null" if null else "bench-node",
        nodes=tuple(h.name for h in hosts),
        workload=workload_name,
        time_limit=seconds,
        concurrency=concurrency,
        rate=0.0,
        seed=1,
    )
    opts = RunOptions(check=False, progress=False, recovery_s=0.0, client_timeout=client_timeout)
    if null:
        wl = Workload(name="null", client=StampingClient(), generator=CountingGenerator())
        res = run_test(
            spec,
            hosts,
            store_root=store_root,
            db=NullDB(),
            workload=wl,
            options=opts,
            connect_fn=MemoryRemote,
        )
    else:
        from workloads import get_workload

        real = get_workload(workload_name, {})
        wl = Workload(name=real.name, client=real.client, generator=real.generator)
        res = run_test(spec, hosts, store_root=store_root, workload=wl, options=opts)
    if res.interrupted:
        raise click.ClickException(f"bench run failed: {res.reason}")
    ops = read_jsonl(res.store_dir / HISTORY_JSONL)
    done = [op for op in ops if op.is_client and op.type != "invoke"]
    if not done:
        return {"ops": 0, "seconds": 0.0, "ops_per_s": 0.0}
    first = min(op.time for op in ops if op.is_client)
    span = (max(op.time for op in done) - first) / 1e9
    by_type = {t: sum(1 for op in done if op.type == t) for t in ("ok", "fail", "info")}
    return {
        "ops": len(done),
        "seconds": round(span, 3),
        "ops_per_s": round(len(done) / span, 1) if span > 0 else 0.0,
        "ok_per_s": round(by_type["ok"] / span, 1) if span > 0 else 0.0,
        **by_type,
        "history_lines": len(ops),
        **({"stamp_skew_ms": stamp_skew(ops)} if null else {}),
    }


def harness_bench(
    seconds: float, concurrency: int, lab: str, skip_node: bool, store_root: str | None
) -> dict[str, Any]:
    """Ops/s the harness records with a null client and against the reference node, with
    the writer's baselines measured in the same run (``splitbrain bench harness``)."""
    with tempfile.TemporaryDirectory(prefix="sb-bench-") as tmp:
        root = store_root or tmp
        fake_hosts = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in range(1, 6)]
        t0 = time.monotonic()
        null = measure(
            fake_hosts, null=True, seconds=seconds, concurrency=concurrency, store_root=root
        )
        out: dict[str, Any] = {
            "benchmark": "harness",
            "concurrency": concurrency,
            "load_seconds": seconds,
            "null_client": null,
            "baseline": {
                **writer_baselines(root),
                **recorder_baselines(root, concurrency),
            },
        }
        if not skip_node:
            from harness.inventory.resolve import resolve_hosts

            hosts = resolve_hosts(
                lab=lab, nodes_file=None, vagrant=None, docker=False, insecure=False
            )
            node = measure(
                hosts, null=False, seconds=seconds, concurrency=concurrency, store_root=root
            )
            out["reference_node"] = node
            if node["ops_per_s"]:
                out["null_over_node_ratio"] = round(null["ops_per_s"] / node["ops_per_s"], 2)
        out["target_null_ops_per_s"] = TARGET_NULL_OPS
        out["target_stamp_skew_p99_ms"] = TARGET_SKEW_MS
        skew = null.get("stamp_skew_ms", {}).get("p99")
        out["meets_target"] = null["ops_per_s"] >= TARGET_NULL_OPS and (
            skew is not None and skew <= TARGET_SKEW_MS
        )
        out["wall_seconds"] = round(time.monotonic() - t0, 1)
    return out
