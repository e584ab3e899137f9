"""Which accelerator boots a guest here: KVM when it really does, else TCG.

``/dev/kvm`` existing is not enough: under PVM-style nested virtualisation a
stock Debian kernel hangs right after the real-mode "Probing EDD" (lab notes).
So the answer comes from a real short boot of the image's kernel under KVM,
judged by whether the kernel reaches its init within a timeout, and is cached
per host kernel, qemu binary and guest kernel (a probe costs up to that
timeout once). ``SPLITBRAIN_VM_ACCEL=tcg|kvm`` overrides it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["choose_accel", "probe_kvm"]

BOOTED = "Run /sbin/splitbrain-init"  # also matches the kernel's "Run ... as init process"


def _cache_key(kernel: Path) -> str:
    """Host kernel, qemu binary and guest kernel *content* (images rebuilt for another
    reason keep the same kernel, and need no new probe)."""
    qemu = shutil.which("qemu-system-x86_64") or ""
    stamp = int(Path(qemu).stat().st_mtime) if qemu else 0
    digest = hashlib.sha256(kernel.read_bytes()).hexdigest()[:16]
    return f"{platform.release()}|{qemu}:{stamp}|{digest}"


def choose_accel(kernel: Path, initrd: Path, cache: Path, *, probe_timeout: float = 40.0) -> str:
    """``kvm`` or ``tcg`` for guests of this kernel on this machine."""
    forced = os.environ.get("SPLITBRAIN_VM_ACCEL", "").strip().lower()
    if forced in ("kvm", "tcg"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    key = _cache_key(kernel)
    with contextlib.suppress(OSError, ValueError):
        known = json.loads(cache.read_text())
        if isinstance(known, dict) and known.get(key) in ("kvm", "tcg"):
            return str(known[key])
    accel = "kvm" if probe_kvm(kernel, initrd, timeout=probe_timeout) else "tcg"
    try:
        known = json.loads(cache.read_text()) if cache.exists() else {}
    except (OSError, ValueError):
        known = {}
    known[key] = accel
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(known, indent=1))
    return accel


def probe_kvm(kernel: Path, initrd: Path, *, timeout: float) -> bool:
    """Whether the kernel gets as far as running init under KVM within ``timeout`` s.

    No disk is attached: the initramfs fails to find one, which is fine, since
    reaching it already proves the kernel booted.
    """
    with tempfile.TemporaryDirectory(prefix="sbvm-probe-") as tmp:
        log = Path(tmp) / "console.log"
        cmd = [
            "qemu-system-x86_64",
            "-accel",
            "kvm",
            "-m",
            "256",
            "-smp",
            "1",
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
            "console=ttyS0 panic=-1 init=/sbin/splitbrain-init root=/dev/vda rootdelay=1",
            "-serial",
            f"file:{log}",
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and proc.poll() is None:
                text = log.read_text(errors="replace") if log.exists() else ""
                if "Run /init as init process" in text or BOOTED in text:
                    return True
                time.sleep(0.5)
            text = log.read_text(errors="replace") if log.exists() else ""
            return "Run /init as init process" in text
        finally:
            proc.kill()
            proc.wait()
