"""Real Apache RocketMQ as a database under test (``--db rocketmq``): classic master/slave
(``mode=master-slave``, RocketMQ's HAService) or the DLedger commitlog (``mode=dledger``).

RocketMQ's own jars (``rocketmq-namesrv``, ``rocketmq-broker``, ``rocketmq-client`` at
``--db-option version=X``) are resolved and built by :mod:`harness.dbs.maven` from
``harness/dbs/java/rocketmq/pom.xml``; the name server and the brokers run by RocketMQ's own
main classes (``NamesrvStartup``, ``BrokerStartup -c broker.conf``). Roles, by the lab's
node order (with 5 hosts)::

    n1          name server (NamesrvStartup)
    master-slave:  n2 broker-a master, brokerId 0 (SYNC_MASTER or ASYNC_MASTER);
                   n3, n4, n5 its slaves, brokerId 1..3 (RocketMQ's HAService replicates)
    dledger:       n2..n5 one DLedger group (peers n0..n3, quorum 3) as broker-a; the
                   elected leader is the master (RocketMQ's DLedgerRoleChangeHandler)

One broker group, so the queue workload's ``(topic, queue)`` is one RocketMQ message queue
and every node's final drain reads the same queue (the master's or a slave's copy). Classic
master/slave has no failover: the master stays the master, a slave never takes writes.
``mode=controller``: RocketMQ 5's controllers elect the master (docs/rocketmq.md).
``consumer=push`` swaps the default workload for RocketMQ's push consumer, consume-and-ack
(:mod:`harness.dbs.rocketmq_push`).

The only part that is ours is the **client gateway** (``splitbrain.rocketmq.Gateway``, one JVM
on the harness's side, started by :meth:`RocketMQDB.wait_ready`, stopped at teardown or when
the harness dies): one loopback port per node speaking the reference node's client protocol,
so ``workloads/queue.py`` drives it unchanged. A send is RocketMQ's ``DefaultMQProducer``
sync send to the queue asked (no retries); a pull is RocketMQ's PULL_MESSAGE sent by its
Netty client to that node's broker (the name server's port pulls from the routed master).

Per node (lab hosts share this machine's disk, hence the levels)::

    <root>/[<lab>/]<test>/<node>/data/       the broker's store (commitlog, consumequeue, ...)
    <root>/[<lab>/]<test>/<node>/broker.conf | namesrv.conf
    <root>/[<lab>/]<test>/<node>/logs/       RocketMQ's own logs (user.home points here)
    <root>/[<lab>/]<test>/<node>/stdout.log
    <root>/[<lab>/]<test>/<node>/rocketmq.pid

docs/rocketmq.md has what was measured.
"""

from __future__ import annotations

import logging
import re
import shlex
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from harness.core.db import Convergence, ConvergenceReport, WorkloadChoice, poll_converged
from harness.core.errors import ConfigError, RemoteError
from harness.core.fanout import map_values
from harness.core.options import option
from harness.dbs.daemon import NO_COND_FIX, absolute_root, raise_if_exited
from harness.dbs.gateway import GatewayDB, gateway_status
from harness.dbs.maven import SOURCES, release_version

if TYPE_CHECKING:
    from harness.core.spec import RunContext
    from harness.dbs.maven import JavaProgram

__all__ = [
    "BROKER_ARTIFACT",
    "NEWEST",
    "PROJECT_DIR",
    "PUSH_GROUP",
    "PUSH_WORKLOAD",
    "RocketMQDB",
    "RocketMQOptions",
    "broker_conf",
    "controller_conf",
    "controller_loss_window",
    "check_mode",
    "check_version",
    "gateway_source_4x",
    "logback_4x",
    "loss_window",
    "roles",
]

log = logging.getLogger(__name__)

PROJECT_DIR = SOURCES / "rocketmq"
"""The Maven project: RocketMQ's jars and our gateway (pom.xml, src/main/java)."""
BROKER_ARTIFACT = "org.apache.rocketmq:rocketmq-broker"
NEWEST = "5.3.3"
"""The newest release whose jars Maven Central serves here (2026-12): 5.3.4, 5.4.0 and 5.5.x
are listed in its metadata but their jars do not resolve (measured with mvn)."""

MODES = ("master-slave", "dledger", "controller")
NOT_YET: dict[str, str] = {}
"""Modes of issue 40 that are refused, each with its reason (none left)."""
CONTROLLER_GROUP = "sb-controllers"
"""The controllers' DLedger group (``controllerDLegerGroup``)."""

TOPIC = "t0"
GROUPS = ("g0",)
"""The queue workload's topic and consumer group (workloads/queue.py: ``t0``.., ``g0``)."""
PUSH_GROUP = "sb_push"
"""The push consumer's group (harness/dbs/rocketmq_push.py), created with the others."""


def check_version(version: str) -> tuple[int, ...]:
    """``"5.3.3"`` -> ``(5, 3, 3)``: a 4.x or 5.x release (Apache's, on Maven Central; the
    gateway's source is rewritten for 4.x's package names, :func:`gateway_source_4x`)."""
    v = release_version("rocketmq", version, NEWEST)
    if v[0] not in (4, 5):
        raise ConfigError(
            f"rocketmq version {version}: a 4.x or 5.x release expected (org.apache.rocketmq "
            "on Maven Central begins at 4.0; the gateway speaks 4.x's and 5.x's client API)",
            field="version",
        )
    return v


