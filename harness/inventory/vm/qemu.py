"""One guest as one qemu process: its plan, its command line, its launch and its end.

The command line is a pure function of the plan, so it is unit-tested without
qemu. A guest boots Debian's kernel directly with the image's small initramfs
and the image's tiny init (no boot loader, no systemd); its name and address
travel on the kernel command line, its host key and the lab's login key on a
read-only seed disk (a tar archive the init unpacks). ``-daemonize`` detaches
qemu from the process that ran ``lab up``: any later process finds it again by
its pid file and QMP socket.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.core.errors import LabError

__all__ = [
    "GuestPlan",
    "Accel",
    "mac_address",
    "kernel_cmdline",
    "qemu_command",
    "write_seed",
    "make_overlay",
    "launch",
    "qemu_pid",
    "kill_qemu",
]

Accel = str  # "kvm" or "tcg"

QEMU = "qemu-system-x86_64"


@dataclass(frozen=True)
class GuestPlan:
    """Names, addresses and files of one guest: pure, derived from the lab's parameters."""

    lab: str
    index: int
    name: str
    address: str
    prefix: int
    tap: str
    directory: Path
    memory_mib: int

    @property
    def overlay(self) -> Path:
        return self.directory / "disk.qcow2"

    @property
    def seed(self) -> Path:
        return self.directory / "seed.tar"

    @property
    def qmp_socket(self) -> Path:
        return self.directory / "qmp.sock"

    @property
    def pidfile(self) -> Path:
        return self.directory / "qemu.pid"

    @property
    def console_log(self) -> Path:
        return self.directory / "console.log"

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    @property
    def mac(self) -> str:
        return mac_address(self.lab, self.index)


def mac_address(lab: str, index: int) -> str:
    """Locally administered (qemu's 52:54:00 prefix), unique per lab and guest."""
    tag = zlib.crc32(lab.encode()) & 0xFFFF
    return f"52:54:00:{tag >> 8:02x}:{tag & 0xFF:02x}:{index:02x}"


def kernel_cmdline(plan: GuestPlan) -> str:
    """What the guest's init reads: its name and address, plus settings for a fast boot."""
    return " ".join(
        [
            "root=/dev/vda",
            "rw",
            "console=ttyS0",
            "init=/sbin/splitbrain-init",
            f"sb.name={plan.name}",
            f"sb.addr={plan.address}/{plan.prefix}",
            # A panicking guest exits (-no-reboot) instead of looping.
            "panic=1",
            "net.ifnames=0",
            "mitigations=off",
            # Under TCG on a loaded host the kernel can calibrate the TSC at a fraction
            # of its rate (430 MHz for 2.6 GHz was seen: a clock running 6x fast, which
            # real-clock faults would then fight); the HPET ticks at its nominal rate.
            "clocksource=hpet",
            "no_timer_check",
            "loglevel=4",
        ]
    )


def qemu_command(
    plan: GuestPlan, *, kernel: Path, initrd: Path, accel: Accel, daemonize: bool = True
) -> list[str]:
    """The full qemu command line for ``plan`` on the given accelerator."""
    if accel not in ("kvm", "tcg"):
        raise ValueError(f"accelerator {accel!r} is neither kvm nor tcg")
    # TCG's translation cache defaults to 1 GiB of host memory: cap it so guests stay small.
    accel_arg = "kvm" if accel == "kvm" else "tcg,tb-size=64"
    cmd = [
        QEMU,
        "-name",
        f"splitbrain-{plan.lab}-{plan.name},process=sbvm-{plan.lab}-{plan.name}",
        "-machine",
        "pc",
        "-accel",
        accel_arg,
        "-smp",
        "1",
        "-m",
        str(plan.memory_mib),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-kernel",
        str(kernel),
        "-initrd",
        str(initrd),
        "-append",
        kernel_cmdline(plan),
        "-drive",
        f"file={plan.overlay},format=qcow2,if=virtio,cache=writeback,discard=unmap",
        "-drive",
        f"file={plan.seed},format=raw,if=virtio,readonly=on",
        "-netdev",
        f"tap,id=net0,ifname={plan.tap},script=no,downscript=no",
        "-device",
        f"virtio-net-pci,netdev=net0,mac={plan.mac}",
        "-device",
        "virtio-rng-pci",
        "-serial",
        f"file:{plan.console_log}",
        "-qmp",
        f"unix:{plan.qmp_socket},server=on,wait=off",
        "-pidfile",
        str(plan.pidfile),
    ]
    if daemonize:
        cmd.append("-daemonize")
    return cmd


