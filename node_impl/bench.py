"""``splitbrain bench node`` and ``splitbrain bench crash``: the reference node under load.

``bench node`` measures acked appends per second and latency on a 3-node loopback
cluster. Its same-run baseline is the bare store (append + one fsync per batch in
this process), which says how much of the budget the machine's disk and this
Python leave for replication.

``bench crash`` is a safety soak, not a speed test: it SIGKILLs nodes under a
steady append load and then proves that every acknowledged append is on every
node, at its index, with its term and payload. Any loss exits 1.

The commands and their options are ``harness/cli/bench.py`` (``splitbrain`` is the
harness's); this module is the measuring, and imports nothing of the harness, as all of
``node_impl`` (it ships alone to hosts).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node_impl.client import AsyncNodeClient, NodeClient
from node_impl.local_cluster import LocalCluster
from node_impl.store import LogStore, encode_body

__all__ = ["run_node_bench", "percentiles", "run_crash", "verify_logs"]


def percentiles(samples: list[float]) -> dict[str, float | None]:
    """p50/p90/p99/max in milliseconds (samples in seconds)."""
    if not samples:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    s = sorted(samples)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, int(p * len(s)))] * 1000, 3)

    return {"p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "max": round(s[-1] * 1000, 3)}


@contextlib.contextmanager
def _workdir(base: Path | None, keep: bool):
    d = Path(tempfile.mkdtemp(prefix="sb-bench-", dir=base))
    try:
        yield d
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def _node_of_addr(cluster: LocalCluster, addr: str | None) -> str | None:
    if not addr:
        return None
    with contextlib.suppress(ValueError):
        port = int(addr.rsplit(":", 1)[1])
        for n, p in cluster.client_ports.items():
            if p == port:
                return n
    return None


# ====================================================================== bench node


def store_baseline(d: Path, entry_size: int, batch: int, seconds: float = 1.0) -> dict:
    """Appends/s of the bare store with one fsync per batch: the ceiling for one node."""
    s = LogStore(d / "baseline")
    body = encode_body({"op": "append", "p": b"x" * entry_size})
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(batch):
            s.append_leader(1, body)
        s.flush()
        n += batch
    dt = time.perf_counter() - t0
    s.close()
    return {"what": "store append+fsync per batch, in-process", "appends_per_s": round(n / dt)}


@dataclass
class _Tally:
    acked: int = 0
    requests: int = 0
    lat: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)


def _record(t: _Tally, r: dict | None, err: str | None, dt: float, measuring: bool) -> None:
    if not measuring:
        return
    t.requests += 1
    if err is not None:
        t.errors[err] += 1
        return
    assert r is not None
    if r.get("code") == "SUCCESS":
        t.acked += len(r.get("indexes") or [r.get("index")])
        t.lat.append(dt)
    else:
        t.errors[r.get("type") if r.get("type") == "redirect" else str(r.get("code"))] += 1


async def _closed_loop(
    addr: tuple[str, int], clients: int, batch: int, payload: bytes, warmup: float, duration: float
) -> tuple[_Tally, float]:
    t = _Tally()
    conns = [AsyncNodeClient(*addr, timeout=5.0) for _ in range(clients)]
    loop = asyncio.get_running_loop()
    start = loop.time()
    m0, m1 = start + warmup, start + warmup + duration

    async def worker(c: AsyncNodeClient) -> None:
        bodies = [payload] * batch
        while True:
            now = loop.time()
            if now >= m1:
                return
            measuring = now >= m0
            try:
                r = await c.append_batch(bodies)
                err = None
            except (ConnectionError, TimeoutError, OSError) as e:
                r, err = None, type(e).__name__
                await asyncio.sleep(0.05)
            _record(t, r, err, loop.time() - now, measuring and loop.time() <= m1)

    try:
        await asyncio.gather(*(worker(c) for c in conns))
    finally:
        for c in conns:
            await c.close()
    return t, duration


async def _open_loop(
    addr: tuple[str, int], rate: float, batch: int, payload: bytes, warmup: float, duration: float
) -> tuple[_Tally, float]:
    """Requests issued on a fixed schedule; latency counts from the scheduled time,
    so a stalled node shows up as latency instead of silently lowering the load."""
    t = _Tally()
    conns = [AsyncNodeClient(*addr, timeout=5.0) for _ in range(4)]
    loop = asyncio.get_running_loop()
    interval = batch / rate
    start = loop.time() + 0.01
    m0, m1 = start + warmup, start + warmup + duration
    tasks: set[asyncio.Task] = set()
    bodies = [payload] * batch

    async def one(c: AsyncNodeClient, due: float, measuring: bool) -> None:
        try:
            r = await c.append_batch(bodies)
            err = None
        except (ConnectionError, TimeoutError, OSError) as e:
            r, err = None, type(e).__name__
        _record(t, r, err, loop.time() - due, measuring)

    k = 0
    while True:
        due = start + k * interval
        if due >= m1:
            break
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(conns[k % len(conns)], due, due >= m0))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        k += 1
    if tasks:
        await asyncio.wait(tasks, timeout=10)
    for c in conns:
        await c.close()
    return t, duration


def _summ(mode: str, t: _Tally, seconds: float, extra: dict) -> dict:
    return {
        "mode": mode,
        **extra,
        "acked": t.acked,
        "requests": t.requests,
        "seconds": round(seconds, 3),
        "acked_appends_per_s": round(t.acked / seconds, 1) if seconds else None,
        "latency_ms": percentiles(t.lat),
        "errors": dict(t.errors),
    }


def run_node_bench(
    *,
    mode: str,
    entry_size: int,
    clients: int,
    batch: int,
    duration: float,
    rate: float,
    latency_rate: float,
    warmup: float,
    nodes: int,
    base_dir: Path | None,
    keep: bool,
    extra_args: tuple[str, ...] = (),
) -> dict:
    results = []
    payload = b"x" * entry_size
    with _workdir(base_dir, keep) as d:
        baseline = store_baseline(d, entry_size, batch)
        cluster = LocalCluster(nodes, d, extra_args=extra_args)
        try:
            cluster.start_all()
            leader = cluster.wait_for_leader(30)
            addr = cluster.client_addr(leader)
            if mode in ("throughput", "both"):
                if rate > 0:
                    t, secs = asyncio.run(_open_loop(addr, rate, batch, payload, warmup, duration))
                else:
                    t, secs = asyncio.run(
                        _closed_loop(addr, clients, batch, payload, warmup, duration)
                    )
                results.append(
                    _summ("throughput", t, secs, {"clients": clients, "batch": batch, "rate": rate})
                )
            if mode in ("latency", "both"):
                t, secs = asyncio.run(_open_loop(addr, latency_rate, 1, payload, warmup, duration))
                results.append(_summ("latency", t, secs, {"rate": latency_rate, "batch": 1}))
            leader_after = cluster.leader()
        finally:
            cluster.close()
    return {
        "bench": "node",
        "config": {
            "nodes": nodes,
            "entry_size": entry_size,
            "clients": clients,
            "batch": batch,
            "duration_s": duration,
            "warmup_s": warmup,
            "rate": rate,
            "latency_rate": latency_rate,
            "leader": leader,
            "leader_unchanged": leader_after == leader,
        },
        "results": results,
        "baseline": baseline,
    }


# ====================================================================== bench crash


@dataclass
class _Acks:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: list[tuple[int, int, str]] = field(default_factory=list)  # (index, term, payload)
    codes: Counter = field(default_factory=Counter)


def _load_worker(
    cluster: LocalCluster, wid: int, acks: _Acks, stop: threading.Event, hint: list[str | None]
) -> None:
    """Append unique payloads forever, following redirects; record every SUCCESS."""
    clients: dict[str, NodeClient] = {}
    seq = 0
    target = hint[0] or cluster.nodes[wid % len(cluster.nodes)]
    rng = random.Random(wid)
    try:
        while not stop.is_set():
            payload = f"w{wid}-{seq}"
            seq += 1
            c = clients.get(target)
            if c is None:
                c = clients[target] = cluster.client(target, timeout=3.0)
            try:
                r = c.append(payload)
            except (ConnectionError, TimeoutError, OSError) as e:
                with acks.lock:
                    acks.codes[type(e).__name__] += 1
                target = hint[0] if hint[0] and hint[0] != target else rng.choice(cluster.nodes)
                time.sleep(0.02)
                continue
            code = r.get("code")
            with acks.lock:
                acks.codes[r.get("type") if r.get("type") == "redirect" else code] += 1
                if code == "SUCCESS" and r.get("type") == "append-resp":
                    acks.acked.append((r["index"], r["term"], payload))
            if r.get("type") == "redirect":
                nxt = _node_of_addr(cluster, r.get("leader_addr")) or r.get("leader")
                if nxt in cluster.client_ports and nxt != target:
                    target = nxt
                else:
                    target = rng.choice(cluster.nodes)
                    time.sleep(0.02)
            elif code != "SUCCESS":
                time.sleep(0.01)
    finally:
        for c in clients.values():
            c.close()


def read_local_log(c: NodeClient, end: int) -> list[list]:
    """A node's whole log via local gets, in as many chunks as the server wants."""
    out: list[list] = []
    lo = 0
    while lo <= end:
        r = c.get(frm=lo, to=end, local=True, timeout=10.0)
        if r.get("code") != "SUCCESS":
            raise RuntimeError(f"local get from {lo} failed: {r}")
        ents = r["entries"]
        if not ents:
            break
        out.extend(ents)
        lo = ents[-1][0] + 1
    return out


