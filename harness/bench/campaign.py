"""``splitbrain bench campaign``: the reference node against etcd, same lab, same run.

``--db NAME`` (repeatable) adds any other registered DB, run with the workload it names
as its default (``HasDefaultWorkload``: name and options; ``--db NAME:WORKLOAD`` picks
another), in the same rounds: the real Java systems (``dledger-java``, ``jraft``) beside
our node and etcd, every run under the same neighbours' load.

A campaign here is the real thing (``harness.run.runner.run_test``: workers, live
history, samplers, final reads, checker) with no faults, ``--rate 0`` and a fixed
concurrency, run once per (database, workload) on one lab, one after the other,
so both sides see the same machine and the same load from the neighbours. Per
run it reports:

- ``ok_per_s``: ok completions of the workload's own ops (status samples and final
  reads left out) over the load window, first invoke to last load completion;
- ``latency_ms``: p50/p99 of ok ops, per ``f``;
- ``cpu_s_per_ok_op``: CPU seconds (user + system) the database's processes used
  inside that window, read from ``/proc`` of this machine (lab hosts are
  namespaces here) and divided by the ok ops. The processes are found by their
  command line, which names the test's own directory, so a neighbour's nodes are
  never counted;
- the verdict, so a speed-up that breaks the node shows at once.

Then ``ratios``: ours / etcd for each of our workloads against the etcd workload.
The machine's load average is recorded around every run: on a shared 2-core box
only same-run ratios mean anything.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import click

from harness.core.remote import Host

__all__ = [
    "DbCpuSampler",
    "TimedClient",
    "campaign_bench",
    "campaign_figures",
    "is_daemon",
    "measure_campaign",
]

CLK_TCK = os.sysconf("SC_CLK_TCK")
LAZY_SUFFIX = "+lazyfs"
"""A run name's suffix for a workload run on the lazy fs (``--lazy-fs``)."""


