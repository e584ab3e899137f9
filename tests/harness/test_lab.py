"""The embedded lab, built for real: namespaces, veths, sshd, faketime, freezer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from harness.cli.lab import lab as lab_cli
from harness.control.ssh import SSHRemote
from harness.core.errors import LabError
from harness.inventory import lab as lab_mod
from harness.inventory.lab import Lab
from harness.inventory.lab.hosts import init_pid
from harness.inventory.lab.hosts import ssh_banner as _ssh_banner

pytestmark = [pytest.mark.integration, pytest.mark.lab]


def _netns() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _free_subnet() -> str:
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    for third in range(os.getpid() % 200 + 1, 255):
        if f" 127.79.{third}." not in used:
            return f"127.79.{third}"
    pytest.skip("no free subnet")


def _procs_with(arg: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "status"])
        if arg in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


def test_naming_is_short_and_distinct():
    a = Lab("a-rather-long-lab-name-for-tests", nodes=12, subnet="127.90.1")
    b = Lab("another-one", nodes=12, subnet="127.90.2")
    names = {n for lab in (a, b) for hp in lab.plan() for n in (hp.veth, hp.peer)}
    names |= {a.bridge, b.bridge}
    assert all(len(n) <= 15 for n in names)
    assert len(names) == 2 * 2 * 12 + 2
    assert [hp.address for hp in a.plan()[:3]] == ["127.90.1.11", "127.90.1.12", "127.90.1.13"]


def test_bad_parameters_are_config_errors():
    from harness.core.errors import ConfigError

    with pytest.raises(ConfigError, match="subnet"):
        Lab("x", subnet="10.0.0")
    with pytest.raises(ConfigError, match="lab name"):
        Lab("bad name!")


def test_needs_root(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="the lab needs root"):
        Lab("x", state_root=tmp_path).up()


def test_status_and_inventory(lab):
    rows = lab.status()
    assert [r["host"] for r in rows] == ["n1", "n2", "n3", "n4", "n5"]
    assert all(r["netns"] and r["sshd_alive"] and r["ssh_ok"] for r in rows)
    hosts = lab.hosts()
    assert [h.address for h in hosts] == [f"{lab.subnet}.{i}" for i in range(11, 16)]
    for h in hosts:
        assert h.extras["lab"] == lab.name
        assert Path("/run/netns", h.extras["netns"]).exists()
        assert Path(h.extras["faketime_file"]).read_text().strip() == "+0"
        assert Path(h.extras["state_dir"]).is_dir()
        assert h.extras["cgroup"] is None or Path(h.extras["cgroup"]).is_dir()
        assert h.verify_host_key and Path(h.known_hosts).exists() and Path(h.key_path).exists()
    assert Lab.load(lab.name).hosts() == hosts


def test_host_isolation(remotes, lab):
    r = remotes["n1"]
    out = r.run(
        "hostname; getent hosts n3 | cut -d' ' -f1; grep CapBnd /proc/self/status; "
        "ps -e -o pid=,comm= | head -1; cat /proc/sys/net/ipv4/conf/all/route_localnet"
    )
    name, n3, capbnd, init, localnet = out.stdout.splitlines()
    assert name == "n1"
    assert n3 == f"{lab.subnet}.13"
    assert not int(capbnd.split()[1], 16) & (1 << 25), "CAP_SYS_TIME must be dropped"
    assert init.split() == ["1", "tini"]
    assert localnet == "1"
    # (never probe with `date -s`: if the drop ever regressed it would move the real clock)
    # private /tmp: a file made in n1 is not visible in n2
    r.run("echo mine > /tmp/sb-private")
    try:
        assert remotes["n2"].run("test -e /tmp/sb-private", check=False).exit_status == 1
    finally:
        r.run("rm -f /tmp/sb-private")


def test_faketime_skews_only_the_host(lab, remotes):
    h = lab.hosts()[1]
    ft = Path(h.extras["faketime_file"])
    try:
        ft.write_text("+3600\n")
        skewed = int(remotes[h.name].run("date +%s").stdout)
        assert abs(skewed - time.time() - 3600) < 5
        # the real clock, and other hosts, are untouched
        assert (
            abs(
                int(subprocess.run(["date", "+%s"], capture_output=True, text=True).stdout)
                - time.time()
            )
            < 2
        )
        assert abs(int(remotes["n1"].run("date +%s").stdout) - time.time()) < 5
    finally:
        ft.write_text("+0\n")
    assert abs(int(remotes[h.name].run("date +%s").stdout) - time.time()) < 5


def test_freezer_pauses_a_whole_host(lab):
    h = lab.hosts()[4]
    cg = h.extras["cgroup"]
    if cg is None:
        pytest.skip("no freezer cgroup on this kernel")
    state = Path(cg, "freezer.state")
    v2 = Path(cg, "cgroup.freeze")
    try:
        if state.exists():
            state.write_text("FROZEN\n")
        else:
            v2.write_text("1\n")
        assert not _ssh_banner(h.address, 22, 0.3)
    finally:
        if state.exists():
            state.write_text("THAWED\n")
        else:
            v2.write_text("0\n")
    assert _ssh_banner(h.address, 22, 2.0)


def test_up_is_idempotent_and_repairs(lab, remotes):
    assert remotes["n5"].run("hostname").stdout == "n5\n"
    before = {r["host"]: r["sshd_pid"] for r in lab.status()}
    t0 = time.monotonic()
    lab.up()
    assert time.monotonic() - t0 < 5
    assert {r["host"]: r["sshd_pid"] for r in lab.status()} == before
    # a host whose init died (the whole host crashed) is rebuilt by the next up()
    n5 = lab.plan()[4]
    os.kill(init_pid(n5), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while lab.status()[4]["sshd_alive"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    lab.up()
    after = {r["host"]: r["sshd_pid"] for r in lab.status()}
    assert after["n5"] != before["n5"] and after["n5"] is not None
    # the same remote reconnects to the rebuilt host
    assert remotes["n5"].run("hostname").stdout == "n5\n"
    assert {k: v for k, v in after.items() if k != "n5"} == {
        k: v for k, v in before.items() if k != "n5"
    }
    with pytest.raises(LabError, match="already exists"):
        Lab(lab.name, nodes=3, subnet=lab.subnet).up()
    with pytest.raises(LabError, match=f"subnet {lab.subnet}.0/24 is used"):
        Lab("other-than-" + lab.name, nodes=2, subnet=lab.subnet).up()


def test_cli_lifecycle(tmp_path):
    """A second, small lab through the CLI: up twice, status, down twice, nothing left."""
    name, subnet = f"c{os.getpid() % 10000}", _free_subnet()
    runner = CliRunner()
    base = ["--name", name]
    try:
        r = runner.invoke(lab_cli, ["up", "--nodes", "2", "--subnet", subnet, *base])
        assert r.exit_code == 0, r.output
        assert f"n2\t{subnet}.12" in r.output
        r = runner.invoke(lab_cli, ["up", "--nodes", "2", "--subnet", subnet, *base])
        assert r.exit_code == 0, r.output
        r = runner.invoke(lab_cli, ["status", *base])
        assert r.exit_code == 0, r.output
        assert "2/2 hosts answer SSH" in r.output
        assert f"n1     {subnet}.11" in r.output
        sshd = [line.split()[3] for line in r.output.splitlines()[1:3]]
        assert all(p.isdigit() for p in sshd)
        # something started inside a host must die with the lab
        marker = f"{os.getpid()}.4242"
        with SSHRemote(Lab.load(name).hosts()[0]) as r1:
            r1.start_daemon(f"sleep {marker}", pidfile="/tmp/m.pid", logfile="/tmp/m.log")
        assert _procs_with(marker)
    finally:
        r1 = runner.invoke(lab_cli, ["down", *base])
        r2 = runner.invoke(lab_cli, ["down", *base])
    assert r1.exit_code == 0 and r2.exit_code == 0, (r1.output, r2.output)
    assert f"sb-{name}-" not in _netns()
    for pid in sshd:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "sshd" not in Path(f"/proc/{pid}/cmdline").read_text()
        )
    assert not _procs_with(marker), "a process started in a host survived lab down"
    tag = Lab(name).tag
    assert not [n for n in os.listdir("/sys/class/net") if n.startswith(f"sb{tag}")]
    assert not Path(lab_mod.DEFAULT_STATE_ROOT, name).exists()
    r = runner.invoke(lab_cli, ["status", *base])
    assert r.exit_code != 0 and isinstance(r.exception, LabError)


def test_etc_var_lib_run_and_var_log_are_private_to_a_host(lab, remotes):
    """What a packaged DB writes (config, data, pid files, logs) is its host's alone,
    while the machine's own files (installed packages' config) show through and the
    harness's tree (/var/lib/splitbrain: lab state, journal, built-in DB data) is one."""
    dirs = ("/etc", "/var/lib", "/run", "/var/log")
    name = f"sbtest-{os.getpid()}"
    write = "; ".join(f"echo $(hostname) > {d}/{name}" for d in dirs)
    read = "; ".join(f"cat {d}/{name} 2>/dev/null || echo none" for d in dirs)
    try:
        for n in ("n1", "n2"):
            remotes[n].run(write)
        for n in ("n1", "n2"):
            assert remotes[n].run(read).stdout.split() == [n] * 4
        assert remotes["n3"].run(read).stdout.split() == ["none"] * 4
        for d in dirs:
            assert not Path(d, name).exists(), f"{d}/{name} leaked to the machine"
        # n1's writes live in its state dir (which `lab down` removes), nowhere else
        upper = lab.hosts()[0].extras["overlay_upper_dirs"]
        assert Path(upper["/etc"], name).read_text() == "n1\n"
        assert Path(upper["/var/lib"], name).read_text() == "n1\n"
        # seeded from the machine: its files show through, unchanged
        assert (
            remotes["n1"].run("cat /etc/os-release").stdout == Path("/etc/os-release").read_text()
        )
        assert remotes["n1"].run("ls -ld /var/lib/dpkg").exit_status == 0
        # the harness's tree is the machine's: written here, seen there, and back
        mark = Path(lab.dir, name)
        mark.write_text("machine\n")
        assert remotes["n2"].run(f"cat {mark}").stdout == "machine\n"
        remotes["n2"].run(f"echo n2 >> {mark}")
        assert mark.read_text() == "machine\nn2\n"
        # the host's mount table holds no trace of the launch's staging area
        mounts = remotes["n1"].run("cat /proc/self/mounts").stdout
        assert "sb-stage" not in mounts and mounts.count(" overlay ") == 3
        # nor of other labs' namespaces, which a hidden copy of /run/netns would pin
        assert "/run/netns/" not in mounts
    finally:
        for n in ("n1", "n2"):
            remotes[n].run(f"rm -f {' '.join(f'{d}/{name}' for d in dirs)}", check=False)
        with contextlib.suppress(OSError):
            mark.unlink()


