"""``--db jraft``: a small linearizable kv server on SOFAJRaft, one JVM per node.

The server is ours (``harness/dbs/java/jraft/``, Java, built by :mod:`harness.dbs.maven`
against ``--db-option version=X`` of ``com.alipay.sofa:jraft-core``); the consensus is
JRaft's. It answers the reference node's client protocol (``node_impl/server.py``:
``kv-write``, ``kv-read``, ``kv-cas``, ``status``, ``members``, ``add-member``,
``remove-member``, ``transfer-leader``), so the register, kv-set and sampler workloads and
their checkers drive it unchanged. docs/jraft.md has the design and what each fault does.

Per node, one directory (lab hosts share this machine's disk, hence the levels)::

    <root>/[<lab>/]<test>/<node>/data/        JRaft's log (RocksDB) and raft meta: disk faults hit this
    <root>/[<lab>/]<test>/<node>/node.log     role/term/vote lines (nodelog_events format)
    <root>/[<lab>/]<test>/<node>/stdout.log   the JVM's output (JRaft's own log lines)
    <root>/[<lab>/]<test>/<node>/jraft.pid
    <root>/[<lab>/]<test>/<node>/tmp/         java.io.tmpdir: RocksDB unpacks its JNI library here

Member names: node ``n3`` is JRaft peer ``ip:raft_port:0``; a host re-added wiped runs
``n3.1`` = ``ip:raft_port:1``, a new JRaft identity, so messages for the removed member
never reach the new one.
"""

from __future__ import annotations

import functools
import logging
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from harness.core.db import DataFiles, Members, WorkloadChoice
from harness.core.errors import ConfigError, NemesisError, RemoteError
from harness.core.fanout import map_values
from harness.core.options import as_options, declares_options, option
from harness.dbs.daemon import (
    NO_COND_FIX,
    PidfileDaemonDB,
    absolute_root,
    await_status,
    durable_mkdir,
    stop_process,
)
from harness.dbs.dledger import _fetch_status, node_ports
from harness.dbs.maven import SOURCES
from harness.dbs.members import AskedMembers, gone
from harness.dbs.members import admin as _admin
from harness.dbs.nodelog_events import NodeLogEvents

if TYPE_CHECKING:
    from harness.core.db import DB
    from harness.core.spec import RunContext
    from harness.dbs.maven import JavaProgram

__all__ = [
    "JRAFT_PROJECT",
    "NEWEST",
    "OLDEST",
    "JRaftOptions",
    "JRaftDB",
    "check_version",
    "factory",
    "java_command",
    "outcome_of",
]

log = logging.getLogger(__name__)

JRAFT_PROJECT = SOURCES / "jraft"
"""The Maven project of the server (pom.xml, src/main/java)."""

NEWEST = "1.4.1"
"""The newest jraft-core Maven Central serves (2026-12), the default."""

OLDEST = "1.2.4"
"""The oldest jraft-core Maven Central serves; measured to build and start (docs/jraft.md)."""

_TRANSFER_OUTCOMES = {
    "SUCCESS": "handed-over",
    "TRANSFER_TIMEOUT": "kept",
    "TRANSFER_FAILED": "lost",
}
"""The server's transfer answers (Server.transfer) in TransfersLeadership's words."""


