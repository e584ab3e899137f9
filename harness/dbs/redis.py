"""Redis (Debian's ``redis-server``) as one primary, replicas and Sentinel failover.

Failover is done the way an operator would run it: a Sentinel beside every
Redis (``redis-server sentinel.conf --sentinel``, the same binary), watching
the primary under the name :data:`workloads.redis.MASTER_NAME`. When a majority
of Sentinels cannot reach the primary for ``down_after_ms`` they elect one of
themselves to promote the replica with the most replicated data and repoint
the others, also the old primary when it comes back. Sentinel sees the
cluster from inside the hosts, so it reacts to partitions the harness itself
never sees; a failover done by the harness could not.

Replication is asynchronous: a primary acknowledges a write before any
replica has it, so a failover can lose acknowledged writes, and an old
primary cut off on the minority side of a partition keeps accepting writes
that vanish when it rejoins. Faults touch only ``redis-server``; the Sentinels
are the operator's tooling and stay up.

Per node, under ``<root>/[<lab>/]<test>/<node>/``: ``redis.conf`` and
``sentinel.conf`` (both rewritten by Sentinel as roles change), ``data/`` (the
append-only file, so a killed Redis restarts with what it had written),
``redis.pid``, ``sentinel.pid``, ``redis.log``, ``sentinel.log``. The first
node starts as the primary.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from typing import TYPE_CHECKING, Any

from harness.core.db import WorkloadChoice
from harness.core.errors import ConfigError, RemoteError
from harness.core.fanout import map_values
from harness.dbs.daemon import (
    PidfileDaemonDB,
    absolute_root,
    ensure_package,
    raise_if_exited,
    stop_process,
)

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["RedisDB", "redis_conf", "sentinel_conf"]

log = logging.getLogger(__name__)

_NO_FAKETIME = "env -u LD_PRELOAD"
"""Debian's redis-server (jemalloc inside) hangs at start under libfaketime
("unexpected recursive calls to clock_gettime()"), so it runs on the real clock:
the clock nemesis does not reach Redis on the lab (see docs/thirdparty.md)."""


def redis_conf(
    *, addr: str, port: int, data_dir: str, primary: tuple[str, int] | None, min_replicas: int = 0
) -> str:
    """redis.conf for one node; ``primary`` None makes it the initial primary."""
    lines = [
        f"bind {addr}",
        f"port {port}",
        "protected-mode no",
        "daemonize no",
        'logfile ""',
        f"dir {data_dir}",
        'save ""',
        "appendonly yes",
        "appendfsync everysec",
        "repl-diskless-sync-delay 0",
        "replica-serve-stale-data yes",
    ]
    if min_replicas:
        lines += [f"min-replicas-to-write {min_replicas}", "min-replicas-max-lag 5"]
    if primary is not None:
        lines.append(f"replicaof {primary[0]} {primary[1]}")
    return "\n".join(lines) + "\n"


def sentinel_conf(
    *,
    addr: str,
    port: int,
    work_dir: str,
    primary: tuple[str, int],
    quorum: int,
    down_after_ms: int,
    failover_timeout_ms: int,
) -> str:
    from workloads.redis import MASTER_NAME as M

    return (
        "\n".join(
            [
                f"bind {addr}",
                f"port {port}",
                "protected-mode no",
                "daemonize no",
                'logfile ""',
                f"dir {work_dir}",
                f"sentinel monitor {M} {primary[0]} {primary[1]} {quorum}",
                f"sentinel down-after-milliseconds {M} {down_after_ms}",
                f"sentinel failover-timeout {M} {failover_timeout_ms}",
                f"sentinel parallel-syncs {M} 8",
            ]
        )
        + "\n"
    )


def _call(addr: tuple[str, int], *args: Any, timeout: float = 1.0) -> Any:
    from workloads.redis import call_once

    try:
        return call_once(addr, timeout, *args)
    except Exception as e:  # noqa: BLE001 - any failure means "not answering"
        log.debug("%s to %s:%s failed: %s", args[0], *addr, e)
        return None


class RedisDB(PidfileDaemonDB):
    """Installs, starts, faults and removes Redis plus a Sentinel on every node."""

    def default_workload(self) -> WorkloadChoice:
        """Registers through the Sentinel's current master (workloads/redis.py)."""
        return WorkloadChoice(name="redis-register")

    def __init__(
        self,
        *,
        root: str = "/var/lib/splitbrain/redis",
        port: int = 6379,
        sentinel_port: int = 26379,
        binary: str = "redis-server",
        down_after_ms: int = 2000,
        failover_timeout_ms: int = 6000,
        min_replicas: int = 0,
        ready_timeout: float = 30.0,
        leave_running: bool = False,
    ) -> None:
        self.root = absolute_root(root)
        if down_after_ms < 100 or failover_timeout_ms < 1000:
            raise ConfigError(
                "down_after_ms must be >= 100 and failover_timeout_ms >= 1000",
                field="down_after_ms",
            )
        self.port, self.sentinel_port = port, sentinel_port
        self.binary = binary
        self.down_after_ms, self.failover_timeout_ms = down_after_ms, failover_timeout_ms
        self.min_replicas = min_replicas
        self.ready_timeout = ready_timeout
        self.leave_running = leave_running
        self._lock = threading.Lock()

    # layout -----------------------------------------------------------------
    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {
            "dir": d,
            "data": f"{d}/data",
            "conf": f"{d}/redis.conf",
            "sconf": f"{d}/sentinel.conf",
            "pid": f"{d}/redis.pid",
            "spid": f"{d}/sentinel.pid",
            "log": f"{d}/redis.log",
            "slog": f"{d}/sentinel.log",
        }

    def _addrs(self, ctx: RunContext, base: int) -> dict[str, tuple[str, int]]:
        addresses = {n: ctx.hosts[n].address for n in ctx.nodes}
        unique = len(set(addresses.values())) == len(addresses)
        return {
            n: (a, base + (0 if unique else 10 * i)) for i, (n, a) in enumerate(addresses.items())
        }

    def client_addrs(self, ctx: RunContext) -> dict[str, tuple[str, int]]:
        return self._addrs(ctx, self.port)

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        return [self.client_addrs(ctx)[node][1], self.sentinel_addrs(ctx)[node][1]]

    def sentinel_addrs(self, ctx: RunContext) -> dict[str, tuple[str, int]]:
        return self._addrs(ctx, self.sentinel_port)

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {"client": self.client_addrs(ctx), "sentinel": self.sentinel_addrs(ctx)}

    # lifecycle ----------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        ensure_package(remote, self.binary, "redis-server")
        for pid in (p["spid"], p["pid"]):
            if remote.daemon_running(pid):
                log.info("%s: stopping a process left running by an earlier run", node)
                stop_process(remote, pid, "redis")
        addrs = self.client_addrs(ctx)
        first = ctx.nodes[0]
        addr, port = addrs[node]
        remote.run(f"rm -rf {shlex.quote(p['dir'])} && mkdir -p {shlex.quote(p['data'])}")
        remote.run(
            f"cat > {shlex.quote(p['conf'])}",
            stdin=redis_conf(
                addr=addr,
                port=port,
                data_dir=p["data"],
                primary=None if node == first else addrs[first],
                min_replicas=self.min_replicas,
            ),
        )
        s_addr, s_port = self.sentinel_addrs(ctx)[node]
        remote.run(
            f"cat > {shlex.quote(p['sconf'])}",
            stdin=sentinel_conf(
                addr=s_addr,
                port=s_port,
                work_dir=p["dir"],
                primary=addrs[first],
                quorum=len(ctx.nodes) // 2 + 1,
                down_after_ms=self.down_after_ms,
                failover_timeout_ms=self.failover_timeout_ms,
            ),
        )
        self.start(ctx, node)
        remote.start_daemon(
            f"{_NO_FAKETIME} {shlex.quote(self.binary)} {shlex.quote(p['sconf'])} --sentinel",
            pidfile=p["spid"],
            logfile=p["slog"],
            chdir=p["dir"],
        )
        self._await_up(ctx, node)

    def _await_up(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if (
                _call(self.client_addrs(ctx)[node], "PING") == "PONG"
                and _call(self.sentinel_addrs(ctx)[node], "PING") == "PONG"
            ):
                return
            for pid, logf in ((p["pid"], p["log"]), (p["spid"], p["slog"])):
                raise_if_exited(remote, pid, logf, f"{logf} process", lines=5)
            time.sleep(0.2)
        raise RemoteError(
            f"redis or sentinel on {node} did not answer PING in {self.ready_timeout:g} s",
            host=remote.host.name,
        )

    def view(self, ctx: RunContext) -> dict[str, Any]:
        """Each node's ROLE reply and each Sentinel's (primary address, peers seen,
        replicas known)."""
        addrs, saddrs = self.client_addrs(ctx), self.sentinel_addrs(ctx)
        from workloads.redis import MASTER_NAME

        def sentinel(a: tuple[str, int]) -> tuple[Any, Any, Any]:
            primary = _call(a, "SENTINEL", "get-master-addr-by-name", MASTER_NAME)
            info = _call(a, "SENTINEL", "master", MASTER_NAME)
            fields = (
                dict(zip(info[::2], info[1::2], strict=False)) if isinstance(info, list) else {}
            )
            return (
                tuple(primary) if isinstance(primary, list) else None,
                fields.get("num-other-sentinels"),
                fields.get("num-slaves"),
            )

        return {
            "roles": map_values(addrs, lambda a: _call(a, "ROLE"), what="role"),
            "sentinels": map_values(saddrs, sentinel, what="sentinel"),
        }

    def wait_ready(self, ctx: RunContext) -> None:
        """Until one primary has every replica linked and all Sentinels know each other
        and every replica.

        A Sentinel learns the replicas only from the primary's INFO (every 10 s); a
        primary killed before that leaves it no replica to promote, and the run would
        measure a setup race instead of the failover."""
        n = len(ctx.nodes)
        primary = self.client_addrs(ctx)[ctx.nodes[0]]
        deadline = time.monotonic() + self.ready_timeout
        v: dict[str, Any] = {}
        while time.monotonic() < deadline:
            v = self.view(ctx)
            roles = list(v["roles"].values())
            replicas_ok = all(
                isinstance(r, list)
                and (
                    (r[0] == "master" and len(r[2]) == n - 1)
                    or (r[0] == "slave" and r[3] == "connected")
                )
                for r in roles
            )
            sents_ok = all(
                s[0] is not None
                and (s[0][0], int(s[0][1])) == primary
                and str(s[1]) == str(n - 1)
                and str(s[2]) == str(n - 1)
                for s in v["sentinels"].values()
            )
            if replicas_ok and sents_ok:
                log.info(
                    "redis ready: primary %s:%s, %d replicas, %d sentinels", *primary, n - 1, n
                )
                return
            time.sleep(0.2)
        log.warning("redis did not settle within %gs (last view: %s)", self.ready_timeout, v)

    def start(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        if remote.daemon_running(p["pid"]):
            return
        remote.start_daemon(
            f"{_NO_FAKETIME} {shlex.quote(self.binary)} {shlex.quote(p['conf'])}",
            pidfile=p["pid"],
            logfile=p["log"],
            chdir=p["dir"],
        )

    def primaries(self, ctx: RunContext) -> list[str]:
        """Nodes whose Redis says it is a master (two during a split brain)."""
        addrs = self.client_addrs(ctx)
        roles = map_values(addrs, lambda a: _call(a, "ROLE"), what="role")
        return [n for n, r in roles.items() if isinstance(r, list) and r and r[0] == "master"]

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        p = self._paths(ctx, node)
        return [p["log"], p["slog"]]

    def teardown(self, ctx: RunContext, node: str) -> None:
        self.stop_and_remove(
            ctx,
            node,
            "redis and sentinel",
            {"spid": "sentinel", "pid": "redis-server"},
            leave=self.leave_running,
        )