GATEWAY_JAVA = "src/main/java/splitbrain/rocketmq/Gateway.java"
RENAMED_IN_5 = {
    "org.apache.rocketmq.remoting.protocol.RequestCode": "org.apache.rocketmq.common.protocol.RequestCode",
    "org.apache.rocketmq.remoting.protocol.ResponseCode": "org.apache.rocketmq.common.protocol.ResponseCode",
    "org.apache.rocketmq.remoting.protocol.body.": "org.apache.rocketmq.common.protocol.body.",
    "org.apache.rocketmq.remoting.protocol.header.": "org.apache.rocketmq.common.protocol.header.",
    "org.apache.rocketmq.remoting.protocol.route.": "org.apache.rocketmq.common.protocol.route.",
    "org.apache.rocketmq.remoting.protocol.subscription.": "org.apache.rocketmq.common.subscription.",
}  # fmt: skip
"""The classes the gateway uses that 5.0 moved into ``rocketmq-remoting`` (5.x name -> 4.x)."""


def gateway_source_4x(java: str) -> str:
    """The gateway's source for a 4.x client: the 5.x-only parts (controller mode, between
    ``// 5.x only: begin`` and ``// 5.x only: end``) cut, the moved packages renamed back.
    A ConfigError if a 5.x-only name is left (the source changed without its markers)."""
    out, skipping, unpaired = [], False, 0
    for line in java.splitlines(keepends=True):
        mark = line.strip()
        if mark.startswith("// 5.x only: begin"):
            unpaired += skipping
            skipping = True
        elif mark == "// 5.x only: end":
            unpaired += not skipping
            skipping = False
        elif not skipping:
            out.append(line)
    text = "".join(out)
    for new, old in RENAMED_IN_5.items():
        text = text.replace(new, old)
    left = re.findall(r"org\.apache\.rocketmq\.remoting\.protocol\.(?!RemotingCommand)\S+", text)
    if skipping or unpaired or left:
        raise ConfigError(
            "the rocketmq gateway's source has 5.x-only names outside its markers "
            f"(unpaired markers: {unpaired + skipping}; names left: {left})",
            field="version",
        )
    return text


def check_mode(mode: str) -> None:
    """ConfigError for a mode that is not one of :data:`MODES` (or is in :data:`NOT_YET`)."""
    if mode in NOT_YET:
        raise ConfigError(f"rocketmq mode={mode}: not yet ({NOT_YET[mode]})", field="mode")
    if mode not in MODES:
        raise ConfigError(
            f"rocketmq mode={mode!r}: one of {', '.join(MODES)} expected", field="mode"
        )


def roles(
    nodes: list[str],
    name_servers: int = 1,
    *,
    dledger: bool = False,
    controllers: int = 0,
    standalone: bool = False,
) -> dict[str, str]:
    """Each node's configured role by the nodes' order: ``namesrv``, then ``master`` and
    ``slave``s (master-slave), or ``broker``s whose master is elected (dledger: the DLedger
    group's leader; controller mode: the controllers' choice).

    Controller mode (``controllers`` > 0): embedded, the first ``controllers`` name servers
    each run a controller (``enableControllerInNamesrv``; at least ``controllers`` name
    servers); ``standalone``, ``controller`` nodes (RocketMQ's ``ControllerStartup``) follow
    the name servers. The brokers come last, at least two.
    """
    if controllers and not standalone:
        name_servers = max(name_servers, controllers)
    extra = controllers if standalone else 0
    need = name_servers + extra + 2
    if len(nodes) < need:
        what = f"{name_servers} name server(s)"
        if controllers:
            what += f", {controllers} {'standalone ' if standalone else ''}controller(s)"
        raise ConfigError(
            f"rocketmq needs at least {need} nodes ({what}, a master and a slave); "
            f"got {len(nodes)}",
            field="nodes",
        )
    elected = dledger or controllers > 0
    out = {}
    for i, n in enumerate(nodes):
        if i < name_servers:
            out[n] = "namesrv"
        elif i < name_servers + extra:
            out[n] = "controller"
        elif elected:
            out[n] = "broker"
        else:
            out[n] = "master" if i == name_servers else "slave"
    return out


def loss_window(flush: str, replication: str, mode: str = "master-slave") -> str | None:
    """The acknowledged messages RocketMQ may lose under these settings, in words, or None.

    ASYNC_FLUSH acks a message once it is in the page cache: a power loss (or lost
    un-fsynced writes) on the master takes its unflushed tail, and with ASYNC_MASTER no slave
    need hold it either. With SYNC_MASTER a slave holds it (in its own page cache) before the
    ack, so only losing both loses it, and after the master comes back short it writes new
    messages at positions its slaves still hold, which classic HA never truncates. SYNC_FLUSH
    acks after the commitlog is forced to disk: no declared loss (classic master/slave has no
    failover, so ASYNC_MASTER alone loses nothing a restart does not bring back).

    The DLedger commitlog acks once a majority of the group appended it (its own flush runs
    in the background): no window is declared for the faults this DB takes (kills keep the
    page cache on the lab; the lazy-fs faults are refused). Controller mode's elected master
    always runs as SYNC_MASTER (RocketMQ's ReplicasManager sets it), whatever ``replication``
    says; its failover windows are :func:`controller_loss_window`'s.
    """
    if mode == "dledger" or flush != "ASYNC_FLUSH":
        return None
    if replication == "ASYNC_MASTER" and mode == "master-slave":
        return "ASYNC_FLUSH + ASYNC_MASTER: acked messages not yet flushed on the master"
    return "ASYNC_FLUSH + SYNC_MASTER: acked messages flushed on neither master nor slave"


