"""The embedded lab, built for real: namespaces, veths, sshd, faketime, freezer."""

from __future__ import annotations

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
    return [p.pid for p in psutil.process_iter(["cmdline", "status"])
            if arg in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]


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
    out = r.run("hostname; getent hosts n3 | cut -d' ' -f1; grep CapBnd /proc/self/status; "
                "ps -e -o pid=,comm= | head -1; cat /proc/sys/net/ipv4/conf/all/route_localnet")
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
        assert abs(int(subprocess.run(["date", "+%s"], capture_output=True, text=True).stdout)
                   - time.time()) < 2
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
        k: v for k, v in before.items() if k != "n5"}
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
        assert not Path(f"/proc/{pid}").exists() or "sshd" not in Path(f"/proc/{pid}/cmdline").read_text()
    assert not _procs_with(marker), "a process started in a host survived lab down"
    tag = Lab(name).tag
    assert not [n for n in os.listdir("/sys/class/net") if n.startswith(f"sb{tag}")]
    assert not Path(lab_mod.DEFAULT_STATE_ROOT, name).exists()
    r = runner.invoke(lab_cli, ["status", *base])
    assert r.exit_code != 0 and isinstance(r.exception, LabError)
