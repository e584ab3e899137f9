"""Real Apache ZooKeeper as a database under test (``--db zookeeper``), any served version.

ZooKeeper's own jar (``org.apache.zookeeper:zookeeper`` at ``--db-option version=X``, from
Maven Central) is resolved and built with our client gateway by :mod:`harness.dbs.maven`
from ``harness/dbs/java/zookeeper/pom.xml``; every node runs ZooKeeper's own
``QuorumPeerMain`` from that class path with a ``zoo.cfg`` and ``myid`` written here. One
server per node, all voters (3- and 5-node ensembles are the same code).

The part that is ours is the **client gateway** (``splitbrain.zookeeper.Gateway``, one JVM on
the harness's side): one loopback port per server speaking the reference node's kv
protocol, each harness connection its own ZooKeeper session to that one server, so the
``register`` workload and the linearizability checker drive ZooKeeper unchanged (it also
serves the ``watch`` workload's ``watch-*`` requests: ``-w watch --workload-option
client=zookeeper``, :mod:`workloads.zk_watch`, docs/subscriptions.md). A register
is the znode ``/splitbrain/<key>``; write = ``setData`` (created when missing); cas =
``getData`` then ``setData`` at the version read (ZooKeeper decides it); read = ``sync`` then
``getData`` on the same session. What the checker may assume (:meth:`ZooKeeperDB.semantics`):
ZooKeeper orders every write through its leader (linearizable writes), and a read after
``sync`` on the same session reflects every write committed before the sync reached the
leader; plain reads are only sequentially consistent (a server answers from its own state),
so they are not offered: a linearizability verdict on them would judge a promise ZooKeeper
never made.

Per node (lab hosts share this machine's disk, hence the levels)::

    <root>/[<lab>/]<test>/<node>/data/            myid, version-2/ (txn logs, snapshots, epochs)
    <root>/[<lab>/]<test>/<node>/zoo.cfg
    <root>/[<lab>/]<test>/<node>/zookeeper.log    the JVM's output (slf4j-simple)
    <root>/[<lab>/]<test>/<node>/zookeeper.pid

The Debian-jar plugin ``examples/zookeeper/`` (kazoo client, the ``zk-queue`` workload) stays
an example of the public plugin API; this is the built-in. docs/thirdparty.md has what was
measured.
"""

from __future__ import annotations

import logging
import re
import shlex
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.db import (
    DB,
    Convergence,
    ConvergenceReport,
    DataFiles,
    WorkloadChoice,
    poll_converged,
)
from harness.core.errors import ConfigError, RemoteError
from harness.core.fanout import map_values
from harness.core.options import as_options, declares_options, option
from harness.dbs.daemon import absolute_root
from harness.dbs.gateway import GatewayDB
from harness.dbs.maven import SOURCES, release_version

if TYPE_CHECKING:
    from harness.core.spec import RunContext
    from harness.dbs.maven import JavaProgram

__all__ = [
    "ARTIFACT",
    "NEWEST",
    "PROJECT_DIR",
    "ZooKeeperDB",
    "ZooKeeperOptions",
    "check_version",
    "factory",
    "four_letter",
    "parse_srvr",
    "zoo_cfg",
]

log = logging.getLogger(__name__)

PROJECT_DIR = SOURCES / "zookeeper"
"""The Maven project: ZooKeeper's jar and our gateway (pom.xml, src/main/java)."""
ARTIFACT = "org.apache.zookeeper:zookeeper"
NEWEST = "3.9.5"
"""The newest release Maven Central serves whole (2026-12; 3.9.6 lacks packages it needs)."""
OLDEST = (3, 8)
"""The oldest line built and measured here: 3.8 and 3.9 share the configuration keys and
the client API the gateway uses (3.8.3 is the oldest 3.8 Maven Central serves here)."""


def check_version(version: str) -> tuple[int, ...]:
    """``"3.9.5"`` -> ``(3, 9, 5)``; ConfigError naming ``version`` for anything else."""
    v = release_version("zookeeper", version, NEWEST)
    if v[:2] < OLDEST or v[0] != 3:
        raise ConfigError(
            f"zookeeper version {version}: only 3.8.x and 3.9.x are built and measured here",
            field="version",
        )
    return v