def controller_loss_window(in_sync_replicas: int, all_ack: bool, unclean: bool) -> str | None:
    """What a failover in controller mode may lose of the acked messages, in words, or None.

    RocketMQ 5's controller elects the new master from the group's SyncStateSet only, unless
    ``enableElectUncleanMaster`` lets it pick any live replica. The master acks a send once
    ``inSyncReplicas`` replicas (itself included) hold it, or, with
    ``allAckInSyncStateSet``, once every member of the SyncStateSet does (the controller
    shrinks the set when a slave falls behind, so the ack never waits for a replica outside
    it). So with ``allAckInSyncStateSet`` every electable replica holds every acked message;
    without it, a member of the set that had not yet copied the tail may be elected. (Were
    ``inSyncReplicas`` to count every broker of the group, that window would be empty; the
    window is declared anyway, since the checker is told the options and not the hosts, so a
    re-check from ``test.json`` judges the same. Declaring too wide a window only weakens the
    check, never makes it wrong.)
    """
    if unclean:
        return (
            "enableElectUncleanMaster: acked messages the replica elected outside the "
            "SyncStateSet did not hold"
        )
    if not all_ack:
        return (
            f"inSyncReplicas={in_sync_replicas} without allAckInSyncStateSet: acked messages "
            "the newly elected member of the SyncStateSet had not copied"
        )
    return None


def controller_conf(
    *,
    peers: str,
    self_id: str,
    store: str,
    unclean: bool,
    namesrv_port: int | None,
) -> str:
    """namesrv.conf with an embedded controller (``namesrv_port`` set), or controller.conf
    of a standalone ``ControllerStartup``: ControllerConfig keys of 5.x. The controller
    answers brokers on its DLedger peer port (``controllerAddr`` names those ports)."""
    conf = {}
    if namesrv_port is not None:
        conf["listenPort"] = str(namesrv_port)
        conf["enableControllerInNamesrv"] = "true"
    conf.update(
        {
            "controllerType": "DLedger",
            "controllerDLegerGroup": CONTROLLER_GROUP,
            "controllerDLegerPeers": peers,
            "controllerDLegerSelfId": self_id,
            "controllerStorePath": store,
            "enableElectUncleanMaster": "true" if unclean else "false",
            "notifyBrokerRoleChanged": "true",
        }
    )
    return "".join(f"{k}={v}\n" for k, v in conf.items())


def logback_4x(name: str, logs: str) -> str:
    """A small logback configuration for a 4.x name server or broker: everything in
    ``<logs>/<name>.log``, the message store's own lines in ``<logs>/store.log``."""
    appender = (
        '  <appender name="{a}" class="ch.qos.logback.core.FileAppender">\n'
        "    <file>{f}</file>\n"
        "    <encoder><pattern>%d{{yyyy-MM-dd HH:mm:ss.SSS}} %p %t - %m%n</pattern></encoder>\n"
        "  </appender>\n"
    )
    return (
        "<configuration>\n"
        + appender.format(a="MAIN", f=f"{logs}/{name}.log")
        + appender.format(a="STORE", f=f"{logs}/store.log")
        + '  <logger name="RocketmqStore" additivity="false"><appender-ref ref="STORE"/></logger>\n'
        + '  <root level="INFO"><appender-ref ref="MAIN"/></root>\n'
        + "</configuration>\n"
    )


def broker_conf(
    *,
    broker_id: int,
    role: str,
    flush: str,
    namesrv: str,
    address: str,
    port: int,
    store: str,
    commitlog_mb: int,
    dledger: Mapping[str, str] | None = None,
    controller: Mapping[str, str] | None = None,
    extra: Mapping[str, str] = {},
) -> str:
    """broker.conf (BrokerConfig, MessageStoreConfig, NettyServerConfig keys of 5.x).

    RocketMQ's defaults assume a dedicated machine (1 GiB commitlog files, 6 MB consume queue
    files, a 20 s HA housekeeping interval); these are shrunk so five JVMs share two cores and
    one disk. ``slaveReadEnable`` lets slaves answer pulls (without it a slave rejects every
    PULL_MESSAGE with "[REJECTREQUEST]system busy", measured).
    """
    conf = {
        "brokerClusterName": "sb",
        "brokerName": "broker-a",
        "brokerId": str(broker_id),
        "brokerRole": role,
        "flushDiskType": flush,
        "namesrvAddr": namesrv,
        "brokerIP1": address,
        "brokerIP2": address,
        "listenPort": str(port),
        "haListenPort": str(port + 1),
        "storePathRootDir": store,
        "storePathCommitLog": f"{store}/commitlog",
        "mappedFileSizeCommitLog": str(commitlog_mb * 1024 * 1024),
        "mappedFileSizeConsumeQueue": str(30000 * 20),
        "transientStorePoolEnable": "false",
        "diskMaxUsedSpaceRatio": "99",
        "autoCreateTopicEnable": "false",
        "autoCreateSubscriptionGroup": "true",
        "slaveReadEnable": "true",
        "syncFlushTimeout": "3000",
        "registerNameServerPeriod": "10000",
        "haHousekeepingInterval": "5000",
        # The master drops an HA connection it has not heard from for haHousekeepingInterval;
        # an idle slave reports every haSendHeartbeatInterval (5 s by default, the same), so
        # in controller mode an idle slave lost its connection after each handshake and never
        # copied anything (measured: "Read socket < 0" 5 s after every TRANSFER).
        "haSendHeartbeatInterval": "1000",
        "sendMessageThreadPoolNums": "1",
        "pullMessageThreadPoolNums": "4",
        "enablePropertyFilter": "false",
        "timerWheelEnable": "false",
        "enableControllerMode": "false",
        "enableDLegerCommitLog": "false",
    }
    if dledger is not None:
        # The DLedger commitlog: brokerRole and brokerId are then set by RocketMQ's
        # DLedgerRoleChangeHandler on every election, not by this file.
        # As RocketMQ's DLedger quick start: every broker's file says brokerId 0 and the
        # default role (a SLAVE with id 0 is refused at start: "Slave's brokerId must be > 0").
        conf["enableDLegerCommitLog"] = "true"
        conf["brokerId"] = "0"
        conf["brokerRole"] = "ASYNC_MASTER"
        conf.update(dledger)
    if controller is not None:
        # Controller mode: the controllers elect the master and hand out broker ids, so the
        # file says neither (RocketMQ's controller quick start: brokerId -1, role SLAVE; the
        # elected master always runs as SYNC_MASTER). The epoch file and the broker's
        # identity live in the store, so a wipe takes them too.
        conf["enableControllerMode"] = "true"
        conf["brokerId"] = "-1"
        conf["brokerRole"] = "SLAVE"
        conf["storePathEpochFile"] = f"{store}/epochFileCheckpoint"
        conf["storePathBrokerIdentity"] = f"{store}/brokerIdentity"
        conf.update(controller)
    conf.update(extra)
    return "".join(f"{k}={v}\n" for k, v in conf.items())


