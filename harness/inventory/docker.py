"""A lab of Docker containers, each a host with its own sshd, reached over SSH.

For users who already run Docker, and for machines where network namespaces
built by hand are not an option. The containers are ordinary SSH hosts to the
rest of the harness: same ``Host`` records, same faults. What differs from the
namespace lab:

- the image is built locally (no registry is needed): a Debian root file system
  made with ``debootstrap`` and imported, with sshd, iptables, libfaketime and
  python3 + msgpack for the reference node;
- the containers sit on a user-defined bridge network in the loopback range
  (127.79.0.0/24 by default), with ``NET_ADMIN`` for iptables partitions and
  ``SYS_TIME`` dropped so no host can move this machine's clock;
- host keys are generated when a container starts and read back through the
  Docker API (a channel we already trust), so SSH still verifies them.

``DockerEngine`` can start a private dockerd (vfs storage, no iptables, no
default bridge) when none is running, as ``lab-notes.md`` describes.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import signal
import subprocess
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, LabError
from harness.core.remote import Host

__all__ = ["DockerEngine", "DockerLab", "IMAGE", "build_image"]

log = logging.getLogger(__name__)

IMAGE_REPO = "splitbrain/node"
STATE_ROOT = Path("/var/lib/splitbrain/docker")
PACKAGES = ["openssh-server", "iptables", "iproute2", "faketime", "python3", "python3-msgpack",
            "procps", "tini"]
FAKETIME_FILE = "/var/lib/splitbrain/faketime"

SSHD_CONFIG = f"""\
# splitbrain docker lab host
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
SetEnv LD_PRELOAD=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 \
FAKETIME_TIMESTAMP_FILE={FAKETIME_FILE} FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1
"""

ENTRYPOINT = f"""#!/bin/sh
# Host keys are made per container, so two containers never share one.
set -e
ssh-keygen -A >/dev/null
mkdir -p /run/sshd /root/.ssh /var/lib/splitbrain
[ -f {FAKETIME_FILE} ] || echo +0 > {FAKETIME_FILE}
chmod 700 /root/.ssh
exec /usr/sbin/sshd -D -e
"""


def image_name() -> str:
    """The image tag follows what goes into it, so a changed config is never served stale."""
    digest = zlib.crc32("\n".join([SSHD_CONFIG, ENTRYPOINT, *PACKAGES]).encode())
    return f"{IMAGE_REPO}:bookworm-{digest:08x}"


IMAGE = image_name()


class DockerEngine:
    """A Docker engine to talk to: the user's, or a private one this class starts.

    The private engine keeps all its state under ``STATE_ROOT`` and listens on
    its own socket, so it never disturbs a Docker the user already has.
    """

    def __init__(self, socket: str | None = None, *, state_root: Path = STATE_ROOT) -> None:
        self.state_root = state_root
        self.private_socket = f"unix://{state_root}/docker.sock"
        self.socket = socket or os.environ.get("DOCKER_HOST") or self._default_socket()

    def _default_socket(self) -> str:
        if Path("/var/run/docker.sock").exists():
            return "unix:///var/run/docker.sock"
        return self.private_socket

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.socket, timeout=120)

    def ping(self) -> bool:
        try:
            return bool(self.client().ping())
        except Exception:
            return False

    def ensure_running(self, *, start: bool = True, timeout: float = 60.0) -> None:
        if self.ping():
            return
        if not start or self.socket != self.private_socket:
            raise LabError(f"no Docker engine answers at {self.socket}")
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise LabError("no Docker engine runs and dockerd is not installed "
                           "(apt-get install docker.io)")
        self.state_root.mkdir(parents=True, exist_ok=True)
        logf = open(self.state_root / "dockerd.log", "ab")  # noqa: SIM115 (outlives this call)
        subprocess.Popen(
            [dockerd, "--storage-driver=vfs", "--iptables=false", "--ip-masq=false",
             "--bridge=none", f"--data-root={self.state_root}/data",
             f"--exec-root={self.state_root}/exec", f"--pidfile={self.state_root}/dockerd.pid",
             "-H", self.private_socket],
            stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ping():
                return
            time.sleep(0.5)
        tail = (self.state_root / "dockerd.log").read_text(errors="replace")[-800:]
        raise LabError(f"dockerd did not answer within {timeout:.0f}s: {tail}")

    def stop_private(self) -> None:
        """Stop the private engine (if we started one) and release its mounts."""
        pidfile = self.state_root / "dockerd.pid"
        if not pidfile.exists():
            return
        try:
            pid = int(pidfile.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.1)
        except (ProcessLookupError, ValueError):
            pass
        # dockerd leaves an nsfs mount under its exec root (lab-notes).
        mounts = Path("/proc/mounts").read_text().splitlines()
        for line in mounts:
            target = line.split()[1]
            if target.startswith(str(self.state_root / "exec")):
                subprocess.run(["umount", "-l", target], check=False, capture_output=True)


def build_image(client: Any, *, state_root: Path = STATE_ROOT,
                mirror: str = "http://deb.debian.org/debian", force: bool = False) -> str:
    """Build ``IMAGE`` locally from a debootstrap root file system; returns its id.

    The root file system is cached, so a rebuild after a config change takes
    seconds; only the first build downloads packages (a few minutes).
    """
    import docker.errors

    if not force:
        try:
            return str(client.images.get(IMAGE).id)
        except docker.errors.ImageNotFound:
            pass
    rootfs = state_root / "rootfs"
    if not (rootfs / "usr/sbin/sshd").exists():
        if shutil.which("debootstrap") is None:
            raise LabError("building the lab image needs debootstrap (apt-get install debootstrap)")
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.mkdir(parents=True)
        log.warning("building the docker lab's root file system with debootstrap (a few minutes)")
        out = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", "bookworm",
             str(rootfs), mirror], capture_output=True, text=True)
        if out.returncode != 0:
            shutil.rmtree(rootfs, ignore_errors=True)
            raise LabError(f"debootstrap failed: {(out.stderr or out.stdout)[-800:]}")
    # The vfs storage driver copies the whole image for every container: keep it small.
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                 "usr/share/locale", "usr/share/info"):
        target = rootfs / junk
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                elif child.name != "lock":
                    child.unlink(missing_ok=True)
    (rootfs / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/ssh/sshd_config.d/splitbrain.conf").write_text(SSHD_CONFIG)
    for key in rootfs.glob("etc/ssh/ssh_host_*"):
        key.unlink()  # made per container by the entrypoint
    (rootfs / "usr/local/sbin").mkdir(parents=True, exist_ok=True)
    entry = rootfs / "usr/local/sbin/splitbrain-entry"
    entry.write_text(ENTRYPOINT)
    entry.chmod(0o755)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(rootfs.iterdir()):
            if child.name in ("proc", "sys", "dev"):
                info = tarfile.TarInfo(child.name)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            tar.add(str(child), arcname=child.name)
    buf.seek(0)
    changes = ['ENTRYPOINT ["/usr/bin/tini", "-s", "--", "/usr/local/sbin/splitbrain-entry"]']
    repo, tag = IMAGE.rsplit(":", 1)
    out = client.api.import_image_from_data(buf.getvalue(), repository=repo, tag=tag,
                                            changes=changes)
    log.info("imported %s: %s", IMAGE, str(out)[:200])
    return str(client.images.get(IMAGE).id)


@dataclass
class DockerLab:
    """N containers n1..nN at SUBNET.11.., on a bridge network of their own."""

    name: str = "docker"
    nodes: int = 5
    subnet: str = "127.79.0"
    engine: DockerEngine | None = None
    state_root: Path = STATE_ROOT

    def __post_init__(self) -> None:
        self.engine = self.engine or DockerEngine(state_root=self.state_root)
        self.dir = self.state_root / "labs" / self.name

    def _container(self, node: str) -> str:
        return f"splitbrain-{self.name}-{node}"

    def _require_root(self) -> None:
        if os.geteuid() != 0:
            raise LabError("the docker lab needs root (it configures a bridge and talks to dockerd)")

    def up(self) -> list[Host]:
        import docker.errors  # noqa: F401 (the SDK must be importable before anything starts)

        self._require_root()
        assert self.engine is not None
        self.engine.ensure_running()
        client = self.engine.client()
        build_image(client, state_root=self.state_root)
        self.dir.mkdir(parents=True, exist_ok=True)
        key = self.dir / "id_ed25519"
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key),
                            "-C", f"splitbrain-docker-{self.name}"], check=True)
        pub = (self.dir / "id_ed25519.pub").read_text()
        self._ensure_bridge()
        hosts = []
        known = []
        for i in range(1, self.nodes + 1):
            node = f"n{i}"
            addr = f"{self.subnet}.{10 + i}"
            cname = self._container(node)
            try:
                c = client.containers.get(cname)
                if c.status != "running":
                    c.start()
            except docker.errors.NotFound:
                # network "none", then our own veth into our own bridge: Docker's bridge
                # driver insists on a default route, and the kernel refuses a gateway in
                # the loopback range, where every lab address must live.
                hostcfg = client.api.create_host_config(
                    network_mode="none", cap_add=["NET_ADMIN"], cap_drop=["SYS_TIME"],
                    sysctls={"net.ipv4.conf.all.route_localnet": "1"},
                    tmpfs={"/dev/shm": "rw,size=64m"})
                created = client.api.create_container(
                    IMAGE, name=cname, hostname=node, detach=True, host_config=hostcfg,
                    labels={"splitbrain.lab": self.name})
                client.api.start(created["Id"])
                c = client.containers.get(cname)
            self._plumb(c, i, addr)
            hostkey = self._wait_hostkey(c)
            c.exec_run(["sh", "-c", f"mkdir -p /root/.ssh && printf '%s' '{pub.strip()}' "
                                    "> /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys"])
            known.append(f"{addr} {hostkey}")
            hosts.append(Host(name=node, address=addr, port=22, user="root", key_path=str(key),
                              known_hosts=str(self.dir / "known_hosts"),
                              extras={"faketime_file": FAKETIME_FILE, "lab": self.name,
                                      "driver": "docker", "container": cname, "python": "python3",
                                      "cgroup": None}))
        (self.dir / "known_hosts").write_text("\n".join(known) + "\n")
        (self.dir / "inventory.json").write_text(json.dumps(
            [h.__dict__ for h in hosts], indent=1, default=str))
        self._wait_ssh(hosts)
        return hosts

    @property
    def bridge(self) -> str:
        return f"sbd{zlib.crc32(self.name.encode()) % 100000:05d}"

    def _ip(self, *args: str, pid: int | None = None, check: bool = True) -> None:
        cmd = (["nsenter", "-t", str(pid), "-n"] if pid else []) + list(args)
        out = subprocess.run(cmd, capture_output=True, text=True)
        if check and out.returncode != 0:
            raise LabError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")

    def _ensure_bridge(self) -> None:
        br = self.bridge
        if subprocess.run(["ip", "link", "show", br], capture_output=True).returncode != 0:
            self._ip("ip", "link", "add", br, "type", "bridge")
            self._ip("ip", "addr", "add", f"{self.subnet}.1/24", "dev", br)
        self._ip("ip", "link", "set", br, "up")
        # Both ends of a loopback-range link must agree to route it (lab-notes).
        self._ip("sysctl", "-q", "-w", f"net.ipv4.conf.{br}.route_localnet=1")

    def _plumb(self, container: Any, i: int, addr: str) -> None:
        container.reload()
        pid = int(container.attrs["State"]["Pid"])
        if subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "addr", "show", "eth0"],
                          capture_output=True, text=True).stdout.find(addr + "/") >= 0:
            return
        outside, inside = f"{self.bridge}h{i}", f"{self.bridge}c{i}"
        self._ip("ip", "link", "del", outside, check=False)
        self._ip("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        self._ip("ip", "link", "set", outside, "master", self.bridge, "up")
        self._ip("ip", "link", "set", inside, "netns", str(pid))
        self._ip("ip", "link", "set", inside, "name", "eth0", pid=pid)
        self._ip("ip", "addr", "add", f"{addr}/24", "dev", "eth0", pid=pid)
        self._ip("ip", "link", "set", "eth0", "up", pid=pid)
        self._ip("ip", "link", "set", "lo", "up", pid=pid)
        self._ip("sysctl", "-q", "-w", "net.ipv4.conf.all.route_localnet=1", pid=pid)
        self._ip("sysctl", "-q", "-w", "net.ipv4.conf.eth0.route_localnet=1", pid=pid)

    def _wait_hostkey(self, container: Any, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code, out = container.exec_run(["cat", "/etc/ssh/ssh_host_ed25519_key.pub"])
            if code == 0 and out.strip():
                parts = out.decode().split()
                return f"{parts[0]} {parts[1]}"
            time.sleep(0.3)
        raise LabError(f"{container.name}: sshd made no host key within {timeout:.0f}s")

    def _wait_ssh(self, hosts: list[Host], timeout: float = 30.0) -> None:
        from harness.control import connect

        deadline = time.monotonic() + timeout
        for h in hosts:
            while True:
                try:
                    r = connect(h)
                    r.run("true", timeout=10)
                    r.close()
                    break
                except Exception as e:
                    if time.monotonic() > deadline:
                        raise LabError(f"{h.name} ({h.address}): SSH does not answer: {e}") from e
                    time.sleep(0.5)

    def hosts(self) -> list[Host]:
        inv = self.dir / "inventory.json"
        if not inv.exists():
            raise LabError(f"no docker lab named {self.name!r}: run `splitbrain lab up --driver docker`")
        try:
            return [Host(**h) for h in json.loads(inv.read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError, RecursionError) as e:
            # a torn or hand-edited state file: say which, not a traceback
            raise ConfigError(f"cannot read the docker lab inventory ({type(e).__name__}: "
                              f"{(str(e).splitlines() or [''])[0][:120]}); `splitbrain lab down "
                              f"--driver docker --name {self.name}` removes what is left",
                              path=inv) from None

    def status(self) -> list[dict[str, Any]]:
        assert self.engine is not None
        if not self.engine.ping():
            return []
        client = self.engine.client()
        out = []
        for c in client.containers.list(all=True, filters={"label": f"splitbrain.lab={self.name}"}):
            out.append({"host": c.name, "status": c.status})
        return out

    def down(self) -> None:
        """Remove the containers and the bridge; safe to run twice."""
        assert self.engine is not None
        if self.engine.ping():
            client = self.engine.client()
            for c in client.containers.list(all=True, filters={"label": f"splitbrain.lab={self.name}"}):
                c.remove(force=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def docker_hosts(name: str = "docker") -> list[Host]:
    """The hosts of a docker lab built by ``splitbrain lab up --driver docker``."""
    return DockerLab(name=name).hosts()
