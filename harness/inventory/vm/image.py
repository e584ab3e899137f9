"""The guests' base disk: a Debian image built once here, cached by a hash of its recipe.

Nothing can be downloaded but packages, so the image is made from the Debian
mirror apt already uses (debootstrap), then turned into an ext4 file system
(``mkfs.ext4 -d``, no loop mount) and a qcow2 base that every guest overlays.
The kernel and a small initramfs are copied out next to it, because booting
them directly (``-kernel``/``-initrd``) skips the boot loader, and a tiny init
script instead of systemd is what keeps a boot under software emulation (TCG)
to seconds. Any change to the recipe changes the hash, so a stale image is
never served.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from harness.core.errors import ConfigError, LabError

__all__ = [
    "VM_ROOT",
    "ImageConfig",
    "BaseImage",
    "DEFAULT_IMAGE",
    "GUEST_INIT",
    "config_hash",
    "debian_mirror",
    "require_tools",
    "ensure_image",
]

log = logging.getLogger(__name__)

VM_ROOT = Path("/var/lib/splitbrain/vm")

# Read by the guest's init from /proc/cmdline; keys are written by the host into
# the per-guest seed disk (a tar archive on /dev/vdb), so no two guests share one.
GUEST_INIT = r"""#!/bin/sh
# splitbrain guest init: just enough of a system to serve SSH, no init system.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
# The initramfs has moved /proc, /sys and /dev here already; mount what is missing.
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -o remount,rw /
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    sb.name=*) SB_NAME=${arg#sb.name=} ;;
    sb.addr=*) SB_ADDR=${arg#sb.addr=} ;;
    sb.key=*) SB_KEY=${arg#sb.key=} ;;
  esac
done
hostname "${SB_NAME:-guest}"
echo "${SB_NAME:-guest}" > /etc/hostname
for m in virtio_net virtio_rng virtio_console sch_netem; do modprobe -q "$m"; done
# The seed disk: this guest's host key and the lab's authorized key.
if [ -b /dev/vdb ]; then tar -xf /dev/vdb -C / --no-same-owner 2>/dev/null; fi
# Without a seed disk (a Vagrant box): the login key from the command line
# ("TYPE:BASE64") and a host key made here.
if [ -n "$SB_KEY" ]; then
  mkdir -p /root/.ssh
  echo "$SB_KEY" | tr ':' ' ' > /root/.ssh/authorized_keys
fi
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
chmod 600 /etc/ssh/ssh_host_ed25519_key /root/.ssh/authorized_keys 2>/dev/null
ip link set lo up
# 127.x off the loopback interface needs route_localnet on both ends.
sysctl -q -w net.ipv4.conf.all.route_localnet=1
sysctl -q -w net.ipv4.conf.default.route_localnet=1
if [ -n "$SB_ADDR" ]; then
  ip addr add "$SB_ADDR" dev eth0
  ip link set eth0 up
  sysctl -q -w net.ipv4.conf.eth0.route_localnet=1
fi
mkdir -p /run/sshd /var/lib/splitbrain
/usr/sbin/sshd -E /var/log/sshd.log
# libvirt (Vagrant) learns the guest's address from its agent.
# No udev here, so find the agent's port by its name in sysfs.
for port in /sys/class/virtio-ports/*; do
  if [ "$(cat "$port/name" 2>/dev/null)" = org.qemu.guest_agent.0 ]; then
    qemu-ga --daemonize -m virtio-serial -p "/dev/${port##*/}"
  fi
done
echo "splitbrain-guest-ready ${SB_NAME} ${SB_ADDR}" > /dev/console
# tini as PID 1 reaps every orphan; the guest lives until its power is cut.
exec /usr/bin/tini -s -- sleep infinity
"""

SSHD_CONFIG = """\
# splitbrain VM lab guest
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PrintMotd no
UseDNS no
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""

# virtio drivers and ext4 only: a small initramfs unpacks fast under TCG.
INITRAMFS_MODULES = ["virtio_pci", "virtio_blk", "virtio_net", "ext4", "crc32c_generic"]