@dataclass(frozen=True)
class RocketMQOptions:
    """``--db-option`` keys of ``--db rocketmq``."""

    mode: str = option(
        "master-slave",
        "master-slave, dledger (the DLedger commitlog) or controller (RocketMQ 5's "
        "DLedger-replicated controller elects the master)",
    )
    version: str = option(NEWEST, "the RocketMQ release from Maven Central (4.x or 5.x)")
    flush: Literal["SYNC_FLUSH", "ASYNC_FLUSH"] = option(
        "ASYNC_FLUSH", "flushDiskType (RocketMQ's default ASYNC_FLUSH)"
    )
    replication: Literal["SYNC_MASTER", "ASYNC_MASTER"] = option(
        "SYNC_MASTER", "the master's brokerRole"
    )
    name_servers: int = option(1, "how many of the first nodes run a name server", minimum=1)
    namesrv_port: int = option(9876, "the name server's port", minimum=1, maximum=65535)
    broker_port: int = option(
        10911, "the brokers' listenPort (haListenPort is the next)", minimum=2, maximum=65534
    )
    commitlog_mb: int = option(16, "mappedFileSizeCommitLog in MiB", minimum=1)
    heap_mb: int = option(256, "the brokers' -Xmx in MiB", minimum=64)
    namesrv_heap_mb: int = option(128, "the name servers' -Xmx in MiB", minimum=32)
    gateway_heap_mb: int = option(192, "the gateway's -Xmx in MiB", minimum=64)
    send_timeout_ms: int = option(4000, "the gateway's send timeout", minimum=100)
    root: str = option("/var/lib/splitbrain/rocketmq", "absolute directory of the node dirs")
    java: str = option("java", "the java binary on the hosts (17 or newer)")
    ready_timeout: float = option(180.0, "seconds for the group to register and the topic")
    leave_running: bool = option(False, "leave the nodes running after the test")
    jvm_args: str = option("", "more JVM options for every name server and broker")
    controllers: int = option(
        3, "controller mode: how many controllers (one DLedger group)", minimum=1
    )
    controller_placement: Literal["namesrv", "standalone"] = option(
        "namesrv",
        "controller mode: embedded in the first name servers (enableControllerInNamesrv), "
        "or standalone ControllerStartup nodes after the name servers",
    )
    controller_port: int = option(
        9878,
        "controller mode: the controllers' DLedger port (the brokers' controllerAddr)",
        minimum=1,
        maximum=65535,
    )
    all_ack_in_sync_state_set: bool = option(
        True,
        "controller mode: allAckInSyncStateSet (a send acked once every member of the "
        "SyncStateSet holds it; RocketMQ's default is false)",
    )
    in_sync_replicas: int = option(
        1, "controller mode: inSyncReplicas, the copies an ack needs without allAck", minimum=1
    )
    min_in_sync_replicas: int = option(
        1,
        "controller mode: minInSyncReplicas (fewer in sync: the master refuses sends)",
        minimum=1,
    )
    unclean_election: bool = option(
        False, "controller mode: enableElectUncleanMaster (elect outside the SyncStateSet)"
    )
    consumer: Literal["pull", "push"] = option(
        "pull",
        "the default workload's consumers: pull (the queue workload, pulls by offset, checked "
        "by queue) or push (RocketMQ's push consumer, consume-and-ack, checked by total-queue: "
        "harness/dbs/rocketmq_push.py)",
    )
    upgrade_to: Literal["dledger"] | None = option(
        None,
        "mode master-slave: the rolling upgrade fault (--nemesis upgrade) switches the group, "
        "one broker at a time, to this mode (harness/dbs/rocketmq_upgrade.py)",
    )
    switch_timeout: float = option(
        240.0,
        "upgrade: seconds one broker's switch (clean stop, start on DLedger) may take",
        minimum=1,
    )
    power_loss: bool = option(
        False,
        "the run cuts power (the VM lab's power fault): declare ASYNC_FLUSH's loss window to "
        "the checker; off, every lost ack is an anomaly, since a kill keeps the page cache",
    )

    def __post_init__(self) -> None:
        check_mode(self.mode)
        v = check_version(self.version)
        if self.mode == "controller" and v < (5, 0, 0):
            raise ConfigError(
                f"rocketmq version {self.version}: controller mode needs 5.x", field="mode"
            )
        absolute_root(self.root)
        if self.upgrade_to is not None and self.mode != "master-slave":
            raise ConfigError(
                f"rocketmq upgrade_to={self.upgrade_to}: the upgrade starts from mode "
                f"master-slave, not {self.mode}",
                field="upgrade_to",
            )


