"""A lab host's life: its files, its freezer cgroup, its init and sshd, and its death.

Each host runs in its own UTS, mount and PID namespace with ``tini -s`` as init,
so a whole host dies with one SIGKILL to its init and killed daemons never
linger as zombies. ``CAP_SYS_TIME`` is dropped from its bounding set, so nothing
in a host can move the real clock: clock faults go through libfaketime,
preloaded by sshd into every session and steered by a per-host offset file.

A host is a host to a packaged database, so what a package keeps per machine is
private to it (see :data:`OVERLAID`, :data:`BOUND`): ``/etc``, ``/var/lib`` and
``/var/log`` are overlayfs mounts whose lower layer is the machine's own
directory (installed packages' config, system users' data dirs and log dirs
are there, at no copying cost) and whose upper layer, the host's changes, lives
in its state dir; ``/run`` (emptied at each launch, as a boot would), ``/tmp``,
``/srv`` and ``/dev/shm`` start empty. The harness's own paths under those
(``/var/lib/splitbrain``, where the lab state, the journal and the built-in DBs'
data live; the lab's state root; the checkout and venv) are bound back from
the machine, so the lab's sshd, libfaketime's offset file and ``lab down``'s
cleanup see one file system, as do the machine's own mounts under the overlaid
directories. ``/usr``, ``/opt``, ``/home``, ``/root``, ``/var/tmp``,
``/var/cache`` and the rest stay shared with the machine.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from harness.core.errors import LabError, RemoteError
from harness.core.remote import Host
from harness.inventory.lab.network import run
from harness.inventory.lab.state import HostPlan, new_ed25519_key, proc_start, write_atomic

__all__ = [
    "SSHD",
    "TOOLS",
    "find_libfaketime",
    "require_root",
    "write_host_files",
    "cgroup_base",
    "ensure_cgroup",
    "thaw",
    "rmdir_retry",
    "init_pid",
    "host_alive",
    "sshd_pid",
    "launch",
    "launch_script",
    "shared_with_machine",
    "OVERLAID",
    "BOUND",
    "HARNESS_SHARED",
    "wait_ssh",
    "kill_host",
    "ssh_login",
    "ssh_banner",
]

log = logging.getLogger(__name__)

SSHD = "/usr/sbin/sshd"
TOOLS = ("ip", "unshare", "setpriv", "tini", "mount", "hostname")
_FREEZER_V1 = Path("/sys/fs/cgroup/freezer")
OVERLAID = ("/etc", "/var/lib", "/var/log")
"""Seeded from the machine (overlayfs, machine's dir as the read-only lower layer)."""
BOUND = ("/run", "/tmp", "/srv")
"""Empty per-host directories under the host's state dir, bound in place."""
HARNESS_SHARED = "/var/lib/splitbrain"
"""Bound back from the machine inside every host: the lab's state, the fault journal
and the built-in DBs' data roots, which ``lab down`` removes from the machine's view."""
_STAGE = "/dev/shm"
"""Where the launch script stages the machine's paths before hiding them; the host's
own empty ``/dev/shm`` is mounted over it once every private mount is in place."""
# Launchers started by this process; reaped so they do not stay zombies.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_REAP_LOCK = threading.Lock()


def find_libfaketime() -> str | None:
    """Path of libfaketime.so.1, or None when the faketime package is missing."""
    try:
        out = subprocess.run(
            ["dpkg", "-L", "libfaketime"], capture_output=True, text=True, timeout=10
        ).stdout
        for line in out.splitlines():
            if line.endswith("/libfaketime.so.1") and os.path.exists(line):
                return line
    except (OSError, subprocess.SubprocessError):
        pass
    for base in (
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
        "/usr/local/lib",
        "/usr/lib64",
    ):
        for p in (f"{base}/faketime/libfaketime.so.1", f"{base}/libfaketime.so.1"):
            if os.path.exists(p):
                return p
    return None


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError(
            "the lab needs root (network namespaces, veth interfaces, sshd); "
            "run as root, or point splitbrain at machines with a nodes file"
        )


# --- files -----------------------------------------------------------------------------


def write_host_files(
    hp: HostPlan, plan: Sequence[HostPlan], client_pub: str, faketime: str | None, lab_name: str
) -> str:
    """The host's private directories, host key, sshd config and /etc/hosts; its public key."""
    d = hp.state_dir
    for sub in ("run/sshd", "tmp", "srv"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for top in OVERLAID:
        for layer in ("upper", "work"):
            (d / layer / _flat(top)).mkdir(parents=True, exist_ok=True)
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
        setenv = (
            f"SetEnv LD_PRELOAD={faketime} FAKETIME_TIMESTAMP_FILE={d / 'faketime'} "
            "FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1\n"
        )
    write_atomic(
        d / "sshd_config",
        f"""\
# splitbrain lab {lab_name}, host {hp.name}: generated, rewritten by `lab up`
Port 22
AddressFamily inet
ListenAddress 0.0.0.0
HostKey {hostkey}
PidFile /run/sshd.pid
AuthorizedKeysFile {d / "authorized_keys"}
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
{setenv}""",
    )
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


def launch_script(hp: HostPlan, *, state_root: Path) -> str:
    """The host's init script: private mounts, then ``exec`` of tini and sshd.

    Every path the script needs from the machine (the host's state dir, which the
    overlays' upper layers live in, and each path to bind back) is first bound
    into a staging tmpfs, because once ``/var/lib`` (say) is overlaid, the
    machine's ``/var/lib/splitbrain/lab/...`` is no longer reachable by name, and
    an upper layer may not be reached through another overlay. The stage is then
    unmounted: the host keeps only its own mounts.
    """
    q = shlex.quote
    d = hp.state_dir
    keep = _paths_to_share(state_root)
    st = f"{_STAGE}/state"
    lines = [
        "set -e",
        "echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet",
        f"hostname {q(hp.name)}",
        f"mount -t tmpfs -o mode=700,size=1m sb-stage {_STAGE}",
        f"mkdir {st}",
        f"mount --bind {q(str(d))} {st}",
    ]
    staged: list[tuple[str, str]] = []
    for i, path in enumerate(keep):
        at = f"{_STAGE}/keep{i}"
        lines.append(f"mkdir {at}" if os.path.isdir(path) else f"touch {at}")
        lines.append(f"mount --bind {q(path)} {at}")
        staged.append((path, at))
    # The machine's mounts under /run (other labs' /run/netns entries) were copied
    # into this mount namespace; hidden under the host's /run they would still pin
    # those namespaces until this host dies.
    lines.append(
        "for m in $(awk '$5 ~ \"^/run/\" {print $5}' /proc/self/mountinfo | sort -r); "
        'do umount -l "$m" 2>/dev/null || true; done'
    )
    for top in BOUND:
        lines.append(f"mount --bind {st}/{_flat(top)} {top}")
    for top in OVERLAID:
        f = _flat(top)
        lines.append(
            f"mount -t overlay -o lowerdir={top},upperdir={st}/upper/{f},workdir={st}/work/{f} "
            f"sb-{f} {top}"
        )
    for path, at in staged:
        if os.path.isdir(path):
            lines.append(f"mkdir -p {q(path)}")
        else:
            lines.append(f"mkdir -p {q(os.path.dirname(path))} && touch {q(path)}")
        lines.append(f"mount --bind {at} {q(path)}")
    lines += [
        f"mount --bind {st}/hosts /etc/hosts",
        f"if [ -f /root/.bashrc ]; then mount --bind {st}/bashrc /root/.bashrc; fi",
        *(f"umount {at}" for _path, at in reversed(staged)),
        f"umount {st}",
        f"umount {_STAGE}",
        "mount -t tmpfs -o mode=1777,size=256m shm /dev/shm",
        f"exec setpriv --bounding-set -sys_time tini -s -- {SSHD} -D -e "
        f"-f {q(str(d / 'sshd_config'))}",
    ]
    return "\n".join(lines) + "\n"


def launch(hp: HostPlan, cgroup: Path | None, faketime: str | None, lab_name: str) -> None:
    """Start the host afresh: its namespaces, private mounts, init and sshd."""
    kill_host(hp, cgroup, lab_name)
    d = hp.state_dir
    if faketime:
        write_atomic(d / "faketime", "+0\n")
    # A launch is a boot: /run starts empty (stale pid files and sockets would lie).
    shutil.rmtree(d / "run", ignore_errors=True)
    (d / "run" / "sshd").mkdir(parents=True)
    os.chmod(d / "run" / "sshd", 0o755)
    (d / "run" / "lock").mkdir()
    os.chmod(d / "run" / "lock", 0o1777)
    Path(HARNESS_SHARED).mkdir(parents=True, exist_ok=True)
    write_atomic(d / "init.sh", launch_script(hp, state_root=d.parent.parent), 0o755)
    # sshd makes bash read ~/.bashrc even for `ssh host cmd`; the machine's own
    # (pyenv and the like) costs ~1 s a command and is no business of a lab host.
    write_atomic(d / "bashrc", "# splitbrain lab host: deliberately empty\n")
    argv = [
        "ip",
        "netns",
        "exec",
        hp.netns,
        "unshare",
        "--uts",
        "--pid",
        "--mount",
        "--fork",
        "--mount-proc",
        "--kill-child",
        "sh",
        str(d / "init.sh"),
    ]
    if cgroup is not None:
        argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *argv]
    with open(d / "sshd.log", "ab") as logf:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    # The launcher becomes `unshare`, whose one child is the host's init.
    deadline = time.monotonic() + 10.0
    init = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(
                f"host {hp.name} of lab {lab_name} failed to start "
                f"(exit {proc.returncode}): {_tail(d / 'sshd.log')}"
            )
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(proc.pid)
            kids = p.children() if p.name() == "unshare" else []
            if kids:
                init = kids[0].pid
                break
        time.sleep(0.005)
    if init is None:
        raise LabError(f"host {hp.name} of lab {lab_name}: init did not start within 10 s")
    write_atomic(
        d / "init.json",
        json.dumps({"launcher": proc.pid, "init": init, "init_start": proc_start(init)}) + "\n",
    )


def wait_ssh(plan: Sequence[HostPlan], timeout: float, lab_name: str) -> None:
    deadline = time.monotonic() + timeout
    pending = list(plan)
    while pending:
        # Poll the listen table, not the port: each probe connection costs sshd a
        # fork and re-exec, which adds up on a loaded machine. One banner at the end.
        pending = [
            hp
            for hp in pending
            if not (_listening(init_pid(hp), 22) and ssh_banner(hp.address, 22, 2.0))
        ]
        if not pending:
            return
        for hp in pending:
            if sshd_pid(hp) is None and init_pid(hp) is None:
                raise LabError(
                    f"sshd on {hp.name} ({hp.address}) of lab {lab_name} died: "
                    f"{_tail(hp.state_dir / 'sshd.log')}"
                )
        if time.monotonic() > deadline:
            hp = pending[0]
            raise LabError(
                f"sshd on {hp.name} ({hp.address}) of lab {lab_name} did not "
                f"answer within {timeout:.0f} s; sshd log: "
                f"{_tail(hp.state_dir / 'sshd.log')}"
            )
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
        raise LabError(f"processes {sorted(pids)} of {hp.name} in lab {lab_name} survived SIGKILL")
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


def _flat(path: str) -> str:
    """``/var/lib`` -> ``var_lib``: a private directory's name inside the state dir."""
    return path.strip("/").replace("/", "_")


def _unescape(field: str) -> str:
    """A /proc/self/mountinfo path field, with its octal escapes (``\\040``) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _paths_to_share(state_root: Path) -> list[str]:
    """What the machine has under a host's private directories that the host must still
    see as the machine does: the harness's own tree (:data:`HARNESS_SHARED`, the lab's
    state root, its checkout and venv, whose python runs inside the hosts) and the
    machine's own mounts under ``/etc`` (an overlay's lower layer does not show them:
    a container's bind-mounted ``/etc/resolv.conf``, say).

    Outermost first, nothing nested in another: a bind mount carries its whole tree.
    """
    import harness

    private = (*OVERLAID, *BOUND)
    wanted = [
        HARNESS_SHARED,
        str(state_root.resolve()),
        str(Path(harness.__file__).resolve().parents[1]),
        str(Path(sys.prefix).resolve()),
    ]
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = _unescape(line.split()[4])
            # Only /etc's: those under /var/lib are a container runtime's business
            # (docker's layers), not a host's.
            if Path(point).is_relative_to("/etc") and point != "/etc":
                wanted.append(point)
    found: list[str] = []
    for p in sorted(set(wanted), key=lambda x: (x.count("/"), x)):
        under = any(Path(p).is_relative_to(t) and p != t for t in private)
        if not under or not os.path.exists(p) or any(Path(p).is_relative_to(f) for f in found):
            continue
        found.append(p)
    return found


def shared_with_machine(path: str, state_root: Path) -> bool:
    """Whether ``path`` in a lab host is the machine's same path (what the machine may
    clean up for the host), rather than the host's own copy under its state dir."""
    p = Path(os.path.normpath(path))
    if any(p.is_relative_to(k) for k in _paths_to_share(state_root)):
        return True
    return not any(p.is_relative_to(t) for t in (*OVERLAID, *BOUND))