def _proc_cpu(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: split after its closing paren.
    rest = raw[raw.rfind(b")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


_MAY_EXEC = (b"sshd", b"sh\0", b"bash\0", b"-bash\0", b"env\0", b"nohup\0", b"setsid\0")
"""Command lines of a process that may still exec into a daemon under the same pid."""

RECHECK_EVERY = 5
"""Samples between two full passes over every pid's command line."""

DAEMON_FLAGS = (b"--data-dir", b"--data", b"--store-base-dir")
"""Flags that name a daemon's store: etcd's and our node's, the JRaft server's, DLedger's."""


def is_daemon(cmd: bytes) -> bool:
    """Whether a command line (NUL-separated, already known to name the test's directory)
    is a database process rather than one of the harness's short commands on its files.

    The daemon takes its store as a flag (``DAEMON_FLAGS``, alone or as ``flag=value``),
    or it is a JVM (``java`` as the program): the Java DBs' servers name the test's
    directory in their own flags, which the harness's ``rm``, ``tail`` and ``python3 -c``
    never run as. Matching whole arguments, not substrings, keeps a path holding ``--data``
    from counting.
    """
    args = cmd.split(b"\0")
    if os.path.basename(args[0]) == b"java":
        return True
    return any(a.split(b"=", 1)[0] in DAEMON_FLAGS for a in args[1:])


class DbCpuSampler:
    """CPU seconds used so far by every process whose command line holds ``marker``.

    Sampled on a thread every ``interval`` s; a process that exits keeps its last
    reading, so the total never goes down. The marker is the test's directory
    (``/<lab>/<test>/``), unique per run.
    """

    def __init__(self, marker: str, *, interval: float = 0.2) -> None:
        self.marker = marker.encode()
        self.interval = interval
        self.samples: list[tuple[int, float]] = []  # (monotonic ns, total CPU s)
        self._last: dict[int, float] = {}
        self._pids: set[int] = set()
        self._not_ours: set[int] = set()
        self._n = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="db-cpu", daemon=True)

    def start(self) -> DbCpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        self._n += 1
        if self._n % RECHECK_EVERY == 0:
            # A pid judged "not ours" may since have exec'd into the daemon (pid reuse, or
            # a wrapper the prefixes below do not know): judge every pid again now and then.
            self._not_ours.clear()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in self._pids or pid in self._not_ours:
                continue
            cmd = _cmdline(pid)
            if cmd.startswith(_MAY_EXEC):
                # sshd's child for a command, or the shell it runs, can exec into the
                # daemon under the same pid: caching it as "not ours" would miss the
                # daemon for the whole run (a campaign counted 2 of etcd's 5). Look again.
                pass
            elif self.marker not in cmd:
                self._not_ours.add(pid)
            elif is_daemon(cmd):
                # The daemon itself: its arguments name the directory *and* its store's
                # flag (or it is a JVM), which the harness's short commands never do. Only
                # --data-dir counted once, so the Java DBs' servers showed 0 CPU s.
                self._pids.add(pid)
            else:
                self._not_ours.add(pid)
        for pid in list(self._pids):
            cpu = _proc_cpu(pid)
            if cpu is None:
                self._pids.discard(pid)
                continue
            self._last[pid] = cpu
        self.samples.append((time.monotonic_ns(), sum(self._last.values())))

    @property
    def pids_seen(self) -> int:
        return len(self._last)

    def cpu_at(self, t_ns: int) -> float:
        """Total CPU at monotonic ``t_ns``, interpolated between samples."""
        s = self.samples
        if not s:
            return 0.0
        if t_ns <= s[0][0]:
            return s[0][1]
        for (t0, c0), (t1, c1) in zip(s, s[1:], strict=False):
            if t0 <= t_ns <= t1:
                return c0 + (c1 - c0) * (t_ns - t0) / max(1, t1 - t0)
        return s[-1][1]


@dataclass
class _Clock:
    """Ties the history's clock to ``time.monotonic_ns``: set by the first invoke."""

    offset_ns: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class TimedClient:
    """Wraps a workload client; on the first op it records history time vs monotonic.

    The history's times count from the writer's own start, which the runner does
    not expose; one pair of readings is enough to place the load window on the
    CPU sampler's clock.
    """

    def __init__(self, inner: Any, clock: _Clock) -> None:
        self.inner, self.clock = inner, clock

    def open(self, ctx: Any, node: str) -> TimedClient:
        return TimedClient(self.inner.open(ctx, node), self.clock)

    def setup(self, ctx: Any) -> None:
        self.inner.setup(ctx)

    def invoke(self, ctx: Any, op: Any) -> Any:
        if self.clock.offset_ns is None and op.time is not None:
            with self.clock.lock:
                if self.clock.offset_ns is None:
                    self.clock.offset_ns = time.monotonic_ns() - op.time
        return self.inner.invoke(ctx, op)

    def teardown(self, ctx: Any) -> None:
        self.inner.teardown(ctx)

    def close(self, ctx: Any) -> None:
        self.inner.close(ctx)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)


def campaign_figures(
    ops: list[Any], *, time_limit: float, ignore_fs: frozenset[str] = frozenset({"sample"})
) -> dict[str, Any]:
    """Throughput and latency of the load phase of one history.

    Load ops are the client ops (not the nemesis, not ``ignore_fs``) invoked
    within ``time_limit`` of the first invoke; final reads start later.
    """
    from harness.core.completed import completed_ops

    client = [c for c in completed_ops(ops) if c.invoke.f not in ignore_fs]
    if not client:
        return {"ok": 0, "ok_per_s": 0.0, "window_ns": (0, 0)}
    start = client[0].start
    load = [c for c in client if c.start <= start + time_limit * 1e9 and c.end is not None]
    end = max(c.end for c in load if c.end is not None)
    span = (end - start) / 1e9
    counts = {t: sum(1 for c in load if c.type == t) for t in ("ok", "fail", "info")}
    by_f: dict[str, list[float]] = {}
    for c in load:
        if c.type == "ok" and c.latency_ns is not None:
            by_f.setdefault(c.invoke.f, []).append(c.latency_ns / 1e6)
    latency = {
        f: {"n": len(v), "p50": _pct(v, 0.5), "p99": _pct(v, 0.99)} for f, v in sorted(by_f.items())
    }
    return {
        **counts,
        "seconds": round(span, 2),
        "ok_per_s": round(counts["ok"] / span, 1) if span > 0 else 0.0,
        "latency_ms": latency,
        "window_ns": (start, end),
    }


def _loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def measure_campaign(
    hosts: list[Host],
    *,
    db: str,
    workload: str,
    seconds: float,
    concurrency: int,
    store_root: str,
    check: bool = True,
    db_options: dict[str, Any] | None = None,
    lazy_fs: bool = False,
    workload_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One no-fault, unpaced campaign through the real runner, with its figures.

    ``lazy_fs`` puts every node's directory on a lazy fs (docs/disk-faults.md): the
    ``lose-unfsynced`` nemesis mounts it at setup, and its first fault is due only
    long after the load, so none lands; the cost measured is the mount's alone.
    """
    from harness.core.history import read_jsonl
    from harness.core.layout import safe_name
    from harness.core.spec import TestSpec
    from harness.run.runner import RunOptions, run_test
    from workloads import get_workload

    lazy = "-lazyfs" if lazy_fs else ""
    name = f"bench-campaign-{db}-{workload}{lazy}-{time.strftime('%H%M%S')}-{os.getpid()}"
    spec = TestSpec(
        name=name,
        nodes=tuple(h.name for h in hosts),
        db=db,
        workload=workload,
        nemesis=("lose-unfsynced",) if lazy_fs else (),
        nemesis_interval=1e6 if lazy_fs else 5.0,
        time_limit=seconds,
        concurrency=concurrency,
        rate=0.0,
        seed=1,
        options={**dict(workload_options or {}), "db": dict(db_options or {})},
    )
    opts = RunOptions(check=check, progress=False, recovery_s=0.0)  # no reporter: no HTML
    clock = _Clock()
    real = get_workload(workload, spec.workload_options)
    wl = replace(real, client=TimedClient(real.client, clock))
    lab = hosts[0].extras.get("lab") if hosts else None
    marker = f"/{safe_name(str(lab))}/{safe_name(name)}/" if lab else f"/{safe_name(name)}/"
    sampler = DbCpuSampler(marker).start()
    load_before = _loadavg()
    try:
        res = run_test(spec, hosts, store_root=store_root, workload=wl, options=opts)
    finally:
        sampler.stop()
    load_after = _loadavg()
    if res.interrupted:
        raise click.ClickException(f"campaign {name} failed: {res.reason}")
    figs = campaign_figures(read_jsonl(res.store_dir / "history.jsonl"), time_limit=seconds)
    start, end = figs.pop("window_ns")
    cpu = None
    # No process found is no reading: a 0.0 would pass for a DB that costs nothing.
    if clock.offset_ns is not None and end > start and sampler.pids_seen:
        cpu = sampler.cpu_at(clock.offset_ns + end) - sampler.cpu_at(clock.offset_ns + start)
    ok = figs.get("ok", 0)
    return {
        "db": db,
        "workload": workload,
        **figs,
        "db_cpu_s": None if cpu is None else round(cpu, 2),
        "db_cpu_cores": round(cpu / figs["seconds"], 2) if cpu and figs["seconds"] else None,
        "cpu_s_per_ok_op": round(cpu / ok, 6) if cpu is not None and ok else None,
        "db_processes": sampler.pids_seen,
        "valid": res.results.get("valid") if check else "not checked",
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "store": str(res.store_dir),
    }


def _ratio(a: Any, b: Any, digits: int = 2) -> float | None:
    return round(a / b, digits) if isinstance(a, (int, float)) and b else None


def _ratios(ours: dict[str, Any], etcd: dict[str, Any]) -> dict[str, Any]:
    """ours / etcd: above 1 is better for ok_per_s, below 1 better for the rest."""
    out: dict[str, Any] = {
        "ok_per_s": _ratio(ours["ok_per_s"], etcd["ok_per_s"]),
        "cpu_s_per_ok_op": _ratio(ours["cpu_s_per_ok_op"], etcd["cpu_s_per_ok_op"], 3),
    }
    lat: dict[str, Any] = {}
    ol, el = ours.get("latency_ms", {}), etcd.get("latency_ms", {})
    for f in sorted(set(ol) & set(el)):
        lat[f] = {q: _ratio(ol[f][q], el[f][q]) for q in ("p50", "p99")}
    out["latency"] = lat
    return out


def other_db(arg: str) -> tuple[str, str, dict[str, Any]]:
    """``NAME`` or ``NAME:WORKLOAD`` of ``--db``: (db, workload, workload options), the DB's
    default workload and its options unless a workload is named. A DB that names no default
    and no workload given is a BadParameter naming the option."""
    from harness.core.db import HasDefaultWorkload
    from harness.core.errors import ConfigError
    from harness.dbs import get_db

    name, _, workload = arg.partition(":")
    try:
        db = get_db(name, {})
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--db") from None
    if workload:
        return name, workload, {}
    if not isinstance(db, HasDefaultWorkload):
        raise click.BadParameter(
            f"{name} names no default workload; give one as {name}:WORKLOAD", param_hint="--db"
        )
    choice = db.default_workload()
    return name, choice.name, dict(choice.options)


def _median(xs: list[float]) -> float | None:
    import statistics

    return round(statistics.median(xs), 2) if xs else None


def round_order(names: list[str], round_no: int) -> list[str]:
    """Odd rounds run in reverse, so a load that drifts during a round favours no side."""
    return list(reversed(names)) if round_no % 2 else list(names)


def summarize_rounds(rounds: list[dict[str, Any]], workloads: tuple[str, ...]) -> dict[str, Any]:
    """Medians over rounds: each run's ok ops/s, and each round's ratio to its own etcd run."""
    out: dict[str, Any] = {"ok_per_s": {}, "ratios_vs_etcd": {}}
    names = sorted({n for r in rounds for n in r["runs"]})
    for n in names:
        out["ok_per_s"][n] = _median([r["runs"][n]["ok_per_s"] for r in rounds if n in r["runs"]])
    for w in workloads:
        per = [r["ratios_vs_etcd"][w] for r in rounds if w in r.get("ratios_vs_etcd", {})]
        out["ratios_vs_etcd"][w] = {
            "ok_per_s": _median([p["ok_per_s"] for p in per if p["ok_per_s"] is not None]),
            "cpu_s_per_ok_op": _median(
                [p["cpu_s_per_ok_op"] for p in per if p["cpu_s_per_ok_op"] is not None]
            ),
            "ok_per_s_per_round": [p["ok_per_s"] for p in per],
        }
    return out


def campaign_bench(
    *,
    lab: str,
    seconds: float,
    concurrency: int,
    workloads: tuple[str, ...],
    etcd_workload: str,
    rounds: int,
    skip_etcd: bool,
    lazy_fs: bool,
    check: bool,
    other_dbs: tuple[str, ...],
    db_options: dict[str, Any],
    store_root: str | None,
) -> dict[str, Any]:
    """The figures of ``splitbrain bench campaign`` (:mod:`harness.cli.bench`): our node
    vs etcd (and ``other_dbs``), ok ops/s, latency and CPU per op, same lab, same run."""
    import tempfile

    from harness.inventory.resolve import resolve_hosts

    opts = dict(db_options)
    others = {f"db:{a}": other_db(a) for a in other_dbs}
    hosts = resolve_hosts(lab=lab, nodes_file=None, vagrant=None, docker=False, insecure=False)
    t0 = time.monotonic()
    out: dict[str, Any] = {
        "benchmark": "campaign",
        "lab": lab,
        "nodes": len(hosts),
        "seconds": seconds,
        "concurrency": concurrency,
        "rounds": rounds,
        "rate": 0,
        "nemesis": "none",
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory(prefix="sb-campaign-") as tmp:
        root = store_root or tmp

        def measure(
            db: str,
            workload: str,
            db_options: dict[str, Any] | None = None,
            lazy: bool = False,
            workload_options: dict[str, Any] | None = None,
        ) -> dict[str, Any]:
            return measure_campaign(
                hosts,
                db=db,
                workload=workload,
                seconds=seconds,
                concurrency=concurrency,
                store_root=root,
                check=check,
                db_options=db_options,
                lazy_fs=lazy,
                workload_options=workload_options,
            )

        lazy_names = [f"{w}{LAZY_SUFFIX}" for w in workloads] if lazy_fs else []
        names = ([] if skip_etcd else ["etcd"]) + list(workloads) + lazy_names + list(others)
        done: list[dict[str, Any]] = []
        for r in range(rounds):
            runs: dict[str, Any] = {}
            for n in round_order(names, r):
                if n == "etcd":
                    runs[n] = measure("etcd", etcd_workload)
                elif n in others:
                    other, wl, wl_opts = others[n]
                    runs[n] = measure(other, wl, workload_options=wl_opts)
                elif n in lazy_names:
                    runs[n] = measure("dledger", n.removesuffix(LAZY_SUFFIX), opts, lazy=True)
                else:
                    runs[n] = measure("dledger", n, opts)
                if store_root is None:
                    runs[n].pop("store", None)
            one: dict[str, Any] = {"runs": {n: runs[n] for n in names}}
            if "etcd" in runs:
                one["ratios_vs_etcd"] = {
                    w: _ratios(runs[w], runs["etcd"]) for w in (*workloads, *others)
                }
            if lazy_fs:
                one["lazyfs_vs_plain"] = {
                    w: _ratio(runs[f"{w}{LAZY_SUFFIX}"]["ok_per_s"], runs[w]["ok_per_s"])
                    for w in workloads
                }
            done.append(one)
    out.update(done[0])
    if rounds > 1:
        out["rounds_detail"] = done
        out["median"] = summarize_rounds(done, (*workloads, *others))
        if lazy_fs:
            out["median"]["lazyfs_vs_plain"] = {
                w: _median([r["lazyfs_vs_plain"][w] for r in done if r["lazyfs_vs_plain"][w]])
                for w in workloads
            }
    out["wall_seconds"] = round(time.monotonic() - t0, 1)
    return out