DEFAULT_WORKLOAD = WorkloadChoice(
    name="queue",
    options={"topics": 1, "queues": 4},
    concurrency=8,
    rate=40.0,
    client_timeout=6.0,
)
"""Sends, pulls by queue offset from each node's broker, offset commits, final drains of every
queue from every node. The client timeout outlasts the gateway's send timeout (4 s) and the
broker's syncFlushTimeout (3 s), so FLUSH_SLAVE_TIMEOUT is RocketMQ's answer, not ours."""

PUSH_WORKLOAD = WorkloadChoice(
    name="harness.dbs.rocketmq_push:workload",
    options={},
    concurrency=8,
    rate=40.0,
    client_timeout=6.0,
)
"""``consumer=push``: enqueues and dequeues through the gateway's push consumer. The client
timeout outlasts a dequeue's longest path (1 s wait, 1 s for the consumer's offset, 2 s for
the master's confirmation)."""

_LAZYFS = (
    "RocketMQ 5.3.3 fsyncs neither the directories nor the directory entries of the files it "
    "creates (commitlog/, consumequeue/, config/topics.json ...); its mmap writes do reach the "
    "lazy fs (pages of commitlog/00000000000000000000 were dropped). Measured on the lab: one "
    "lose-unfsynced on every node dropped each broker's whole store, topic config included, "
    "so the master served TOPIC_NOT_EXIST until the end and no verdict was possible "
    "(docs/rocketmq.md); use the VM lab's power fault to test power loss on real disks"
)

_DECLINES = {
    "changes_membership": "no runtime membership change the harness can ask of RocketMQ: a "
    "broker group is its brokers' configuration (brokerName, and brokerId or the "
    "controllers' ids)",
    "fuse": _LAZYFS,
}
"""What the deck leaves out, by what a fault does or needs, with the reason it prints
(``harness.core.fault.declines``). Corrupt is left out without a word here: a broker
declares no ``data_files`` (its commitlog, consume queues and config are not a log and a
term the fault can aim at)."""


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


