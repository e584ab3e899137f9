"""Crash-only cleanup (issue #15): the fault journal, the clean start, the leftover scanner.

The pure tests check the journal's file format and the scanner's parsing. The
lab tests use real hosts: faults applied by the real nemeses and then abandoned
(as a SIGKILLed harness abandons them) must be undone by a journal replay, and a
real ``splitbrain run`` SIGKILLed mid-fault must leave nothing the next run on
the same lab does not heal before its load starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.core.history import read_jsonl
from harness.core.remote import CommandResult, Host
from harness.run.cleanup import DB_NODE  # the run's own journal kind, registered on import
from harness.run.leftovers import Scope, parse_scan, scan_hosts
from nemesis import journal as jr
from nemesis import undo_journal

REPO = Path(__file__).resolve().parents[2]


# --- pure: the journal's files -------------------------------------------------------


def _host(tmp_path: Path, name: str = "n1") -> Host:
    return Host(
        name=name,
        address="127.0.0.9",
        extras={"lab": "x", "state_dir": str(tmp_path / "lab" / name)},
    )


def test_journal_dir_follows_the_inventory(tmp_path, monkeypatch):
    assert jr.journal_dir(_host(tmp_path)) == tmp_path / "lab" / "journal" / "n1"
    monkeypatch.setenv("SPLITBRAIN_JOURNAL_DIR", str(tmp_path / "j"))
    vm = Host(name="db1", address="10.0.0.5", port=2222)
    assert jr.journal_dir(vm) == tmp_path / "j" / "ssh-10.0.0.5_2222" / "db1"
    docker = Host(name="n2", address="127.79.0.12", extras={"lab": "d", "driver": "docker"})
    assert jr.journal_dir(docker) == tmp_path / "j" / "docker-d" / "n2"


def test_journal_records_durably_overwrites_by_key_and_clears(tmp_path):
    j = jr.HostJournal(_host(tmp_path))
    j.record(DB_NODE.name, "db", {"dir": "/var/lib/splitbrain/run/x/t/n1"}, "node")
    j.record("faketime", "/f", {"file": "/f"}, "offset +5 ms")
    j.record("iptables-chain", "SPLITBRAIN", {"chain": "SPLITBRAIN"}, "first")
    j.record("iptables-chain", "SPLITBRAIN", {"chain": "SPLITBRAIN"}, "second")
    j.record("freeze", "/cg", {"cgroup": "/cg"})
    files = sorted(p.name for p in j.dir.iterdir())
    assert len(files) == 4 and not any(f.endswith(".tmp") for f in files)
    entries = j.entries()
    # Undo order: a frozen host first, the network, clocks, and the cluster last.
    assert [e.kind for e in entries] == ["freeze", "iptables-chain", "faketime", "db-node"]
    chain = entries[1]
    assert chain.what == "second" and chain.writer_pid == os.getpid()
    on_disk = json.loads(chain.path.read_text())
    assert on_disk["version"] == 1 and on_disk["undo"] == {"chain": "SPLITBRAIN"}
    j.clear("iptables-chain", "SPLITBRAIN")
    j.clear("iptables-chain", "SPLITBRAIN")  # idempotent
    assert [e.kind for e in j.entries()] == ["freeze", "faketime", "db-node"]
    with pytest.raises(ValueError, match="unknown journal kind"):
        j.record("meteor", "k", {})


class _Recorder:
    """A Remote that records commands: for the dispatch logic of replay only."""

    def __init__(self, host: Host, fail: str | None = None) -> None:
        self.host, self.cmds, self.fail = host, [], fail

    def run(self, cmd: str, **kw: Any) -> CommandResult:
        self.cmds.append(cmd)
        if self.fail and self.fail in cmd:
            raise RuntimeError("host says no")
        return CommandResult(self.host.name, cmd, 0, "", "")

    def signal_daemon(self, pidfile: str, sig: str = "TERM", **kw: Any) -> bool:
        self.cmds.append(f"signal {sig} {pidfile}")
        return True

    def stop_daemon(self, pidfile: str, **kw: Any) -> None:
        self.cmds.append(f"stop {pidfile}")

    def daemon_running(self, pidfile: str, **kw: Any) -> bool:
        return False


def test_replay_undoes_in_order_and_keeps_what_failed(tmp_path):
    h = _host(tmp_path)
    j = jr.HostJournal(h)
    j.record(
        "db-node", "db", {"dir": "/r/x/t/n1", "root": "/r", "pidfiles": ["/r/x/t/n1/node.pid"]}
    )
    j.record("sigstop", "db", {"pidfiles": ["/r/x/t/n1/node.pid"]})
    j.record("iptables-chain", "SPLITBRAIN", {"chain": "SPLITBRAIN", "iptables": "iptables -w 10"})
    rec = _Recorder(h)
    assert undo_journal.replay([j], {"n1": rec}) == {}
    assert j.entries() == []
    text = "\n".join(rec.cmds)
    assert (
        text.index("-X SPLITBRAIN")
        < text.index("signal CONT")
        < text.index("stop /r/x/t/n1/node.pid")
    )
    assert "rm -rf /r/x/t/n1; rmdir /r/x/t; rmdir /r/x" in text.replace(" 2>/dev/null", "")
    # A failing undo stays journaled, named with its host.
    j.record("netem", "eth0", {"iface": "eth0"})
    problems = undo_journal.replay([j], {"n1": _Recorder(h, fail="tc qdisc")})
    assert "n1" in problems and "netem eth0" in problems["n1"][0]
    assert [e.kind for e in j.entries()] == ["netem"]


SCAN = """@@sb-scanipt
-P INPUT ACCEPT
-N SPLITBRAIN
-A INPUT -j SPLITBRAIN
-A INPUT -s 127.79.0.12/32 -j DROP
-A INPUT -s 10.9.9.9/32 -j DROP
-A SPLITBRAIN -s 127.79.0.13/32 -j DROP
@@sb-scantc
qdisc noqueue 0: dev lo root refcnt 2
qdisc netem 8001: dev eth0 root refcnt 2 limit 1000 delay 50ms
@@sb-scanps
    1 Ss   tini -s -- /usr/sbin/sshd -D
   98 Tsl  /usr/bin/python3 -m node_impl --id n1 --data-dir /var/lib/splitbrain/run/x/t/n1/data
  120 Sl   /usr/bin/python3 -m node_impl --id n2 --data-dir /var/lib/splitbrain/run/x/t/n2/data
  130 T    vi notes
  140 S    sh /var/lib/splitbrain/lab/x/n1/faketime.strobe.sh
  150 S    bash -c echo @@sb-scanipt; iptables -S /var/lib/splitbrain/run/x/t/n1
