"""The VM lab, for real: qemu guests with their own kernels, SSH with verified host keys,
a campaign on them, power and pause through QMP, and nothing left after ``down``.

Skipped with the reason only where qemu cannot run (not root, qemu or the image
tools not installed). The first run on a machine builds the image with
debootstrap (a few minutes); later runs reuse it. Under TCG a guest boots in
tens of seconds: two guests only, one module-wide lab.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def vm_lab():
    if os.geteuid() != 0:
        pytest.skip("the VM lab needs root (bridge, taps)")
    for tool, pkg in (
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("qemu-img", "qemu-utils"),
        ("debootstrap", "debootstrap"),
    ):
        if shutil.which(tool) is None:
            pytest.skip(
                f"{tool} is not installed (apt-get install {pkg}, or scripts/setup.sh --with-vm)"
            )
    if not Path("/dev/net/tun").exists():
        pytest.skip("no /dev/net/tun: qemu cannot make tap interfaces here")
    from harness.inventory.vm import VmLab

    third = zlib.crc32(str(os.getpid()).encode()) % 200 + 40
    lab = VmLab(name=f"vt{os.getpid() % 10000}", nodes=2, subnet=f"127.91.{third}")
    try:
        started = time.monotonic()
        hosts = lab.up(timeout=300)
        print(f"VM lab up: {time.monotonic() - started:.1f} s, accelerator {lab.record().accel}")
        yield lab, hosts
    finally:
        lab.down()


def _qemus(lab_name: str) -> list[int]:
    from harness.inventory.vm.qemu import stray_qemus

    return stray_qemus(lab_name)


def test_guests_are_ssh_hosts_with_verified_keys(vm_lab):
    from harness.control import connect
    from harness.core.errors import RemoteError
    from harness.core.remote import Host

    lab, hosts = vm_lab
    assert [h.name for h in hosts] == ["n1", "n2"]
    for h in hosts:
        assert h.verify_host_key and h.known_hosts and h.machine is not None
        r = connect(h)
        try:
            out = r.run(
                "hostname; uname -r; python3 -c 'import msgpack, click; print(1)'"
            ).stdout.split()
            assert out[0] == h.name and out[2] == "1"
            # Its own kernel, unlike a namespace host: netem is there.
            r.run("tc qdisc add dev eth0 root netem delay 5ms && tc qdisc del dev eth0 root")
        finally:
            r.close()
    # Each guest its own host key.
    keys = [line.split()[2] for line in Path(hosts[0].known_hosts).read_text().splitlines()]
    assert len(set(keys)) == 2
    # Guest to guest over the lab bridge, in the loopback range.
    a = connect(hosts[0])
    try:
        got = a.run(
            f"python3 -c \"import socket; s=socket.create_connection(('{hosts[1].address}', 22), 10); "
            'print(s.recv(8).decode())"'
        ).stdout
        assert got.startswith("SSH-")
    finally:
        a.close()
    # Same address, another key: verification refuses it.
    bad_known = Path(hosts[0].known_hosts + ".bad")
    bad_known.write_text(f"{hosts[0].address} ssh-ed25519 {keys[1]}\n")
    wrong = Host(**{**hosts[0].__dict__, "known_hosts": str(bad_known)})
    with pytest.raises(RemoteError):
        connect(wrong).run("true")


def test_machine_from_another_process_state_and_pause(vm_lab):
    """The Machine is rebuilt from the lab's record alone, as a later `run` does."""
    from harness.inventory.vm import vm_hosts

    lab, _ = vm_lab
    h = vm_hosts(lab.name)[1]
    assert h.machine is not None
    assert h.machine.state() == "running"
    h.machine.suspend()
    try:
        assert h.machine.state() == "paused"
        from harness.inventory.lab.hosts import ssh_banner

        assert not ssh_banner(h.address, 22, 3.0)  # a paused guest answers nothing
    finally:
        h.machine.resume()
    assert h.machine.state() == "running"
    h.machine.resume()  # idempotent


def test_power_cut_loses_the_page_cache_and_power_on_reboots(vm_lab):
    from harness.control import connect
    from harness.inventory.vm import vm_hosts

    lab, _ = vm_lab
    h = vm_hosts(lab.name)[1]
    assert h.machine is not None
    r = connect(h)
    try:
        # One file synced to disk, one left in the page cache only.
        r.run("echo kept > /root/synced && sync && echo lost > /root/unsynced")
        boot_id = r.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    finally:
        r.close()
    h.machine.power_cut()
    assert h.machine.state() == "off"
    h.machine.power_cut()  # idempotent
    h.machine.power_on()
    lab.wait_ssh([h], 300)
    r = connect(h)
    try:
        assert r.run("cat /proc/sys/kernel/random/boot_id").stdout.strip() != boot_id
        assert r.run("cat /root/synced").stdout.strip() == "kept"
        assert r.run("test -s /root/unsynced", check=False).exit_status != 0
    finally:
        r.close()


def test_campaign_on_guests_is_valid(vm_lab, tmp_path):
    lab, _ = vm_lab
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "harness.cli", "run", "--vm", "--lab", lab.name]
    cmd += ["--db", "dledger", "-w", "append", "--nemesis", "partition", "--time-limit", "20"]
    cmd += ["--rate", "20", "--no-progress", "--store", str(tmp_path / "store")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1500, cwd=REPO)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "verdict: VALID" in out.stdout


def test_zz_down_leaves_nothing(vm_lab):
    """Runs last in the module: down, twice, and nothing of the lab remains."""
    from harness.inventory.vm import network as vmnet

    lab, _ = vm_lab
    lab.down()
    lab.down()
    assert _qemus(lab.name) == []
    assert vmnet.lab_links(lab.name) == []
    assert not lab.dir.exists()
    assert not any(
        lab.name in " ".join(p.info.get("cmdline") or []) for p in psutil.process_iter(["cmdline"])
    )
