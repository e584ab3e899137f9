"""The DB: ``redis-server`` on every node, the first node the primary, the others replicas.

No init system runs on the hosts, so the plugin writes each server's config and
starts it over SSH under a pid file. Each node keeps its append-only file in its own
directory, so a killed server restarts with what it had acknowledged.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from harness.api import ConfigError, RunContext, WorkloadChoice

__all__ = ["RedisQueueDB", "ping"]

# Debian's redis-server hangs at start under the lab's libfaketime (jemalloc's
# clock_gettime recursion), so it runs on the real clock.
NO_FAKETIME = "env -u LD_PRELOAD"


def ping(address: tuple[str, int], timeout: float = 1.0) -> bool:
    """True when a Redis server at ``address`` answers PING with PONG."""
    try:
        with socket.create_connection(address, timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisQueueDB:
    """Killable, Pausable, HasPrimaries, HasLogFiles, WaitsReady, Addressable (by its methods)."""

    def __init__(self, port: int = 6379, ready_timeout: int = 30, **_: Any) -> None:
        self.port, self.ready_timeout = port, ready_timeout

    def default_workload(self) -> WorkloadChoice:
        """Its queue, consumers active throughout (a consume-and-ack queue: docs/queues.md)."""
        return WorkloadChoice(name="redis-queue")

    def _dir(self, ctx: RunContext, node: str) -> str:
        return f"/srv/splitbrain-redisqueue/{ctx.hosts[node].extras.get('lab', 'hosts')}/{node}"

    def primary(self, ctx: RunContext) -> str:
        return ctx.nodes[0]

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        """Every client talks to the primary: the queue is the primary's (no failover)."""
        p = ctx.hosts[self.primary(ctx)].address
        return {
            "client": {n: (p, self.port) for n in ctx.nodes},
            "redis": {n: (ctx.hosts[n].address, self.port) for n in ctx.nodes},
        }

    def config(self, ctx: RunContext, node: str) -> str:
        lines = [
            f"bind {ctx.hosts[node].address}",
            f"port {self.port}",
            "protected-mode no",
            "daemonize no",
            f"dir {self._dir(ctx, node)}",
            'save ""',
            "appendonly yes",
            # every write is on disk before its reply: an ack survives a kill
            "appendfsync always",
            "repl-diskless-sync-delay 0",
        ]
        if node != self.primary(ctx):
            lines.append(f"replicaof {ctx.hosts[self.primary(ctx)].address} {self.port}")
        return "\n".join(lines) + "\n"

    def setup(self, ctx: RunContext, node: str) -> None:
        self.teardown(ctx, node)  # a killed earlier run may have left a server behind
        remote, d = ctx.remotes[node], self._dir(ctx, node)
        if not remote.run("command -v redis-server", check=False).ok:
            raise ConfigError(f"redis-server is missing on {node}: apt-get install redis-server")
        remote.run(f"mkdir -p {d}")
        remote.run(f"cat > {d}/redis.conf", stdin=self.config(ctx, node))
        self.start(ctx, node)

    def start(self, ctx: RunContext, node: str) -> None:
        d = self._dir(ctx, node)
        ctx.remotes[node].start_daemon(
            f"{NO_FAKETIME} redis-server {d}/redis.conf",
            pidfile=f"{d}/pid",
            logfile=f"{d}/redis.log",
            chdir=d,
        )

    def teardown(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].stop_daemon(f"{self._dir(ctx, node)}/pid")
        ctx.remotes[node].run(f"rm -rf {self._dir(ctx, node)}")

    def kill(self, ctx: RunContext, node: str) -> None:
        pidfile = f"{self._dir(ctx, node)}/pid"
        ctx.remotes[node].signal_daemon(pidfile, "KILL")
        deadline = time.monotonic() + 10
        while ctx.remotes[node].daemon_running(pidfile) and time.monotonic() < deadline:
            time.sleep(0.05)

    def pause(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(f"{self._dir(ctx, node)}/pid", "STOP")

    def resume(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(f"{self._dir(ctx, node)}/pid", "CONT")

    def primaries(self, ctx: RunContext) -> list[str]:
        return [self.primary(ctx)]

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        d = self._dir(ctx, node)
        return [f"{d}/redis.log", f"{d}/redis.conf"]

    def wait_ready(self, ctx: RunContext) -> None:
        """Every server answers PING (replicas included: they must be up to replicate)."""
        deadline = time.monotonic() + self.ready_timeout
        for n in ctx.nodes:
            while not ping((ctx.hosts[n].address, self.port)):
                if time.monotonic() > deadline:
                    raise ConfigError(f"redis-server on {n} never answered (nodes/{n}/redis.log)")
                time.sleep(0.1)
