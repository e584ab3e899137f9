"""A client gateway JVM on the harness's side, for a real system whose clients are Java.

ZooKeeper's, Kafka's and RocketMQ's clients are Java libraries; rather than a Python
client per system, each of those DBs runs one small gateway of ours
(``harness/dbs/java/<system>/``) on this machine: one loopback port per node, speaking the
reference node's client protocol (``node_impl/client.py``), so the project's workloads
drive the real system through its own client unchanged. :class:`Gateway` is the process
(free ports, start, liveness, stop; it exits by itself when our end of its stdin closes,
so a harness that dies takes it along); :class:`GatewayDB` is what those DBs share around
it: one server JVM per node by pid file, the program built by :mod:`harness.dbs.maven`,
the gateway's ports, command line and lifetime, the node's start, and its teardown.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from harness.core.errors import ConfigError, RemoteError
from harness.dbs.daemon import PidfileDaemonDB, durable_mkdir, raise_if_exited
from harness.dbs.maven import require_java

if TYPE_CHECKING:
    from harness.core.spec import RunContext
    from harness.dbs.maven import JavaProgram

__all__ = ["Gateway", "GatewayDB", "free_ports", "gateway_status"]

log = logging.getLogger(__name__)


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports free now (the gateway binds them a moment later)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def gateway_status(addr: tuple[str, int], timeout: float, kind: str = "status") -> dict | None:
    """One request of ``kind`` to a gateway port; None when it does not answer SUCCESS."""
    from node_impl.client import NodeClient

    client = NodeClient(addr[0], addr[1], timeout=timeout)
    try:
        reply = client.call({"type": kind}, timeout)
    except Exception as e:  # noqa: BLE001 - any failure means "not answering"
        log.debug("gateway %s %s failed: %s", kind, addr, e)
        return None
    finally:
        client.close()
    return reply if isinstance(reply, dict) and reply.get("code") == "SUCCESS" else None


class Gateway:
    """One gateway process: started once, restarted if it died, stopped at teardown."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.directory: Path | None = None

    def start(self, command: Sequence[str], directory: Path) -> None:
        """Start ``command`` with its output in ``directory/stdout.log`` (once)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            directory.mkdir(parents=True, exist_ok=True)
            self.directory = directory
            self._log = (directory / "stdout.log").open("ab")
            self._proc = subprocess.Popen(  # noqa: S603 - our own java command line
                list(command), stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT
            )
            log.info("%s gateway started (pid %d)", self.name, self._proc.pid)

    def check_alive(self) -> None:
        """RemoteError naming the gateway's log when the process has exited."""
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            tail = ""
            if self.directory is not None:
                with contextlib.suppress(OSError):
                    tail = (self.directory / "stdout.log").read_text(errors="replace")[-600:]
            raise RemoteError(
                f"the {self.name} gateway exited ({proc.returncode}); see "
                f"{self.directory}/stdout.log: {tail.strip()}",
                host="localhost",
            )

    def wait_listening(self, ports: Sequence[int], within: float) -> None:
        """Until every port accepts a connection (the gateway bound them), or RemoteError."""
        deadline = time.monotonic() + within
        for port in ports:
            while True:
                self.check_alive()
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        raise RemoteError(
                            f"the {self.name} gateway did not listen on {port} within {within:g} s",
                            host="localhost",
                        ) from None
                    time.sleep(0.2)

    def stop(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            out, self._log = self._log, None
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if out is not None:
            out.close()


class GatewayDB(PidfileDaemonDB):
    """A real Java system, one server JVM per node by pid file, driven through our gateway.

    A subclass names itself (:attr:`system`, :attr:`title`, :attr:`member`,
    :attr:`shared`), builds its program (:meth:`build`, with
    :func:`harness.dbs.maven.build_release`), writes a node's configuration (``_conf``)
    and command line (:meth:`command`), and says what ready and converged mean; its
    options carry ``root``, ``java``, ``gateway_heap_mb`` and ``leave_running``.
    ``_paths`` names at least ``dir``, ``data``, ``conf``, ``pid`` and ``stdout``.
    """

    system: ClassVar[str]
    """``kafka``: the gateway's name, its directory in the run, the errors' subject."""
    title: ClassVar[str]
    """``Kafka``: the system in the operator's log lines."""
    member: ClassVar[str] = "node"
    """What one node runs, in "stopping a Kafka node left running by an earlier run"."""
    shared: ClassVar[str] = "nodes"
    """What shares fixed ports when two nodes share an address ("brokers share ...")."""
    options: Any

    def __init__(self, options: Any) -> None:
        self.options = options
        self.root = options.root.rstrip("/")
        self._program: JavaProgram | None = None
        self._lock = threading.Lock()
        self._gw_ports: list[int] | None = None
        self.gateway = Gateway(self.system)

    # the program ----------------------------------------------------------------------
    def build(self) -> JavaProgram:
        """The program for these options (Maven once per release, then the cache)."""
        raise NotImplementedError

    def program(self) -> JavaProgram:
        """:meth:`build`, once per DB (setup runs on every node at once)."""
        with self._lock:
            if self._program is None:
                self._program = self.build()
            return self._program

    def command(self, ctx: RunContext, node: str, lib: str) -> str:
        """The node's server command line, its jars in ``lib`` on the host."""
        raise NotImplementedError

    def _conf(self, ctx: RunContext, node: str) -> str:
        raise NotImplementedError

    # layout ---------------------------------------------------------------------------
    def gateway_addresses(self, ctx: RunContext) -> dict[str, tuple[str, int]]:
        """The ``client`` service: the gateway's loopback port for each node, chosen once
        (free now). The servers' own ports are fixed, so every node needs its own address."""
        with self._lock:
            if self._gw_ports is None:
                addrs = [ctx.hosts[n].address for n in ctx.nodes]
                if len(set(addrs)) != len(addrs):
                    raise ConfigError(
                        f"{self.system} needs one address per node ({self.shared} share fixed "
                        "ports)",
                        field="nodes",
                    )
                self._gw_ports = free_ports(len(ctx.nodes))
            ports = self._gw_ports
        return {n: ("127.0.0.1", ports[i]) for i, n in enumerate(ctx.nodes)}

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        p = self._paths(ctx, node)
        return [p["stdout"], p["conf"]]

    # lifecycle ------------------------------------------------------------------------
    def prepare(self, ctx: RunContext, node: str, *, also: Sequence[str] = ()) -> None:
        """Setup's first steps: java on the host, a leftover of an earlier run stopped, the
        node's directory emptied in place (under the disk faults it is a lazy fs's mount
        point), the directories ``also`` made, the data directory made durably (a power
        cut must not take it), and the configuration written."""
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        q = shlex.quote
        require_java(remote, self.options.java)
        self.stop_leftover(ctx, node, f"a {self.title} {self.member}", self.system)
        made = "".join(f"mkdir -p {q(d)} && " for d in also)
        remote.run(
            f"mkdir -p {q(p['dir'])} && find {q(p['dir'])} -mindepth 1 -delete; "
            f"{made}{durable_mkdir(p['data'])}"
        )
        remote.run(f"cat > {q(p['conf'])}", stdin=self._conf(ctx, node))

    def start(self, ctx: RunContext, node: str) -> None:
        if not self.should_start(ctx, node):
            return
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        lib = self.program().install(remote, f"{self.root}/java")
        remote.start_daemon(
            self.command(ctx, node, lib), pidfile=p["pid"], logfile=p["stdout"], chdir=p["dir"]
        )

    def _alive(self, ctx: RunContext) -> None:
        """While the cluster starts: a server that exited is an error now, with its last
        log lines, not a timeout later."""
        for n in ctx.nodes:
            p = self._paths(ctx, n)
            raise_if_exited(ctx.remotes[n], p["pid"], p["stdout"], self.system)

    def teardown(self, ctx: RunContext, node: str) -> None:
        self.gateway.stop()
        self.stop_and_remove(
            ctx, node, self.title, {"pid": self.system}, leave=self.options.leave_running
        )

    # the gateway ----------------------------------------------------------------------
    def gateway_command(self, ctx: RunContext) -> list[str]:
        """The gateway's whole command line (:meth:`gateway_jvm` and its arguments)."""
        raise NotImplementedError

    def gateway_jvm(self, *properties: str, main: str) -> list[str]:
        """The gateway's JVM up to its arguments: small heap, serial GC, C1 only (it shares
        the machine with the harness), ``properties``, the program's jars, ``main``."""
        o = self.options
        return [
            o.java,
            f"-Xmx{o.gateway_heap_mb}m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            *properties,
            "-cp",
            f"{self.program().lib}/*",
            main,
        ]

    def _gateway_dir(self, ctx: RunContext) -> str:
        return f"{ctx.store_dir}/{self.system}-gateway"

    def start_gateway(self, ctx: RunContext, deadline: float | None = None) -> None:
        """Start the gateway (once); with ``deadline`` (``time.monotonic()``), wait until it
        listens on every node's port, for at least 10 s."""
        self.gateway.start(self.gateway_command(ctx), Path(self._gateway_dir(ctx)))
        if deadline is not None:
            ports = [a[1] for a in self.gateway_addresses(ctx).values()]
            self.gateway.wait_listening(ports, max(10.0, deadline - time.monotonic()))
