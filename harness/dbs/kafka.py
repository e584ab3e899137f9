"""Real Apache Kafka in KRaft mode as a database under test (``--db kafka``), any 4.x release.

Kafka's own jars (``org.apache.kafka:kafka_2.13`` and ``kafka-clients`` at ``--db-option
version=X``, from Maven Central) are resolved and built with our client gateway by
:mod:`harness.dbs.maven` from ``harness/dbs/java/kafka/pom.xml``; every node runs Kafka's
own ``kafka.Kafka server.properties`` after Kafka's own ``StorageTool format``. Roles by the
lab's node order: the first ``controllers`` nodes are the KRaft voters (a static quorum,
``controller.quorum.voters``); with ``mode=combined`` they are brokers too
(``process.roles=broker,controller``), with ``mode=separate`` controllers only; the other
nodes are brokers.

The part that is ours is the **client gateway** (``splitbrain.kafka.Gateway``, one JVM on the
harness's side): one loopback port per node speaking the reference node's broker protocol, so
the ``queue`` workload and the ``queue`` checker drive Kafka unchanged. The workload's queue
``(t0, q)`` is partition ``q`` of the topic ``t0`` (created by the gateway with
``replication``, ``min.insync.replicas`` and ``unclean.leader.election.enable`` as asked); a
send is a produce to that partition (each harness connection its own producer: ``acks`` and
idempotence as asked, one attempt when not idempotent); its queue offset is the record's Kafka
offset. Kafka has no physical offset across partitions, so ``offset`` is null and the checks
that read one (order and regress of physical offsets) have nothing to judge; per partition, a
record seen at another offset than its ack, two records at one offset, a record at two offsets,
a gap in a pull, an acked record missing from every final drain are still judged. A pull reads
from the replica on the node asked when it holds one (``broker.rack`` = node,
``client.rack`` = node, the rack-aware replica selector of KIP-392), else from the leader, so
the final drains compare the replicas' copies.

What Kafka promises, declared to the checker (:func:`loss_window`): with ``acks=all``,
``min.insync.replicas`` >= 2 and no unclean election, an acknowledged record is on every
in-sync replica and survives any minority of crashes; ``acks=1`` acknowledges on the leader
alone, and an unclean election may make an out-of-sync replica the leader: both may lose
acknowledged records, and then lost records are measured as notes, not anomalies.

Per node (lab hosts share this machine's disk, hence the levels)::

    <root>/[<lab>/]<test>/<node>/data/               log.dirs: t0-<p>/, __cluster_metadata-0/ ...
    <root>/[<lab>/]<test>/<node>/server.properties
    <root>/[<lab>/]<test>/<node>/stdout.log          Kafka's own log lines (slf4j-simple)
    <root>/[<lab>/]<test>/<node>/kafka.pid

docs/kafka.md has the design and what was measured.
"""

from __future__ import annotations

import base64
import logging
import shlex
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from harness.core.db import (
    DB,
    Convergence,
    ConvergenceReport,
    DataFiles,
    WorkloadChoice,
    poll_converged,
)
from harness.core.errors import ConfigError, RemoteError
from harness.core.options import as_options, declares_options, option
from harness.dbs.daemon import absolute_root
from harness.dbs.gateway import GatewayDB, gateway_status
from harness.dbs.maven import SOURCES, release_version

if TYPE_CHECKING:
    from harness.core.spec import RunContext
    from harness.dbs.maven import JavaProgram

__all__ = [
    "ARTIFACT",
    "NEWEST",
    "PROJECT_DIR",
    "KafkaDB",
    "KafkaOptions",
    "check_version",
    "factory",
    "loss_window",
    "roles",
    "server_properties",
    "subscription_promises",
]

log = logging.getLogger(__name__)

PROJECT_DIR = SOURCES / "kafka"
"""The Maven project: Kafka's server and client jars and our gateway."""
ARTIFACT = "org.apache.kafka:kafka_2.13"
NEWEST = "4.4.0"
"""The newest release Maven Central serves (2026-12)."""
TOPIC = "t0"
"""The queue workload's topic (workloads/queue.py: ``t0``; one topic)."""


def check_version(version: str) -> tuple[int, ...]:
    """``"4.4.0"`` -> ``(4, 4, 0)``. Only 4.x: KRaft only, the configuration written here and
    the admin calls of the gateway (describeMetadataQuorum) are 4.x's; 3.x is not yet."""
    v = release_version("kafka", version, NEWEST)
    if v[0] != 4:
        raise ConfigError(
            f"kafka version {version}: only 4.x releases (KRaft only) are built and measured "
            "here; 3.x is not yet",
            field="version",
        )
    return v


