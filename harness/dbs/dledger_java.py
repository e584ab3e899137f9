"""openmessaging DLedger's real Java server as a database under test (``--db dledger-java``).

Each node runs one JVM: DLedger's own ``DLedgerServer``, configured and started as
DLedger's own main class does it, plus, in the same JVM, splitbrain's client endpoint that
speaks the reference node's client protocol (``harness/dbs/java/dledger``). The endpoint
is the only part that is ours: appends go through DLedger's ``handleAppend``, reads
through its ``handleGet`` (or, for the final reads, the member's own ``DLedgerStore``),
transfers through ``handleLeadershipTransfer``; status is DLedger's ``MemberState``. So
the reference node's workloads, sampler and checkers drive it unchanged (``append``:
log safety and lost acks).

The program is built by Maven from the project's own ``pom.xml`` for the DLedger version
asked (``--db-option version=X``), once, then cached (:mod:`harness.dbs.maven`); the jars
and their checksums are recorded in ``test.json`` (``artifacts``). Per node::

    <root>/[<lab>/]<test>/<node>/data/        --store-base-dir (DLedger's data, index, term)
    <root>/[<lab>/]<test>/<node>/node.log     role changes (our watcher of MemberState)
    <root>/[<lab>/]<test>/<node>/stdout.log   DLedger's own log (slf4j-simple) and the JVM's
    <root>/[<lab>/]<test>/<node>/dledger.pid

DLedger 0.x has no runtime membership change (no add/remove-peer request in any served
jar), so the DB is not ``Reconfigurable``; leadership transfer exists from 0.2.0 on.
docs/dledger-java.md has what was measured.
"""

from __future__ import annotations

import logging
import re
import shlex
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from harness.core.db import (
    DB,
    Convergence,
    ConvergenceReport,
    DataFiles,
    WorkloadChoice,
    poll_converged,
)
from harness.core.errors import ConfigError, NemesisError, RemoteError
from harness.core.fanout import map_values
from harness.core.options import as_options, declares_options, option
from harness.dbs.daemon import NO_COND_FIX, PidfileDaemonDB, absolute_root, await_status
from harness.dbs.dledger import _admin, _fetch_status
from harness.dbs.maven import SOURCES
from harness.dbs.nodelog_events import NodeLogEvents

if TYPE_CHECKING:
    from harness.core.spec import RunContext
    from harness.dbs.maven import JavaProgram

__all__ = [
    "DLEDGER_ARTIFACT",
    "DLedgerJavaDB",
    "DLedgerJavaOptions",
    "PROJECT_DIR",
    "dledger_peers",
    "factory",
    "parse_version",
    "transfer_supported",
]

log = logging.getLogger(__name__)

PROJECT_DIR = SOURCES / "dledger"
"""The Maven project of the launcher and endpoint (pom.xml, src/main/java)."""
DLEDGER_ARTIFACT = "io.openmessaging.storage:dledger"
MAIN_CLASS = "splitbrain.dledger.Launcher"
NEWEST = "0.4.3"

OPENS = (
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
)
"""DLedger up to 0.2.7 ships with netty 4.0.42 (through rocketmq-remoting), whose
``PlatformDependent`` fails its static initialisation on Java 17 without these (the JVM
exits before DLedger starts; measured on 0.1, 0.2.0 and 0.2.7); with them all three serve.
Newer netty (DLedger 0.3.0 on: 4.1.65) does not need them and is not changed by them."""

_VERSION = re.compile(r"^\d+(\.\d+){1,3}$")


def parse_version(v: str) -> tuple[int, ...]:
    """``"0.3.1.2"`` -> ``(0, 3, 1, 2)``; a ConfigError naming ``version`` otherwise (it is
    passed to Maven as a property, so only dotted numbers are let through)."""
    if not _VERSION.match(v):
        raise ConfigError(
            f"dledger-java version {v!r}: dotted numbers expected (e.g. {NEWEST})", field="version"
        )
    return tuple(int(x) for x in v.split("."))