class RocketMQDB(GatewayDB):
    """RocketMQ's name server and one master/slave broker group, and our client gateway."""

    system = "rocketmq"
    title = "RocketMQ"
    member = "process"
    shared = "brokers"
    runs_under_faketime = True
    reconfigurable = False
    declines = _DECLINES
    options: RocketMQOptions

    # capabilities ---------------------------------------------------------------------
    def default_workload(self) -> WorkloadChoice:
        return PUSH_WORKLOAD if self.options.consumer == "push" else DEFAULT_WORKLOAD

    def checker_options(self) -> dict[str, Any]:
        """The loss window of the flush and replication settings (:func:`loss_window`),
        declared only for a run that cuts power (``power_loss``): the window is what a lost
        page cache takes, and no other fault this DB takes loses one (kills keep it, the
        lazy-fs faults are refused), so a loss in any other run is an anomaly."""
        o = self.options
        windows = []
        if o.power_loss:
            windows.append(loss_window(o.flush, o.replication, o.mode))
        if self.controller_mode:
            windows.append(self.controller_window())
        words = "; ".join(w for w in windows if w)
        return {"queue": {"loss_window": words}} if words else {}

    def controller_window(self) -> str | None:
        """:func:`controller_loss_window` of this run's options."""
        o = self.options
        return controller_loss_window(
            o.in_sync_replicas, o.all_ack_in_sync_state_set, o.unclean_election
        )

    def build(self) -> JavaProgram:
        from harness.dbs import maven

        four = check_version(self.options.version)[0] == 4
        project = PROJECT_DIR
        tmp = tempfile.mkdtemp(prefix="sb-rocketmq4-") if four else None
        try:
            if tmp is not None:
                # the same project, its gateway rewritten for 4.x's package names
                project = Path(tmp) / "rocketmq"
                shutil.copytree(PROJECT_DIR, project, ignore=shutil.ignore_patterns("target"))
                src = project / GATEWAY_JAVA
                src.write_text(gateway_source_4x(src.read_text()))
            return maven.build_release(
                project,
                name="rocketmq4" if four else "rocketmq",
                system="RocketMQ",
                prop="rocketmq.version",
                version=self.options.version,
                artifact=BROKER_ARTIFACT,
                java=self.options.java,
                shared=(maven.SHARED,),
            )
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def resolve_artifacts(self) -> dict[str, Any]:
        """The build's manifest and the RocketMQ version that resolved (test.json)."""
        p = self.program()
        o = self.options
        extra: dict[str, Any] = {}
        if self.controller_mode:
            extra["controller"] = {
                "controllers": o.controllers,
                "placement": o.controller_placement,
                "allAckInSyncStateSet": o.all_ack_in_sync_state_set,
                "inSyncReplicas": o.in_sync_replicas,
                "minInSyncReplicas": o.min_in_sync_replicas,
                "enableElectUncleanMaster": o.unclean_election,
            }
        return {
            "rocketmq": p.version_of(BROKER_ARTIFACT),
            "mode": o.mode,
            "flush": o.flush,
            "replication": o.replication,
            **extra,
            **p.manifest(),
        }

    # layout ---------------------------------------------------------------------------
    @property
    def dledger(self) -> bool:
        return self.options.mode == "dledger"

    @property
    def controller_mode(self) -> bool:
        return self.options.mode == "controller"

    @property
    def elected(self) -> bool:
        """Whether the master is elected (dledger, controller) rather than configured."""
        return self.dledger or self.controller_mode

    def runs_dledger(self, ctx: RunContext, node: str) -> bool:
        """Whether ``node``'s broker runs the DLedger commitlog (every broker in mode dledger;
        the upgrade's subclass: the brokers it switched)."""
        return self.dledger

    def layout(self, ctx: RunContext) -> dict[str, str]:
        """Each node's configured role (:func:`roles`): what it runs, not whom it leads."""
        o = self.options
        return roles(
            list(ctx.nodes),
            o.name_servers,
            dledger=self.dledger,
            controllers=o.controllers if self.controller_mode else 0,
            standalone=o.controller_placement == "standalone",
        )

    def brokers(self, ctx: RunContext) -> list[str]:
        return [n for n, r in self.layout(ctx).items() if r not in ("namesrv", "controller")]

    def controller_nodes(self, ctx: RunContext) -> list[str]:
        """The nodes running a controller (embedded in a name server or standalone)."""
        if not self.controller_mode:
            return []
        lay = self.layout(ctx)
        if self.options.controller_placement == "standalone":
            return [n for n, r in lay.items() if r == "controller"]
        return [n for n, r in lay.items() if r == "namesrv"][: self.options.controllers]

    def _controller_addrs(self, ctx: RunContext) -> str:
        return ";".join(
            f"{ctx.hosts[n].address}:{self.options.controller_port}"
            for n in self.controller_nodes(ctx)
        )

    def master(self, ctx: RunContext) -> str | None:
        """The master: by configuration (master-slave), or the broker the name server routes
        as brokerId 0 (dledger: the DLedger leader, asked through the gateway)."""
        if not self.elected:
            return next(n for n, r in self.layout(ctx).items() if r == "master")
        addrs = self.addresses(ctx)["client"]
        by_addr = {self._broker_addr(ctx, n): n for n in self.brokers(ctx)}
        for n in self.brokers(ctx):
            st = gateway_status(addrs[n], 2.0)
            if st is not None:
                return by_addr.get(str((st.get("route") or {}).get("broker-a:0")))
        return None

    def roles(self, ctx: RunContext) -> dict[str, list[str]]:
        """HasRoles: who plays which part now, for the deck's role scripts. Controller mode:
        ``controller-leader`` (the controller every controller names as leader), the
        ``controller``s, the ``master`` (the broker the name server routes as brokerId 0)
        and its ``slave``s, the ``namesrv``s (the controllers' nodes when embedded: the
        deck aims at that set once). Master-slave and dledger: ``master``, ``slave``,
        ``namesrv``. Asks the gateway; changes nothing."""
        lay = self.layout(ctx)
        out: dict[str, list[str]] = {}
        if self.controller_mode:
            ctl = self.controller_status(ctx) or {}
            by_ctl = {
                f"{ctx.hosts[n].address}:{self.options.controller_port}": n
                for n in self.controller_nodes(ctx)
            }
            leader = by_ctl.get(str(ctl.get("leader")))
            out["controller-leader"] = [leader] if leader else []
            out["controller"] = self.controller_nodes(ctx)
        master = self.master(ctx)
        out["master"] = [master] if master else []
        out["slave"] = [b for b in self.brokers(ctx) if b != master]
        out["namesrv"] = [n for n, r in lay.items() if r == "namesrv"]
        return out

    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        role = self.layout(ctx)[node]
        conf = {"namesrv": "namesrv.conf", "controller": "controller.conf"}.get(role, "broker.conf")
        return {
            "dir": d,
            "data": f"{d}/data",
            "conf": f"{d}/{conf}",
            "pid": f"{d}/rocketmq.pid",
            "stdout": f"{d}/stdout.log",
            "logs": f"{d}/logs/rocketmqlogs",
        }

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        role = self.layout(ctx)[node]
        ctl = [self.options.controller_port] if node in self.controller_nodes(ctx) else []
        if role == "namesrv":
            return [self.options.namesrv_port, *ctl]
        if role == "controller":
            return ctl
        p = self.options.broker_port
        return [p, p + 2] if self.runs_dledger(ctx, node) else [p, p + 1]

    def _namesrv_addr(self, ctx: RunContext) -> str:
        return ";".join(
            f"{ctx.hosts[n].address}:{self.options.namesrv_port}"
            for n, r in self.layout(ctx).items()
            if r == "namesrv"
        )

    def _broker_addr(self, ctx: RunContext, node: str) -> str:
        return f"{ctx.hosts[node].address}:{self.options.broker_port}"

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        """``client``: the gateway's loopback port for each node (chosen once, free now)."""
        return {"client": self.gateway_addresses(ctx)}

    # commands -------------------------------------------------------------------------
    def _jvm(self, heap_mb: int, home: str) -> list[str]:
        """Small heaps, serial GC, C1 only, one processor: five JVMs share two cores."""
        return [
            "env",
            NO_COND_FIX,
            f"ROCKETMQ_HOME={home}",
            self.options.java,
            f"-Xmx{heap_mb}m",
            "-Xms32m",
            "-Xss512k",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:ActiveProcessorCount=1",
            "-XX:MaxDirectMemorySize=128m",
            "-XX:+ExitOnOutOfMemoryError",
            f"-Duser.home={home}",
            f"-Drocketmq.home.dir={home}",
            f"-Djava.io.tmpdir={home}",
            # RocketMQ's remoting servers default to TLS "permissive" and make a
            # self-signed certificate at every start (keyutil_localhost_* files, an RSA
            # key generation): seconds of CPU per restart on a loaded machine, for TLS
            # no client here uses.
            "-Dtls.server.mode=disabled",
            "-Dtls.test.mode.enable=false",
            # The controller's ReplicasInfoManager loads Hessian, whose serializer factory
            # reflects into java.lang (StackTraceElement) at class init: without these it
            # prints an InaccessibleObjectException at every controller start (measured).
            "--add-opens=java.base/java.lang=ALL-UNNAMED",
            "--add-opens=java.base/java.util=ALL-UNNAMED",
            "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
            # 4.x's MappedFile.clean reflects into jdk.internal.ref.Cleaner to unmap a
            # file; without this a broker restarted after a kill dies in its store's load
            # (IndexService.load destroys the index files past the checkpoint: "load
            # exception ... InaccessibleObjectException ... jdk.internal.ref", measured on
            # 4.9.7, Java 17), so no killed 4.x broker ever came back
            "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
        ]

    def command(self, ctx: RunContext, node: str, lib: str) -> str:
        p = self._paths(ctx, node)
        role = self.layout(ctx)[node]
        broker = role in ("broker", "master", "slave")
        heap = self.options.heap_mb if broker else self.options.namesrv_heap_mb
        main = {
            "namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
            "controller": "org.apache.rocketmq.controller.ControllerStartup",
        }.get(role, "org.apache.rocketmq.broker.BrokerStartup")
        cmd = " ".join(shlex.quote(a) for a in self._jvm(heap, p["dir"]))
        if self.options.jvm_args:
            cmd += " " + self.options.jvm_args
        tail = ["-cp", f"{lib.rstrip('/')}/*", main, "-c", p["conf"]]
        return cmd + " " + " ".join(shlex.quote(a) for a in tail)

    def _conf(self, ctx: RunContext, node: str) -> str:
        role = self.layout(ctx)[node]
        ctls = self.controller_nodes(ctx)
        if node in ctls:
            peers = ";".join(
                f"n{i}-{ctx.hosts[c].address}:{self.options.controller_port}"
                for i, c in enumerate(ctls)
            )
            return controller_conf(
                peers=peers,
                self_id=f"n{ctls.index(node)}",
                store=f"{self._paths(ctx, node)['data']}/controller",
                unclean=self.options.unclean_election,
                namesrv_port=self.options.namesrv_port if role == "namesrv" else None,
            )
        if role == "namesrv":
            return f"listenPort={self.options.namesrv_port}\n"
        brokers = self.brokers(ctx)
        dledger = None
        controller = None
        if self.controller_mode:
            o = self.options
            controller = {
                "controllerAddr": self._controller_addrs(ctx),
                "allAckInSyncStateSet": str(o.all_ack_in_sync_state_set).lower(),
                "inSyncReplicas": str(o.in_sync_replicas),
                "minInSyncReplicas": str(o.min_in_sync_replicas),
                "totalReplicas": str(len(brokers)),
            }
        if self.runs_dledger(ctx, node):
            peers = ";".join(
                f"n{i}-{ctx.hosts[b].address}:{self.options.broker_port + 2}"
                for i, b in enumerate(brokers)
            )
            dledger = {
                "dLegerGroup": "broker-a",
                "dLegerPeers": peers,
                "dLegerSelfId": f"n{brokers.index(node)}",
            }
        return broker_conf(
            dledger=dledger,
            controller=controller,
            broker_id=brokers.index(node),
            role=self.options.replication if role == "master" else "SLAVE",
            flush=self.options.flush,
            namesrv=self._namesrv_addr(ctx),
            address=ctx.hosts[node].address,
            port=self.options.broker_port,
            store=self._paths(ctx, node)["data"],
            commitlog_mb=self.options.commitlog_mb,
        )

    # lifecycle ------------------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        q = shlex.quote
        self.prepare(ctx, node, also=[p["logs"]])
        if check_version(self.options.version)[0] == 4:
            # 4.x's startup classes read $ROCKETMQ_HOME/conf/logback_*.xml and exit without
            # one (5.x carries its logging configuration in its jars)
            remote.run(f"mkdir -p {q(p['dir'])}/conf")
            for name in ("namesrv", "broker"):
                remote.run(
                    f"cat > {q(p['dir'])}/conf/logback_{name}.xml",
                    stdin=logback_4x(name, p["logs"]),
                )
        self.program().install(remote, f"{self.root}/java")
        self.start(ctx, node)
        self._await_port(ctx, node)

    def _await_port(self, ctx: RunContext, node: str) -> None:
        """Until the node's first port accepts connections, or its JVM died."""
        host = ctx.hosts[node].address
        port = self.ports(ctx, node)[0]
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        deadline = time.monotonic() + self.options.ready_timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, port), timeout=1.0).close()
                return
            except OSError:
                pass
            raise_if_exited(remote, p["pid"], p["stdout"], f"RocketMQ {self.layout(ctx)[node]}")
            time.sleep(0.3)
        raise RemoteError(
            f"RocketMQ {self.layout(ctx)[node]} on {node} did not listen on {port} within "
            f"{self.options.ready_timeout:g} s",
            host=remote.host.name,
        )

    # the gateway ----------------------------------------------------------------------
    def gateway_command(self, ctx: RunContext) -> list[str]:
        """Our gateway's JVM on this machine: one endpoint per node (``route`` for a name
        server: it pulls from the master the name server's route names)."""
        ports = self.addresses(ctx)["client"]
        args = [
            *self.gateway_jvm(
                f"-Duser.home={self._gateway_dir(ctx)}", main="splitbrain.rocketmq.Gateway"
            ),
            "--namesrv", self._namesrv_addr(ctx),
            "--broker-name", "broker-a",
            "--topic", TOPIC,
            "--queues", "4",
            "--groups", ",".join((*GROUPS, PUSH_GROUP)),
            "--push-group", PUSH_GROUP,
            "--brokers", ",".join(self._broker_addr(ctx, n) for n in self.brokers(ctx)),
            "--send-timeout-ms", str(self.options.send_timeout_ms),
            "--version", self.options.version,
            "--controllers", self._controller_addrs(ctx),
            "--log", f"{self._gateway_dir(ctx)}/gateway.log",
        ]  # fmt: skip
        for n, role in self.layout(ctx).items():
            target = "route" if role == "namesrv" else self._broker_addr(ctx, n)
            args += ["--endpoint", f"{n}={ports[n][1]}={target}"]
        return args

    def look(self, ctx: RunContext) -> Convergence:
        """One look through the gateway: the name server routes the topic to the master and
        every slave, every broker serves the topic, and every slave's commitlog ends where the
        master's does (RocketMQ's own ``commitLogMaxOffset``). The token is that offset."""
        addrs = self.addresses(ctx)["client"]
        brokers = [n for n, r in self.layout(ctx).items() if r != "namesrv"]
        sts = map_values(
            {n: addrs[n] for n in brokers},
            lambda a: gateway_status(a, 3.0),
            what="rocketmq status",
        )
        seen: dict[str, Any] = {}
        for n, st in sts.items():
            rt = (st or {}).get("runtime") or {}
            seen[n] = {
                "max_offset": _int(rt.get("commitLogMaxOffset")),
                "probe": (st or {}).get("probe"),
            }
        any_st = next((st for st in sts.values() if st), None) or {}
        route_map = any_st.get("route") or {}
        by_addr = {self._broker_addr(ctx, n): n for n in brokers}
        master = by_addr.get(str(route_map.get("broker-a:0"))) if self.elected else None
        master = master if self.elected else self.master(ctx)
        route = set(route_map)
        seen["route"] = sorted(route)
        seen["master"] = master
        seen["topic_ready"] = bool(any_st.get("topic_ready"))
        if not seen["topic_ready"]:
            return Convergence(False, seen, why="the brokers have not taken the topic yet")
        # master-slave: ids 0..k-1 by configuration; dledger, controller: a master (id 0)
        # and every broker registered (RocketMQ numbers the slaves itself)
        ok_route = (
            master is not None and len(route) == len(brokers)
            if self.elected
            else {f"broker-a:{i}" for i in range(len(brokers))} <= route
        )
        if not ok_route or master is None:
            return Convergence(False, seen, why=f"the name server routes {sorted(route)} only")
        if self.controller_mode:
            ctl = self.controller_status(ctx) or {}
            by_ctl_addr = {
                f"{ctx.hosts[n].address}:{self.options.controller_port}": n
                for n in self.controller_nodes(ctx)
            }
            seen["controller_leader"] = by_ctl_addr.get(str(ctl.get("leader")))
            sync = ctl.get("sync") or {}
            seen["sync_state_set"] = sorted(
                by_addr.get(str(a), str(a)) for a in sync.get("in_sync") or []
            )
            if seen["controller_leader"] is None:
                return Convergence(False, seen, why="no controller leads")
        down = [n for n in brokers if seen[n]["probe"] != "SUCCESS"]
        if down:
            return Convergence(False, seen, why=f"{', '.join(down)} do not serve the topic yet")
        top = seen[master]["max_offset"]
        behind = [n for n in brokers if seen[n]["max_offset"] != top]
        if top is None or behind:
            return Convergence(False, seen, why=f"{', '.join(behind)} behind the master ({top})")
        return Convergence(True, seen, token=top)

    def controller_status(self, ctx: RunContext) -> dict[str, Any] | None:
        """The gateway's ``controller-status``: each controller's view of the controllers'
        leader, the leader's address and the SyncStateSet of broker-a; None if unanswered."""
        addr = next(iter(self.addresses(ctx)["client"].values()))
        return gateway_status(addr, 8.0, "controller-status")

    def wait_ready(self, ctx: RunContext) -> None:
        """Start the gateway, then wait for :meth:`look` to agree twice (every broker
        registered, serving the topic, caught up)."""
        self.start_gateway(ctx)
        deadline = time.monotonic() + self.options.ready_timeout

        def look() -> Convergence:
            self.gateway.check_alive()
            return self.look(ctx)

        report = poll_converged(look, deadline)
        if not report.converged:
            raise RemoteError(
                f"rocketmq not ready within {self.options.ready_timeout:g} s: {report.why} "
                f"(last: {dict(report.last)})",
                host="localhost",
            )
        log.info("rocketmq ready: %s", dict(report.last))

    def wait_converged(self, ctx: RunContext, deadline: float) -> ConvergenceReport:
        """Converges: after the heal, until :meth:`look` agrees twice (restarted brokers
        registered again, slaves caught up), so the final drains read the outcome."""
        return poll_converged(lambda: self.look(ctx), deadline)

    def primaries(self, ctx: RunContext) -> list[str]:
        """The master: classic master/slave never moves it (brokerId 0 by configuration);
        under DLedger the broker the name server routes as brokerId 0."""
        m = self.master(ctx)
        return [m] if m else []

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        p = self._paths(ctx, node)
        role = self.layout(ctx)[node]
        if role in ("namesrv", "controller"):
            own = [f"{p['logs']}/namesrv.log"] if role == "namesrv" else []
            if node in self.controller_nodes(ctx):
                own.append(f"{p['logs']}/controller.log")
            return [p["stdout"], *own]
        # store.log holds the message store's own complaints (consume queue building,
        # recovery, DLedger truncation), which broker.log does not
        return [p["stdout"], f"{p['logs']}/broker.log", f"{p['logs']}/store.log"]
