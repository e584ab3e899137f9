"""The embedded lab: N hosts on this machine, each a network namespace with its own sshd.

It exists so that every fault splitbrain injects is real (iptables inside a host,
signals to real processes, a skewed clock seen by real programs) without VMs.
What each host gets, and why (see docs lab-notes):

- a network namespace joined by a veth to one bridge per lab; addresses are in the
  loopback range (SUBNET.11, .12, ...; the harness side is SUBNET.1), which needs
  ``route_localnet`` in every namespace and on the bridge;
- its own UTS, mount and PID namespace with ``tini -s`` as init, so a whole host
  dies with one SIGKILL to its init and killed daemons never linger as zombies;
- private ``/run`` (sshd needs ``/run/sshd``), ``/tmp``, ``/srv``, ``/dev/shm``,
  ``/etc/hosts`` and root's ``.bashrc``; the rest of the file system is shared with
  the machine;
- no ``CAP_SYS_TIME`` in its bounding set, so nothing in a host can move the real
  clock; clock faults go through libfaketime, preloaded by sshd into every session
  and steered by a per-host offset file;
- a freezer cgroup when the kernel has one, for whole-host pauses.

Interface names are derived from a hash of the lab name so that several labs (with
different names and subnets) can coexist, e.g. while several test runs share the
machine. Everything a lab makes is found again from its name alone, so ``down``
works from another process and after a crash of the one that ran ``up``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.control.base import Host
from harness.errors import ConfigError, LabError

__all__ = ["Lab", "DEFAULT_STATE_ROOT", "find_libfaketime"]

log = logging.getLogger(__name__)

DEFAULT_STATE_ROOT = "/var/lib/splitbrain/lab"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_FREEZER_V1 = Path("/sys/fs/cgroup/freezer")
_TOOLS = ("ip", "unshare", "setpriv", "tini", "mount", "hostname")
_SSHD = "/usr/sbin/sshd"
# Launchers started by this process; reaped in down() so they do not stay zombies.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def find_libfaketime() -> str | None:
    """Path of libfaketime.so.1, or None when the faketime package is missing."""
    try:
        out = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True,
                             timeout=10).stdout
        for line in out.splitlines():
            if line.endswith("/libfaketime.so.1") and os.path.exists(line):
                return line
    except (OSError, subprocess.SubprocessError):
        pass
    for base in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib",
                 "/usr/local/lib", "/usr/lib64"):
        for p in (f"{base}/faketime/libfaketime.so.1", f"{base}/libfaketime.so.1"):
            if os.path.exists(p):
                return p
    return None


@dataclass(frozen=True)
class _HostPlan:
    """Names and paths of one lab host: pure, derived from the lab's parameters."""

    index: int
    name: str
    address: str
    netns: str
    veth: str
    peer: str
    state_dir: Path