def transfer_supported(version: str) -> bool:
    """Leadership transfer (``LeadershipTransferRequest``) is in DLedger from 0.2.0 on; the
    0.1 jar has no such class (checked with javap)."""
    return parse_version(version) >= (0, 2)


def dledger_peers(addresses: Mapping[str, str], peer_port: int) -> str:
    """DLedger's ``--peers``: ``n1-HOST:PORT;n2-HOST:PORT`` with the node names as member
    ids (ports spread when nodes share an address, as the other DBs do)."""
    unique = len(set(addresses.values())) == len(addresses)
    parts = []
    for i, (node, addr) in enumerate(addresses.items()):
        if "-" in node or ";" in node:
            raise ConfigError(
                f"node name {node!r}: DLedger member ids cannot hold '-' or ';'", field="nodes"
            )
        parts.append(f"{node}-{addr}:{peer_port + (0 if unique else 10 * i)}")
    return ";".join(parts)


@dataclass(frozen=True)
class DLedgerJavaOptions:
    """``--db-option`` keys of ``dledger-java``."""

    version: str = option(NEWEST, "the DLedger release from Maven Central (0.1 .. 0.4.3)")
    root: str = option(
        "/var/lib/splitbrain/dledger-java", "absolute directory of the node directories"
    )
    peer_port: int = option(9110, "DLedger's own port (its peers' RPC)", minimum=1, maximum=65535)
    client_port: int = option(
        9111,
        "splitbrain's endpoint port (the reference node's protocol)",
        minimum=1,
        maximum=65535,
    )
    heartbeat_ms: int = option(
        500, "DLedger heartBeatTimeIntervalMs (DLedger's default: 2000)", minimum=10
    )
    max_heartbeat_leak: int = option(3, "DLedger maxHeartBeatLeak", minimum=1)
    min_vote_ms: int = option(300, "DLedger minVoteIntervalMs", minimum=1)
    max_vote_ms: int = option(1000, "DLedger maxVoteIntervalMs", minimum=1)
    max_wait_ack_ms: int = option(
        2000,
        "DLedger maxWaitAckTimeMs: an append unacked this long is WAIT_QUORUM_ACK_TIMEOUT",
        minimum=10,
    )
    heap_mb: int = option(256, "the JVM's -Xmx in MiB (five JVMs share the machine)", minimum=32)
    java: str = option("java", "the java binary on the hosts (17 or newer)")
    ready_timeout: float = option(
        180.0,
        "seconds for the cluster to elect a leader (a bound, not a wait: five JVMs at a "
        "load of 40 on two cores did not answer within 60 s)",
        minimum=1,
    )
    leave_running: bool = option(
        False, "leave the nodes running after the test (set by --leave-db-running)"
    )
    extra_args: str = option("", "more arguments for every node's launcher command line")
    jvm_args: str = option("", "more JVM options for every node")

    def __post_init__(self) -> None:
        parse_version(self.version)
        absolute_root(self.root)
        if self.min_vote_ms > self.max_vote_ms:
            raise ConfigError("min_vote_ms must not exceed max_vote_ms", field="min_vote_ms")


_POWER = (
    "DLedger acknowledges an append once a quorum holds it in memory (DLedgerMmapFileStore "
    "flushes its mmap files in the background, flushFileInterval 10 ms) and writes its "
    "term file without fsync: losing un-fsynced writes is outside what it promises. "
    "Measured on the lab (docs/dledger-java.md): after lose-unfsynced on all five nodes "
    "12 s into a run, the nodes sampled came back with term 0 and an empty log, so even "
    "entries flushed long before were gone as the lazy fs saw them; use the VM lab's "
    "power fault to test power loss on real disks"
)