def roles(nodes: list[str], controllers: int, mode: str) -> dict[str, str]:
    """Each node's ``process.roles`` by the nodes' order: the first ``controllers`` are
    ``broker,controller`` (combined) or ``controller`` (separate), the rest ``broker``."""
    if controllers > len(nodes):
        raise ConfigError(
            f"kafka controllers={controllers} but the test has {len(nodes)} nodes",
            field="controllers",
        )
    first = "broker,controller" if mode == "combined" else "controller"
    return {n: first if i < controllers else "broker" for i, n in enumerate(nodes)}


def loss_window(acks: str, unclean: bool) -> str | None:
    """The acknowledged records Kafka may lose under these settings, in words, or None.

    ``acks=1``: the leader acknowledges once it appended; a leader change before a follower
    fetched the record truncates it (Kafka's documented trade). An unclean leader election
    lets an out-of-sync replica lead and truncate what the others held. ``acks=all`` with
    ``min.insync.replicas`` >= 2 and no unclean election promises the record is on every
    in-sync replica (at least two), so crashes and partitions of a minority lose nothing;
    ``min.insync.replicas=1`` lets the ISR shrink to the leader, which then acknowledges
    alone, but a clean election waits for that replica, so nothing is declared for it.
    """
    why = []
    if acks != "all":
        why.append(
            f"acks={acks}: acknowledged by the leader alone, lost if it is replaced "
            "before a follower fetched it"
        )
    if unclean:
        why.append(
            "unclean.leader.election.enable: an out-of-sync replica may lead and "
            "truncate acknowledged records"
        )
    return "; ".join(why) or None


def subscription_promises(acks: str, unclean: bool, idempotent: bool) -> dict[str, bool]:
    """What these settings take away from the watch client's promises
    (:data:`workloads.kafka_watch.PROMISES`), for the ``subscription`` checker.

    The queue checker turns the losses of a declared :func:`loss_window` into notes; the
    subscription checker has no notes, so the guarantees a lost acknowledged record breaks
    are not declared under a window: ``no_gap`` (an acked position nobody delivers),
    ``resumable`` (another record at an acked position, or replicas that disagree after an
    unclean election), ``final_state`` (a final read older than an ack) and ``atomic`` (a
    truncated part of a transaction). Order, duplicates within one consumer and its
    positions are a consumer's own and stay judged. Without ``acks=all`` and idempotence
    there is no transactional producer: every multi-event publish is refused unsent, so
    ``atomic`` has nothing to judge and is not declared either.
    """
    out: dict[str, bool] = {}
    if loss_window(acks, unclean):
        out.update(no_gap=False, resumable=False, final_state=False, atomic=False)
    if acks != "all" or not idempotent:
        out["atomic"] = False
    return out


def server_properties(
    *,
    node_id: int,
    role: str,
    address: str,
    voters: Mapping[int, str],
    broker_port: int,
    controller_port: int,
    data_dir: str,
    rack: str,
    brokers: int,
    replication: int,
    min_insync: int,
    unclean: bool,
    flush_messages: int | None,
) -> str:
    """server.properties of one KRaft node (a static voter set).

    Timeouts are shortened from the defaults (a broker fenced after 6 s without heartbeat
    instead of 9 s, a lagging follower out of the ISR after 10 s instead of 30 s, a
    follower's fetch waiting 100 ms for data instead of 500) so a killed broker leaves the
    ISR within a fault period and an acks=all send is not held by idle fetches; thread
    counts are shrunk for five JVMs on two cores.
    """
    listeners = []
    if "broker" in role:
        listeners.append(f"PLAINTEXT://{address}:{broker_port}")
    if "controller" in role:
        listeners.append(f"CONTROLLER://{address}:{controller_port}")
    conf: dict[str, str] = {
        "process.roles": role,
        "node.id": str(node_id),
        "controller.quorum.voters": ",".join(
            f"{i}@{a}:{controller_port}" for i, a in sorted(voters.items())
        ),
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": data_dir,
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "controller.quorum.election.timeout.ms": "2000",
        "controller.quorum.fetch.timeout.ms": "4000",
    }
    if "broker" in role:
        conf.update(
            {
                "advertised.listeners": f"PLAINTEXT://{address}:{broker_port}",
                "inter.broker.listener.name": "PLAINTEXT",
                "broker.rack": rack,
                "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
                "num.partitions": "1",
                "default.replication.factor": str(replication),
                "min.insync.replicas": str(min_insync),
                "unclean.leader.election.enable": "true" if unclean else "false",
                "auto.create.topics.enable": "false",
                "offsets.topic.replication.factor": str(min(3, brokers)),
                "offsets.topic.num.partitions": "4",
                "transaction.state.log.replication.factor": str(min(3, brokers)),
                "transaction.state.log.min.isr": str(min(2, brokers)),
                # made at the first transaction (the watch workload's): 50 partitions by
                # default, which a loaded lab takes longer to create than a producer waits
                "transaction.state.log.num.partitions": "4",
                # a transaction whose producer vanished is aborted within its timeout (the
                # watch client's: 10 s) plus this, rather than 10 s more
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
                "group.initial.rebalance.delay.ms": "0",
                "broker.heartbeat.interval.ms": "1000",
                "broker.session.timeout.ms": "6000",
                "replica.lag.time.max.ms": "10000",
                "num.replica.fetchers": "1",
                # an acks=all produce waits for the followers' next fetch: 500 ms by default
                "replica.fetch.wait.max.ms": "100",
                "log.segment.bytes": str(16 * 1024 * 1024),
                "log.cleaner.threads": "1",
                "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
            }
        )
        if flush_messages is not None:
            conf["log.flush.interval.messages"] = str(flush_messages)
    return "".join(f"{k}={v}\n" for k, v in conf.items())


