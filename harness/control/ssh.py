"""The paramiko implementation of :class:`harness.core.remote.Remote`.

One SSH connection per host, shared by every thread that talks to it: paramiko
multiplexes channels over one transport, so only (re)connecting needs a lock.
Faults make connections die (a killed sshd, a frozen host, a partition that
includes the harness), so a command that finds the connection gone reconnects
once before it reports the host unreachable; a command that was already running
when the link died is never re-sent, because it may not be idempotent.

Host keys are verified by default; turning that off is an explicit choice on the
host and is logged. Command environments are logged by name only: values often
hold passwords or tokens.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import select
import shlex
import socket
import stat
import threading
import time
import uuid
from pathlib import Path

import paramiko

from harness.core.errors import RemoteCommandError, RemoteError
from harness.core.remote import CommandResult, Host

__all__ = ["SSHRemote"]

log = logging.getLogger(__name__)

_RUN_ID = "SPLITBRAIN_RUN_ID"
_ENV_NAME_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _env_prefix(env: dict[str, str] | None) -> str:
    if not env:
        return ""
    parts = []
    for k, v in env.items():
        if not k or not set(k) <= _ENV_NAME_OK or k[0].isdigit():
            raise ValueError(f"not a valid environment variable name: {k!r}")
        parts.append(f"{k}={shlex.quote(str(v))}")
    return "export " + " ".join(parts) + "; "


EMULATED_CONNECT_TIMEOUT = 20.0
"""Connect timeout for a host whose CPU is emulated (``Host.emulated_cpu``,
a VM lab guest under TCG): its key exchange alone can take several
seconds on a loaded machine, where 5 s fits every other host."""


def _connect_failure(h: Host, e: BaseException) -> str:
    """What went wrong when SSH to ``h`` failed with ``e``, for the operator to act on: a
    host key that does not match or is not known, a key refused, or a host unreachable."""
    if isinstance(e, paramiko.BadHostKeyException):
        return (
            f"host key verification failed: the server's key "
            f"({e.key.get_name()}) does not match {h.known_hosts or 'known_hosts'}"
        )
    if isinstance(e, paramiko.AuthenticationException):
        return f"authentication failed for {h.user}@{h.address}:{h.port} with key {h.key_path}: {e}"
    if isinstance(e, paramiko.SSHException):
        msg = str(e)
        if "not found in known_hosts" in msg:
            msg = (
                f"host key verification failed: {h.address}:{h.port} is not in "
                f"{h.known_hosts or 'the system known_hosts'}"
            )
        return f"SSH to {h.address}:{h.port} failed: {msg}"
    why = (
        "timed out" if isinstance(e, (socket.timeout, TimeoutError)) else str(e) or type(e).__name__
    )
    return f"cannot connect to {h.address}:{h.port}: {why}"


class SSHRemote:
    """Control channel to one host over SSH (see module docstring for the rules)."""

    def __init__(self, host: Host, *, connect_timeout: float | None = None) -> None:
        self.host = host
        if connect_timeout is None:
            emulated = host.emulated_cpu
            connect_timeout = EMULATED_CONNECT_TIMEOUT if emulated else 5.0
        self.connect_timeout = connect_timeout
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.sftp_timeout = max(30.0, 4 * connect_timeout)
        """Seconds one SFTP request may wait for its answer (a silent link fails, not hangs)."""

    def __repr__(self) -> str:
        h = self.host
        return f"SSHRemote({h.user}@{h.address}:{h.port} as {h.name!r})"

    def __enter__(self) -> SSHRemote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- connection --------------------------------------------------------------------

    def _connect(self) -> paramiko.SSHClient:
        h = self.host
        if h.key_path is not None and not os.path.isfile(h.key_path):
            raise RemoteError(f"private key {h.key_path} not found", host=h.name)
        client = paramiko.SSHClient()
        if h.verify_host_key:
            try:
                if h.known_hosts:
                    client.load_host_keys(h.known_hosts)
                else:
                    client.load_system_host_keys()
            except OSError as e:
                raise RemoteError(
                    f"cannot read known_hosts {h.known_hosts}: {e.strerror}", host=h.name
                ) from None
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            log.warning("%s: host key NOT verified (verify_host_key is off)", h.name)
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        t = self.connect_timeout
        try:
            client.connect(
                h.address,
                port=h.port,
                username=h.user,
                key_filename=h.key_path,
                timeout=t,
                banner_timeout=t,
                auth_timeout=t,
                look_for_keys=h.key_path is None,
                allow_agent=h.key_path is None,
                # paramiko waits an hour for a channel by default: SFTP (log fetching)
                # on a link that went silent would hold the cleanup that long.
                channel_timeout=t,
            )
        except (paramiko.SSHException, OSError, EOFError) as e:
            client.close()
            raise RemoteError(_connect_failure(h, e), host=h.name) from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(15)
        log.debug("%s: connected to %s:%d", h.name, h.address, h.port)
        return client

    def connect(self) -> SSHRemote:
        """Open the connection now (it is otherwise opened by the first command)."""
        self._get()
        return self

    def _get(self, stale: paramiko.SSHClient | None = None) -> paramiko.SSHClient:
        """The live client; ``stale`` is one the caller saw fail, to be replaced."""
        with self._lock:
            if self._closed:
                raise RemoteError("remote is closed", host=self.host.name)
            c = self._client
            if c is not None and (c is stale or not _alive(c)):
                c.close()
                c = self._client = None
            if c is None:
                c = self._client = self._connect()
            return c

    def _open_channel(self, *, reconnect: bool = True) -> paramiko.Channel:
        client = self._get()
        deadline = time.monotonic() + self.connect_timeout
        delay = 0.02
        while True:
            try:
                return client.get_transport().open_session(timeout=self.connect_timeout)  # type: ignore[union-attr]
            except paramiko.ChannelException as e:
                # The server refused one more session (MaxSessions) but the connection is
                # fine: closing it would kill the other threads' commands. Wait for a slot.
                if time.monotonic() + delay > deadline:
                    raise RemoteError(
                        f"server refused a new session: {e.text} "
                        "(too many concurrent commands? raise MaxSessions)",
                        host=self.host.name,
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
            except (paramiko.SSHException, OSError, EOFError, AttributeError) as e:
                if _alive(client) or not reconnect:
                    # Connected but silent (a paused host): a new connection would only
                    # wait out the banner timeout as well.
                    raise RemoteError(
                        f"host does not answer: cannot open a session within "
                        f"{self.connect_timeout:.0f} s ({e or type(e).__name__})",
                        host=self.host.name,
                    ) from None
                log.info("%s: connection lost, reconnecting", self.host.name)
                break
        client = self._get(stale=client)
        try:
            return client.get_transport().open_session(timeout=self.connect_timeout)  # type: ignore[union-attr]
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as e:
            raise RemoteError(
                f"cannot open a session: {e or type(e).__name__}", host=self.host.name
            ) from None

    def _sftp(self) -> paramiko.SFTPClient:
        client = self._get()
        try:
            return _timed(client.open_sftp(), self.sftp_timeout)
        except (paramiko.SSHException, OSError, EOFError):
            pass
        client = self._get(stale=client)
        try:
            return _timed(client.open_sftp(), self.sftp_timeout)
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise RemoteError(
                f"cannot open SFTP: {e or type(e).__name__}", host=self.host.name
            ) from None

    def reset(self) -> None:
        """Drop the current connection (not the remote): the next command reconnects.

        A link that went silent (packets dropped, not refused) leaves paramiko's transport
        looking alive, and TCP's backoff may keep it silent long after the path is back;
        a heal retried after a cut asks for a fresh connection instead.
        """
        with self._lock:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()
                self._client = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._client is not None:
                self._client.close()
                self._client = None

    # --- commands ----------------------------------------------------------------------

    def _wrap(self, cmd: str, sudo: bool, env: dict[str, str] | None) -> str:
        full = _env_prefix(env) + cmd
        if sudo and self.host.user != "root":
            full = "sudo -n -- sh -c " + shlex.quote(full)
        return full

    def run(
        self,
        cmd: str,
        *,
        sudo: bool = False,
        timeout: float | None = 60.0,
        env: dict[str, str] | None = None,
        check: bool = True,
        stdin: str | bytes | None = None,
    ) -> CommandResult:
        return self._run(
            cmd, sudo=sudo, timeout=timeout, env=env, check=check, stdin=stdin, kill_on_timeout=True
        )

    def _run(
        self,
        cmd: str,
        *,
        sudo: bool,
        timeout: float | None,
        env: dict[str, str] | None,
        check: bool,
        stdin: str | bytes | None,
        kill_on_timeout: bool,
        reconnect: bool = True,
        retried: bool = False,
    ) -> CommandResult:
        # A marker in the environment lets a timeout find and kill what the command
        # started, children included (sshd offers no way to signal a session's group).
        run_id = uuid.uuid4().hex[:16] if timeout is not None and kill_on_timeout else None
        full = self._wrap(cmd, sudo, {**(env or {}), _RUN_ID: run_id} if run_id else env)
        if stdin is None:
            # The command reads no input from us, so we never send EOF: an EOF that
            # crosses the server's close of a quick command's session is, to OpenSSH, a
            # message for a channel that no longer exists, and it drops the whole
            # connection with every other thread's command on it.
            full = "exec </dev/null; " + full
        name = self.host.name
        log.debug("%s$ %s%s", name, cmd, f"  (env: {', '.join(env)})" if env else "")
        chan = self._open_channel(reconnect=reconnect)
        out, err = bytearray(), bytearray()
        deadline = None if timeout is None else time.monotonic() + timeout
        # paramiko waits for the reply to `exec` without a time limit; a host paused at
        # that moment would hang us. Closing the channel from a timer releases the wait.
        fired = threading.Event()
        exec_failed_on_live_link = False
        watchdog = None
        if timeout is not None:

            def fire() -> None:
                fired.set()
                chan.close()

            watchdog = threading.Timer(timeout, fire)
            watchdog.daemon = True
            watchdog.start()
        try:
            try:
                chan.exec_command(full)
            except (paramiko.SSHException, OSError, EOFError):
                if fired.is_set():
                    raise RemoteCommandError(
                        host=name, cmd=cmd, exit_status=None, stdout="", stderr=""
                    ) from None
                if reconnect and not retried and _alive(self._get()):
                    # The connection is fine but this session's exec was refused or its
                    # channel closed under load: nothing ran, so one fresh session is safe.
                    log.info("%s: exec of %r failed on a live connection; retrying once", name, cmd)
                    exec_failed_on_live_link = True
                else:
                    raise
            else:
                if stdin is not None:
                    _feed(chan, stdin.encode() if isinstance(stdin, str) else stdin)
            finally:
                if watchdog is not None:
                    watchdog.cancel()
            if exec_failed_on_live_link:
                chan.close()
                return self._run(
                    cmd,
                    sudo=sudo,
                    timeout=timeout,
                    env=env,
                    check=check,
                    stdin=stdin,
                    kill_on_timeout=kill_on_timeout,
                    retried=True,
                )
            while True:
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                # Output may still be in flight after the status; drain until EOF.
                # (A channel the watchdog closed is no finished command.)
                if (
                    not fired.is_set()
                    and chan.exit_status_ready()
                    and not chan.recv_ready()
                    and not chan.recv_stderr_ready()
                    and (chan.eof_received or chan.closed)
                ):
                    break
                if fired.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    if run_id is not None:
                        # In the background: on a paused host this waits out its own timeout.
                        threading.Thread(
                            target=self._kill_run,
                            args=(run_id, sudo),
                            name=f"kill-{name}-{run_id}",
                            daemon=True,
                        ).start()
                    raise RemoteCommandError(
                        host=name,
                        cmd=cmd,
                        exit_status=None,
                        stdout=out.decode(errors="replace"),
                        stderr=err.decode(errors="replace"),
                    )
                wait = (
                    0.02 if deadline is None else max(0.0, min(0.02, deadline - time.monotonic()))
                )
                select.select([chan], [], [], wait)
            status = chan.recv_exit_status()
        except (paramiko.SSHException, OSError, EOFError) as e:
            lost: RemoteError | None = RemoteError(
                f"connection lost while running {cmd!r}: {str(e) or type(e).__name__}", host=name
            )
            retry = (
                reconnect and not retried and not out and not err and not chan.exit_status_ready()
            )
        else:
            if status == -1:  # paramiko's value for a channel closed without an exit status
                lost = RemoteError(
                    f"the server closed the session running {cmd!r} without an exit status",
                    host=name,
                )
                # The same session death as above, seen as a close (8 threads on one
                # connection under load): retried by the same rule.
                retry = reconnect and not retried and not out and not err
            else:
                lost, retry = None, False
        finally:
            chan.close()
        if lost is not None:
            if not retry:
                raise lost
            # The session died before the command said anything (seen rarely with many
            # threads on one connection under load): reconnect if needed and run it once
            # more. The same rule as for a dropped connection before the command.
            log.info("%s: %s; retrying once", name, lost)
            return self._run(
                cmd,
                sudo=sudo,
                timeout=timeout,
                env=env,
                check=check,
                stdin=stdin,
                kill_on_timeout=kill_on_timeout,
                retried=True,
            )
        res = CommandResult(
            host=name,
            cmd=cmd,
            exit_status=status,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
        )
        if check and status != 0:
            raise RemoteCommandError(
                host=name, cmd=cmd, exit_status=status, stdout=res.stdout, stderr=res.stderr
            )
        return res

    def _kill_run(self, run_id: str, sudo: bool) -> None:
        """Best effort: SIGKILL every process of a timed-out command on the host."""
        script = (
            f"for f in /proc/[0-9]*/environ; do"
            f' if grep -qzx {_RUN_ID}={run_id} "$f" 2>/dev/null; then'
            f' p=${{f#/proc/}}; kill -s KILL "${{p%/environ}}" 2>/dev/null; fi; done; true'
        )
        try:
            self._run(
                script,
                sudo=sudo,
                timeout=10.0,
                env=None,
                check=False,
                stdin=None,
                kill_on_timeout=False,
                reconnect=False,
            )
        except RemoteError as e:
            log.info("%s: could not kill a timed-out command: %s", self.host.name, e)

    # --- files -------------------------------------------------------------------------

    def upload(self, local: str, remote: str) -> None:
        """Copy a file (or, given a directory, the whole tree) to ``remote``."""
        if Path(local).is_dir():
            self.upload_tree(local, remote)
            return
        sftp = self._sftp()
        try:
            _sftp_makedirs(sftp, posixpath.dirname(remote))
            _put(sftp, local, remote)
        except OSError as e:
            raise RemoteError(
                f"upload {local} -> {remote} failed: {_oserr(e)}", host=self.host.name
            ) from None
        finally:
            sftp.close()

    def upload_tree(self, local_dir: str, remote_dir: str) -> None:
        """Copy ``local_dir``'s contents into ``remote_dir`` (created), keeping file modes."""
        root = Path(local_dir)
        if not root.is_dir():
            raise RemoteError(f"upload_tree: {local_dir} is not a directory", host=self.host.name)
        sftp = self._sftp()
        try:
            _sftp_makedirs(sftp, remote_dir)
            for dirpath, dirnames, filenames in os.walk(root):
                rel = Path(dirpath).relative_to(root)
                rdir = posixpath.join(remote_dir, *rel.parts) if rel.parts else remote_dir
                for d in sorted(dirnames):
                    _sftp_makedirs(sftp, posixpath.join(rdir, d))
                for f in sorted(filenames):
                    lp = Path(dirpath, f)
                    if lp.is_symlink() and not lp.exists():
                        continue
                    _put(sftp, str(lp), posixpath.join(rdir, f))
        except OSError as e:
            raise RemoteError(
                f"upload {local_dir} -> {remote_dir} failed: {_oserr(e)}", host=self.host.name
            ) from None
        finally:
            sftp.close()

    def download(self, remote: str, local: str) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        sftp = self._sftp()
        try:
            # Into a temporary name: paramiko would leave an empty file behind on failure.
            tmp = f"{local}.part"
            sftp.get(remote, tmp)
            os.replace(tmp, local)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise RemoteError(
                f"download {remote} -> {local} failed: {_oserr(e)}", host=self.host.name
            ) from None
        finally:
            sftp.close()

    # --- daemons -----------------------------------------------------------------------

    def start_daemon(
        self,
        cmd: str,
        *,
        pidfile: str,
        logfile: str,
        env: dict[str, str] | None = None,
        chdir: str | None = None,
        sudo: bool = False,
    ) -> int:
        """Start ``cmd`` detached in its own session; returns its pid.

        The daemon's stdio goes to ``logfile`` (appended) so the SSH channel closes
        at once; ``exec`` keeps the pid in ``pidfile`` the daemon's own.
        """
        q = shlex.quote
        inner = f"echo $$ > {q(pidfile)}; exec {cmd}"
        script = (
            f"mkdir -p {q(posixpath.dirname(pidfile) or '.')} {q(posixpath.dirname(logfile) or '.')}"
            f" && rm -f {q(pidfile)}"
            + (f" && cd {q(chdir)}" if chdir else "")
            + f" && {{ setsid sh -c {q(inner)} >> {q(logfile)} 2>&1 < /dev/null & }}"
            f" && i=0; while [ ! -s {q(pidfile)} ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done;"
            f" cat {q(pidfile)}"
        )
        res = self.run(script, sudo=sudo, env=env, timeout=30.0)
        try:
            return int(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RemoteCommandError(
                host=self.host.name,
                cmd=cmd,
                exit_status=res.exit_status,
                stdout=res.stdout,
                stderr=res.stderr or f"no pid written to {pidfile}",
            ) from None

    def signal_daemon(self, pidfile: str, sig: str = "TERM", *, sudo: bool = False) -> bool:
        """Signal the daemon's process group (its children too); False if it is not running."""
        sig = sig.upper().removeprefix("SIG")
        if not sig.isalnum():
            raise ValueError(f"not a signal name: {sig!r}")
        script = (
            _read_pid(pidfile)
            + f' && {{ kill -s {sig} -- "-$p" 2>/dev/null || kill -s {sig} "$p" 2>/dev/null; }}'
        )
        return self.run(script, sudo=sudo, check=False, timeout=15.0).exit_status == 0

    def daemon_running(self, pidfile: str, *, sudo: bool = False) -> bool:
        script = _read_pid(pidfile) + " && " + _ALIVE
        return self.run(script, sudo=sudo, check=False, timeout=15.0).exit_status == 0

    def stop_daemon(self, pidfile: str, *, timeout: float = 10.0, sudo: bool = False) -> None:
        """TERM the daemon's group, wait up to ``timeout``, then KILL; remove the pid file.

        After KILL it waits up to :data:`KILL_WAIT_S` by the host's clock: on a loaded
        machine a killed process can spend seconds in D state or being reaped, and
        calling that "survived" made teardowns fail for processes gone moments later.
        A process still there is a one-line :class:`RemoteError`: host, pid, the
        signals sent and the seconds waited (never the script, which says nothing).
        """
        steps = max(1, int(timeout / 0.05))
        q = shlex.quote
        script = (
            f"if {_read_pid(pidfile)}; then t0=$(date +%s); sent=TERM;"
            ' kill -s TERM -- "-$p" 2>/dev/null || kill -s TERM "$p" 2>/dev/null;'
            f" i=0; while {_ALIVE} && [ $i -lt {steps} ]; do sleep 0.05; i=$((i+1)); done;"
            f" if {_ALIVE}; then sent=TERM,KILL; t1=$(date +%s);"
            ' kill -s KILL -- "-$p" 2>/dev/null || kill -s KILL "$p" 2>/dev/null;'
            f" while {_ALIVE} && [ $(($(date +%s) - t1)) -lt {KILL_WAIT_S} ]; do sleep 0.1; done;"
            f" fi; if {_ALIVE}; then"
            f' echo "{_SURVIVED} $p $sent $(($(date +%s) - t0))'
            " $(sed -n 's/^State:[[:space:]]*//p' /proc/$p/status 2>/dev/null | tr ' ' _)\";"
            f" exit 2; fi; fi; rm -f {q(pidfile)}"
        )
        what = f"stopping the daemon of pid file {pidfile}"
        try:
            res = self.run(script, sudo=sudo, check=False, timeout=timeout + KILL_WAIT_S + 15.0)
        except RemoteCommandError:  # only a timeout: the script always exits
            raise RemoteError(
                f"{what}: no answer within {timeout + KILL_WAIT_S + 15.0:.0f} s",
                host=self.host.name,
            ) from None
        if res.exit_status == 0:
            return
        for line in res.stdout.splitlines():
            f = line.split()
            if len(f) >= 4 and f[0] == _SURVIVED:
                state = f" (state {f[4].replace('_', ' ')})" if len(f) > 4 else ""
                raise RemoteError(
                    f"pid {f[1]} (pid file {pidfile}) still running{state} after "
                    f"{f[2].replace(',', ' then ')} to its process group, {f[3]} s waited",
                    host=self.host.name,
                )
        err = " ".join((res.stderr or res.stdout).split())[:200]
        raise RemoteError(f"{what} failed (exit {res.exit_status}): {err}", host=self.host.name)


KILL_WAIT_S = 30
"""Seconds ``stop_daemon`` waits for a process it sent SIGKILL to before it gives up."""
_SURVIVED = "splitbrain-stop-survived"


def _read_pid(pidfile: str) -> str:
    """Shell that sets ``$p`` from the pid file, failing unless it names a real process.

    A pid of 0 or 1 (a pid file truncated or written wrongly) is refused: ``kill -- -1``
    would signal every process the user may signal, and ``-0`` the caller's own group.
    """
    return (
        f'p=$(cat {shlex.quote(pidfile)} 2>/dev/null) && [ -n "$p" ]'
        ' && [ "$p" -eq "$p" ] 2>/dev/null && [ "$p" -gt 1 ]'
    )


# A zombie still answers kill -0; it is not running.
_ALIVE = (
    '{ kill -0 "$p" 2>/dev/null && ! grep -q "^State:[[:space:]]*Z" /proc/$p/status 2>/dev/null; }'
)


def _feed(chan: paramiko.Channel, data: bytes) -> None:
    """Send a command's input, then EOF, unless the command has already finished.

    Once the command ran, a failure here is no reason to run it again: a command that
    exits without reading all its input closes the session under us, and its exit status
    says what happened. The residual race (the server's close arriving between the check
    and the EOF) is paramiko's: it sends EOF without looking at the channel's state.
    """
    try:
        chan.sendall(data)
    except OSError:
        return
    if not chan.closed:
        chan.shutdown_write()


def _timed(sftp: paramiko.SFTPClient, timeout: float) -> paramiko.SFTPClient:
    """``sftp`` whose every request gives up after ``timeout`` s without an answer."""
    channel = sftp.get_channel()
    if channel is not None:
        channel.settimeout(timeout)
    return sftp


def _alive(client: paramiko.SSHClient) -> bool:
    t = client.get_transport()
    return t is not None and t.is_active()


def _oserr(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


def _put(sftp: paramiko.SFTPClient, local: str, remote: str) -> None:
    """Write beside the target and rename over it: replacing a binary that is running
    (a DB being upgraded) fails with ETXTBSY if written in place, and readers never
    see a half-written file."""
    tmp = f"{remote}.sb-upload"
    sftp.put(local, tmp)
    sftp.chmod(tmp, stat.S_IMODE(os.stat(local).st_mode))
    try:
        sftp.posix_rename(tmp, remote)
    except OSError:
        with contextlib.suppress(OSError):
            sftp.remove(tmp)
        raise


def _sftp_makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    if not path or path in ("/", "."):
        return
    try:
        if stat.S_ISDIR(sftp.stat(path).st_mode or 0):
            return
    except OSError:
        pass
    _sftp_makedirs(sftp, posixpath.dirname(path.rstrip("/")))
    try:
        sftp.mkdir(path)
    except OSError:
        # Another thread may have made it meanwhile; fail only if it still is not there.
        if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):
            raise