def _version_key(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_version(version: str) -> None:
    """A ConfigError naming ``version`` when it is not one the server can be built on.

    Maven Central serves jraft-core from 1.2.4 on; every served version from there to the
    newest compiles (the server reads what older Node interfaces lack, the term, the vote,
    the indexes and the configuration, from NodeImpl's fields) and starts (measured:
    1.2.4, 1.2.6, 1.3.0, 1.4.1). Anything older is refused before Maven is asked.
    """
    if not version or not version[0].isdigit():
        raise ConfigError(f"jraft version {version!r} is not a version number", field="version")
    if _version_key(version) < _version_key(OLDEST):
        raise ConfigError(
            f"jraft version {version} is refused: Maven Central serves jraft-core from "
            f"{OLDEST} on, and the server is built and measured on those only",
            field="version",
        )


@dataclass(frozen=True)
class JRaftOptions:
    """``--db-option`` keys of ``--db jraft``."""

    version: str = option(NEWEST, "com.alipay.sofa:jraft-core version (Maven Central)")
    read: Literal["index", "lease"] = option(
        "index", "kv reads: index (JRaft ReadIndex, a heartbeat round) or lease (leader lease)"
    )
    election_timeout_ms: int = option(1000, "JRaft's election timeout", minimum=100)
    raft_port: int = option(8100, "JRaft's RPC port", minimum=1, maximum=65535)
    client_port: int = option(8101, "the client port", minimum=1, maximum=65535)
    root: str = option("/var/lib/splitbrain/jraft", "absolute directory of the node directories")
    leave_running: bool = option(False, "leave the nodes running after the test")
    extra_args: str = option("", "more arguments for the JVM (before the class path)")
    java: str = option("java", "the java binary on the hosts (17 or newer)")
    heap_mb: int = option(256, "-Xmx of each JVM, in MiB", minimum=64)
    sync_meta: bool | None = option(
        None,
        "RaftOptions.syncMeta (default: JRaft's, off; JRaft fsyncs the meta when sync or "
        "syncMeta, and sync is on, so this alone changes nothing)",
    )
    ready_timeout: float = option(
        180.0,
        "seconds for a node to know a leader at setup (a bound, not a wait: five JVMs at a "
        "load of 40 on two cores need more than 60 s)",
        minimum=0,
    )
    durable_dirs: bool = option(
        True,
        "create data/log and data/meta (and fsync their parent) before JRaft starts; off: "
        "JRaft creates them and never fsyncs the directory (docs/jraft.md)",
    )

    def checker_options(self) -> dict[str, dict[str, Any]]:
        """What log safety must know of JRaft: a candidate's new term is in memory (and
        shown in status) before its save with the self-vote (``setTermAndVotedFor``) is
        durable, and a save that fails under a disk fault stops the node in STATE_ERROR
        still showing that term; a restart then loses a term the node neither led nor
        followed in (measured, docs/jraft.md). Raft asks the term be stable before the
        node answers an RPC in it, so only terms seen as leader or follower bind
        term-regress; a vote the node then gives twice in a term is still
        ``event-double-vote``."""
        return {"log-safety": {"settled_terms_only": True}}


@declares_options(JRaftOptions)
def factory(options: JRaftOptions | Mapping[str, Any]) -> DB:
    """``--db jraft`` (pyproject.toml's ``splitbrain.dbs``)."""
    return JRaftDB(as_options(JRaftOptions, options, role="db jraft"))


def java_command(
    java: str,
    classpath: str,
    *,
    heap_mb: int,
    tmp: str,
    extra: str,
    args: list[str],
) -> str:
    """The JVM's command line, sized for five JVMs on two cores.

    Serial GC and one active processor: JRaft sizes its pools by the CPU count, and five
    JVMs each believing they own both cores would spend the machine on thread switches.
    C1 only (TieredStopAtLevel=1): the server is small and C2's compile time does not pay
    back within a run. The --add-opens let old protobuf and RocksDB releases reach the
    JDK's internals on Java 17.
    """
    jvm = [
        java,
        f"-Xmx{heap_mb}m",
        "-Xms64m",
        "-Xss512k",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:ActiveProcessorCount=1",
        "-XX:+ExitOnOutOfMemoryError",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        f"-Djava.io.tmpdir={tmp}",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
    ]
    cmd = " ".join(shlex.quote(a) for a in jvm)
    if extra:
        cmd += " " + extra
    tail = " ".join(shlex.quote(a) for a in ["-cp", classpath, "splitbrain.jraft.Server", *args])
    return f"env {NO_COND_FIX} {cmd} {tail}"


_WIPE_TREE_PY = (
    "import os, sys\n"
    "def fsync(p):\n"
    "    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)\n"
    "    os.fsync(fd)\n"
    "    os.close(fd)\n"
    "def empty(d):\n"
    "    for name in os.listdir(d):\n"
    "        p = os.path.join(d, name)\n"
    "        if os.path.isdir(p) and not os.path.islink(p):\n"
    "            empty(p)\n"
    "            os.rmdir(p)\n"
    "        else:\n"
    "            os.unlink(p)\n"
    "    fsync(d)\n"
    "d = sys.argv[1]\n"
    "os.makedirs(d, exist_ok=True)\n"
    "empty(d)\n"
)


def durable_wipe_tree(path: str) -> str:
    """A shell command emptying ``path`` durably, every subdirectory fsynced once emptied.

    JRaft keeps its files one level down (``log/``, ``meta/``). Measured on the lazy fs:
    an ``rm -rf`` followed by an fsync of ``path`` alone (harness/dbs/dledger.py's
    ``durable_wipe``, enough for the reference node's flat directory) leaves the unlinks
    inside the subdirectories un-fsynced, and a later power cut brought the removed
    member's RocksDB and raft_meta back under the re-added member (term 5 fell to 4).
    """
    return f"python3 -c {shlex.quote(_WIPE_TREE_PY)} {shlex.quote(path)}"


def _call(msg: dict[str, Any], client: Any) -> dict:
    """One admin request on a NodeClient (a module function: no loop variable captured)."""
    reply: dict = client.call(msg, 10.0)
    return reply


def outcome_of(code: Any) -> str | None:
    """TransfersLeadership's outcome for the server's transfer answer code."""
    if code is None:
        return None
    return _TRANSFER_OUTCOMES.get(str(code), "refused")


class JRaftDB(NodeLogEvents, AskedMembers, PidfileDaemonDB):
    """Installs, starts, faults and removes the jraft kv server on every node of a test."""

    members_of = "jraft "

    transfer_hands_over = False
    """JRaft's transferLeadershipTo promises nothing (it returns once TimeoutNow is on its
    way; a target that does not win leaves a cluster that elects anyone): recorded only."""

    data_files = DataFiles(under="data", log=("log/*.log", "log/*.sst"), state=("meta/raft_meta",))
    """JRaft's own files (Server.java: logUri data/log, raftMetaUri data/meta; no snapshot
    is configured): RocksDB's WAL and tables, the newest by RocksDB's file number, and
    the raft meta (term, votedFor) that corrupt's rollback restores."""

    # No ``declines``: the deck leaves out a whole script when one of its faults is
    # refused; lose-unfsynced works on JRaft and found the 1.2.4 meta loss (docs/jraft.md).

    unreachable_situations = {
        "read-from-non-leader": "the server answers a kv read only in STATE_LEADER and only "
        "after JRaft's ReadIndex (or, with read=lease, its lease check) confirmed it: a "
        "correct run never reaches this; a run that does has found a stale read"
    }

    def checker_options(self) -> dict[str, dict[str, Any]]:
        """InformsChecker: the options class's declaration (a re-check reads the same)."""
        return self.opts.checker_options()

    def event_kinds(self) -> frozenset[str]:
        """node.log's kinds; not ``truncate``: JRaft does not tell the state machine or the
        server when a follower cuts its log, so a truncation is not observable here."""
        return frozenset({"start", "role", "vote", "candidacy", "read-refused"})

    def __init__(self, options: JRaftOptions | None = None) -> None:
        self.opts = options or JRaftOptions()
        check_version(self.opts.version)
        self.root = absolute_root(self.opts.root)
        self._program: JavaProgram | None = None
        self._lib: dict[str, str] = {}
        self._lock = threading.Lock()
        self._idents: dict[str, str] = {}
        """The member id each host runs now, when not the node's own name (re-added)."""
        self._generation: dict[str, int] = {}
        self._removed: set[str] = set()
        self._joining: set[str] = set()
        """Hosts whose member was started with an empty configuration (re-added)."""
        self._old_logs: dict[str, list[str]] = {}

    # artifacts ----------------------------------------------------------------------
    def program(self) -> JavaProgram:
        """The built server for this version (Maven once per version, then the cache)."""
        with self._lock:
            if self._program is None:
                from harness.dbs.maven import SHARED, build_release

                self._program = build_release(
                    JRAFT_PROJECT,
                    name="jraft",
                    system="jraft",
                    prop="jraft.version",
                    version=self.opts.version,
                    shared=(SHARED,),  # splitbrain.shared.Frames packs the replies
                )
            return self._program

    def resolve_artifacts(self) -> dict[str, Any]:
        """ResolvesArtifacts: the build's manifest and the jraft-core version that resolved."""
        p = self.program()
        return {"jraft-core": p.version_of("com.alipay.sofa:jraft-core"), **p.manifest()}

    def default_workload(self) -> WorkloadChoice:
        """Per-key cas registers (linearizability) with the status samplers (log safety).

        ``mixed`` is not the default: its append log needs the reference node's ``append``
        and ``get`` by index, which a kv server does not have. Five JVMs on two cores take
        about 40 ops/s with room for the samplers.
        """
        return WorkloadChoice(
            name="register",
            options={"keys": 4, "ops_per_key": 100, "retired_reads": 0.1, "sample_rate": 5.0},
            concurrency=10,
            rate=40.0,
            client_timeout=3.0,
        )

    # layout -------------------------------------------------------------------------
    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {
            "dir": d,
            "data": f"{d}/data",
            "log": f"{d}/node.log",
            "stdout": f"{d}/stdout.log",
            "pid": f"{d}/jraft.pid",
            "tmp": f"{d}/tmp",
        }

    def _ports(self, ctx: RunContext) -> dict[str, tuple[int, int]]:
        addrs = {n: ctx.hosts[n].address for n in ctx.nodes}
        return node_ports(addrs, self.opts.raft_port, self.opts.client_port)

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        return list(self._ports(ctx)[node])

    def client_addrs(self, ctx: RunContext) -> dict[str, tuple[str, int]]:
        ports = self._ports(ctx)
        return {n: (ctx.hosts[n].address, ports[n][1]) for n in ctx.nodes}

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {"client": self.client_addrs(ctx)}

    def ident(self, node: str) -> str:
        return self._idents.get(node, node)

    def _nodes_arg(self, ctx: RunContext) -> str:
        ports = self._ports(ctx)
        return ",".join(
            f"{n}={ctx.hosts[n].address}:{ports[n][0]}:{ports[n][1]}" for n in ctx.nodes
        )

    def command(self, ctx: RunContext, node: str, lib: str) -> str:
        p = self._paths(ctx, node)
        conf = "-" if node in self._joining else ",".join(ctx.nodes)
        args = [
            "--id", self.ident(node),
            "--nodes", self._nodes_arg(ctx),
            "--conf", conf,
            "--data", p["data"],
            "--log", p["log"],
            "--read", self.opts.read,
            "--election-ms", str(self.opts.election_timeout_ms),
        ]  # fmt: skip
        if self.opts.sync_meta is not None:
            args += ["--sync-meta", "true" if self.opts.sync_meta else "false"]
        return java_command(
            self.opts.java,
            self.program().classpath(lib),
            heap_mb=self.opts.heap_mb,
            tmp=p["tmp"],
            extra=self.opts.extra_args,
            args=args,
        )

    # lifecycle ----------------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        from harness.dbs.maven import require_java

        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        require_java(remote, self.opts.java)
        self.stop_leftover(ctx, node, "a jraft server", "jraft server")
        remote.run(
            durable_wipe_tree(p["dir"])
            + f" && mkdir -p {shlex.quote(p['tmp'])} && "
            + self._mkdirs(p["data"])
        )
        self._lib[node] = self.program().install(remote, f"{p['dir']}/app")
        self.start(ctx, node)
        self._await(ctx, node, leader=True, within=self.opts.ready_timeout)

    def _mkdirs(self, data: str) -> str:
        """The operator's durable directories: ``data``, and JRaft's own two with
        ``durable_dirs`` (measured: JRaft creates them and fsyncs neither them nor ``data``,
        so a power cut under the lazy fs takes the whole log with them)."""
        cmd = durable_mkdir(data)
        if self.opts.durable_dirs:
            cmd += f" && {durable_mkdir(data + '/log')} && {durable_mkdir(data + '/meta')}"
        return cmd

    def _await(self, ctx: RunContext, node: str, *, leader: bool, within: float) -> None:
        """Until ``node`` answers status (and knows a leader, with ``leader``)."""
        host, port = self.client_addrs(ctx)[node]
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        answered, last = await_status(
            remote,
            p["pid"],
            p["stdout"],
            what="jraft server",
            ask=lambda: _fetch_status(host, port, 1.0),
            done=lambda st: not leader or bool(st.get("leader")),
            within=within,
        )
        if answered:
            return
        raise RemoteError(
            f"jraft server on {node} knew no leader after {within:g} s (last status: {last})",
            host=remote.host.name,
        )

    def wait_ready(self, ctx: RunContext, *, settle: float = 0.5) -> None:
        """Until every node names the same leader in the same term for ``settle`` s."""
        addrs = {n: a for n, a in self.client_addrs(ctx).items() if n not in self._removed}
        deadline = time.monotonic() + self.opts.ready_timeout
        since: float | None = None
        last: Any = None
        while time.monotonic() < deadline:
            sts = list(map_values(addrs, lambda a: _fetch_status(a[0], a[1], 1.0)).values())
            views = {(st.get("term"), st.get("leader")) if st else None for st in sts}
            view = next(iter(views)) if len(views) == 1 else None
            if view is not None and view[1]:
                if views == last and since is not None and time.monotonic() - since >= settle:
                    log.info("jraft ready: %s", next(iter(views)))
                    return
                if views != last or since is None:
                    since = time.monotonic()
            else:
                since = None
            last = views
            time.sleep(0.1)
        log.warning(
            "jraft nodes did not agree on one leader within %gs: %s", self.opts.ready_timeout, last
        )

    def start(self, ctx: RunContext, node: str) -> None:
        if not self.should_start(ctx, node, self._removed):
            return
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        lib = self._lib.get(node)
        if lib is None:
            lib = self._lib[node] = self.program().install(remote, f"{p['dir']}/app")
        remote.run(f"mkdir -p {shlex.quote(p['tmp'])}", check=False)
        remote.start_daemon(
            self.command(ctx, node, lib), pidfile=p["pid"], logfile=p["stdout"], chdir=p["dir"]
        )

    def _stop(self, ctx: RunContext, node: str) -> None:
        stop_process(ctx.remotes[node], self._paths(ctx, node)["pid"], "jraft server")

    def primaries(self, ctx: RunContext) -> list[str]:
        """Nodes whose server says leader (JRaft's STATE_LEADER or TRANSFERRING)."""
        addrs = {n: a for n, a in self.client_addrs(ctx).items() if n not in self._removed}
        sts = map_values(addrs, lambda a: _fetch_status(a[0], a[1], 1.0), what="status")
        return [n for n, st in sts.items() if st and st.get("role") == "leader"]

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        p = self._paths(ctx, node)
        return [p["log"], p["stdout"], *self._old_logs.get(node, [])]

    def teardown(self, ctx: RunContext, node: str) -> None:
        self.stop_and_remove(
            ctx, node, "the jraft server", {"pid": "jraft server"}, leave=self.opts.leave_running
        )

    # membership (Reconfigurable, TransfersLeadership) -------------------------------
    def _node_of(self, ctx: RunContext, ident: str) -> str | None:
        for n in ctx.nodes:
            if self.ident(n) == ident:
                return n
        name = ident.split(".", 1)[0]
        return name if name in ctx.nodes else None

    def _view(self, ctx: RunContext, reply: Mapping[str, Any], asked: str) -> Members:
        voters: dict[str, str] = {}
        learners: dict[str, str] = {}
        unknown: list[str] = []
        for key, out in (("voters", voters), ("learners", learners)):
            for ident in dict(reply.get(key) or {}):
                n = self._node_of(ctx, str(ident))
                if n is None or (n in out and out[n] != str(ident)):
                    unknown.append(str(ident))
                else:
                    out[n] = str(ident)
        lead = reply.get("leader")
        return Members(
            voters=voters,
            learners=learners,
            pending=bool(reply.get("pending")),
            leader=self._node_of(ctx, lead) if isinstance(lead, str) else None,
            asked=asked,
            unknown=tuple(unknown),
        )

    def _request(self, kind: str, ident: str) -> Callable[[Any], dict]:
        """One add/remove request (JRaft's addPeer/removePeer answer once the new
        configuration commits; an add first catches the new peer up)."""
        return functools.partial(_call, {"type": kind, "id": ident})

    def remove_member(
        self, ctx: RunContext, node: str, *, via: str | None = None, wait: bool = True
    ) -> Members:
        """JRaft removePeer through the leader; once gone, the server stopped."""
        ident = self.ident(node)
        if not wait:
            target, _ = self._send_once(
                ctx,
                f"remove {node} ({ident})",
                lambda c: c.call({"type": "remove-member", "id": ident}, 1.0),
                via=via,
            )
            return self._ask(ctx, target)

        view = self._change(
            ctx,
            f"remove {node} ({ident})",
            self._request("remove-member", ident),
            gone(ident),
            via=via,
            within=25.0,
            timeout=10.0,
        )
        self._removed.add(node)
        self._stop(ctx, node)
        return view

    def add_member(self, ctx: RunContext, node: str) -> Members:
        """``node``'s host wiped, a fresh member ``<node>.<k>`` started with an empty
        configuration (it waits for the leader), then JRaft addPeer (which catches it up
        before the configuration changes) until it votes."""
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        now = self.members(ctx)
        if node in now.voters:
            raise NemesisError(f"add {node}: already a voter as {now.voters[node]}")
        self._removed.add(node)
        self._stop(ctx, node)
        kept = f"{p['dir']}/node.{self.ident(node)}.log"
        remote.run(
            f"if [ -e {shlex.quote(p['log'])} ]; then mv {shlex.quote(p['log'])} "
            f"{shlex.quote(kept)}; fi; "
            + durable_wipe_tree(p["data"])
            + " && "
            + self._mkdirs(p["data"])
        )
        self._old_logs.setdefault(node, []).append(kept)
        k = self._generation[node] = self._generation.get(node, 0) + 1
        ident = f"{node}.{k}"
        self._idents[node] = ident
        self._joining.add(node)
        self._removed.discard(node)
        self.start(ctx, node)
        self._await(ctx, node, leader=False, within=30.0)
        return self._change(
            ctx,
            f"add {node} ({ident})",
            self._request("add-member", ident),
            lambda m: m.voters.get(node) == ident and not m.pending,
            via=None,
            within=40.0,
            timeout=10.0,
        )

    def transfer_leader(self, ctx: RunContext, node: str) -> dict[str, Any]:
        """JRaft transferLeadershipTo on the leader; the server waits up to 3 s for the
        outcome (the target leads, the old leader resumed, or a third member leads)."""
        lead = self._leader(ctx, 5.0)
        if lead is None:
            raise NemesisError(f"transfer to {node}: no leader")
        host, port = self.client_addrs(ctx)[lead]
        target = self.ident(node)
        reply = _admin(host, port, 6.0, lambda c: c.transfer_leader(target, 3000))
        code = reply.get("code")
        out: dict[str, Any] = {
            "code": code,
            "from": lead,
            "term": reply.get("term"),
            "leader": None,
            "outcome": outcome_of(code),
        }
        new = reply.get("leader")
        if isinstance(new, str):
            out["leader"] = self._node_of(ctx, new) or new
        if reply.get("error"):
            out["error"] = reply["error"]
        return out