@dataclass(frozen=True)
class KafkaOptions:
    """``--db-option`` keys of ``--db kafka``."""

    version: str = option(NEWEST, "the Kafka release from Maven Central (4.x, KRaft)")
    mode: Literal["combined", "separate"] = option(
        "combined", "controllers that are brokers too (combined) or controllers only (separate)"
    )
    controllers: int = option(3, "how many of the first nodes are KRaft voters", minimum=1)
    acks: Literal["all", "1"] = option("all", "the producers' acks")
    idempotent: bool = option(True, "enable.idempotence (off: one attempt per send)")
    replication: int = option(3, "the topic's replication factor", minimum=1)
    min_insync: int = option(2, "the topic's min.insync.replicas", minimum=1)
    unclean: bool = option(False, "the topic's unclean.leader.election.enable")
    partitions: int = option(4, "the topic's partitions (the workload's queues)", minimum=1)
    flush_messages: int | None = option(
        None,
        "log.flush.interval.messages (default: Kafka's, never forced: the OS flushes); 1 "
        "fsyncs every append, which the lazy-fs disk faults need (else refused)",
        minimum=1,
    )
    broker_port: int = option(9092, "the brokers' PLAINTEXT port", minimum=1, maximum=65535)
    controller_port: int = option(9093, "the controllers' port", minimum=1, maximum=65535)
    heap_mb: int = option(320, "each node's -Xmx in MiB", minimum=128)
    gateway_heap_mb: int = option(256, "the gateway's -Xmx in MiB", minimum=64)
    request_timeout_ms: int = option(4000, "the producers' request.timeout.ms", minimum=100)
    delivery_timeout_ms: int = option(
        8000, "the producers' delivery.timeout.ms (>= request timeout)", minimum=100
    )
    pull_timeout_ms: int = option(
        5000, "how long a pull polls for records before it fails (TIMEOUT)", minimum=100
    )
    root: str = option("/var/lib/splitbrain/kafka", "absolute directory of the node dirs")
    java: str = option("java", "the java binary on the hosts (17 or newer)")
    jvm_args: str = option("", "more JVM options for every node")
    ready_timeout: float = option(240.0, "seconds for the cluster and the topic at setup")
    leave_running: bool = option(False, "leave the nodes running after the test")

    def __post_init__(self) -> None:
        check_version(self.version)
        absolute_root(self.root)
        if self.min_insync > self.replication:
            raise ConfigError(
                f"min_insync={self.min_insync} exceeds replication={self.replication}: no "
                "acks=all send could ever succeed",
                field="min_insync",
            )
        if self.delivery_timeout_ms < self.request_timeout_ms:
            raise ConfigError(
                "delivery_timeout_ms must be at least request_timeout_ms (Kafka refuses it)",
                field="delivery_timeout_ms",
            )


_NO_FSYNC = (
    "Kafka acknowledges from the replicas' page caches (log.flush.interval.messages unset, "
    "its default): a lost page cache is outside what it promises, so the lazy fs would judge "
    "a promise it never made; run with --db-option flush_messages=1 to test its fsyncs"
)