@@sb-scanss
LISTEN 0 128 127.79.0.11:9001 0.0.0.0:*
LISTEN 0 128 0.0.0.0:22 0.0.0.0:*
@@sb-scanft
-1.5
@@sb-scandirs
/var/lib/splitbrain/run/x/t/n1
@@sb-scandaemons
/tmp/splitbrain-delayer.pid 77
@@sb-scandate
1700000000.0
"""


def test_parse_scan_finds_every_kind_of_leftover():
    h = Host(name="n1", address="127.79.0.11", extras={"faketime_file": "/f", "lab": "x"})
    scope = Scope(ports=(9000, 9001), peers=("127.79.0.12", "127.79.0.13"))
    found = parse_scan(h, SCAN, scope, skew_s=-3.0)
    kinds = sorted((x.kind, x.pid) for x in found)
    assert kinds == sorted(
        [
            ("rule", None),
            ("rule", None),  # a peer's DROP in INPUT and our chain's; not 10.9.9.9
            ("netem", None),
            ("db-process", 98),
            ("stopped", 98),
            ("stopped", 130),
            ("daemon", 140),
            ("port", None),
            ("clock", None),
            ("clock", None),
            ("data", None),
            ("daemon", 77),
        ]
    )
    # n2's node is another host's (a nodes file with two nodes on one machine): not ours here.
    assert not any(x.pid == 120 for x in found)
    assert parse_scan(h, "@@sb-scanipt\n-P INPUT ACCEPT\n@@sb-scanft\n+0\n", scope) == []


# --- lab: the real thing --------------------------------------------------------------


def _sleep_db() -> Any:
    """The nemesis tests' sleep daemon, with the pid-file layout harness/dbs uses."""
    from tests.nemesis.conftest import SleepDB

    class PidfileSleepDB(SleepDB):
        """Declares its footprint (harness.core.db.HasFootprint), as harness/dbs do."""

        root = "/tmp/sb-nemesis-sleep"

        def node_dir(self, ctx: Any, node: str) -> str:
            return f"{self.root}/{node}"

        def pidfiles(self, ctx: Any, node: str) -> list[str]:
            return [self.PID]

        def ports(self, ctx: Any, node: str) -> list[int]:
            return []

    return PidfileSleepDB()


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_journal_replay_undoes_abandoned_faults_on_real_hosts(lab, tmp_path):
    import random

    import nemesis.grudge as g
    from harness.control.ssh import SSHRemote
    from harness.core.history import HistoryWriter, Op
    from harness.core.spec import RunContext, TestSpec
    from nemesis.clock import ClockNemesis
    from nemesis.net import PartitionNemesis
    from nemesis.process import HostFreezeNemesis, PauseNemesis

    hosts = {h.name: h for h in lab.hosts()}
    names = sorted(hosts)
    remotes = {n: SSHRemote(h) for n, h in hosts.items()}
    writer = HistoryWriter(tmp_path / "history.jsonl")
    db = _sleep_db()
    ctx = RunContext(
        spec=TestSpec(name="journal-test", nodes=tuple(names)),
        hosts=hosts,
        remotes=remotes,
        db=db,
        history=writer,
        rng=random.Random(3),
        store_dir=str(tmp_path),
    )
    ctx.journal = jr.run_journal(ctx)
    freeze_ok = bool(hosts[names[-1]].extras.get("cgroup"))
    try:
        for n in names:
            db.setup(ctx, n)

        def inv(f: str, value: Any) -> Op:
            return Op(type="invoke", process="nemesis", f=f, value=value)

        grudge = g.grudge_to_json(g.build_shape("halves", names, random.Random(1)))
        assert (
            PartitionNemesis().invoke(ctx, inv("start-partition", {"grudge": grudge})).error is None
        )
        assert (
            ClockNemesis()
            .invoke(ctx, inv("start-clock", {"nodes": names, "mode": "bump", "offset_ms": 7000}))
            .error
            is None
        )
        assert PauseNemesis().invoke(ctx, inv("start-pause", {"nodes": names[:2]})).error is None
        if freeze_ok:
            frz = HostFreezeNemesis().invoke(ctx, inv("start-pause", {"nodes": [names[-1]]}))
            assert frz.error is None
        # The harness "dies" here: no stop op, no teardown. Only the journal knows.
        for r in remotes.values():
            r.close()
        kinds = {n: sorted(e.kind for e in jr.HostJournal(hosts[n]).entries()) for n in names}
        assert all("faketime" in k for k in kinds.values()), kinds
        assert "sigstop" in kinds[names[0]] and "iptables-chain" in kinds[names[0]]
        if freeze_ok:
            assert "freeze" in kinds[names[-1]]
        before = scan_hosts([hosts[n] for n in names[:-1]])
        assert all(any(x.kind == "clock" for x in v) for v in before.values()), before
        assert any(x.kind == "stopped" for x in before[names[0]]), before[names[0]]
        assert any(x.kind == "rule" for v in before.values() for x in v), before
        # A later command, with fresh connections, replays the journal.
        fresh = {n: SSHRemote(h) for n, h in hosts.items()}
        try:
            problems = undo_journal.replay([jr.HostJournal(hosts[n]) for n in names], fresh)
        finally:
            for r in fresh.values():
                r.close()
        assert problems == {}
        assert all(jr.HostJournal(hosts[n]).entries() == [] for n in names)
        after = scan_hosts(list(hosts.values()))
        assert after == {n: [] for n in names}, after
    finally:
        from harness.run.cleanup import heal_hosts

        writer.close()
        heal_hosts(list(hosts.values()))  # thaws first: a frozen host answers nothing
        for n in names:  # the sleep daemons are this test's, not a leftover to scan for
            with SSHRemote(hosts[n]) as r:
                r.stop_daemon(db.PID, timeout=2)


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_sigkill_mid_fault_then_next_run_heals_first_and_is_valid(lab, tmp_path):
    from tests.harness.test_campaign import _STACKED

    hosts = lab.hosts()
    store = tmp_path / "store"
    killed = f"t{os.getpid()}-killed"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _STACKED,
            "run",
            "--lab",
            lab.name,
            "--name",
            killed,
            "--store",
            str(store),
            "-w",
            "append",
            "--nemesis",
            "partition,clock,pause,kill",
            "--time-limit",
            "120",
            "--rate",
            "30",
            "--no-progress",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            hist = store / killed / "latest" / "history.jsonl"
            if hist.exists() and "start-kill" in {
                o.f for o in read_jsonl(hist) if o.process == "nemesis" and o.type == "info"
            }:
                break
            assert proc.poll() is None, "the campaign ended before its faults were in force"
            time.sleep(0.2)
        else:
            pytest.fail("the faults were not all applied within 90 s")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Everything the dead harness had in force is still there, and journaled.
    left = scan_hosts(hosts)
    kinds = {x.kind for v in left.values() for x in v}
    assert {"journal", "rule", "clock", "stopped", "db-process", "port", "data"} <= kinds, kinds
    st = subprocess.run(
        [sys.executable, "-m", "harness.cli", "lab", "status", "--name", lab.name],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert st.returncode == 3 and "leftovers (" in st.stdout, st.stdout + st.stderr

    # The next run on the same lab, another test, no faults, the correct node.
    follow = f"t{os.getpid()}-follow"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--lab",
            lab.name,
            "--name",
            follow,
            "--store",
            str(store),
            "-w",
            "register",
            "--nemesis",
            "none",
            "--time-limit",
            "4",
            "--no-progress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0 and "verdict: VALID" in r.stdout, r.stdout + r.stderr
    run_dir = store / follow / "latest"
    cs = json.loads((run_dir / "clean-start.json").read_text())
    assert cs["clean"] and all(v == [] for v in cs["after"].values()), cs
    assert sum(len(v) for v in cs["before"].values()) >= len(hosts), cs
    log = (run_dir / "splitbrain.log").read_text()
    assert (
        log.index("clean start: removed") < log.index("phase: db-setup") < log.index("phase: run")
    )
    assert scan_hosts(hosts) == {h.name: [] for h in hosts}
    st = subprocess.run(
        [sys.executable, "-m", "harness.cli", "lab", "status", "--name", lab.name],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert st.returncode == 0 and "leftovers: none" in st.stdout, st.stdout + st.stderr


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_a_cluster_that_cannot_be_cleaned_is_refused_with_exit_3(lab, tmp_path):
    """A port the DB needs, held by a process that is none of ours: no run may start."""
    from harness.control.ssh import SSHRemote

    h = lab.hosts()[0]
    pidfile = "/tmp/sb-test-squatter.pid"
    squat = (
        "import signal,socket; s=socket.socket(); s.bind(('0.0.0.0', 9001)); s.listen(); "
        "signal.pause()"
    )  # not time.sleep: it fails under the lab's libfaketime
    with SSHRemote(h) as r:
        r.start_daemon(
            f'{sys.executable} -c "{squat}"', pidfile=pidfile, logfile="/tmp/sb-test-squatter.log"
        )
        try:
            r.run(
                "for i in $(seq 100); do ss -Hltn | grep -q ':9001 ' && exit 0; sleep 0.1; "
                "done; cat /tmp/sb-test-squatter.log; exit 1",
                timeout=30,
            )
            st = subprocess.run(
                [sys.executable, "-m", "harness.cli", "lab", "status", "--name", lab.name],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert st.returncode == 3, st.stdout + st.stderr
            assert f"{h.name}: port: " in st.stdout and ":9001 is in use" in st.stdout, st.stdout
            res = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "harness.cli",
                    "run",
                    "--lab",
                    lab.name,
                    "--name",
                    f"t{os.getpid()}-dirty",
                    "--store",
                    str(tmp_path),
                    "--nemesis",
                    "none",
                    "--time-limit",
                    "2",
                    "--no-progress",
                ],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=240,
            )
        finally:
            r.stop_daemon(pidfile, timeout=2)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "refusing to run on a dirty cluster" in res.stderr
    assert f"{h.name}: port: " in res.stderr and ":9001 is in use" in res.stderr, res.stderr
    results = json.loads(next(tmp_path.glob("*/latest/results.json")).read_text())
    assert results["valid"] == "unknown" and "dirty cluster" in results["reason"]
    assert read_jsonl(next(tmp_path.glob("*/latest/history.jsonl"))) == []  # not one op
    assert scan_hosts(lab.hosts()) == {x.name: [] for x in lab.hosts()}


@pytest.mark.integration
@pytest.mark.lab
def test_db_node_undo_keeps_the_entry_while_its_ports_are_busy(lab, tmp_path):
    """A plugin DB's daemon that outlived its pid file still holds its port: the replay must
    not strike the db-node entry out (the next clean start would then call the host clean)."""
    from harness.control.ssh import SSHRemote

    host = lab.hosts()[0]
    j = jr.HostJournal(host, tmp_path / "j")
    d = f"/srv/sb-undo-test-{os.getpid()}"
    j.record("db-node", "db", {"dir": d, "root": "/srv", "pidfiles": [], "ports": [39917]})
    with SSHRemote(host) as r:
        r.run(f"mkdir -p {d}")
        r.start_daemon(
            "python3 -m http.server --bind 0.0.0.0 39917",
            pidfile="/tmp/sb-undo-port.pid",
            logfile="/tmp/sb-undo-port.log",
        )
        try:
            for _ in range(50):
                if "39917" in r.run("ss -Hltn", check=False).stdout:
                    break
                time.sleep(0.1)
            problems = undo_journal.replay([j], {host.name: r})
            assert "ports are still in use" in " ".join(problems.get(host.name, [])), problems
            assert [e.kind for e in j.entries()] == ["db-node"]
        finally:
            r.stop_daemon("/tmp/sb-undo-port.pid", timeout=5)
        assert undo_journal.replay([j], {host.name: r}) == {}
        assert j.entries() == []
        assert r.run(f"test -e {d}", check=False).exit_status != 0
