"""splitbrain plugin for Apache ZooKeeper (Debian's ``zookeeper`` package), client ``kazoo``.

DB ``zookeeper``: a ZooKeeper ensemble, one server per node, started by the plugin
from the Debian package's jar (no init system needed) with a config it writes.
Workload ``zk-register``: independent CAS registers on znodes; a write is ``set``
(creating the znode if needed), a cas is a read followed by ``set`` with the read
version (ZooKeeper's own conditional update), a read is ``sync`` then ``get``.
Only ``harness.api`` is used, so nothing here is special to splitbrain's core.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from harness.api import (
    ConfigError,
    GenContext,
    Op,
    RunContext,
    Workload,
    WorkloadChoice,
    host_addresses,
    kill_daemon,
    node_dir,
    wait_until,
)

__all__ = ["ZooKeeper", "ZkClient", "db", "server_address", "workload"]

# slf4j-simple: without a binding ZooKeeper logs nothing at all.
CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"


def server_address(ctx: RunContext, node: str) -> tuple[str, int]:
    """The ZooKeeper server of ``node`` for a kazoo session.

    This plugin's DB (``zookeeper-debian``) serves clients on ``client``; splitbrain's
    built-in ``--db zookeeper`` (ZooKeeper from Maven Central) names its servers
    ``zookeeper`` and keeps ``client`` for its own gateway, so the workloads here run
    against either DB.
    """
    return (ctx.addresses.get("zookeeper") or ctx.addresses["client"])[node]


def four_letter(host: str, port: int, word: str = "srvr", timeout: float = 1.0) -> str:
    """A ZooKeeper four-letter command's answer ('' when the server does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeper:
    """Killable, Pausable, HasPrimaries, HasLogFiles, WaitsReady, Addressable, HasFootprint."""

    # A lab preloads libfaketime into every session for clock faults; the JVM's threads
    # hang under it (leader election completes, followers never sync), so the server
    # runs on the real clock: the harness starts it without the preload, and clock
    # faults do not reach ZooKeeper.
    runs_under_faketime = False

    def __init__(self, client_port: int = 2181, tick_ms: int = 500, heap_mb: int = 128,
                 **_: Any) -> None:
        for name, v in (("client_port", client_port), ("tick_ms", tick_ms),
                        ("heap_mb", heap_mb)):
            if not isinstance(v, int) or v <= 0:
                raise ConfigError(f"a positive integer, not {v!r}", field=name)
        self.port, self.tick_ms, self.heap_mb = client_port, tick_ms, heap_mb

    root = "/srv/splitbrain-zookeeper"
    """HasFootprint: where every node directory lives (the disk faults mount over one)."""

    def _dir(self, ctx: RunContext, node: str) -> str:
        return node_dir(ctx, node, self.root)

    def node_dir(self, ctx: RunContext, node: str) -> str:
        return self._dir(ctx, node)

    def pidfiles(self, ctx: RunContext, node: str) -> list[str]:
        return [f"{self._dir(ctx, node)}/pid"]

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        return [self.port, 2888, 3888]

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return host_addresses(ctx, self.port)

    def _config(self, ctx: RunContext, node: str) -> str:
        servers = "\n".join(f"server.{i}={ctx.hosts[n].address}:2888:3888"
                            for i, n in enumerate(ctx.nodes, 1))
        return (f"tickTime={self.tick_ms}\ninitLimit=20\nsyncLimit=5\n"
                f"dataDir={self._dir(ctx, node)}/data\nclientPort={self.port}\n"
                f"clientPortAddress={ctx.hosts[node].address}\nadmin.enableServer=false\n"
                f"4lw.commands.whitelist=srvr,ruok\nforceSync=yes\n{servers}\n")

    def default_workload(self) -> WorkloadChoice:
        """Per-key registers: linearizable reads and writes (sync before read)."""
        return WorkloadChoice(name="zk-register")

    def setup(self, ctx: RunContext, node: str) -> None:
        """Stop and wipe leftovers, write zoo.cfg and myid, start the server."""
        self.teardown(ctx, node)
        d, remote = self._dir(ctx, node), ctx.remotes[node]
        remote.run(f"mkdir -p {d}/data")
        remote.run(f"cat > {d}/zoo.cfg", stdin=self._config(ctx, node))
        remote.run(f"echo {ctx.nodes.index(node) + 1} > {d}/data/myid")
        # An installer's files are durable before the server runs (fsync of each file
        # and of the directories naming them): a power cut (the lazy fs) must take
        # what ZooKeeper wrote, not the myid it needs to start at all.
        remote.run(f"sync {d}/zoo.cfg {d}/data/myid {d}/data {d}")
        self.start(ctx, node)

    def start(self, ctx: RunContext, node: str) -> None:
        d = self._dir(ctx, node)
        ctx.remotes[node].start_daemon(
            f"java -Xmx{self.heap_mb}m -cp {CLASSPATH} -Dzookeeper.log.dir={d} "
            f"org.apache.zookeeper.server.quorum.QuorumPeerMain {d}/zoo.cfg",
            pidfile=f"{d}/pid", logfile=f"{d}/zookeeper.log", chdir=d)

    def teardown(self, ctx: RunContext, node: str) -> None:
        """Stop the server and empty its directory in place: under the disk faults the
        directory is a lazy fs's mount point, which ``rm -rf`` cannot remove."""
        d = self._dir(ctx, node)
        ctx.remotes[node].stop_daemon(f"{d}/pid")
        ctx.remotes[node].run(f"mkdir -p {d} && find {d} -mindepth 1 -delete")

    def kill(self, ctx: RunContext, node: str) -> None:
        kill_daemon(ctx.remotes[node], f"{self._dir(ctx, node)}/pid")

    def pause(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(f"{self._dir(ctx, node)}/pid", "STOP")

    def resume(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(f"{self._dir(ctx, node)}/pid", "CONT")

    def primaries(self, ctx: RunContext) -> list[str]:
        return [n for n in ctx.nodes
                if "Mode: leader" in four_letter(ctx.hosts[n].address, self.port)]

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        return [f"{self._dir(ctx, node)}/zookeeper.log", f"{self._dir(ctx, node)}/zoo.cfg"]

    def wait_ready(self, ctx: RunContext) -> None:
        """Every server answers ``srvr`` as leader or follower (an ensemble has formed)."""
        for n in ctx.nodes:
            wait_until(lambda n=n: any(
                f"Mode: {m}" in four_letter(ctx.hosts[n].address, self.port)
                for m in ("leader", "follower")),
                timeout=90, host=n, interval=0.3,
                what="ZooKeeper never joined an ensemble (see nodes/<node>/zookeeper.log)")


class ZkClient:
    """A kazoo session to one server only, so faults on that server reach the client."""

    read_fs = frozenset({"read"})

    def __init__(self, address: tuple[str, int] = ("", 0), timeout: float = 3.0) -> None:
        self.address, self.timeout = address, timeout
        self.zk: Any = None

    def open(self, ctx: RunContext, node: str) -> ZkClient:
        return ZkClient(server_address(ctx, node), self.timeout)

    def setup(self, ctx: RunContext) -> None:
        pass

    def _session(self) -> Any:
        if self.zk is None:
            from kazoo.client import KazooClient  # type: ignore[import-untyped]

            zk = KazooClient(hosts=f"{self.address[0]}:{self.address[1]}", timeout=5.0)
            try:
                zk.start(timeout=self.timeout)
            except Exception:
                zk.stop()
                zk.close()
                raise
            self.zk = zk
        return self.zk

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        from kazoo.exceptions import (  # type: ignore[import-untyped]
            BadVersionError,
            NodeExistsError,
            NoNodeError,
        )

        path, v, t = f"/splitbrain/{op.key}", op.value, self.timeout
        try:
            zk = self._session()
        except Exception as e:  # no session: nothing was sent
            return op.complete("fail", v, error=f"no session: {type(e).__name__}")
        try:
            if op.f == "read":
                zk.sync_async(path).get(timeout=t)
                try:
                    data, _ = zk.get_async(path).get(timeout=t)
                except NoNodeError:
                    return op.complete("ok", None)
                return op.complete("ok", int(data))
            if op.f == "write":
                try:
                    zk.set_async(path, str(v).encode()).get(timeout=t)
                except NoNodeError:
                    try:
                        zk.create_async(path, str(v).encode(), makepath=True).get(timeout=t)
                    except NodeExistsError:
                        zk.set_async(path, str(v).encode()).get(timeout=t)
                return op.complete("ok", v)
            try:
                data, stat = zk.get_async(path).get(timeout=t)
            except NoNodeError:
                return op.complete("fail", v, error="no such znode")
            if int(data) != v[0]:
                return op.complete("fail", v, error="cas mismatch")
            try:
                zk.set_async(path, str(v[1]).encode(), version=stat.version).get(timeout=t)
            except BadVersionError:
                return op.complete("fail", v, error="cas mismatch (version)")
            return op.complete("ok", v)
        except Exception as e:  # connection loss, timeout, expired session: unknown
            return op.complete("info", v, error=f"{type(e).__name__}: {e}"[:200])

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        if self.zk is not None:
            zk, self.zk = self.zk, None
            try:
                zk.stop()
                zk.close()
            except Exception:
                pass


class Registers:
    """Random read/write/cas; a fresh key every 50 ops keeps each key's history small."""

    def __init__(self) -> None:
        self.n = 0

    def op(self, ctx: GenContext) -> Op:
        self.n += 1
        key, f = f"k{self.n // 50}", "read" if ctx.lull else ctx.rng.choice(["read", "write", "cas"])
        value: Any = {"read": None, "write": ctx.rng.randrange(5),
                      "cas": [ctx.rng.randrange(5), ctx.rng.randrange(5)]}[f]
        return Op(type="invoke", process=ctx.process, f=f, value=value, key=key, node=ctx.node)

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


def db(options: Mapping[str, Any]) -> ZooKeeper:
    return ZooKeeper(**options)


def workload(options: Mapping[str, Any]) -> Workload:
    return Workload(name="zk-register", client=ZkClient(), generator=Registers(),
                    checker={"model": "cas-register", "keys": True, "checks": ["linearizable"]})


def queue_workload(options: Mapping[str, Any]) -> Workload:
    """``zk-queue``: a FIFO queue per key on sequential znodes, checked against ``fifo-queue``."""
    from .queue import FinalDrain, QueueGen, ZkQueueClient

    gen = QueueGen()
    return Workload(name="zk-queue", client=ZkQueueClient(), generator=gen,
                    final_generator=FinalDrain(lambda: gen.keys),
                    checker={"model": "fifo-queue", "keys": True, "checks": ["linearizable"]})