def verify_logs(
    logs: dict[str, list[list]], committed: dict[str, int], acked: list[tuple[int, int, str]]
) -> dict[str, Any]:
    """Pure check: acked appends present everywhere; committed prefixes identical."""
    by_node = {n: {e[0]: (e[1], e[3]) for e in ents} for n, ents in logs.items()}
    lost: list[dict] = []
    for index, term, payload in acked:
        missing = [n for n, m in by_node.items() if m.get(index) != (term, payload)]
        if missing:
            lost.append(
                {
                    "index": index,
                    "term": term,
                    "payload": payload,
                    "nodes": missing,
                    "found": {n: by_node[n].get(index) for n in missing},
                }
            )
    lo_commit = min(committed.values()) if committed else -1
    divergent: list[dict] = []
    nodes = sorted(by_node)
    for i in range(lo_commit + 1):
        vals = {n: by_node[n].get(i) for n in nodes}
        if len(set(vals.values())) > 1:
            divergent.append({"index": i, "values": vals})
    payloads = (
        Counter(e[3] for e in logs[nodes[0]] if e[2] == "append" and e[3] is not None)
        if nodes
        else Counter()
    )
    dups = [p for p, k in payloads.items() if k > 1]
    return {"lost": lost, "divergent": divergent, "duplicates": dups, "min_committed": lo_commit}