def _run(args: list[str], *, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LabError(f"{args[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"`{' '.join(args)}` took more than {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(f"`{' '.join(args)}` failed ({proc.returncode}): {err[-1] if err else ''}")
    return proc


def _link_exists(name: str, netns: str | None = None) -> bool:
    if netns is None:
        return Path("/sys/class/net", name).exists()
    return _run(["ip", "-n", netns, "link", "show", "dev", name], check=False).returncode == 0


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _proc_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _read_meta(meta_path: Path, name: str) -> dict[str, Any]:
    """``nodes`` and ``subnet`` from a lab's ``lab.json``, checked field by field.

    The file is ours, but a crash, a full disk or a hand edit can leave anything
    in it; every failure is a ConfigError naming the file (and line or field),
    with the command that clears the lab. Exact types, not ``int()``: ``int(1e999)``
    raises OverflowError and ``int(true)`` would quietly mean one node.
    """
    hint = f"`splitbrain lab down --name {name}` removes what is left"
    try:
        text = meta_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read: {getattr(e, 'strerror', None) or e}; {hint}",
                          path=meta_path) from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"not valid JSON ({e.msg}); {hint}", path=meta_path, line=e.lineno) from None
    except (RecursionError, ValueError):
        raise ConfigError(f"not valid JSON; {hint}", path=meta_path) from None
    if not isinstance(meta, dict):
        raise ConfigError(f"expected a JSON object, got {type(meta).__name__}; {hint}",
                          path=meta_path)
    nodes, subnet = meta.get("nodes"), meta.get("subnet")
    if type(nodes) is not int:
        raise ConfigError(f"expected an integer, got {repr(nodes)[:60]}; {hint}", path=meta_path,
                          field="nodes")
    if not isinstance(subnet, str):
        raise ConfigError(f"expected a string, got {repr(subnet)[:60]}; {hint}", path=meta_path,
                          field="subnet")
    try:
        Lab(name=name, nodes=nodes, subnet=subnet)   # its range checks, before anything uses them
    except ConfigError as e:
        why = str(e).removeprefix(f"field {e.field!r}: ")
        raise ConfigError(f"{why}; {hint}", path=meta_path, field=e.field) from None
    return {"nodes": nodes, "subnet": subnet}


class Lab:
    """A named lab on this machine. Cheap to construct; ``up`` and ``down`` do the work."""

    def __init__(self, name: str = "default", nodes: int = 5, subnet: str = "127.77.0",
                 state_root: str | os.PathLike[str] = DEFAULT_STATE_ROOT) -> None:
        if not _NAME_RE.match(name):
            raise ConfigError(f"lab name {name!r} must be 1-32 letters, digits, '-' or '_'",
                              field="name")
        if not 1 <= nodes <= 99:
            raise ConfigError(f"nodes must be between 1 and 99, got {nodes}", field="nodes")
        parts = subnet.split(".")
        if (len(parts) != 3 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts)
                or parts[0] != "127"):
            raise ConfigError(f"subnet {subnet!r} must be three octets in 127.0.0.0/8, "
                              "e.g. 127.77.0", field="subnet")
        self.name = name
        self.nodes = nodes
        self.subnet = ".".join(str(int(p)) for p in parts)
        self.state_root = Path(state_root)
        self.dir = self.state_root / name
        self.tag = hashlib.sha1(name.encode()).hexdigest()[:6]
        self.bridge = f"sb{self.tag}br"
        self.gateway = f"{self.subnet}.1"

    def __repr__(self) -> str:
        return f"Lab(name={self.name!r}, nodes={self.nodes}, subnet={self.subnet!r})"

    # --- pure naming -------------------------------------------------------------------

    def plan(self) -> list[_HostPlan]:
        return [
            _HostPlan(index=i, name=f"n{i}", address=f"{self.subnet}.{10 + i}",
                      netns=f"sb-{self.name}-n{i}", veth=f"sb{self.tag}v{i}",
                      peer=f"sb{self.tag}p{i}", state_dir=self.dir / f"n{i}")
            for i in range(1, self.nodes + 1)
        ]

    @property
    def key_path(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.yaml"

    # --- loading -----------------------------------------------------------------------

    @classmethod
    def load(cls, name: str = "default",
             state_root: str | os.PathLike[str] = DEFAULT_STATE_ROOT) -> Lab:
        meta_path = Path(state_root) / name / "lab.json"
        if not meta_path.exists():
            raise LabError(f"no lab named {name!r} (nothing at {meta_path}); "
                           "start one with `splitbrain lab up`")
        return cls(name=name, state_root=state_root, **_read_meta(meta_path, name))

    def hosts(self) -> list[Host]:
        from harness.inventory import load_nodes_file

        if not self.inventory_path.exists():
            raise LabError(f"lab {self.name!r} is not up (no {self.inventory_path}); "
                           "run `splitbrain lab up`")
        return load_nodes_file(self.inventory_path)

    # --- up ----------------------------------------------------------------------------

    def up(self, *, timeout: float = 30.0) -> list[Host]:
        """Build whatever is missing, restart dead hosts, wait for every sshd; idempotent."""
        _require_root()
        missing = [t for t in _TOOLS if shutil.which(t) is None]
        if not os.path.exists(_SSHD):
            missing.append("sshd (openssh-server)")
        if missing:
            raise LabError(f"the lab needs these programs, not found: {', '.join(missing)}")
        with self._locked():
            self._check_meta()
            self._check_conflicts()
            self.dir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.dir, 0o755)
            _write(self.dir / "lab.json", json.dumps(
                {"name": self.name, "nodes": self.nodes, "subnet": self.subnet,
                 "bridge": self.bridge}, indent=2) + "\n")
            client_pub = self._ensure_client_key()
            faketime = find_libfaketime()
            if faketime is None:
                log.warning("libfaketime not found: clock faults will be unavailable")
            self._ensure_bridge()
            cgroup_base, cgroup_kind = self._cgroup_base()
            hosts: list[Host] = []
            known: list[str] = []
            launched: list[_HostPlan] = []
            for hp in self.plan():
                pub = self._ensure_host_files(hp, client_pub, faketime)
                known.append(f"{hp.address} {pub}")
                self._ensure_net(hp)
                cg = self._ensure_cgroup(cgroup_base, hp)
                if not self._host_alive(hp):
                    self._launch(hp, cg, faketime)
                    launched.append(hp)
                else:
                    # `up` means "healthy": undo a pause or clock skew a run left behind.
                    if cg is not None:
                        _thaw(cg)
                    if faketime:
                        _write(hp.state_dir / "faketime", "+0\n")
                hosts.append(Host(
                    name=hp.name, address=hp.address, port=22, user="root",
                    key_path=str(self.key_path), known_hosts=str(self.known_hosts),
                    extras={"lab": self.name, "netns": hp.netns, "state_dir": str(hp.state_dir),
                            "faketime_file": str(hp.state_dir / "faketime") if faketime else None,
                            "cgroup": str(cg) if cg else None,
                            "cgroup_kind": cgroup_kind if cg else None,
                            "private_dirs": {d: str(hp.state_dir / d.strip("/").replace("/", "_"))
                                             for d in ("/tmp", "/srv")}}))
            _write(self.known_hosts, "\n".join(known) + "\n")
            from harness.inventory import dump_nodes

            _write(self.inventory_path, dump_nodes(hosts))
            self._wait_ssh(self.plan(), timeout)
            if launched:
                log.info("lab %s: started %s", self.name, ", ".join(h.name for h in launched))
            return hosts

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # One lock for all labs under this root: building is quick, and it makes the
        # subnet and interface conflict checks race-free between concurrent test runs.
        self.state_root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _check_meta(self) -> None:
        meta_path = self.dir / "lab.json"
        if not meta_path.exists():
            return
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            return
        if meta.get("nodes") != self.nodes or meta.get("subnet") != self.subnet:
            raise LabError(
                f"lab {self.name!r} already exists with {meta.get('nodes')} nodes on "
                f"{meta.get('subnet')}.0/24; run `splitbrain lab down --name {self.name}` first "
                "or use another --name")

    def _check_conflicts(self) -> None:
        # Another lab's state claiming this subnet, while its bridge still exists.
        if self.state_root.exists():
            for other in self.state_root.iterdir():
                if other.name == self.name or not (other / "lab.json").exists():
                    continue
                try:
                    meta = json.loads((other / "lab.json").read_text())
                except (OSError, ValueError):
                    continue
                if meta.get("subnet") == self.subnet and _link_exists(str(meta.get("bridge"))):
                    raise LabError(f"subnet {self.subnet}.0/24 is used by lab {other.name!r}; "
                                   "choose another --subnet")
        # Any interface but our bridge holding an address in our /24.
        out = _run(["ip", "-j", "-4", "addr", "show"]).stdout
        for link in json.loads(out or "[]"):
            for a in link.get("addr_info", []):
                local = a.get("local", "")
                if local.rsplit(".", 1)[0] == self.subnet and link.get("ifname") != self.bridge:
                    raise LabError(f"address {local} on interface {link.get('ifname')} is in the "
                                   f"lab subnet {self.subnet}.0/24; choose another --subnet")
        if _link_exists(self.bridge):
            info = json.loads(_run(["ip", "-j", "-d", "link", "show", "dev", self.bridge]).stdout)
            kind = (info[0].get("linkinfo") or {}).get("info_kind") if info else None
            if kind != "bridge":
                raise LabError(f"interface {self.bridge} exists and is not a bridge "
                               f"(kind {kind}); it is in the way of lab {self.name!r}")

    def _ensure_client_key(self) -> str:
        if not self.key_path.exists():
            key = Ed25519PrivateKey.generate()
            priv = key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.OpenSSH,
                                     serialization.NoEncryption())
            pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                serialization.PublicFormat.OpenSSH)
            _write(self.key_path, priv.decode(), 0o600)
            _write(self.key_path.with_suffix(".pub"), pub.decode() + f" splitbrain-lab-{self.name}\n")
        return self.key_path.with_suffix(".pub").read_text().strip()

    def _ensure_bridge(self) -> None:
        br = self.bridge
        if not _link_exists(br):
            _run(["ip", "link", "add", br, "type", "bridge"])
        out = json.loads(_run(["ip", "-j", "-4", "addr", "show", "dev", br]).stdout or "[]")
        have = {a.get("local") for link in out for a in link.get("addr_info", [])}
        if self.gateway not in have:
            _run(["ip", "addr", "add", f"{self.gateway}/24", "dev", br])
        Path(f"/proc/sys/net/ipv4/conf/{br}/route_localnet").write_text("1\n")
        _run(["ip", "link", "set", br, "up"])

    def _ensure_host_files(self, hp: _HostPlan, client_pub: str, faketime: str | None) -> str:
        d = hp.state_dir
        for sub in ("run/sshd", "tmp", "srv"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "run" / "sshd", 0o755)
        os.chmod(d / "tmp", 0o1777)
        hostkey = d / "ssh_host_ed25519_key"
        if not hostkey.exists():
            key = Ed25519PrivateKey.generate()
            _write(hostkey, key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.OpenSSH,
                                              serialization.NoEncryption()).decode(), 0o600)
            pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                serialization.PublicFormat.OpenSSH).decode()
            _write(d / "ssh_host_ed25519_key.pub", pub + "\n")
        _write(d / "authorized_keys", client_pub + "\n", 0o600)
        others = "\n".join(f"{p.address}\t{p.name}" for p in self.plan())
        _write(d / "hosts", f"127.0.0.1\tlocalhost\n{others}\n")
        setenv = ""
        if faketime:
            setenv = (f"SetEnv LD_PRELOAD={faketime} FAKETIME_TIMESTAMP_FILE={d / 'faketime'} "
                      "FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1\n")
        _write(d / "sshd_config", f"""\
# splitbrain lab {self.name}, host {hp.name}: generated, rewritten by `lab up`
Port 22
AddressFamily inet
ListenAddress 0.0.0.0
HostKey {hostkey}
PidFile /run/sshd.pid
AuthorizedKeysFile {d / 'authorized_keys'}
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
PrintMotd no
MaxSessions 200
MaxStartups 100:30:200
Subsystem sftp internal-sftp
{setenv}""")
        return (d / "ssh_host_ed25519_key.pub").read_text().strip()

    def _ensure_net(self, hp: _HostPlan) -> None:
        ns_file = Path("/run/netns", hp.netns)
        if not ns_file.exists():
            _run(["ip", "netns", "add", hp.netns])
        if not _link_exists("eth0", hp.netns):
            # Half-built: a veth whose peer is not (or no longer) in the namespace.
            for stale in (hp.veth, hp.peer):
                if _link_exists(stale):
                    _run(["ip", "link", "del", stale])
            _run(["ip", "link", "add", hp.veth, "type", "veth", "peer", "name", hp.peer,
                  "netns", hp.netns])
            _run(["ip", "-n", hp.netns, "link", "set", hp.peer, "name", "eth0"])
        elif not _link_exists(hp.veth):
            raise LabError(f"namespace {hp.netns} has an eth0 that is not joined to {hp.veth}; "
                           f"run `splitbrain lab down --name {self.name}`")
        _run(["ip", "link", "set", hp.veth, "master", self.bridge, "up"])
        out = json.loads(_run(["ip", "-n", hp.netns, "-j", "-4", "addr", "show", "dev", "eth0"]).stdout or "[]")
        have = {a.get("local") for link in out for a in link.get("addr_info", [])}
        if hp.address not in have:
            _run(["ip", "-n", hp.netns, "addr", "add", f"{hp.address}/24", "dev", "eth0"])
        _run(["ip", "-n", hp.netns, "link", "set", "eth0", "up"])
        _run(["ip", "-n", hp.netns, "link", "set", "lo", "up"])

    # --- cgroups -----------------------------------------------------------------------

    def _cgroup_base(self) -> tuple[Path | None, str | None]:
        if (_FREEZER_V1 / "freezer.state").exists() or (_FREEZER_V1 / "tasks").exists():
            return _FREEZER_V1 / "splitbrain" / self.name, "freezer-v1"
        v2 = _cgroup2_mount()
        if v2 is not None:
            return v2 / "splitbrain" / self.name, "v2"
        return None, None

    def _ensure_cgroup(self, base: Path | None, hp: _HostPlan) -> Path | None:
        if base is None:
            return None
        path = base / hp.name
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.warning("no freezer cgroup for %s (%s): whole-host pause unavailable", hp.name, e)
            return None
        if not ((path / "freezer.state").exists() or (path / "cgroup.freeze").exists()):
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return path

    # --- processes ---------------------------------------------------------------------

    def _init_record(self, hp: _HostPlan) -> dict[str, Any] | None:
        try:
            return json.loads((hp.state_dir / "init.json").read_text())
        except (OSError, ValueError):
            return None

    def _init_pid(self, hp: _HostPlan) -> int | None:
        """Root-namespace pid of the host's tini, if that very process still runs."""
        rec = self._init_record(hp)
        if not rec:
            return None
        pid = int(rec.get("init", 0))
        start = _proc_start(pid) if pid else None
        if start is None or abs(start - float(rec.get("init_start", 0))) > 0.5:
            return None
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return None
        except psutil.Error:
            return None
        return pid

    def _host_alive(self, hp: _HostPlan) -> bool:
        """Init running, inside the namespace the lab's netns file names (not a stale one)."""
        pid = self._init_pid(hp)
        if pid is None:
            return False
        try:
            return (os.stat(f"/proc/{pid}/ns/net").st_ino
                    == os.stat(f"/run/netns/{hp.netns}").st_ino)
        except OSError:
            return False

    def _sshd_pid(self, hp: _HostPlan) -> int | None:
        pid = self._init_pid(hp)
        if pid is None:
            return None
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(pid).children():
                if child.name() == "sshd" and child.status() != psutil.STATUS_ZOMBIE:
                    return child.pid
        return None

    def _launch(self, hp: _HostPlan, cgroup: Path | None, faketime: str | None) -> None:
        self._kill_host(hp, cgroup)
        d = hp.state_dir
        if faketime:
            _write(d / "faketime", "+0\n")
        q = shlex.quote
        # Each host has its own /tmp, but the harness itself (its checkout and venv,
        # whose python runs inside the hosts) may live under /tmp: stage those paths
        # before /tmp is replaced, then mount them back at the same place.
        keep = _paths_under_tmp()
        stage = "".join(f"mkdir -p {q(str(d / f'keep{i}'))}\n"
                        f"mount --bind {q(p)} {q(str(d / f'keep{i}'))}\n"
                        for i, p in enumerate(keep))
        restore = "".join(f"mkdir -p {q(p)}\nmount --bind {q(str(d / f'keep{i}'))} {q(p)}\n"
                          for i, p in enumerate(keep))
        script = f"""\
set -e
echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
hostname {q(hp.name)}
mount --bind {q(str(d / 'run'))} /run
{stage}mount --bind {q(str(d / 'tmp'))} /tmp
{restore}mount --bind {q(str(d / 'srv'))} /srv
mount --bind {q(str(d / 'hosts'))} /etc/hosts
if [ -f /root/.bashrc ]; then mount --bind {q(str(d / 'bashrc'))} /root/.bashrc; fi
mount -t tmpfs -o mode=1777,size=256m shm /dev/shm
exec setpriv --bounding-set -sys_time tini -s -- {_SSHD} -D -e -f {q(str(d / 'sshd_config'))}
"""
        _write(d / "init.sh", script, 0o755)
        # sshd makes bash read ~/.bashrc even for `ssh host cmd`; the machine's own
        # (pyenv and the like) costs ~1 s a command and is no business of a lab host.
        _write(d / "bashrc", "# splitbrain lab host: deliberately empty\n")
        argv = ["ip", "netns", "exec", hp.netns, "unshare", "--uts", "--pid", "--mount", "--fork",
                "--mount-proc", "--kill-child", "sh", str(d / "init.sh")]
        if cgroup is not None:
            argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *argv]
        with open(d / "sshd.log", "ab") as logf:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                    start_new_session=True, close_fds=True)
        _CHILDREN[proc.pid] = proc
        # The launcher becomes `unshare`, whose one child is the host's init.
        deadline = time.monotonic() + 10.0
        init = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LabError(f"host {hp.name} of lab {self.name} failed to start "
                               f"(exit {proc.returncode}): {_tail(d / 'sshd.log')}")
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(proc.pid)
                kids = p.children() if p.name() == "unshare" else []
                if kids:
                    init = kids[0].pid
                    break
            time.sleep(0.005)
        if init is None:
            raise LabError(f"host {hp.name} of lab {self.name}: init did not start within 10 s")
        _write(d / "init.json", json.dumps({
            "launcher": proc.pid, "init": init, "init_start": _proc_start(init)}) + "\n")

    def _wait_ssh(self, plan: list[_HostPlan], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(plan)
        while pending:
            # Poll the listen table, not the port: each probe connection costs sshd a
            # fork and re-exec, which adds up on a loaded machine. One banner at the end.
            pending = [hp for hp in pending
                       if not (_listening(self._init_pid(hp), 22) and _ssh_banner(hp.address, 22, 2.0))]
            if not pending:
                return
            for hp in pending:
                if self._sshd_pid(hp) is None and self._init_pid(hp) is None:
                    raise LabError(f"sshd on {hp.name} ({hp.address}) of lab {self.name} died: "
                                   f"{_tail(hp.state_dir / 'sshd.log')}")
            if time.monotonic() > deadline:
                hp = pending[0]
                raise LabError(f"sshd on {hp.name} ({hp.address}) of lab {self.name} did not "
                               f"answer within {timeout:.0f} s; sshd log: "
                               f"{_tail(hp.state_dir / 'sshd.log')}")
            time.sleep(0.02)

    def _kill_host(self, hp: _HostPlan, cgroup: Path | None) -> None:
        """SIGKILL everything of one host: its init (hence its PID namespace), the
        processes in its cgroup and any process still inside its network namespace."""
        if cgroup is not None and cgroup.exists():
            _thaw(cgroup)
        pids: set[int] = set()
        rec = self._init_record(hp)
        init = self._init_pid(hp)
        if init is not None:
            pids.add(init)
        if rec:
            launcher = int(rec.get("launcher", 0))
            with contextlib.suppress(psutil.Error):
                if launcher and psutil.Process(launcher).name() == "unshare":
                    pids.add(launcher)
        if cgroup is not None:
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in (cgroup / "cgroup.procs").read_text().split())
        if Path("/run/netns", hp.netns).exists():
            out = _run(["ip", "netns", "pids", hp.netns], check=False).stdout
            pids.update(int(x) for x in out.split() if x.isdigit())
        pids.discard(os.getpid())
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _reap_children()
        deadline = time.monotonic() + 5.0
        while pids and time.monotonic() < deadline:
            _reap_children()
            pids = {p for p in pids if _running(p)}
            if pids:
                time.sleep(0.01)
        if pids:
            raise LabError(f"processes {sorted(pids)} of {hp.name} in lab {self.name} "
                           "survived SIGKILL")
        with contextlib.suppress(OSError):
            (hp.state_dir / "init.json").unlink()

    # --- down and status ---------------------------------------------------------------

    def down(self) -> None:
        """Remove every process, namespace, interface, cgroup and file of this lab; safe twice."""
        _require_root()
        with self._locked():
            plan = {hp.name: hp for hp in self.plan()}
            # Hosts of a lab built with more nodes than this object knows about.
            prefix = f"sb-{self.name}-n"
            if Path("/run/netns").exists():
                for ns in os.listdir("/run/netns"):
                    rest = ns[len(prefix):]
                    if ns.startswith(prefix) and rest.isdigit() and f"n{rest}" not in plan:
                        i = int(rest)
                        plan[f"n{i}"] = _HostPlan(i, f"n{i}", f"{self.subnet}.{10 + i}", ns,
                                                  f"sb{self.tag}v{i}", f"sb{self.tag}p{i}",
                                                  self.dir / f"n{i}")
            base, _kind = self._cgroup_base()
            errors: list[str] = []
            for hp in plan.values():
                cg = base / hp.name if base is not None else None
                try:
                    self._kill_host(hp, cg)
                except LabError as e:
                    errors.append(str(e))
                if Path("/run/netns", hp.netns).exists():
                    r = _run(["ip", "netns", "del", hp.netns], check=False)
                    if r.returncode != 0:
                        errors.append(f"ip netns del {hp.netns}: {r.stderr.strip()}")
                for link in (hp.veth, hp.peer):
                    if _link_exists(link):
                        _run(["ip", "link", "del", link], check=False)
                if cg is not None:
                    _rmdir_retry(cg)
            # veths of hosts beyond what we know (e.g. the namespace vanished already)
            for link in os.listdir("/sys/class/net"):
                if link.startswith(f"sb{self.tag}v") or link.startswith(f"sb{self.tag}p"):
                    _run(["ip", "link", "del", link], check=False)
            if _link_exists(self.bridge):
                r = _run(["ip", "link", "del", self.bridge], check=False)
                if r.returncode != 0:
                    errors.append(f"ip link del {self.bridge}: {r.stderr.strip()}")
            if base is not None:
                _rmdir_retry(base)
                with contextlib.suppress(OSError):
                    base.parent.rmdir()  # shared by all labs: only when the last one is gone
            if errors:
                raise LabError(f"lab {self.name} not fully removed: {'; '.join(errors)}")
            shutil.rmtree(self.dir, ignore_errors=True)

    def status(self) -> list[dict[str, Any]]:
        """Per host: address, whether its namespace exists, its sshd runs, and whether the
        harness can log in with the lab's key and known_hosts (a real SSH session)."""
        plan = self.plan()
        try:
            hosts = {h.name: h for h in self.hosts()}
        except (LabError, ConfigError):
            hosts = {}

        def one(hp: _HostPlan) -> dict[str, Any]:
            netns = Path("/run/netns", hp.netns).exists()
            sshd = self._sshd_pid(hp)
            ok, why = False, "no inventory" if hp.name not in hosts else ""
            if netns and hp.name in hosts:
                ok, why = _ssh_login(hosts[hp.name])
            return {"host": hp.name, "address": hp.address, "netns": netns,
                    "sshd_pid": sshd, "sshd_alive": sshd is not None, "ssh_ok": ok,
                    "ssh_error": why or None}

        with ThreadPoolExecutor(max_workers=min(16, len(plan))) as ex:
            return list(ex.map(one, plan))


