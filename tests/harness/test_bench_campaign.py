"""``bench campaign``'s own parts: the /proc CPU sampler on a real process, and the
figures taken from a real history (no lab needed; the lab run is the benchmark)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from harness.bench.campaign import DbCpuSampler, campaign_figures
from harness.core.history import HistoryWriter, Op, read_jsonl

MS = 1_000_000


def test_sampler_counts_only_processes_naming_the_run(tmp_path: Path) -> None:
    """A daemon whose command line names the test dir and --data-dir is counted;
    a busy process without the marker is not."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
    marker = f"/lab/{tmp_path.name}/"
    ours = subprocess.Popen([sys.executable, "-c", burn, "--data-dir", f"/x{marker}n1/data"])
    other = subprocess.Popen([sys.executable, "-c", burn, "--data-dir", "/elsewhere/n1/data"])
    sampler = DbCpuSampler(marker, interval=0.05).start()
    try:
        ours.wait(10)
        other.wait(10)
    finally:
        sampler.stop()
    assert sampler.pids_seen == 1
    total = sampler.samples[-1][1]
    assert 0.3 <= total <= 1.0, total
    # Interpolation stays within the readings and never goes down.
    t0, t1 = sampler.samples[0][0], sampler.samples[-1][0]
    mid = sampler.cpu_at((t0 + t1) // 2)
    assert sampler.cpu_at(t0) <= mid <= sampler.cpu_at(t1) == total


def test_figures_count_the_load_phase_only(tmp_path: Path) -> None:
    """ok/s over the load window, latency per f of ok ops; samples and final reads
    (invoked after the time limit) are left out."""
    w = HistoryWriter(tmp_path / "history.jsonl", start_ns=time.monotonic_ns())

    def op(t_ms: int, typ: str, proc: int, f: str, **kw: object) -> None:
        # +1 s: a time of 0 would mean "stamp it now" to the writer.
        w.append(Op(type=typ, process=proc, f=f, value=kw.get("value"), time=(t_ms + 1000) * MS))

    for i in range(10):  # 10 appends of 10 ms each, 9 ok, one info
        op(i * 100, "invoke", 1, "append")
        op(i * 100 + 10, "ok" if i else "info", 1, "append")
    op(5, "invoke", 2, "read")
    op(25, "ok", 2, "read")
    op(50, "invoke", 1_000_000, "sample")  # a sampler's status: not a workload op
    op(51, "ok", 1_000_000, "sample")
    op(3000, "invoke", 3, "read")  # final read, after the 1 s limit
    op(3500, "ok", 3, "read")
    w.close()
    figs = campaign_figures(read_jsonl(tmp_path / "history.jsonl"), time_limit=1.0)
    assert (figs["ok"], figs["info"], figs["fail"]) == (10, 1, 0)
    assert figs["seconds"] == 0.91 and figs["ok_per_s"] == round(10 / 0.91, 1)
    assert figs["latency_ms"]["append"] == {"n": 9, "p50": 10.0, "p99": 10.0}
    assert figs["latency_ms"]["read"]["n"] == 1 and "sample" not in figs["latency_ms"]
    assert figs["window_ns"] == (1000 * MS, 1910 * MS)


def test_rounds_alternate_order_and_report_median_ratios():
    from harness.bench.campaign import round_order, summarize_rounds

    names = ["etcd", "register", "append"]
    assert round_order(names, 0) == names
    assert round_order(names, 1) == ["append", "register", "etcd"]

    def one(etcd, reg, ratio):
        return {
            "runs": {"etcd": {"ok_per_s": etcd}, "register": {"ok_per_s": reg}},
            "ratios_vs_etcd": {"register": {"ok_per_s": ratio, "cpu_s_per_ok_op": 0.5}},
        }

    s = summarize_rounds(
        [one(400, 800, 2.0), one(500, 500, 1.0), one(300, 900, 3.0)], ("register",)
    )
    assert s["ok_per_s"] == {"etcd": 400, "register": 800}
    assert s["ratios_vs_etcd"]["register"]["ok_per_s"] == 2.0
    assert s["ratios_vs_etcd"]["register"]["ok_per_s_per_round"] == [2.0, 1.0, 3.0]
    assert s["ratios_vs_etcd"]["register"]["cpu_s_per_ok_op"] == 0.5


def test_soak_growth_per_million_is_the_least_squares_slope():
    from harness.bench.soak import growth_per_million

    flat = [(x / 10, 50.0 + (0.5 if x % 2 else -0.5)) for x in range(20)]
    slope = growth_per_million(flat)
    assert slope is not None and abs(slope) < 0.2
    leaking = [(x / 10, 50.0 + 30 * x / 10) for x in range(20)]
    slope = growth_per_million(leaking)
    assert slope is not None and abs(slope - 30.0) < 1e-9
    assert growth_per_million([(1.0, 5.0)]) is None
    assert growth_per_million([(1.0, 5.0), (1.0, 9.0)]) is None


def test_soak_checks_and_reports_the_stored_run(tmp_path):
    """The whole soak path on the null client: run, Parquet, check in a child, report."""
    from click.testing import CliRunner

    from harness.cli.bench import bench_soak

    out = tmp_path / "soak.json"
    args = ["--seconds", "2", "--check-engine", "local", "--store", str(tmp_path / "s")]
    r = CliRunner().invoke(bench_soak, [*args, "--output", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["records"] > 1000 and d["parquet_mib"] is not None
    # the null client makes no final reads, so lost acks cannot be judged either way
    assert d["check"]["verdict"] == "unknown", d["check"]
    assert d["check"]["engine_used"] == "local" and d["check"]["checker_seconds"] >= 0
    assert d["report"]["ok"] and d["report"]["bytes"] > 0, d["report"]


def test_sampler_finds_a_daemon_that_a_wrapper_execs_into(tmp_path: Path) -> None:
    """The pid first shows a command line without the marker (as sshd's child does before
    it execs the command), then execs into the daemon: it is counted all the same."""
    marker = f"/lab/{tmp_path.name}/"
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
    wrapper = (
        "import os, sys, time\n"
        "time.sleep(0.6)\n"
        "flag = '--data' + '-dir'  # not in this command line, only in the daemon's\n"
        "os.execv(sys.executable, [sys.executable, '-c', sys.argv[1], flag, sys.argv[2]])\n"
    )
    sampler = DbCpuSampler(marker, interval=0.05).start()
    try:
        p = subprocess.Popen(
            [sys.executable, "-c", wrapper, burn, f"/x{marker}n1/data"],
            executable=sys.executable,
        )
        time.sleep(0.3)  # sampled while it still looks like someone else's process
        p.wait(10)
    finally:
        sampler.stop()
    assert sampler.pids_seen == 1
    assert sampler.samples[-1][1] >= 0.3


def test_other_dbs_take_their_default_workload_or_the_one_named() -> None:
    import click
    import pytest

    from harness.bench.campaign import other_db

    assert other_db("jraft") == (
        "jraft",
        "register",
        {"keys": 4, "ops_per_key": 100, "retired_reads": 0.1, "sample_rate": 5.0},
    )
    name, workload, opts = other_db("dledger-java")
    assert (name, workload) == ("dledger-java", "append") and opts["read_fraction"] == 0.1
    assert other_db("etcd:etcd-register") == ("etcd", "etcd-register", {})
    with pytest.raises(click.BadParameter, match="no-such-db"):
        other_db("no-such-db")


def test_is_daemon_takes_the_java_servers_and_leaves_the_short_commands() -> None:
    """The JRaft server (``--data``) and DLedger's (``--store-base-dir``, and a JVM) count;
    the harness's commands on the same directory do not, nor a path that holds a flag."""
    from harness.bench.campaign import is_daemon

    d = b"/var/lib/splitbrain/jraft/h4/t/n1"
    assert is_daemon(b"\0".join([b"etcd", b"--data-dir=" + d + b"/data"]))
    assert is_daemon(b"\0".join([b"/usr/bin/python3", b"-m", b"node_impl", b"--data-dir", d]))
    assert is_daemon(b"\0".join([b"/opt/jdk/bin/java", b"-Xmx256m", b"-cp", d + b"/lib/*"]))
    assert is_daemon(b"\0".join([b"srv", b"--id", b"n1", b"--data", d + b"/data"]))
    assert is_daemon(b"\0".join([b"srv", b"--store-base-dir", d + b"/data"]))
    assert not is_daemon(b"\0".join([b"tail", b"-c", b"65536", d + b"/node.log"]))
    assert not is_daemon(b"\0".join([b"python3", b"-c", b"import os", d + b"/--data"]))
    assert not is_daemon(b"\0".join([b"rm", b"-rf", d + b"/--data-dir"]))


def test_sampler_counts_a_jvm_naming_the_run(tmp_path: Path) -> None:
    """A process whose program is ``java`` and whose arguments name the test's directory
    (as the Java DBs' servers do, with no --data-dir) is counted, with its CPU."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
    marker = f"/lab/{tmp_path.name}/"
    jvm = subprocess.Popen(
        ["java", "-c", burn, f"-Dstore=/x{marker}n1/data"], executable=sys.executable
    )
    sampler = DbCpuSampler(marker, interval=0.05).start()
    try:
        jvm.wait(10)
    finally:
        sampler.stop()
    assert sampler.pids_seen == 1
    assert sampler.samples[-1][1] >= 0.3