_MEMBERSHIP = (
    "not yet: KRaft controller membership (add/remove voter, KIP-853) needs a dynamic "
    "quorum (controller.quorum.bootstrap.servers); this DB formats a static voter set"
)


class KafkaDB(GatewayDB):
    """A KRaft cluster, one Kafka process per node, and our client gateway."""

    system = "kafka"
    title = "Kafka"

    # Not measured under the lab's libfaketime preload (ZooKeeper's JVM never served under
    # it): the nodes run on the real clock, and the clock fault refuses hosts whose only
    # clock is libfaketime's.
    runs_under_faketime = False
    reconfigurable = False
    data_files = DataFiles(
        under="data", log=("t0-*/*.log",), state=("__cluster_metadata-0/quorum-state",)
    )
    unreachable_situations = {
        "read-from-non-leader": "a pull on a node holding a follower replica reads that "
        "replica by design (KIP-392), up to the high watermark the leader sent it"
    }

    options: KafkaOptions

    def __init__(self, options: KafkaOptions) -> None:
        super().__init__(options)
        raw = uuid.uuid4().bytes
        self.cluster_id = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        """One cluster id for every node's ``StorageTool format`` of this run."""

    @property
    def declines(self) -> dict[str, str]:
        """What faults the DB cannot take, by what they do or need, with the reason
        (``harness.core.fault.declines``): no membership change; without
        ``flush_messages`` no fault that interposes on the page cache (``fuse``), whose
        loss Kafka's default never promised to survive."""
        out = {"changes_membership": _MEMBERSHIP}
        if self.options.flush_messages is None:
            out["fuse"] = _NO_FSYNC
        return out

    # capabilities ---------------------------------------------------------------------
    def workload_defaults(self, workload: str) -> dict[str, Any]:
        """``-w watch`` subscribes with this system's own client (kafka)."""
        return {"client": "kafka"} if workload == "watch" else {}

    def default_workload(self) -> WorkloadChoice:
        """Sends with unique bodies to every partition, pulls by offset from each node's
        replica, final drains of every partition from every node (checker ``queue``). The
        client timeout outlasts the producers' delivery timeout, so a timed-out send is
        Kafka's answer, not ours."""
        o = self.options
        return WorkloadChoice(
            name="queue",
            options={"topics": 1, "queues": self.options.partitions, "commit_fraction": 0.02},
            concurrency=6,
            rate=30.0,
            client_timeout=(max(o.delivery_timeout_ms, o.pull_timeout_ms) + 4000) / 1000.0,
        )

    def checker_options(self) -> dict[str, Any]:
        """The loss window of these settings (:func:`loss_window`), when there is one, and
        the watch guarantees these settings do not give (:func:`subscription_promises`)."""
        o = self.options
        out: dict[str, Any] = {}
        window = loss_window(o.acks, o.unclean)
        if window:
            out["queue"] = {"loss_window": window}
        narrowed = subscription_promises(o.acks, o.unclean, o.idempotent)
        if narrowed:
            out["subscription"] = narrowed
        return out

    def build(self) -> JavaProgram:
        from harness.dbs import maven

        return maven.build_release(
            PROJECT_DIR,
            name="kafka",
            system="Kafka",
            prop="kafka.version",
            version=self.options.version,
            artifact=ARTIFACT,
            java=self.options.java,
            shared=(maven.SHARED,),
        )

    def resolve_artifacts(self) -> dict[str, Any]:
        """The build's manifest, the Kafka version that resolved and the promise judged."""
        p = self.program()
        o = self.options
        return {
            "kafka": p.version_of(ARTIFACT),
            "mode": o.mode,
            "acks": o.acks,
            "idempotent": o.idempotent,
            "min_insync": o.min_insync,
            "unclean": o.unclean,
            "loss_window": loss_window(o.acks, o.unclean),
            **p.manifest(),
        }

    # layout ---------------------------------------------------------------------------
    def roles(self, ctx: RunContext) -> dict[str, str]:
        return roles(list(ctx.nodes), self.options.controllers, self.options.mode)

    def brokers(self, ctx: RunContext) -> list[str]:
        return [n for n, r in self.roles(ctx).items() if "broker" in r]

    def node_id(self, ctx: RunContext, node: str) -> int:
        return list(ctx.nodes).index(node) + 1

    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {
            "dir": d,
            "data": f"{d}/data",
            "conf": f"{d}/server.properties",
            "pid": f"{d}/kafka.pid",
            "stdout": f"{d}/stdout.log",
        }

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        role = self.roles(ctx)[node]
        out = []
        if "broker" in role:
            out.append(self.options.broker_port)
        if "controller" in role:
            out.append(self.options.controller_port)
        return out

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        """``client``: the gateway's loopback port for each node; ``kafka``: the brokers."""
        return {
            "client": self.gateway_addresses(ctx),
            "kafka": {
                n: (ctx.hosts[n].address, self.options.broker_port) for n in self.brokers(ctx)
            },
        }

    def _check_layout(self, ctx: RunContext) -> None:
        brokers = len(self.brokers(ctx))
        if brokers < self.options.replication:
            raise ConfigError(
                f"kafka replication={self.options.replication} needs that many brokers; "
                f"{self.options.mode} mode with controllers={self.options.controllers} on "
                f"{len(ctx.nodes)} nodes has {brokers}",
                field="replication",
            )

    def _jvm(self, ctx: RunContext, node: str, heap_mb: int) -> list[str]:
        """Small heap, serial GC, C1 only, one processor: five JVMs share two cores."""
        d = self._paths(ctx, node)["dir"]
        return [
            self.options.java,
            f"-Xmx{heap_mb}m",
            "-Xms64m",
            "-Xss512k",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:ActiveProcessorCount=1",
            "-XX:MaxDirectMemorySize=128m",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Djava.io.tmpdir={d}",
            f"-Dkafka.logs.dir={d}",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
        ]

    def command(self, ctx: RunContext, node: str, lib: str) -> str:
        p = self._paths(ctx, node)
        cmd = " ".join(shlex.quote(a) for a in self._jvm(ctx, node, self.options.heap_mb))
        if self.options.jvm_args:
            cmd += " " + self.options.jvm_args
        tail = ["-cp", f"{lib.rstrip('/')}/*", "kafka.Kafka", p["conf"]]
        return cmd + " " + " ".join(shlex.quote(a) for a in tail)

    def format_command(self, ctx: RunContext, node: str, lib: str) -> str:
        """Kafka's own ``kafka-storage format`` (StorageTool) of the node's log dirs."""
        p = self._paths(ctx, node)
        cmd = " ".join(shlex.quote(a) for a in self._jvm(ctx, node, 192))
        tail = [
            "-cp", f"{lib.rstrip('/')}/*", "kafka.tools.StorageTool", "format",
            "-t", self.cluster_id, "-c", p["conf"],
        ]  # fmt: skip
        return cmd + " " + " ".join(shlex.quote(a) for a in tail)

    def _conf(self, ctx: RunContext, node: str) -> str:
        o = self.options
        r = self.roles(ctx)
        voters = {
            self.node_id(ctx, n): ctx.hosts[n].address for n in ctx.nodes if "controller" in r[n]
        }
        return server_properties(
            node_id=self.node_id(ctx, node),
            role=r[node],
            address=ctx.hosts[node].address,
            voters=voters,
            broker_port=o.broker_port,
            controller_port=o.controller_port,
            data_dir=self._paths(ctx, node)["data"],
            rack=node,
            brokers=len(self.brokers(ctx)),
            replication=o.replication,
            min_insync=o.min_insync,
            unclean=o.unclean,
            flush_messages=o.flush_messages,
        )

    # lifecycle ------------------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        """Stop and empty a leftover, write server.properties, format the log dir with
        Kafka's StorageTool (fsynced with the directories naming it), start the node."""
        self._check_layout(ctx)
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        q = shlex.quote
        self.prepare(ctx, node)
        lib = self.program().install(remote, f"{self.root}/java")
        res = remote.run(self.format_command(ctx, node, lib), check=False, timeout=300)
        if not res.ok:
            raise RemoteError(
                f"kafka storage format failed: {(res.stdout + res.stderr).strip()[-600:]}",
                host=remote.host.name,
            )
        remote.run(f"sync {q(p['conf'])} {q(p['data'])}/* {q(p['data'])} {q(p['dir'])}")
        self.start(ctx, node)

    def gateway_command(self, ctx: RunContext) -> list[str]:
        o = self.options
        ports = self.addresses(ctx)["client"]
        brokers = self.addresses(ctx)["kafka"]
        d = self._gateway_dir(ctx)
        args = [
            *self.gateway_jvm(
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", main="splitbrain.kafka.Gateway"
            ),
            "--bootstrap", ",".join(f"{h}:{p}" for h, p in brokers.values()),
            "--topic", TOPIC,
            "--partitions", str(o.partitions),
            "--replication", str(o.replication),
            "--min-isr", str(o.min_insync),
            "--unclean", "true" if o.unclean else "false",
            "--acks", o.acks,
            "--idempotent", "true" if o.idempotent else "false",
            "--request-timeout-ms", str(o.request_timeout_ms),
            "--delivery-timeout-ms", str(o.delivery_timeout_ms),
            "--pull-timeout-ms", str(o.pull_timeout_ms),
            "--log", f"{d}/gateway.log",
        ]  # fmt: skip
        for n in ctx.nodes:
            args += ["--endpoint", f"{n}={ports[n][1]}={self.node_id(ctx, n)}"]
        return args

    def _status(self, ctx: RunContext) -> dict[str, Any] | None:
        """The gateway's status (any endpoint: its admin client asks the cluster)."""
        for addr in self.addresses(ctx)["client"].values():
            st = gateway_status(addr, 10.0)
            if st is not None:
                return st
        return None

    def look(self, ctx: RunContext) -> Convergence:
        """One look: the topic exists, every partition has a leader and its whole replica
        set in sync, and every KRaft voter's log ends at the quorum's high watermark. The
        token is each partition's leader and end offset."""
        self.gateway.check_alive()
        st = self._status(ctx)
        if st is None:
            return Convergence(False, {}, why="the gateway does not answer")
        parts = st.get("partitions") or []
        quorum = st.get("quorum") or {}
        seen = {"partitions": parts, "quorum": quorum, "topic_ready": st.get("topic_ready")}
        if not st.get("topic_ready") or len(parts) != self.options.partitions:
            return Convergence(False, seen, why=f"topic not ready ({st.get('topic_error')})")
        off = [p["partition"] for p in parts if not p.get("leader")]
        if off:
            return Convergence(False, seen, why=f"partitions {off} have no leader")
        short = [
            p["partition"]
            for p in parts
            if sorted(p.get("isr") or []) != sorted(p.get("replicas") or [])
        ]
        if short:
            return Convergence(False, seen, why=f"partitions {short} have replicas out of sync")
        voters = quorum.get("voters") or {}
        hw = quorum.get("high_watermark")
        behind = sorted(v for v, leo in voters.items() if hw is None or leo is None or leo < hw)
        if not voters or behind:
            return Convergence(False, seen, why=f"controllers behind the quorum: {behind}")
        token = tuple((p["partition"], p["leader"], p.get("end")) for p in parts)
        return Convergence(True, seen, token=token)

    def wait_ready(self, ctx: RunContext) -> None:
        """Every node's port open, the gateway started, then :meth:`look` converged once
        (the topic created, every replica in sync)."""
        deadline = time.monotonic() + self.options.ready_timeout
        for n in ctx.nodes:
            host = ctx.hosts[n].address
            port = self.ports(ctx, n)[0]
            while True:
                self._alive(ctx)
                try:
                    socket.create_connection((host, port), timeout=1.0).close()
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        raise RemoteError(
                            f"kafka did not listen on {host}:{port} within "
                            f"{self.options.ready_timeout:g} s",
                            host=ctx.hosts[n].name,
                        ) from None
                    time.sleep(0.3)
        self.start_gateway(ctx, deadline)
        while True:
            self._alive(ctx)
            report = poll_converged(lambda: self.look(ctx), time.monotonic(), stable=1)
            if report.converged:
                log.info("kafka ready: %s", dict(report.last))
                return
            if time.monotonic() >= deadline:
                raise RemoteError(
                    f"kafka not ready within {self.options.ready_timeout:g} s: {report.why} "
                    f"(last: {dict(report.last)})",
                    host="localhost",
                )
            time.sleep(0.5)

    def wait_converged(self, ctx: RunContext, deadline: float) -> ConvergenceReport:
        """Converges: after the heal, until :meth:`look` agrees twice (every replica back
        in sync, the controllers caught up), so the final drains read the outcome."""
        return poll_converged(lambda: self.look(ctx), deadline)

    def primaries(self, ctx: RunContext) -> list[str]:
        """The brokers leading a partition of the topic (what holds acked records first)."""
        st = self._status(ctx)
        leaders = {p.get("leader") for p in (st or {}).get("partitions") or []}
        return sorted(n for n in leaders if isinstance(n, str) and n in ctx.nodes)


@declares_options(KafkaOptions)
def factory(options: KafkaOptions | Mapping[str, Any]) -> DB:
    """``--db kafka``."""
    return KafkaDB(as_options(KafkaOptions, options, role="db kafka"))