def _ssh_login(host: Host) -> tuple[bool, str]:
    from harness.control.ssh import SSHRemote
    from harness.errors import RemoteError

    try:
        with SSHRemote(host, connect_timeout=3.0) as r:
            r.run("true", timeout=5.0)
        return True, ""
    except RemoteError as e:
        return False, str(e)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, veth interfaces, sshd); "
                       "run as root, or point splitbrain at machines with a nodes file")


def _cgroup2_mount() -> Path | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            f = line.split()
            if len(f) >= 3 and f[2] == "cgroup2":
                return Path(f[1])
    return None


def _thaw(cgroup: Path) -> None:
    with contextlib.suppress(OSError):
        if (cgroup / "freezer.state").exists():
            (cgroup / "freezer.state").write_text("THAWED\n")
        elif (cgroup / "cgroup.freeze").exists():
            (cgroup / "cgroup.freeze").write_text("0\n")


def _rmdir_retry(path: Path) -> None:
    deadline = time.monotonic() + 2.0
    while path.exists():
        try:
            path.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                log.warning("cannot remove cgroup %s", path)
                return
            time.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


_REAP_LOCK = threading.Lock()


def _reap_children() -> None:
    with _REAP_LOCK:
        for pid, proc in list(_CHILDREN.items()):
            if proc.poll() is not None:
                del _CHILDREN[pid]


def _listening(pid: int | None, port: int) -> bool:
    """Whether a TCP socket listens on ``port`` in the network namespace of ``pid``."""
    if pid is None:
        return False
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    want = f":{port:04X}"
    return any(f[1].endswith(want) and f[3] == "0A" for f in (ln.split() for ln in lines))


def _ssh_banner(address: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"(no log at {path})"
    return " | ".join(text[-lines:]) or f"(empty log {path})"


def _paths_under_tmp() -> list[str]:
    """The harness's own directories (checkout, venv) that a private /tmp would hide."""
    import harness

    found: list[str] = []
    for p in (Path(harness.__file__).resolve().parents[1], Path(sys.prefix).resolve()):
        if p.is_relative_to("/tmp") and p != Path("/tmp"):
            if any(p.is_relative_to(f) for f in found):
                continue
            found = [f for f in found if not Path(f).is_relative_to(p)] + [str(p)]
    return found
