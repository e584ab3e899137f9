"""What ``vagrant up`` on the libvirt provider needs here, made by our own tooling.

No init system runs on this machine, so libvirtd and virtlogd are started by
us (and stopped by us, only if we started them). Nothing can be downloaded,
so the box is built from the VM lab's image: the same qcow2, kernel and
initramfs, booted directly (the Vagrantfile passes kernel, initrd and command
line to libvirt). Addresses stay in the loopback range: libvirt accepts an
*isolated* network (no ``<forward>``, no DHCP) on 127.X.Y.1/24, which we
define before Vagrant runs, so vagrant-libvirt finds its management network
by address instead of making its default NAT network on 192.168.121.0/24. A
guest gets its address and login key from the kernel command line and tells
libvirt its address through the qemu guest agent.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

from harness.core.errors import LabError
from harness.inventory.lab.state import ensure_client_key
from harness.inventory.vm.image import VM_ROOT, BaseImage, ensure_image
from harness.inventory.vm.network import check_subnet

__all__ = [
    "VAGRANT_ROOT",
    "BOX_NAME",
    "NETWORK_NAME",
    "network_xml",
    "ensure_libvirtd",
    "ensure_network",
    "build_box",
    "prepare",
    "teardown",
]

log = logging.getLogger(__name__)

VAGRANT_ROOT = VM_ROOT / "vagrant"
BOX_NAME = "splitbrain/bookworm"
NETWORK_NAME = "splitbrain-vagrant"
BRIDGE = "sbvagrant0"
VIRSH = ["virsh", "-c", "qemu:///system"]


def network_xml(subnet: str) -> str:
    """An isolated libvirt network on SUBNET.1/24: no forward (so no NAT), no DHCP."""
    check_subnet(subnet)
    return (
        f"<network>\n  <name>{NETWORK_NAME}</name>\n  <bridge name='{BRIDGE}'/>\n"
        f"  <ip address='{subnet}.1' netmask='255.255.255.0'/>\n</network>\n"
    )


def _virsh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        out = subprocess.run([*VIRSH, *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise LabError("virsh is not installed (apt-get install libvirt-clients)") from None
    if check and out.returncode != 0:
        raise LabError(f"virsh {' '.join(args)}: {(out.stderr or out.stdout).strip()}")
    return out


def ensure_libvirtd(timeout: float = 30.0) -> bool:
    """libvirtd answering on qemu:///system; True if this call started it."""
    if shutil.which("libvirtd") is None:
        raise LabError(
            "libvirtd is not installed: apt-get install libvirt-daemon-system vagrant-libvirt"
        )
    if _virsh("version", check=False).returncode == 0:
        return False
    VAGRANT_ROOT.mkdir(parents=True, exist_ok=True)
    for daemon in ("virtlogd", "libvirtd"):
        pidfile = VAGRANT_ROOT / f"{daemon}.pid"
        subprocess.run([daemon, "-d", "-p", str(pidfile)], check=True, timeout=30)
    deadline = time.monotonic() + timeout
    while _virsh("version", check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise LabError(f"libvirtd did not answer within {timeout:.0f} s")
        time.sleep(0.5)
    (VAGRANT_ROOT / "started-daemons").write_text("virtlogd libvirtd\n")
    return True


def ensure_network(subnet: str) -> None:
    """Our isolated loopback-range network, defined and active, routable from here."""
    xml = network_xml(subnet)
    info = _virsh("net-dumpxml", NETWORK_NAME, check=False)
    if info.returncode == 0 and f"address='{subnet}.1'" not in info.stdout:
        _virsh("net-destroy", NETWORK_NAME, check=False)
        _virsh("net-undefine", NETWORK_NAME)
        info = _virsh("net-dumpxml", NETWORK_NAME, check=False)
    if info.returncode != 0:
        VAGRANT_ROOT.mkdir(parents=True, exist_ok=True)
        path = VAGRANT_ROOT / "network.xml"
        path.write_text(xml)
        _virsh("net-define", str(path))
    if NETWORK_NAME not in _virsh("net-list", "--name").stdout.split():
        _virsh("net-start", NETWORK_NAME)
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1\n")


def build_box(image: BaseImage, root: Path = VAGRANT_ROOT) -> Path:
    """The box file for ``image`` (and its kernel and initramfs beside it), made once."""
    box_dir = root / image.key
    box = box_dir / "splitbrain.box"
    if box.exists():
        return box
    box_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(image.kernel, box_dir / "vmlinuz")
    shutil.copyfile(image.initrd, box_dir / "initrd.img")
    work = box_dir / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    # A box's disk must stand alone (no backing file); the base already does.
    shutil.copyfile(image.disk, work / "box.img")
    (work / "metadata.json").write_text(
        json.dumps({"provider": "libvirt", "format": "qcow2", "virtual_size": 2})
    )
    tmp = box.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tf:  # uncompressed: the qcow2 is already compact
        for name in ("metadata.json", "box.img"):
            tf.add(work / name, arcname=name)
    os.replace(tmp, box)
    shutil.rmtree(work)
    return box


def _box_added(key: str) -> bool:
    out = subprocess.run(["vagrant", "box", "list"], capture_output=True, text=True, timeout=120)
    marker = VAGRANT_ROOT / "box-key"
    return BOX_NAME in out.stdout and marker.exists() and marker.read_text().strip() == key


def prepare(subnet: str) -> dict[str, str]:
    """libvirtd, the network, the box and the login key: everything ``vagrant up`` needs.

    Returns the environment the repository's Vagrantfile reads.
    """
    if shutil.which("vagrant") is None:
        raise LabError("vagrant is not installed: apt-get install vagrant vagrant-libvirt")
    check_subnet(subnet)
    image = ensure_image()
    ensure_libvirtd()
    ensure_network(subnet)
    box = build_box(image)
    if not _box_added(image.key):
        log.warning("adding the Vagrant box %s from %s", BOX_NAME, box)
        out = subprocess.run(
            ["vagrant", "box", "add", "--force", "--name", BOX_NAME, str(box)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if out.returncode != 0:
            raise LabError(f"vagrant box add failed: {(out.stderr or out.stdout).strip()[-800:]}")
        (VAGRANT_ROOT / "box-key").write_text(image.key + "\n")
    key = VAGRANT_ROOT / "id_ed25519"
    ensure_client_key(key, "vagrant")
    return {
        "SPLITBRAIN_NET": subnet,
        "SPLITBRAIN_BOX": BOX_NAME,
        "SPLITBRAIN_KEY": str(key),
        "SPLITBRAIN_BOOT_DIR": str(box.parent),
    }


def teardown() -> None:
    """Remove our network and stop the daemons we started (never a libvirtd we did not)."""
    if _virsh("version", check=False).returncode == 0:
        _virsh("net-destroy", NETWORK_NAME, check=False)
        _virsh("net-undefine", NETWORK_NAME, check=False)
        # vagrant-libvirt's copy of our box in libvirt's pool (VMs: `vagrant destroy`).
        listing = _virsh("vol-list", "default", check=False).stdout.splitlines()
        vols = [line.split()[0] for line in listing[2:] if line.strip()]
        for vol in vols:
            if vol.startswith(BOX_NAME.replace("/", "-VAGRANTSLASH-")):
                _virsh("vol-delete", vol, "--pool", "default", check=False)
    started = VAGRANT_ROOT / "started-daemons"
    if not started.exists():
        return
    for daemon in ("libvirtd", "virtlogd"):
        pidfile = VAGRANT_ROOT / f"{daemon}.pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        pidfile.unlink(missing_ok=True)
    started.unlink()
    remove_libvirt_chains()


def remove_libvirt_chains() -> None:
    """libvirtd leaves its (by then empty) LIBVIRT_* chains and the jumps to them in
    this machine's firewall; a libvirtd we started must not leave anything behind."""
    for table in ("filter", "nat", "mangle"):
        rules = subprocess.run(
            ["iptables", "-w", "10", "-t", table, "-S"], capture_output=True, text=True
        ).stdout.splitlines()
        for rule in rules:
            parts = rule.split()
            if (
                parts[:1] == ["-A"]
                and "-j" in parts
                and parts[parts.index("-j") + 1].startswith("LIBVIRT_")
                and not parts[1].startswith("LIBVIRT_")
            ):
                subprocess.run(["iptables", "-w", "10", "-t", table, "-D", *parts[1:]])
        for rule in rules:
            parts = rule.split()
            if parts[:1] == ["-N"] and parts[1].startswith("LIBVIRT_"):
                subprocess.run(["iptables", "-w", "10", "-t", table, "-F", parts[1]])
                subprocess.run(["iptables", "-w", "10", "-t", table, "-X", parts[1]])
