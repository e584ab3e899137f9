"""A cluster of real node processes on loopback, for tests and benchmarks.

Each node is ``python -m node_impl`` in its own process, with its own data dir and
log file under ``base_dir``, so kills, pauses and restarts are real signals and
real recoveries. Ports are found by binding port 0; all of them are held at once
while choosing so that no two nodes get the same one.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from node_impl.client import NodeClient

__all__ = ["LocalCluster", "free_ports"]


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGKILL it if the harness dies, so no node outlives a crash."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports that were free a moment ago (all bound, then released together).

    They come from below the kernel's ephemeral range: a port the kernel handed out by
    ``bind(0)`` can be handed out again as the source port of any outgoing connection,
    and the nodes' own peer connections took one of a not yet started node's ports
    (that node then died with EADDRINUSE, under load, a few times in a hundred runs).
    """
    lo_eph, hi_eph = _ephemeral_range()
    low, high = (10000, lo_eph - 1) if lo_eph - 10000 >= 4 * n else (hi_eph + 1, 65535)
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    socks: list[socket.socket] = []
    try:
        for _ in range(50 * n):
            if len(socks) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, rng.randint(low, high)))
            except OSError:
                s.close()
                continue
            socks.append(s)
        while len(socks) < n:  # a crowded range: the kernel's choice, as before
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalCluster:
    """n nodes ``n1..nN`` as subprocesses; every method names a node by id."""

    def __init__(
        self,
        n: int,
        base_dir: Path,
        *,
        bug: str | None = None,
        extra_args: Iterable[str] = (),
        host: str = "127.0.0.1",
        heartbeat_ms: int = 100,
        election_timeout_ms: int = 500,
    ) -> None:
        if n < 1:
            raise ValueError(f"a cluster needs at least one node, got n={n}")
        self.n = n
        self.base_dir = Path(base_dir)
        self.bug = bug
        self.extra_args = tuple(extra_args)
        self.node_args: dict[str, tuple[str, ...]] = {}
        """Per node, arguments that replace ``extra_args`` (a node switched to another mode)."""
        self.host = host
        self.heartbeat_ms = heartbeat_ms
        self.election_timeout_ms = election_timeout_ms
        self.nodes = [f"n{i + 1}" for i in range(n)]
        ports = free_ports(2 * n, host)
        self.peer_ports = dict(zip(self.nodes, ports[:n], strict=True))
        self.client_ports = dict(zip(self.nodes, ports[n:], strict=True))
        self.node_peers: dict[str, str] = {}
        """Per node, a frozen ``--peers`` (set by :meth:`add_node`, so restarts keep them)."""
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, Any] = {}
        self._status_clients: dict[str, NodeClient] = {}
        self._closed = False
        for node in self.nodes:
            self.data_dir(node).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------ layout

    def data_dir(self, node: str) -> Path:
        return self.base_dir / node / "data"

    def log_path(self, node: str) -> Path:
        """stdout+stderr of every incarnation of the node, appended."""
        return self.base_dir / node / "process.log"

    @property
    def peers_arg(self) -> str:
        return ",".join(f"{n}={self.host}:{self.peer_ports[n]}" for n in self.nodes)

    def client_addr(self, node: str) -> tuple[str, int]:
        self._check(node)
        return self.host, self.client_ports[node]

    def peer_addr(self, node: str) -> tuple[str, int]:
        self._check(node)
        return self.host, self.peer_ports[node]

    def command(self, node: str) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "node_impl",
            "--id",
            node,
            "--peers",
            self.node_peers.get(node, self.peers_arg),
            "--data-dir",
            str(self.data_dir(node)),
            "--client-port",
            str(self.client_ports[node]),
            "--heartbeat-ms",
            str(self.heartbeat_ms),
            "--election-timeout-ms",
            str(self.election_timeout_ms),
        ]
        if self.bug:
            cmd += ["--bug", self.bug]
        return cmd + list(self.node_args.get(node, self.extra_args))

    def add_node(self, node: str, *, members: Iterable[str] | None = None) -> None:
        """A fresh node with an empty data dir that joins the running cluster (not started).

        It starts with ``--join`` and ``--peers`` = ``members`` (default: every node so
        far) plus itself: the recipe of docs/membership.md M6. The existing nodes keep
        the ``--peers`` they were started with.
        """
        if node in self.peer_ports:
            raise ValueError(f"node {node!r} already exists")
        for n in self.nodes:
            self.node_peers.setdefault(n, self.peers_arg)
        peer, client = free_ports(2, self.host)
        self.peer_ports[node], self.client_ports[node] = peer, client
        known = list(self.nodes if members is None else members)
        self.nodes.append(node)
        self.n = len(self.nodes)
        self.node_peers[node] = ",".join(
            f"{n}={self.host}:{self.peer_ports[n]}" for n in (*known, node)
        )
        self.node_args[node] = (*self.extra_args, "--join")
        self.data_dir(node).mkdir(parents=True, exist_ok=True)

    def peer_addr_str(self, node: str) -> str:
        host, port = self.peer_addr(node)
        return f"{host}:{port}"

    def _check(self, node: str) -> None:
        if node not in self.peer_ports:
            raise KeyError(f"no node {node!r} in this cluster (nodes: {', '.join(self.nodes)})")

    # ------------------------------------------------------------ lifecycle

    def is_running(self, node: str) -> bool:
        p = self.procs.get(node)
        return p is not None and p.poll() is None

    def start(self, node: str) -> None:
        """Start the node unless it is already running (after a kill it restarts from its dir)."""
        self._check(node)
        if self._closed:
            raise RuntimeError("cluster is closed")
        if self.is_running(node):
            return
        self._reap(node)
        log = open(self.log_path(node), "ab")  # noqa: SIM115 - closed in _reap
        log.write(
            f"--- start {time.strftime('%H:%M:%S')} {' '.join(self.command(node))}\n".encode()
        )
        log.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._logs[node] = log
        self.procs[node] = subprocess.Popen(
            self.command(node),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C to the harness must not hit the nodes
            preexec_fn=_die_with_parent,
        )

    def start_all(self) -> None:
        for node in self.nodes:
            self.start(node)

    def _signal(self, node: str, sig: int) -> bool:
        p = self.procs.get(node)
        if p is None or p.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, sig)
        return True

    def _reap(self, node: str) -> int | None:
        p = self.procs.pop(node, None)
        rc = None
        if p is not None:
            try:
                rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                rc = p.wait()
        log = self._logs.pop(node, None)
        if log is not None:
            log.close()
        c = self._status_clients.pop(node, None)
        if c is not None:
            c.close()
        return rc

    def kill(self, node: str) -> None:
        """SIGKILL and reap: the node loses everything not fsynced."""
        self._check(node)
        self._signal(node, signal.SIGKILL)
        self._reap(node)

    def stop(self, node: str, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait for a clean exit (SIGKILL after ``timeout``); returns the exit code."""
        self._check(node)
        p = self.procs.get(node)
        if p is None:
            return None
        self._signal(node, signal.SIGCONT)  # a paused node cannot handle SIGTERM
        self._signal(node, signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal(node, signal.SIGKILL)
        return self._reap(node)

    def pause(self, node: str) -> None:
        self._check(node)
        self._signal(node, signal.SIGSTOP)

    def resume(self, node: str) -> None:
        self._check(node)
        self._signal(node, signal.SIGCONT)

    def exit_code(self, node: str) -> int | None:
        p = self.procs.get(node)
        return None if p is None else p.poll()

    def close(self) -> None:
        """Kill every node; idempotent, safe in ``finally``."""
        if self._closed:
            return
        self._closed = True
        for node in list(self.procs):
            self._signal(node, signal.SIGKILL)
        for node in list(self.procs):
            self._reap(node)
        for c in self._status_clients.values():
            c.close()
        self._status_clients.clear()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # ------------------------------------------------------------ clients

    def client(self, node: str, *, timeout: float = 2.0) -> NodeClient:
        """A fresh client for the node's client port; the caller closes it."""
        host, port = self.client_addr(node)
        return NodeClient(host, port, timeout=timeout)

    def status(self, node: str, timeout: float = 1.0) -> dict | None:
        """The node's status reply, or None if it does not answer."""
        if not self.is_running(node):
            return None
        c = self._status_clients.get(node)
        if c is None:
            c = self._status_clients[node] = self.client(node, timeout=timeout)
        try:
            return c.status(timeout=timeout)
        except (ConnectionError, TimeoutError, OSError, ValueError):
            return None

    def status_all(self, timeout: float = 1.0) -> dict[str, dict | None]:
        return {node: self.status(node, timeout) for node in self.nodes}

    def leader(self, statuses: dict[str, dict | None] | None = None) -> str | None:
        """The leader a majority agrees on right now, if that node itself says it leads."""
        st = self.status_all() if statuses is None else statuses
        votes = Counter(
            (s.get("leader"), s.get("term")) for s in st.values() if s and s.get("leader")
        )
        for (lid, term), cnt in votes.most_common():
            me = st.get(lid) if isinstance(lid, str) else None
            if (
                cnt >= self.n // 2 + 1
                and me is not None
                and me.get("role") == "leader"
                and me.get("term") == term
            ):
                return lid
        return None

    def wait_for_leader(self, timeout: float = 15.0) -> str:
        """Poll until a majority names the same leader; TimeoutError with the last statuses."""
        deadline = time.monotonic() + timeout
        st: dict[str, dict | None] = {}
        while time.monotonic() < deadline:
            st = self.status_all(timeout=0.5)
            lid = self.leader(st)
            if lid is not None:
                return lid
            time.sleep(0.05)
        summary = {
            n: (None if s is None else f"{s.get('role')}/t{s.get('term')}/l{s.get('leader')}")
            for n, s in st.items()
        }
        raise TimeoutError(f"no leader agreed by a majority within {timeout}s: {summary}")

    def wait_ready(self, nodes: Iterable[str] | None = None, timeout: float = 15.0) -> None:
        """Wait until the nodes answer ``status`` (a restarted node needs a moment to bind)."""
        todo = list(self.nodes if nodes is None else nodes)
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            todo = [n for n in todo if self.status(n, timeout=0.5) is None]
            if todo:
                for n in todo:
                    if not self.is_running(n) and n in self.procs:
                        raise RuntimeError(
                            f"{n} exited with {self.exit_code(n)}; see {self.log_path(n)}"
                        )
                time.sleep(0.05)
        if todo:
            raise TimeoutError(f"nodes {todo} did not answer status within {timeout}s")

    def wait_until(self, pred: Any, timeout: float, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.05)
        raise TimeoutError(f"{what} not reached within {timeout}s")