def four_letter(host: str, port: int, word: str = "srvr", timeout: float = 1.0) -> str:
    """A four-letter command's answer ('' when the server does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def parse_srvr(text: str) -> dict[str, Any] | None:
    """``srvr``'s mode and zxid (``{"mode": "leader", "zxid": 0x100000003, "epoch": 1}``);
    None for a server that does not serve (no answer, or "not currently serving")."""
    mode = re.search(r"^Mode: (\w+)", text, re.M)
    zxid = re.search(r"^Zxid: (0x[0-9a-fA-F]+)", text, re.M)
    if not mode or not zxid:
        return None
    z = int(zxid.group(1), 16)
    return {"mode": mode.group(1), "zxid": z, "epoch": z >> 32}


def zoo_cfg(
    *,
    servers: Mapping[int, str],
    data_dir: str,
    address: str,
    client_port: int,
    quorum_port: int,
    election_port: int,
    tick_ms: int,
    force_sync: bool,
) -> str:
    """zoo.cfg for one member of a static ensemble (``servers``: myid -> address).

    ``preAllocSize`` shrinks the txn log's preallocation from 64 MiB to 4 MiB: five
    members share one disk (and the lazy fs of the disk faults holds files in memory).
    """
    lines = [
        f"tickTime={tick_ms}",
        "initLimit=20",
        "syncLimit=5",
        f"dataDir={data_dir}",
        f"clientPort={client_port}",
        f"clientPortAddress={address}",
        "admin.enableServer=false",
        "4lw.commands.whitelist=srvr,ruok,mntr",
        f"forceSync={'yes' if force_sync else 'no'}",
        "preAllocSize=4096",
        "maxClientCnxns=0",
    ]
    lines += [f"server.{i}={a}:{quorum_port}:{election_port}" for i, a in sorted(servers.items())]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ZooKeeperOptions:
    """``--db-option`` keys of ``--db zookeeper``."""

    version: str = option(NEWEST, "the ZooKeeper release from Maven Central (3.8.x, 3.9.x)")
    tick_ms: int = option(500, "tickTime (initLimit 20, syncLimit 5 ticks)", minimum=50)
    session_ms: int = option(6000, "the gateway's session timeout", minimum=1000)
    force_sync: bool = option(True, "forceSync (fsync the txn log before acking)")
    client_port: int = option(2181, "clientPort", minimum=1, maximum=65535)
    quorum_port: int = option(2888, "the quorum port", minimum=1, maximum=65535)
    election_port: int = option(3888, "the leader election port", minimum=1, maximum=65535)
    heap_mb: int = option(192, "each server's -Xmx in MiB", minimum=64)
    gateway_heap_mb: int = option(160, "the gateway's -Xmx in MiB", minimum=64)
    root: str = option("/var/lib/splitbrain/zookeeper", "absolute directory of the node dirs")
    java: str = option("java", "the java binary on the hosts (17 or newer)")
    jvm_args: str = option("", "more JVM options for every server")
    ready_timeout: float = option(120.0, "seconds for the ensemble to form at setup", minimum=1)
    leave_running: bool = option(False, "leave the servers running after the test")

    def __post_init__(self) -> None:
        check_version(self.version)
        absolute_root(self.root)


DEFAULT_WORKLOAD = WorkloadChoice(
    name="register",
    options={"keys": 4, "ops_per_key": 100, "retired_reads": 0.1, "sampler": False},
    concurrency=8,
    rate=40.0,
    client_timeout=8.0,
)
"""Per-key cas registers checked for linearizability (reads through ``sync``). No status
samplers: their history values (term, leader, committed index of one log) are the reference
node's, and log safety would judge ZooKeeper by another system's semantics. The client
timeout outlasts the session timeout (6 s), so a lost connection is ZooKeeper's answer."""

_MEMBERSHIP = (
    "not yet: ZooKeeper's dynamic reconfiguration (reconfigEnabled, 3.5+) is not built into "
    "this DB; the ensemble is static"
)