DEFAULT_WORKLOAD = WorkloadChoice(
    name="append",
    options={"read_fraction": 0.1, "sample_rate": 5.0},
    concurrency=10,
    rate=50.0,
    client_timeout=5.0,
)
"""Appends with unique payloads, reads of the recent committed log, one status sampler per
node: log safety and lost acks. Ten clients at 50 ops/s and samplers at 5/s per node keep
five JVMs and the harness inside two cores; the client timeout outlasts DLedger's own
wait for acks (``max_wait_ack_ms``), so a slow append is DLedger's answer, not ours."""


def converged_look(statuses: Mapping[str, Mapping[str, Any] | None]) -> Convergence:
    """One look after the heal: converged when every member answers, all name one leader
    of one term that says it leads, every log ends where the leader's does, and every
    member's committed index has reached that end.

    DLedger keeps its committed index in memory (a restarted member starts at -1) and
    advances a follower's from the leader's pushes, so final reads taken before this
    holds would judge a moment: the log safety checker trusts only what a read's
    committed index covers.
    """
    seen = {
        n: (
            None
            if st is None
            else {k: st.get(k) for k in ("role", "term", "leader", "ledgerEndIndex",
                                         "committedIndex")}
        )
        for n, st in statuses.items()
    }  # fmt: skip
    missing = sorted(n for n, st in seen.items() if st is None)
    if missing:
        return Convergence(False, seen, why=f"no status from {', '.join(missing)}")
    sts = {n: st for n, st in seen.items() if st is not None}
    leaders = sorted(n for n, st in sts.items() if st["role"] == "leader")
    if len(leaders) != 1:
        return Convergence(False, seen, why=f"{len(leaders)} members say they lead: {leaders}")
    lead = sts[leaders[0]]
    views = {(st["term"], st["leader"]) for st in sts.values()}
    if views != {(lead["term"], leaders[0])}:
        return Convergence(
            False, seen, why=f"members disagree on (term, leader): {sorted(map(str, views))}"
        )
    end = lead["ledgerEndIndex"]
    behind = sorted(
        n for n, st in sts.items() if st["ledgerEndIndex"] != end or st["committedIndex"] != end
    )
    if behind:
        return Convergence(
            False,
            seen,
            why=f"log end or committed index short of the leader's end {end} on "
            f"{', '.join(behind)}",
        )
    return Convergence(True, seen, token=(leaders[0], lead["term"], end))


def _status(host: str, port: int, timeout: float) -> dict[str, Any] | None:
    """The endpoint's status map, or None when the node does not answer it in time."""
    st = _fetch_status(host, port, timeout)
    return st if isinstance(st, dict) and st.get("code") == "SUCCESS" else None