@dataclass(frozen=True)
class ImageConfig:
    """Everything that goes into the base image; its hash names the cache entry."""

    suite: str = "bookworm"
    packages: tuple[str, ...] = (
        "linux-image-amd64",
        "openssh-server",
        "python3",
        "python3-msgpack",
        "python3-click",
        "chrony",
        "iptables",
        "iproute2",
        "kmod",
        "procps",
        "tini",
        "qemu-guest-agent",
    )
    disk_mib: int = 2048
    init: str = GUEST_INIT
    sshd_config: str = SSHD_CONFIG
    initramfs_modules: tuple[str, ...] = tuple(INITRAMFS_MODULES)
    # udev's coldplug in the initramfs costs tens of seconds under TCG, and devtmpfs
    # alone makes /dev/vda appear once the listed modules are loaded.
    initramfs_udev: bool = False
    extra: dict[str, str] = field(default_factory=dict)


DEFAULT_IMAGE = ImageConfig()

PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
"""Debian policy's package names (and nothing a shell or debootstrap would misread)."""


def with_packages(extra: tuple[str, ...], base: ImageConfig = DEFAULT_IMAGE) -> ImageConfig:
    """``base`` plus Debian packages a system under test needs on the guests (etcd,
    ZooKeeper...): guests reach no mirror, so whatever they run must be in the image,
    and a different set is a different cached image."""
    for p in extra:
        if not PACKAGE_RE.match(p):
            raise ConfigError(f"{p!r} is not a Debian package name", field="package")
    added = tuple(sorted(set(extra) - set(base.packages)))
    return replace(base, packages=base.packages + added) if added else base


def config_hash(config: ImageConfig) -> str:
    """A short stable hash of the recipe (mirror excluded: same packages either way)."""
    blob = json.dumps(asdict(config), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class BaseImage:
    """A built image: the qcow2 base and the kernel and initramfs taken from it."""

    key: str
    directory: Path

    @property
    def disk(self) -> Path:
        return self.directory / "base.qcow2"

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"

    def complete(self) -> bool:
        return all(p.exists() for p in (self.disk, self.kernel, self.initrd))


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt already uses (deb822 or one-line sources), else deb.debian.org."""
    files = sorted(sources.glob("sources.list.d/*.sources")) + [sources / "sources.list"]
    files += sorted(sources.glob("sources.list.d/*.list"))
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if re.search(r"/debian/?$", m.group(1)):
                return m.group(1).rstrip("/")
        for m in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+\S+", text, re.M):
            if re.search(r"/debian/?$", m.group(1)):
                return m.group(1).rstrip("/")
    return "http://deb.debian.org/debian"


# tool -> Debian package that provides it
HOST_TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "debootstrap": "debootstrap",
    "mkfs.ext4": "e2fsprogs",
    "ssh-keygen": "openssh-client",
}


def require_tools(tools: list[str]) -> None:
    """A clear error naming the Debian package for every missing host tool."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pkgs = " ".join(sorted({HOST_TOOLS.get(t, t) for t in missing}))
        raise LabError(
            f"the VM lab needs {', '.join(missing)} on this machine: "
            f"apt-get install {pkgs} (or scripts/setup.sh --with-vm)"
        )


@contextlib.contextmanager
def _build_lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_image(config: ImageConfig = DEFAULT_IMAGE, *, root: Path = VM_ROOT) -> BaseImage:
    """The cached image for ``config``, built first if absent (minutes, once)."""
    key = config_hash(config)
    image = BaseImage(key, root / "images" / key)
    if image.complete():
        return image
    require_tools(["debootstrap", "mkfs.ext4", "qemu-img"])
    # Two processes must never debootstrap into one directory: build under a lock.
    with _build_lock(root):
        if image.complete():
            return image
        _build(config, image)
    return image


def _run(cmd: list[str], what: str, timeout: float = 3600) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        tail = (out.stderr.strip() or out.stdout.strip())[-1500:]
        raise LabError(f"VM image: {what} failed ({' '.join(cmd[:3])} ...): {tail}")


def _packages_key(config: ImageConfig) -> str:
    blob = json.dumps([config.suite, sorted(config.packages)]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _debootstrap(config: ImageConfig, root: Path) -> Path:
    """The bare root file system for the suite and packages, downloaded once.

    Kept apart from the image so that a change to the init script or sshd
    config rebuilds in seconds, not minutes.
    """
    done = root / "debootstrap" / _packages_key(config)
    if (done / "usr/sbin/sshd").exists():
        return done
    partial = done.with_name(done.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    mirror = debian_mirror()
    log.warning("VM lab image: debootstrap %s from %s (minutes, once)", config.suite, mirror)
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(config.packages)}",
            config.suite,
            str(partial),
            mirror,
        ],
        "debootstrap",
    )
    shutil.rmtree(done, ignore_errors=True)
    os.replace(partial, done)
    return done