def test_a_host_shares_the_harness_paths_it_runs_from(tmp_path):
    """A checkout, venv or state root under a private directory is bound back, nested
    paths once, outermost first; paths elsewhere (e.g. /work) need nothing."""
    from harness.inventory.lab.hosts import HARNESS_SHARED, _paths_to_share, launch_script

    root = tmp_path / "state"
    (root / "x" / "n1").mkdir(parents=True)
    share = _paths_to_share(root)
    assert str(root.resolve()) in share or any(
        str(root.resolve()).startswith(p + "/") for p in share
    )
    assert HARNESS_SHARED in share or not Path(HARNESS_SHARED).exists()
    assert not any(a != b and Path(a).is_relative_to(b) for a in share for b in share)
    script = launch_script(Lab("x", nodes=1, state_root=root).plan()[0], state_root=root)
    # the state dir is staged before any private mount hides it, restored after all
    assert script.index("mount --bind /dev/shm/keep0 ") > script.index("sb-var_log /var/log")
    assert script.index("mount --bind /var/lib/splitbrain /dev/shm/keep") < script.index(
        "sb-etc /etc"
    )


def test_a_process_that_outlives_sigkill_is_one_line_naming_host_pid_signals_and_wait(
    lab, remotes, monkeypatch
):
    """A killed process that cannot die yet (frozen by the v1 freezer, as in D state)
    makes stop_daemon fail after its post-KILL wait with one short line, and not
    with the script; once it can die, it is gone."""
    from harness.control import ssh as ssh_mod
    from harness.core.errors import RemoteError

    h = lab.hosts()[3]
    if h.extras.get("cgroup_kind") != "freezer-v1":
        pytest.skip("needs the v1 freezer (a frozen task defers SIGKILL there)")
    r = remotes[h.name]
    marker = f"{os.getpid()}.777"
    pidfile = f"/tmp/sbstuck-{os.getpid()}.pid"
    r.start_daemon(f"sleep {marker}", pidfile=pidfile, logfile="/tmp/sbstuck.log")
    (pid,) = _procs_with(marker)
    cg = Path(h.extras["cgroup"], f"stuck{os.getpid()}")
    cg.mkdir()
    try:
        (cg / "tasks").write_text(f"{pid}\n")
        (cg / "freezer.state").write_text("FROZEN\n")
        monkeypatch.setattr(ssh_mod, "KILL_WAIT_S", 2)
        t0 = time.monotonic()
        with pytest.raises(RemoteError) as e:
            r.stop_daemon(pidfile, timeout=0.5)
        msg = str(e.value)
        assert time.monotonic() - t0 < 60
        assert "\n" not in msg and len(msg) < 200, msg
        assert msg.startswith(f"{h.name}: pid ") and f"(pid file {pidfile})" in msg
        assert "after TERM then KILL to its process group" in msg and " s waited" in msg
        waited = int(msg.rsplit(" s waited", 1)[0].rsplit(" ", 1)[1])
        assert waited >= 2
    finally:
        (cg / "freezer.state").write_text("THAWED\n")
        deadline = time.monotonic() + 30
        while _procs_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        rmdir_ok = False
        while not rmdir_ok and time.monotonic() < deadline:
            try:
                cg.rmdir()
                rmdir_ok = True
            except OSError:
                time.sleep(0.05)
    assert not _procs_with(marker), "the SIGKILLed process outlived its thaw"
    r.stop_daemon(pidfile, timeout=0.5)  # gone now: stopping it again is quiet
    assert r.run(f"test -e {pidfile}", check=False).exit_status == 1


def test_what_the_machine_may_clean_for_a_host():
    """`lab down` removes journaled node dirs on the machine only where a host shares
    the path; a host's own /var/lib/<package> is not the machine's same-named dir."""
    lab = Lab("x")
    assert lab.shares("/var/lib/splitbrain/run/x/t/n1")
    assert lab.shares("/opt/db/n1") and lab.shares("/var/tmp/db")
    for own in ("/var/lib/mysql", "/etc/mysql", "/var/log/mysql", "/run/mysqld", "/srv/db"):
        assert not lab.shares(own), own
    assert not lab.shares("/var/lib/splitbrain-other")  # a sibling, not the shared tree