class DLedgerJavaDB(NodeLogEvents, PidfileDaemonDB):
    """DLedger's own server per node, faulted and read through our endpoint."""

    runs_under_faketime = True
    """The JVM starts and runs under the lab's libfaketime (docs/dledger-java.md)."""

    data_files = DataFiles(
        under="data", log=("dledger-*/data/[0-9]*",), state=("dledger-*/currterm",)
    )
    """DLedger's own files under --store-base-dir (seen in a run's data dir):
    ``dledger-<id>/data/<20-digit offset>`` (the mmap'd entry segments, 64 MiB each here),
    ``dledger-<id>/index/<offset>`` and ``dledger-<id>/currterm`` (a properties file:
    currTerm, voteLeader; ``currterm.bak`` beside it)."""

    @property
    def declines(self) -> dict[str, str]:
        """What the deck leaves out for DLedger and a ``--nemesis`` run refuses, with the
        reason it prints (``harness.core.fault.declines``; ``Fault.why_not`` matches it).

        ``fuse``: the lazy fs faults (lose-unfsynced, torn-write). Not ``loses_writes``:
        the VM lab's power cut loses un-fsynced writes too, on real disks, and is what the
        reason points to; and not corrupt, which damages DLedger's own files at rest,
        between its kill and its restart, through the page cache its mmap shares (measured,
        docs/dledger-java.md). The deck's ``disk`` script keeps its corrupt part.

        A version without leadership transfer declines ``TransfersLeadership`` and
        ``changes_membership``: the membership fault plays only its ``transfer`` variant
        here (the DB is ``TransfersLeadership``, not ``Reconfigurable``), so there it would
        do nothing.
        """
        out = {"fuse": _POWER}
        if not transfer_supported(self.options.version):
            why = (
                f"DLedger {self.options.version} has no leadership transfer "
                "(LeadershipTransferRequest is in DLedger from 0.2.0 on) and no membership change"
            )
            out["TransfersLeadership"] = why
            out["changes_membership"] = why
        return out

    def __init__(self, options: DLedgerJavaOptions) -> None:
        self.options = options
        self.root = options.root.rstrip("/")
        self._program: JavaProgram | None = None
        self._cmd: dict[str, str] = {}

    # capabilities -------------------------------------------------------------
    def default_workload(self) -> WorkloadChoice:
        return DEFAULT_WORKLOAD

    def event_kinds(self) -> frozenset[str]:
        """Our watcher logs process starts and role changes; DLedger's votes are not parsed."""
        return frozenset({"start", "role"})

    def resolve_artifacts(self) -> dict[str, Any]:
        """Build (or find cached) the launcher for ``version``; what test.json records."""
        program = self.program()
        out = dict(program.manifest())
        out["dledger"] = program.version_of(DLEDGER_ARTIFACT)
        return out

    def program(self) -> JavaProgram:
        if self._program is None:
            from harness.dbs import maven

            self._program = maven.build_release(
                PROJECT_DIR,
                name="dledger-java",
                system="DLedger",
                prop="dledger.version",
                version=self.options.version,
                artifact=DLEDGER_ARTIFACT,
                java=self.options.java,
                shared=(maven.SHARED,),  # splitbrain.shared.Frames packs the replies
            )
        return self._program

    # layout -------------------------------------------------------------------
    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {
            "dir": d,
            "data": f"{d}/data",
            "pid": f"{d}/dledger.pid",
            "stdout": f"{d}/stdout.log",
            "log": f"{d}/node.log",
        }

    def _addrs(self, ctx: RunContext) -> dict[str, str]:
        return {n: ctx.hosts[n].address for n in ctx.nodes}

    def _step(self, ctx: RunContext, node: str) -> int:
        addrs = self._addrs(ctx)
        unique = len(set(addrs.values())) == len(addrs)
        return 0 if unique else 10 * list(addrs).index(node)

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        s = self._step(ctx, node)
        return [self.options.peer_port + s, self.options.client_port + s]

    def client_addrs(self, ctx: RunContext) -> dict[str, tuple[str, int]]:
        return {n: (ctx.hosts[n].address, self.ports(ctx, n)[1]) for n in ctx.nodes}

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {"client": self.client_addrs(ctx)}

    def group(self, ctx: RunContext) -> str:
        """DLedger's group: unique to the lab and test, so no other run's member is heard."""
        lab = ctx.hosts[ctx.nodes[0]].extras.get("lab") or "hosts"
        return re.sub(r"[^A-Za-z0-9_]", "_", f"sb_{lab}_{ctx.spec.name}")

    def command(self, ctx: RunContext, node: str, lib: str) -> str:
        """The node's JVM command line (DLedger's options, then the endpoint's)."""
        o = self.options
        assert self._program is not None
        p = self._paths(ctx, node)
        jvm = [
            "env",
            NO_COND_FIX,
            o.java,
            f"-Xmx{o.heap_mb}m",
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xss512k",
            *OPENS,
            f"-Dsplitbrain.dledger.version={o.version}",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
            "-Dorg.slf4j.simpleLogger.logFile=System.out",
        ]
        args = [
            "-cp",
            f"{lib.rstrip('/')}/*",  # every jar of the build: lib/ holds exactly those
            MAIN_CLASS,
            "--group", self.group(ctx),
            "--id", node,
            "--peers", dledger_peers(self._addrs(ctx), o.peer_port),
            "--store-base-dir", p["data"],
            "--client-host", ctx.hosts[node].address,
            "--client-port", str(self.ports(ctx, node)[1]),
            "--event-log", p["log"],
            "--heartbeat-ms", str(o.heartbeat_ms),
            "--max-heartbeat-leak", str(o.max_heartbeat_leak),
            "--min-vote-ms", str(o.min_vote_ms),
            "--max-vote-ms", str(o.max_vote_ms),
            "--max-wait-ack-ms", str(o.max_wait_ack_ms),
        ]  # fmt: skip
        cmd = " ".join(shlex.quote(a) for a in jvm)
        if o.jvm_args:
            cmd += " " + o.jvm_args
        cmd += " " + " ".join(shlex.quote(a) for a in args)
        if o.extra_args:
            cmd += " " + o.extra_args
        return cmd

    # lifecycle ----------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        from harness.dbs.maven import require_java

        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        require_java(remote, self.options.java)
        program = self.program()
        lib = program.install(remote, f"{self.root}/java")
        self.stop_leftover(ctx, node, "a DLedger node", "dledger-java")
        remote.run(
            f"mkdir -p {shlex.quote(p['dir'])} && "
            f"find {shlex.quote(p['dir'])} -mindepth 1 -delete && "
            f"mkdir -p {shlex.quote(p['data'])}"
        )
        self._cmd[node] = self.command(ctx, node, lib)
        self.start(ctx, node)
        self._await_leader(ctx, node)

    def start(self, ctx: RunContext, node: str) -> None:
        if not self.should_start(ctx, node):
            return
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        cmd = self._cmd.get(node)
        if cmd is None:
            lib = self.program().install(remote, f"{self.root}/java")
            cmd = self._cmd[node] = self.command(ctx, node, lib)
        remote.start_daemon(cmd, pidfile=p["pid"], logfile=p["stdout"], chdir=p["dir"])

    def _await_leader(self, ctx: RunContext, node: str) -> None:
        """Until ``node`` knows a leader (the group formed), or its JVM died."""
        host, port = self.client_addrs(ctx)[node]
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        known, last = await_status(
            remote,
            p["pid"],
            p["stdout"],
            what="DLedger JVM",
            ask=lambda: _status(host, port, 1.0),
            done=lambda st: bool(st.get("leader")) and st.get("role") in ("leader", "follower"),
            within=self.options.ready_timeout,
            lines=5,
        )
        if known:
            return
        raise RemoteError(
            f"no DLedger leader known after {self.options.ready_timeout:g} s (last: {last})",
            host=remote.host.name,
        )

    def wait_ready(self, ctx: RunContext, *, settle: float = 0.5) -> None:
        """Until every member names the same leader in the same term, which says it leads,
        for ``settle`` s; a warning (not a failure) if that never happens."""
        addrs = self.client_addrs(ctx)
        deadline = time.monotonic() + self.options.ready_timeout
        since: float | None = None
        last: Any = None
        while time.monotonic() < deadline:
            sts = map_values(addrs, lambda a: _status(a[0], a[1], 1.0), what="status")
            views = {(st.get("term"), st.get("leader")) if st else None for st in sts.values()}
            leaders = [n for n, st in sts.items() if st and st.get("role") == "leader"]
            ok = len(views) == 1 and None not in views and len(leaders) == 1
            ok = ok and next(iter(views))[1] == leaders[0]  # type: ignore[index]
            if ok and views == last:
                since = since or time.monotonic()
                if time.monotonic() - since >= settle:
                    log.info("dledger-java ready: leader %s", leaders[0])
                    return
            else:
                since = None
            last = views
            time.sleep(0.1)
        log.warning("DLedger members did not agree on one leader within %gs (%s)",
                    self.options.ready_timeout, last)  # fmt: skip

    def wait_converged(self, ctx: RunContext, deadline: float) -> ConvergenceReport:
        """Converges: after the heal, until :func:`converged_look` holds twice in a row."""
        addrs = self.client_addrs(ctx)

        def look() -> Convergence:
            return converged_look(
                map_values(addrs, lambda a: _status(a[0], a[1], 1.0), what="status")
            )

        return poll_converged(look, deadline)

    def primaries(self, ctx: RunContext) -> list[str]:
        """Members whose MemberState says leader (each asked once, in parallel)."""
        addrs = self.client_addrs(ctx)
        sts = map_values(addrs, lambda a: _status(a[0], a[1], 1.0), what="status")
        return [n for n in ctx.nodes if (sts.get(n) or {}).get("role") == "leader"]

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        p = self._paths(ctx, node)
        return [p["log"], p["stdout"]]

    def teardown(self, ctx: RunContext, node: str) -> None:
        self.stop_and_remove(
            ctx, node, "DLedger", {"pid": "dledger-java"}, leave=self.options.leave_running
        )

    # leadership transfer --------------------------------------------------------
    @property
    def transfer_hands_over(self) -> bool:
        """DLedger's transfer brings the target up to date before it campaigns. Read in
        0.4.3's bytecode (javap of ``DLedgerServer.handleLeadershipTransfer``): the leader
        refuses a target more than ``maxLeadershipTransferWaitIndex`` behind, then stops
        taking appends (``LEADER_TRANSFERRING``) and sends the target
        ``takeLeadershipLedgerIndex``, its own end; the target campaigns only once its
        log reaches that index and answers ``fall behind, wait timeout`` otherwise. So it
        hands over or keeps; only the versions read (0.4 on) declare it, so the
        ``transfer`` checker judges their quiet transfers and records the rest."""
        return parse_version(self.options.version) >= (0, 4)

    def leader_seen_by(self, ctx: RunContext, node: str) -> str | None:
        """The leader ``node``'s MemberState names (member ids are node names), or None
        when it names none or does not answer: how the membership fault's ``transfer``
        waits for a restarted target to follow again."""
        host, port = self.client_addrs(ctx)[node]
        st = _status(host, port, 1.0)
        lead = None if st is None else st.get("leader")
        return str(lead) if lead and lead in ctx.nodes else None

    def transfer_leader(self, ctx: RunContext, node: str) -> dict[str, Any]:
        """DLedger's own ``handleLeadershipTransfer`` on the leader, to ``node``."""

        if not transfer_supported(self.options.version):
            raise NemesisError(f"DLedger {self.options.version} has no leadership transfer")
        lead = self.primaries(ctx)
        if not lead:
            raise NemesisError(f"transfer to {node}: no leader")
        host, port = self.client_addrs(ctx)[lead[0]]
        reply = _admin(host, port, 15.0, lambda c: c.transfer_leader(node, 5000))
        now = self.primaries(ctx)
        leader = now[0] if now else None
        code = reply.get("code")
        outcome = (
            "refused" if code not in ("SUCCESS", "TIMEOUT", "TAKE_LEADERSHIP_FAILED") and
            leader == lead[0]
            else "handed-over" if leader == node
            else "kept" if leader == lead[0]
            else "lost" if leader else None
        )  # fmt: skip
        return {"code": code, "from": lead[0], "leader": leader, "outcome": outcome,
                "term": reply.get("term")}  # fmt: skip


@declares_options(DLedgerJavaOptions)
def factory(options: DLedgerJavaOptions | Mapping[str, Any]) -> DB:
    """``--db dledger-java``."""
    opts = as_options(DLedgerJavaOptions, options, role="db dledger-java")
    return DLedgerJavaDB(DLedgerJavaOptions(**asdict(opts)))