def write_seed(plan: GuestPlan, host_key_pem: str, host_key_pub: str, authorized: str) -> None:
    """The seed disk: a tar archive of the guest's own files, padded to whole sectors."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for path, text, mode in (
            ("etc/ssh/ssh_host_ed25519_key", host_key_pem, 0o600),
            ("etc/ssh/ssh_host_ed25519_key.pub", host_key_pub + "\n", 0o644),
            ("root/.ssh/authorized_keys", authorized + "\n", 0o600),
        ):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tf.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    blob += b"\0" * (-len(blob) % 65536)
    tmp = plan.seed.with_suffix(".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, plan.seed)


def make_overlay(plan: GuestPlan, base: Path) -> None:
    """A copy-on-write overlay of the base image (kept when it exists: a rebooted guest
    keeps its disk)."""
    if plan.overlay.exists():
        return
    tmp = plan.overlay.with_name("disk.tmp.qcow2")
    _run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(base), str(tmp)],
        f"{plan.name}: creating its overlay",
    )
    os.replace(tmp, plan.overlay)


def repair_overlay(plan: GuestPlan) -> None:
    """After a power cut qemu may have left qcow2 metadata half-written: mend leaks."""
    if plan.overlay.exists():
        subprocess.run(
            ["qemu-img", "check", "-q", "-r", "leaks", str(plan.overlay)],
            capture_output=True,
            timeout=120,
        )


def launch(plan: GuestPlan, *, kernel: Path, initrd: Path, accel: Accel) -> int:
    """Start the guest's qemu, detached; returns its pid once qemu has initialised."""
    plan.console_log.unlink(missing_ok=True)
    plan.pidfile.unlink(missing_ok=True)
    plan.qmp_socket.unlink(missing_ok=True)
    cmd = qemu_command(plan, kernel=kernel, initrd=initrd, accel=accel)
    _run(cmd, f"{plan.name}: starting qemu", timeout=120)
    pid = qemu_pid(plan)
    if pid is None:
        raise LabError(f"{plan.name}: qemu started but left no live pid in {plan.pidfile}")
    return pid


def qemu_pid(plan: GuestPlan) -> int | None:
    """The pid of this guest's qemu if it runs (checked against its command line)."""
    try:
        pid = int(plan.pidfile.read_text().strip())
        cmdline = psutil.Process(pid).cmdline()
    except (OSError, ValueError, psutil.Error):
        return None
    return pid if str(plan.qmp_socket) in " ".join(cmdline) else None


def kill_qemu(plan: GuestPlan, timeout: float = 10.0) -> None:
    """SIGKILL: the guest gets no chance to sync (a pulled plug); waits until it is gone."""
    pid = qemu_pid(plan)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(psutil.Error):
        psutil.Process(pid).wait(timeout)
    plan.pidfile.unlink(missing_ok=True)


def stray_qemus(lab: str) -> list[int]:
    """Pids of qemu processes of this lab, whatever their pid files say."""
    mine = re.compile(rf"process=sbvm-{re.escape(lab)}-n\d+$")
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info.get("cmdline") or []
        if cmd and any(mine.search(a) for a in cmd):
            found.append(p.pid)
    return found


def _run(cmd: list[str], what: str, timeout: float = 120.0) -> None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LabError(f"{what}: {cmd[0]} is not installed") from None
    if out.returncode != 0:
        raise LabError(f"{what} failed: {(out.stderr or out.stdout).strip()[-800:]}")