class ZooKeeperDB(GatewayDB):
    """A ZooKeeper ensemble, one server per node, and our client gateway."""

    system = "zookeeper"
    title = "ZooKeeper"
    member = "server"
    shared = "servers"

    # Measured with the Debian-jar plugin (docs/thirdparty.md): under the lab's libfaketime
    # preload a ZooKeeper leader never leaves discovery, so the ensemble never serves. The
    # servers run on the real clock; the clock fault refuses hosts whose only clock is
    # libfaketime's (the VM lab's real clocks take it).
    runs_under_faketime = False
    reconfigurable = False
    declines = {"changes_membership": _MEMBERSHIP}
    data_files = DataFiles(
        under="data", log=("version-2/log.*",), state=("version-2/currentEpoch",)
    )
    unreachable_situations = {
        "read-from-non-leader": "every server answers reads from its own state by design; the "
        "gateway syncs first, so this is not a situation ZooKeeper's reads avoid"
    }

    options: ZooKeeperOptions

    # capabilities ---------------------------------------------------------------------
    def workload_defaults(self, workload: str) -> dict[str, Any]:
        """``-w watch`` subscribes with this system's own client (zookeeper)."""
        return {"client": "zookeeper"} if workload == "watch" else {}

    def default_workload(self) -> WorkloadChoice:
        return DEFAULT_WORKLOAD

    @staticmethod
    def semantics() -> str:
        """What the linearizability checker is allowed to assume of this configuration."""
        return (
            "writes and conditional setData are ordered by ZooKeeper's leader (linearizable); "
            "reads are sync then getData on one session: they see every write committed "
            "before the sync reached the leader"
        )

    def build(self) -> JavaProgram:
        from harness.dbs import maven

        return maven.build_release(
            PROJECT_DIR,
            name="zookeeper",
            system="ZooKeeper",
            prop="zookeeper.version",
            version=self.options.version,
            artifact=ARTIFACT,
            java=self.options.java,
            shared=(maven.SHARED,),
        )

    def resolve_artifacts(self) -> dict[str, Any]:
        """The build's manifest and the ZooKeeper version that resolved (test.json)."""
        p = self.program()
        return {"zookeeper": p.version_of(ARTIFACT), "semantics": self.semantics(), **p.manifest()}

    # layout ---------------------------------------------------------------------------
    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {
            "dir": d,
            "data": f"{d}/data",
            "conf": f"{d}/zoo.cfg",
            "pid": f"{d}/zookeeper.pid",
            "stdout": f"{d}/zookeeper.log",
        }

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        o = self.options
        return [o.client_port, o.quorum_port, o.election_port]

    def myid(self, ctx: RunContext, node: str) -> int:
        return list(ctx.nodes).index(node) + 1

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        """``client``: the gateway's loopback port for each node; ``zookeeper``: the servers."""
        return {
            "client": self.gateway_addresses(ctx),
            "zookeeper": {n: (ctx.hosts[n].address, self.options.client_port) for n in ctx.nodes},
        }

    def command(self, ctx: RunContext, node: str, lib: str) -> str:
        """ZooKeeper's QuorumPeerMain, small heap, serial GC, C1 only (five JVMs, 2 cores)."""
        p = self._paths(ctx, node)
        jvm = [
            self.options.java,
            f"-Xmx{self.options.heap_mb}m",
            "-Xms32m",
            "-Xss512k",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:ActiveProcessorCount=1",
            "-XX:+ExitOnOutOfMemoryError",
            f"-Djava.io.tmpdir={p['dir']}",
            f"-Dzookeeper.log.dir={p['dir']}",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
        ]
        cmd = " ".join(shlex.quote(a) for a in jvm)
        if self.options.jvm_args:
            cmd += " " + self.options.jvm_args
        tail = [
            "-cp",
            f"{lib.rstrip('/')}/*",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            p["conf"],
        ]
        return cmd + " " + " ".join(shlex.quote(a) for a in tail)

    def _conf(self, ctx: RunContext, node: str) -> str:
        o = self.options
        return zoo_cfg(
            servers={self.myid(ctx, n): ctx.hosts[n].address for n in ctx.nodes},
            data_dir=self._paths(ctx, node)["data"],
            address=ctx.hosts[node].address,
            client_port=o.client_port,
            quorum_port=o.quorum_port,
            election_port=o.election_port,
            tick_ms=o.tick_ms,
            force_sync=o.force_sync,
        )

    # lifecycle ------------------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        """Stop and empty a leftover, write zoo.cfg and myid durably, start the server.

        The directory is emptied in place (under the disk faults it is a lazy fs's mount
        point), and the files the operator writes are fsynced with the directories naming
        them: measured with the plugin, a power cut otherwise took ``myid`` and the member
        could never start again (docs/thirdparty.md)."""
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        q = shlex.quote
        self.prepare(ctx, node)
        remote.run(f"cat > {q(p['data'])}/myid", stdin=f"{self.myid(ctx, node)}\n")
        remote.run(f"sync {q(p['conf'])} {q(p['data'])}/myid {q(p['data'])} {q(p['dir'])}")
        self.program().install(remote, f"{self.root}/java")
        self.start(ctx, node)

    def gateway_command(self, ctx: RunContext) -> list[str]:
        ports = self.addresses(ctx)["client"]
        servers = self.addresses(ctx)["zookeeper"]
        d = self._gateway_dir(ctx)
        args = [
            *self.gateway_jvm(
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                main="splitbrain.zookeeper.Gateway",
            ),
            "--session-ms", str(self.options.session_ms),
            "--read", "sync",
            "--log", f"{d}/gateway.log",
        ]  # fmt: skip
        for n in ctx.nodes:
            host, port = servers[n]
            args += ["--endpoint", f"{n}={ports[n][1]}={host}:{port}"]
        return args

    def look(self, ctx: RunContext) -> Convergence:
        """One look: every server serves, exactly one leads, all at the same zxid (the
        token: the leader and that zxid)."""
        servers = self.addresses(ctx)["zookeeper"]
        views = map_values(
            servers, lambda a: parse_srvr(four_letter(a[0], a[1], "srvr", 2.0)), what="srvr"
        )
        seen = {n: v for n, v in views.items()}
        down = sorted(n for n, v in views.items() if v is None)
        if down:
            return Convergence(False, seen, why=f"{', '.join(down)} not serving")
        leaders = sorted(n for n, v in views.items() if v and v["mode"] == "leader")
        if len(leaders) != 1:
            return Convergence(False, seen, why=f"leaders: {leaders}")
        zxids = {v["zxid"] for v in views.values() if v}
        if len(zxids) != 1:
            return Convergence(False, seen, why=f"zxids differ: {sorted(zxids)}")
        return Convergence(True, seen, token=(leaders[0], next(iter(zxids))))

    def wait_ready(self, ctx: RunContext) -> None:
        """Every server leader or follower (one ensemble formed), then the gateway up."""
        deadline = time.monotonic() + self.options.ready_timeout
        while True:
            self._alive(ctx)  # a server that exited is an error now, not in 120 s
            report = poll_converged(lambda: self._formed(ctx), time.monotonic(), stable=1)
            if report.converged or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if not report.converged:
            raise RemoteError(
                f"zookeeper did not form an ensemble within {self.options.ready_timeout:g} s: "
                f"{report.why} (see nodes/<node>/zookeeper.log)",
                host="localhost",
            )
        self.start_gateway(ctx, deadline)
        log.info("zookeeper ready: %s", dict(report.last))

    def _formed(self, ctx: RunContext) -> Convergence:
        c = self.look(ctx)
        modes = {n: (v or {}).get("mode") for n, v in c.seen.items()}
        ok = all(m in ("leader", "follower") for m in modes.values())
        return Convergence(ok, c.seen, token=ok, why=None if ok else f"modes {modes}")

    def wait_converged(self, ctx: RunContext, deadline: float) -> ConvergenceReport:
        """Converges: after the heal, until :meth:`look` agrees twice (every server back,
        one leader, one zxid), so the final reads read one state."""
        self.gateway.check_alive()
        return poll_converged(lambda: self.look(ctx), deadline)

    def primaries(self, ctx: RunContext) -> list[str]:
        """The server whose ``srvr`` says ``Mode: leader``."""
        servers = self.addresses(ctx)["zookeeper"]
        views = map_values(
            servers, lambda a: parse_srvr(four_letter(a[0], a[1], "srvr", 1.0)), what="srvr"
        )
        return [n for n, v in views.items() if v and v["mode"] == "leader"]


@declares_options(ZooKeeperOptions)
def factory(options: ZooKeeperOptions | Mapping[str, Any]) -> DB:
    """``--db zookeeper``."""
    return ZooKeeperDB(as_options(ZooKeeperOptions, options, role="db zookeeper"))
