"""A client gateway JVM on the harness's side, for a real system whose clients are Java.

ZooKeeper's and Kafka's clients are Java libraries; rather than a Python client per
system, each of those DBs runs one small gateway of ours (``harness/dbs/java/<system>/``)
on this machine: one loopback port per node, speaking the reference node's client
protocol (``node_impl/client.py``), so the project's workloads drive the real system
through its own client unchanged. This module is only the process: free ports, start,
liveness, stop. The gateway exits by itself when our end of its stdin closes, so a
harness that dies takes it along.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from harness.core.errors import RemoteError

__all__ = ["Gateway", "free_ports", "gateway_status"]

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