def _build(config: ImageConfig, image: BaseImage) -> None:
    work = image.directory.with_name(image.key + ".build")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rootfs = work / "rootfs"
    bare = _debootstrap(config, image.directory.parent.parent)
    log.warning("building the VM lab image %s", image.key)
    _run(["cp", "-a", str(bare), str(rootfs)], "copying the root file system")
    _configure(rootfs, config)
    kernels = sorted((rootfs / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise LabError(f"VM image: no kernel under {rootfs}/boot after debootstrap")
    release = kernels[-1].name.removeprefix("vmlinuz-")
    _run(["chroot", str(rootfs), "update-initramfs", "-c", "-k", release], "update-initramfs")
    work_kernel, work_initrd = work / "vmlinuz", work / "initrd.img"
    shutil.copyfile(kernels[-1], work_kernel)
    shutil.copyfile(rootfs / "boot" / f"initrd.img-{release}", work_initrd)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
        shutil.rmtree(rootfs / junk, ignore_errors=True)
    raw = work / "root.ext4"
    _run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-L",
            "sbroot",
            "-d",
            str(rootfs),
            str(raw),
            f"{config.disk_mib}M",
        ],
        "mkfs.ext4",
    )
    _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(work / "base.qcow2")], "qemu-img")
    raw.unlink()
    shutil.rmtree(rootfs)
    (work / "config.json").write_text(json.dumps(asdict(config), indent=1, sort_keys=True))
    shutil.rmtree(image.directory, ignore_errors=True)
    os.replace(work, image.directory)
    log.warning("VM lab image %s is ready", image.key)


def _configure(rootfs: Path, config: ImageConfig) -> None:
    init = rootfs / "sbin/splitbrain-init"
    init.write_text(config.init)
    init.chmod(0o755)
    (rootfs / "etc/ssh/sshd_config").write_text(config.sshd_config)
    for old in (rootfs / "etc/ssh").glob("ssh_host_*"):
        old.unlink()  # every guest gets its own key from its seed disk
    (rootfs / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    (rootfs / "etc/fstab").write_text("/dev/vda / ext4 rw,errors=remount-ro 0 1\n")
    conf = rootfs / "etc/initramfs-tools"
    (conf / "modules").write_text("\n".join(config.initramfs_modules) + "\n")
    text = (conf / "initramfs.conf").read_text()
    text = re.sub(r"^MODULES=.*$", "MODULES=list", text, flags=re.M)
    text = re.sub(r"^#?\s*COMPRESS=.*$", "COMPRESS=gzip", text, flags=re.M)
    (conf / "initramfs.conf").write_text(text)
    for old in (rootfs / "boot").glob("initrd.img-*"):
        old.unlink()
    if not config.initramfs_udev:
        for hook in ("hooks/udev", "scripts/init-top/udev", "scripts/init-bottom/udev"):
            (rootfs / "usr/share/initramfs-tools" / hook).unlink(missing_ok=True)
