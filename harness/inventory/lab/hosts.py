"""A lab host's life: its files, its freezer cgroup, its init and sshd, and its death.

Each host runs in its own UTS, mount and PID namespace with ``tini -s`` as init,
so a whole host dies with one SIGKILL to its init and killed daemons never
linger as zombies. It gets private ``/run`` (sshd needs ``/run/sshd``), ``/tmp``,
``/srv``, ``/dev/shm``, ``/etc/hosts`` and root's ``.bashrc``; the rest of the
file system is shared with the machine. ``CAP_SYS_TIME`` is dropped from its
bounding set, so nothing in a host can move the real clock: clock faults go
through libfaketime, preloaded by sshd into every session and steered by a
per-host offset file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from harness.core.errors import LabError, RemoteError
from harness.core.remote import Host
from harness.inventory.lab.network import run
from harness.inventory.lab.state import HostPlan, new_ed25519_key, proc_start, write_atomic

__all__ = ["SSHD", "TOOLS", "find_libfaketime", "require_root", "write_host_files",
           "cgroup_base", "ensure_cgroup", "thaw", "rmdir_retry", "init_pid", "host_alive",
           "sshd_pid", "launch", "wait_ssh", "kill_host", "ssh_login", "ssh_banner"]

log = logging.getLogger(__name__)

SSHD = "/usr/sbin/sshd"
TOOLS = ("ip", "unshare", "setpriv", "tini", "mount", "hostname")
_FREEZER_V1 = Path("/sys/fs/cgroup/freezer")
# Launchers started by this process; reaped so they do not stay zombies.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_REAP_LOCK = threading.Lock()


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


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, veth interfaces, sshd); "
                       "run as root, or point splitbrain at machines with a nodes file")


# --- files -----------------------------------------------------------------------------

def write_host_files(hp: HostPlan, plan: Sequence[HostPlan], client_pub: str,
                     faketime: str | None, lab_name: str) -> str:
    """The host's private directories, host key, sshd config and /etc/hosts; its public key."""
    d = hp.state_dir
    for sub in ("run/sshd", "tmp", "srv"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(d / "run" / "sshd", 0o755)
    os.chmod(d / "tmp", 0o1777)
    hostkey = d / "ssh_host_ed25519_key"
    if not hostkey.exists():
        priv, pub = new_ed25519_key()
        write_atomic(hostkey, priv, 0o600)
        write_atomic(d / "ssh_host_ed25519_key.pub", pub + "\n")
    write_atomic(d / "authorized_keys", client_pub + "\n", 0o600)
    others = "\n".join(f"{p.address}\t{p.name}" for p in plan)
    write_atomic(d / "hosts", f"127.0.0.1\tlocalhost\n{others}\n")
    setenv = ""
    if faketime:
        setenv = (f"SetEnv LD_PRELOAD={faketime} FAKETIME_TIMESTAMP_FILE={d / 'faketime'} "
                  "FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1\n")
    write_atomic(d / "sshd_config", f"""\
# splitbrain lab {lab_name}, host {hp.name}: generated, rewritten by `lab up`
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


# --- cgroups ---------------------------------------------------------------------------

def _cgroup2_mount() -> Path | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            f = line.split()
            if len(f) >= 3 and f[2] == "cgroup2":
                return Path(f[1])
    return None


def cgroup_base(lab_name: str) -> tuple[Path | None, str | None]:
    """Where this lab's freezer cgroups go, and which kind (v1 freezer or v2)."""
    if (_FREEZER_V1 / "freezer.state").exists() or (_FREEZER_V1 / "tasks").exists():
        return _FREEZER_V1 / "splitbrain" / lab_name, "freezer-v1"
    v2 = _cgroup2_mount()
    if v2 is not None:
        return v2 / "splitbrain" / lab_name, "v2"
    return None, None


def ensure_cgroup(base: Path | None, hp: HostPlan) -> Path | None:
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


def thaw(cgroup: Path) -> None:
    with contextlib.suppress(OSError):
        if (cgroup / "freezer.state").exists():
            (cgroup / "freezer.state").write_text("THAWED\n")
        elif (cgroup / "cgroup.freeze").exists():
            (cgroup / "cgroup.freeze").write_text("0\n")


def rmdir_retry(path: Path) -> None:
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


# --- processes -------------------------------------------------------------------------

def _init_record(hp: HostPlan) -> dict[str, Any] | None:
    try:
        rec = json.loads((hp.state_dir / "init.json").read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def init_pid(hp: HostPlan) -> int | None:
    """Root-namespace pid of the host's tini, if that very process still runs."""
    rec = _init_record(hp)
    if not rec:
        return None
    pid = int(rec.get("init", 0))
    start = proc_start(pid) if pid else None
    if start is None or abs(start - float(rec.get("init_start", 0))) > 0.5:
        return None
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:
        return None
    return pid


def host_alive(hp: HostPlan) -> bool:
    """Init running, inside the namespace the lab's netns file names (not a stale one)."""
    pid = init_pid(hp)
    if pid is None:
        return False
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{hp.netns}").st_ino
    except OSError:
        return False


def sshd_pid(hp: HostPlan) -> int | None:
    pid = init_pid(hp)
    if pid is None:
        return None
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(pid).children():
            if child.name() == "sshd" and child.status() != psutil.STATUS_ZOMBIE:
                return int(child.pid)
    return None


def launch(hp: HostPlan, cgroup: Path | None, faketime: str | None, lab_name: str) -> None:
    """Start the host afresh: its namespaces, private mounts, init and sshd."""
    kill_host(hp, cgroup, lab_name)
    d = hp.state_dir
    if faketime:
        write_atomic(d / "faketime", "+0\n")
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
exec setpriv --bounding-set -sys_time tini -s -- {SSHD} -D -e -f {q(str(d / 'sshd_config'))}
"""
    write_atomic(d / "init.sh", script, 0o755)
    # sshd makes bash read ~/.bashrc even for `ssh host cmd`; the machine's own
    # (pyenv and the like) costs ~1 s a command and is no business of a lab host.
    write_atomic(d / "bashrc", "# splitbrain lab host: deliberately empty\n")
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
            raise LabError(f"host {hp.name} of lab {lab_name} failed to start "
                           f"(exit {proc.returncode}): {_tail(d / 'sshd.log')}")
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(proc.pid)
            kids = p.children() if p.name() == "unshare" else []
            if kids:
                init = kids[0].pid
                break
        time.sleep(0.005)
    if init is None:
        raise LabError(f"host {hp.name} of lab {lab_name}: init did not start within 10 s")
    write_atomic(d / "init.json", json.dumps({
        "launcher": proc.pid, "init": init, "init_start": proc_start(init)}) + "\n")


def wait_ssh(plan: Sequence[HostPlan], timeout: float, lab_name: str) -> None:
    deadline = time.monotonic() + timeout
    pending = list(plan)
    while pending:
        # Poll the listen table, not the port: each probe connection costs sshd a
        # fork and re-exec, which adds up on a loaded machine. One banner at the end.
        pending = [hp for hp in pending
                   if not (_listening(init_pid(hp), 22) and ssh_banner(hp.address, 22, 2.0))]
        if not pending:
            return
        for hp in pending:
            if sshd_pid(hp) is None and init_pid(hp) is None:
                raise LabError(f"sshd on {hp.name} ({hp.address}) of lab {lab_name} died: "
                               f"{_tail(hp.state_dir / 'sshd.log')}")
        if time.monotonic() > deadline:
            hp = pending[0]
            raise LabError(f"sshd on {hp.name} ({hp.address}) of lab {lab_name} did not "
                           f"answer within {timeout:.0f} s; sshd log: "
                           f"{_tail(hp.state_dir / 'sshd.log')}")
        time.sleep(0.02)


def kill_host(hp: HostPlan, cgroup: Path | None, lab_name: str) -> None:
    """SIGKILL everything of one host: its init (hence its PID namespace), the
    processes in its cgroup and any process still inside its network namespace."""
    if cgroup is not None and cgroup.exists():
        thaw(cgroup)
    pids: set[int] = set()
    rec = _init_record(hp)
    init = init_pid(hp)
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
        out = run(["ip", "netns", "pids", hp.netns], check=False).stdout
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
        raise LabError(f"processes {sorted(pids)} of {hp.name} in lab {lab_name} "
                       "survived SIGKILL")
    with contextlib.suppress(OSError):
        (hp.state_dir / "init.json").unlink()


def ssh_login(host: Host) -> tuple[bool, str]:
    """Whether the harness can log in with the lab's key and known_hosts (a real session)."""
    from harness.control.ssh import SSHRemote

    try:
        with SSHRemote(host, connect_timeout=3.0) as r:
            r.run("true", timeout=5.0)
        return True, ""
    except RemoteError as e:
        return False, str(e)


def ssh_banner(address: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


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