def _converge(cluster: LocalCluster, timeout: float) -> dict[str, dict]:
    """Wait until every node has the leader's end committed; returns the last statuses."""
    deadline = time.monotonic() + timeout
    last: dict = {}
    while time.monotonic() < deadline:
        st = cluster.status_all(timeout=1.0)
        last = st
        lid = cluster.leader(st)
        up = {n: s for n, s in st.items() if s}
        if lid is not None and len(up) == len(st):
            end = up[lid]["ledgerEndIndex"]
            if all(s["ledgerEndIndex"] == end and s["committedIndex"] == end for s in up.values()):
                return up
        time.sleep(0.2)
    raise TimeoutError(
        f"cluster did not converge within {timeout}s: "
        + json.dumps(
            {
                n: s
                and {
                    k: s.get(k)
                    for k in ("role", "term", "leader", "ledgerEndIndex", "committedIndex")
                }
                for n, s in last.items()
            }
        )
    )


def run_crash(
    *,
    cycles: int,
    nodes: int,
    workers: int,
    down: float,
    interval: float,
    seed: int,
    base_dir: Path | None,
    keep: bool,
    converge_timeout: float = 60.0,
    settle: float = 5.0,
    bug: str | None = None,
    progress: Any = None,
) -> dict:
    rng = random.Random(seed)
    t0 = time.monotonic()
    acks = _Acks()
    kills: Counter[str] = Counter()
    unexpected_exits: list[dict] = []
    with _workdir(base_dir, keep) as d:
        cluster = LocalCluster(nodes, d, bug=bug)
        stop = threading.Event()
        threads: list[threading.Thread] = []
        try:
            cluster.start_all()
            hint: list[str | None] = [cluster.wait_for_leader(30)]
            for w in range(workers):
                th = threading.Thread(
                    target=_load_worker,
                    args=(cluster, w, acks, stop, hint),
                    daemon=True,
                    name=f"load-{w}",
                )
                th.start()
                threads.append(th)
            for cyc in range(cycles):
                time.sleep(interval)
                for n in cluster.nodes:  # a node that died on its own is a finding
                    rc = cluster.exit_code(n)
                    if rc is not None:
                        unexpected_exits.append({"node": n, "cycle": cyc, "rc": rc})
                        cluster.kill(n)
                        cluster.start(n)
                try:  # kill from a settled state, so "leader ~1/3 of the time" holds
                    leader: str | None = cluster.wait_for_leader(settle)
                except TimeoutError:
                    leader = None
                hint[0] = leader
                if leader is not None and rng.random() < 1 / 3:
                    victim, kind = leader, "leader"
                else:
                    victim = rng.choice([n for n in cluster.nodes if n != leader])
                    kind = "follower" if leader else "no-leader"
                kills[kind] += 1
                cluster.kill(victim)
                time.sleep(down * rng.uniform(0.5, 1.5))
                cluster.start(victim)
                if progress:
                    progress(cyc + 1, len(acks.acked))
            time.sleep(interval)
            stop.set()
            for th in threads:
                th.join(15)
            hint[0] = cluster.wait_for_leader(30)
            statuses = _converge(cluster, converge_timeout)
            logs: dict[str, list[list]] = {}
            committed: dict[str, int] = {}
            for n in cluster.nodes:
                with cluster.client(n, timeout=10.0) as c:
                    logs[n] = read_local_log(c, statuses[n]["ledgerEndIndex"])
                committed[n] = statuses[n]["committedIndex"]
        finally:
            stop.set()
            cluster.close()
        with acks.lock:
            acked = list(acks.acked)
        v = verify_logs(logs, committed, acked)
    return {
        "bench": "crash",
        "cycles": cycles,
        "nodes": nodes,
        "acked": len(acked),
        "lost": len(v["lost"]),
        "divergent": len(v["divergent"]),
        "duplicates": len(v["duplicates"]),
        "log_length": len(logs[cluster.nodes[0]]),
        "kills": dict(kills),
        "unexpected_exits": unexpected_exits,
        "replies": dict(acks.codes),
        "seconds": round(time.monotonic() - t0, 1),
        "examples": {"lost": v["lost"][:5], "divergent": v["divergent"][:5]},
    }
