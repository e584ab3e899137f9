"""The reference DLedger node (``node_impl``) as a database under test.

Everything happens over the host's ``Remote``, so the same code drives lab
namespaces, VMs and containers. Per node, one directory holds the uploaded
code, the data, the pid file and the daemon's stdout::

    <root>/[<lab>/]<test>/<node>/app/node_impl/   the package, uploaded at setup
    <root>/<test>/<node>/data/            --data-dir
    <root>/<test>/<node>/node.log         --log-file: outside the data a disk fault rolls back
    <root>/<test>/<node>/node.pid
    <root>/<test>/<node>/stdout.log

Directories are per node even on one machine because lab hosts share this
machine's disk. Ports bind on each host's own address; when several nodes
share an address (a nodes file pointing at one machine), ports are spread so
they do not collide.
"""

from __future__ import annotations

import logging
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.db import DataFiles, Members, WorkloadChoice
from harness.core.errors import ConfigError, NemesisError, RemoteError
from harness.core.fanout import map_values
from harness.core.remote import UploadsTrees
from harness.dbs.daemon import NO_COND_FIX, PidfileDaemonDB, absolute_root, await_status
from harness.dbs.members import AskedMembers, Change, gone
from harness.dbs.members import admin as _admin
from harness.dbs.nodelog_events import NodeLogEvents

if TYPE_CHECKING:
    from harness.core.remote import Remote
    from harness.core.spec import RunContext

__all__ = [
    "DLedgerDB",
    "DLedgerMembership",
    "NODE_IMPL_DIR",
    "node_ports",
    "check_bug",
    "node_source",
]

log = logging.getLogger(__name__)

NODE_IMPL_DIR = Path(__file__).resolve().parents[2] / "node_impl"


EMULATED_TIMING = {"leader_timeout": 300.0, "heartbeat_ms": 300, "election_timeout_ms": 3000}
"""Defaults when any host's CPU is emulated (``Host.emulated_cpu``, a VM
lab guest under TCG): the node runs ~20x slower there, so starting it can take a
minute on a loaded machine and the usual 200/1000 ms heartbeat and election
timeouts elect a new leader every few seconds. Explicit options still win."""


def emulated(ctx: RunContext) -> bool:
    """Whether any host of the run declares a software-emulated CPU."""
    return any(h.emulated_cpu for h in ctx.hosts.values())


def node_ports(
    addresses: dict[str, str], peer_port: int, client_port: int
) -> dict[str, tuple[int, int]]:
    """(peer port, client port) per node: fixed, unless two nodes share an address."""
    unique = len(set(addresses.values())) == len(addresses)
    out = {}
    for i, node in enumerate(addresses):
        step = 0 if unique else 10 * i
        out[node] = (peer_port + step, client_port + step)
    return out


def node_source(node_src: str | None) -> Path:
    """The node package to ship: ``node_impl`` itself, or the tree the ``node_src`` option names.

    ``node_src`` is a directory holding a node package (its ``__main__.py``), e.g. a
    mutant of ``node_impl`` (``splitbrain mutants``); it is shipped as
    ``node_impl`` so the command line stays the same. Recorded in test.json with
    the other db options, so a run says which code it tested.
    """
    if node_src is None:
        return NODE_IMPL_DIR
    p = Path(node_src)
    if not p.is_absolute():
        raise ConfigError(
            f"db option node_src must be an absolute path, got {node_src!r}", field="node_src"
        )
    if not (p / "__main__.py").is_file():
        raise ConfigError(
            f"db option node_src={node_src}: not a node package (no __main__.py there)",
            field="node_src",
        )
    return p


def check_bug(bug: str) -> None:
    """Reject an unknown --bug before any node starts (the node would only exit 2)."""
    from node_impl.bugs import UnknownBug, parse_bugs

    try:
        parse_bugs(bug)
    except UnknownBug as e:
        raise ConfigError(str(e), field="bug") from None


def _leaders_now(
    addrs: dict[str, tuple[str, int]], *, timeout: float = 2.0, grace: float = 0.3
) -> list[str]:
    """The nodes whose status says leader, asked all at once.

    Once one leader has answered, the others get ``grace`` more seconds, not the
    whole timeout: a paused or cut-off node answers only by timing out, and a
    fault aimed at the leader should not wait for it. (A node that still believes
    it leads but answers that slowly is left out; it will be asked again.)
    """
    if not addrs:
        return []
    pool = ThreadPoolExecutor(max_workers=len(addrs), thread_name_prefix="status")
    try:
        futs = {pool.submit(_fetch_status, h, p, timeout): n for n, (h, p) in addrs.items()}
        leaders: list[str] = []
        until = time.monotonic() + timeout + 0.5
        pending = set(futs)
        while pending:
            done, pending = wait(
                pending, timeout=max(0.0, until - time.monotonic()), return_when=FIRST_COMPLETED
            )
            if not done:
                break
            for f in done:
                st = f.result()
                if st and st.get("role") == "leader":
                    leaders.append(futs[f])
                    until = min(until, time.monotonic() + grace)
        return [n for n in addrs if n in leaders]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a silent node's thread ends at its timeout


_WIPE_PY = (
    "import os, shutil, sys\n"
    "d = sys.argv[1]\n"
    "os.makedirs(d, exist_ok=True)\n"
    "for name in os.listdir(d):\n"
    "    p = os.path.join(d, name)\n"
    "    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)\n"
    "fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)\n"
    "os.fsync(fd)\n"
)


def durable_wipe(path: str) -> str:
    """A shell command that empties ``path`` and fsyncs it, so the emptying is durable.

    A member re-added wiped (M6) is a new identity: under the lazy fs of the disk faults
    (docs/disk-faults.md) an ``rm -rf`` whose directory was never fsynced is an un-fsynced
    change, and a later lost-power fault would bring the old member's log and term back
    under the new id. The harness's own wipe must be as durable as a real operator's.
    """
    return f"python3 -c {shlex.quote(_WIPE_PY)} {shlex.quote(path)}"


def _fetch_status(host: str, port: int, timeout: float) -> dict[str, Any] | None:
    """The node's status map, or None if it does not answer in time."""
    from node_impl.client import NodeClient

    client = NodeClient(host, port, timeout=timeout)
    try:
        st = client.status()
    except Exception as e:  # noqa: BLE001 - any failure means "not answering"
        if not isinstance(e, ConnectionRefusedError) and "refused" not in str(e):
            log.debug("status of %s:%s failed: %s", host, port, e)
        return None
    finally:
        client.close()
    return st


# membership (Reconfigurable: docs/membership.md M6-M10, the node author's recipe) --------

RETRY_CODES = frozenset(
    {
        "NOT_LEADER",
        "LEADER_NOT_READY",
        "CONFIG_CHANGE_PENDING",
        "TERM_CHANGED",
        "LEADER_TRANSFERRING",
        "WAIT_QUORUM_ACK_TIMEOUT",
    }
)
"""Answers to a change after which the recipe asks again (after checking ``members``)."""

CHANGE_TIMEOUT_S = 5.0
"""Client timeout of one add/remove: the reply comes once the config entry commits."""


class DLedgerMembership(AskedMembers):
    """``Reconfigurable`` for the reference node in modes dledger and broker.

    Mixed into :class:`DLedgerDB` (whose layout and command line it reuses); the asking
    (``members``, the change loop) is :class:`harness.dbs.members.AskedMembers`, shared with
    jraft. Mode ``ha`` (a subclass) has no membership: every call there is a clear NemesisError.
    """

    _idents: dict[str, str]
    _generation: dict[str, int]
    _removed: set[str]
    _old_logs: dict[str, list[str]]
    _cmd: dict[str, str]
    _python: dict[str, str]

    # what DLedgerDB provides
    def _ports(self, ctx: RunContext) -> dict[str, tuple[int, int]]:
        raise NotImplementedError

    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        raise NotImplementedError

    def _command(self, ctx: RunContext, node: str, python: str) -> str:
        raise NotImplementedError

    def _node_command(
        self, ctx: RunContext, node: str, python: str, *, ident: str, peers: str, join: bool
    ) -> str:
        raise NotImplementedError

    def _choose_python(self, remote: Remote) -> str:
        raise NotImplementedError

    # helpers ------------------------------------------------------------------
    def check_reconfigurable(self, ctx: RunContext) -> None:
        """Called by the membership fault at setup, before the load (mode ha refused)."""
        self._refuse_ha(ctx)

    def _refuse_ha(self, ctx: RunContext) -> None:
        node = ctx.nodes[0]
        if "--mode ha" in self._command(ctx, node, "python3"):
            raise NemesisError(
                f"the DB {type(self).__name__} runs the node in mode ha, which has no "
                "membership changes (docs/membership.md: its operator is the harness)"
            )

    def ident(self, node: str) -> str:
        """The member id ``node``'s host runs now (its own name until re-added)."""
        return self._idents.get(node, node)

    def _peer_addr(self, ctx: RunContext, node: str) -> str:
        return f"{ctx.hosts[node].address}:{self._ports(ctx)[node][0]}"

    def _node_at(self, ctx: RunContext, ident: str, addr: str | None) -> str | None:
        """The run's node behind a member id (by its peer address; else by id)."""
        if addr:
            for n in ctx.nodes:
                if self._peer_addr(ctx, n) == addr:
                    return n
        for n in ctx.nodes:
            if self.ident(n) == ident or n == ident:
                return n
        return None

    def _view(self, ctx: RunContext, reply: Mapping[str, Any], asked: str) -> Members:
        voters: dict[str, str] = {}
        learners: dict[str, str] = {}
        unknown: list[str] = []
        addrs: dict[str, str] = {}
        for key, out in (("voters", voters), ("learners", learners)):
            for ident, addr in dict(reply.get(key) or {}).items():
                addrs[str(ident)] = str(addr)
                n = self._node_at(ctx, str(ident), str(addr))
                if n is None:
                    unknown.append(str(ident))
                else:
                    out[n] = str(ident)
        lead = reply.get("leader")
        leader = None
        if isinstance(lead, str):
            leader = self._node_at(ctx, lead, addrs.get(lead))
        return Members(
            voters=voters,
            learners=learners,
            pending=bool(reply.get("pending")),
            leader=leader,
            asked=asked,
            unknown=tuple(unknown),
        )

    # Reconfigurable -------------------------------------------------------------
    def members(self, ctx: RunContext, via: str | None = None) -> Members:
        """``via``'s own view, else the leader's (else any member's, marked by ``asked``)."""
        self._refuse_ha(ctx)
        return super().members(ctx, via)

    def _answered(
        self, ctx: RunContext, change: Change, reply: Mapping[str, Any], last: str
    ) -> Members | None:
        """The recipe's retries: SUCCESS and the retryable answers ask again (``members``
        first: the change may have committed); UNSUPPORTED may mean done or under way."""
        code = reply.get("code")
        if code == "SUCCESS" or code in RETRY_CODES:
            time.sleep(0.2 if code == "SUCCESS" else 0.3)
            return None
        # UNSUPPORTED: the change may already be in force (a retry after a commit),
        # or under way (an add committed as a learner, not yet promoted: M4)
        view = self.members(ctx, change.via)
        if change.done(view):
            return view
        if change.under_way is not None and change.under_way(view):
            time.sleep(0.3)
            return None
        raise NemesisError(f"{change.what}: {last}")

    def _stop_node(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        pid = self._paths(ctx, node)["pid"]
        remote.signal_daemon(pid, "CONT")
        remote.stop_daemon(pid, timeout=5)

    def remove_member(
        self, ctx: RunContext, node: str, *, via: str | None = None, wait: bool = True
    ) -> Members:
        """M7/M8 through the leader (or only ``via``); then the node is stopped (M7.4).

        With ``wait`` False the request goes once to ``via`` (or the leader) with a short
        timeout and the answer is not awaited: a staged fault asks a leader that may never
        commit it. The node keeps running then (it may still be a member).
        """
        self._refuse_ha(ctx)
        ident = self.ident(node)
        if not wait:
            what = f"remove {node} ({ident})"
            target, reply = self._send_once(ctx, what, lambda c: c.remove_member(ident), via=via)
            code = None if reply is None else reply.get("code")
            if reply is not None and code not in (
                "SUCCESS",
                "TERM_CHANGED",
                "WAIT_QUORUM_ACK_TIMEOUT",
            ):
                # refused: nothing appended (TERM_CHANGED and WAIT_QUORUM_ACK_TIMEOUT
                # mean appended, outcome unknown: M3)
                raise NemesisError(f"remove {ident} via {target}: {code}")
            return self._ask(ctx, target)

        view = self._change(
            ctx,
            f"remove {node} ({ident})",
            lambda c: c.remove_member(ident, timeout=CHANGE_TIMEOUT_S),
            gone(ident),
            via=via,
            within=25.0,
            timeout=CHANGE_TIMEOUT_S + 1.0,
        )
        # Quiet: the leader keeps telling a removed node for up to 2E after the commit.
        self._removed.add(node)
        time.sleep(0.3)
        self._stop_node(ctx, node)
        return view

    def add_member(self, ctx: RunContext, node: str) -> Members:
        """M6: ``node``'s host wiped, started as a fresh member with ``--join``, added and
        awaited until it votes. The fresh id is ``<node>.<k>`` (k counts re-additions)."""
        self._refuse_ha(ctx)
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        now = self.members(ctx)
        if node in now.voters:
            raise NemesisError(f"add {node}: already a voter as {now.voters[node]}")
        if node in now.learners:
            ident = now.learners[node]
        else:
            self._removed.add(node)  # stopped below; no kill heal may revive it meanwhile
            self._stop_node(ctx, node)
            # the old member's log is evidence (what it did before it was removed): kept
            # beside the node directory and fetched with the others (log_files)
            kept = f"{p['dir']}/node.{self.ident(node)}.log"
            remote.run(
                f"if [ -e {shlex.quote(p['log'])} ]; then "
                f"mv {shlex.quote(p['log'])} {shlex.quote(kept)}; fi; " + durable_wipe(p["data"])
            )
            self._old_logs.setdefault(node, []).append(kept)
            k = self._generation[node] = self._generation.get(node, 0) + 1
            ident = f"{node}.{k}"
            addr = self._peer_addr(ctx, node)
            members = dict(now.voters) | dict(now.learners)
            peers = ",".join(
                [f"{i}={self._peer_addr(ctx, n)}" for n, i in sorted(members.items())]
                + [f"{ident}={addr}"]
            )
            python = self._python.get(node) or self._choose_python(remote)
            self._python[node] = python
            # Restarts after a kill keep this command line: same --peers, --join (M6.3).
            self._cmd[node] = self._node_command(
                ctx, node, python, ident=ident, peers=peers, join=True
            )
            self._idents[node] = ident
            self._removed.discard(node)
            remote.start_daemon(
                self._cmd[node], pidfile=p["pid"], logfile=p["stdout"], chdir=p["app"]
            )
            self._await_status(ctx, node)
        addr = self._peer_addr(ctx, node)
        self._removed.discard(node)
        return self._change(
            ctx,
            f"add {node} ({ident})",
            lambda c: c.add_member(ident, addr, timeout=CHANGE_TIMEOUT_S),
            lambda m: m.voters.get(node) == ident and not m.pending,
            via=None,
            within=40.0,
            timeout=CHANGE_TIMEOUT_S + 1.0,
            under_way=lambda m: m.learners.get(node) == ident or m.voters.get(node) == ident,
        )

    def _await_status(self, ctx: RunContext, node: str, within: float = 20.0) -> None:
        host, port = self.client_addrs(ctx)[node]
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if _fetch_status(host, port, 1.0) is not None:
                return
            time.sleep(0.2)
        raise NemesisError(f"add {node}: the new member did not answer status in {within:g} s")

    transfer_hands_over = True
    """M9: the target is caught up before its TimeoutNow, so it wins (TransfersLeadership)."""

    def transfer_leader(self, ctx: RunContext, node: str) -> dict[str, Any]:
        """M9 on the leader; the reply with ``leader`` named as a node of the run."""
        self._refuse_ha(ctx)
        lead = self._leader(ctx, 5.0)
        if lead is None:
            raise NemesisError(f"transfer to {node}: no leader")
        host, port = self.client_addrs(ctx)[lead]
        timeout_ms = 3000
        target = self.ident(node)
        reply = _admin(
            host, port, timeout_ms / 1000 + 3.0, lambda c: c.transfer_leader(target, timeout_ms)
        )
        code = reply.get("code")
        out = {
            "code": code,
            "from": lead,
            "term": reply.get("term"),
            "leader": None,
            "outcome": _TRANSFER_OUTCOMES.get(str(code), "refused" if code else None),
        }
        new = reply.get("leader")
        if isinstance(new, str):
            out["leader"] = self._node_at(ctx, new, None) or new
        if reply.get("error"):
            out["error"] = reply["error"]
        return out


_TRANSFER_OUTCOMES = {
    "SUCCESS": "handed-over",
    "TRANSFER_TIMEOUT": "kept",
    "TRANSFER_FAILED": "lost",
}
"""M9.4's answers as TransfersLeadership outcomes; any other code did nothing (refused)."""


# "mixed" runs the append log and per-key registers at once, with the status sampler,
# so log safety (I2-I4), linearizability (I7) and the sampled invariants (I1, I5, I6) are
# checked in every run; reads served by followers and isolated leaders expose stale
# reads. The workloads that read the past ride along: archive keys written once and read
# for the rest of the run, retired register keys still read, a set in the kv map read
# back from every node, and clients that stick to the node that last answered.
# Three workers per node keep reads flowing on an isolated leader while its writes hang.
STRONGEST_WORKLOAD = WorkloadChoice(
    name="mixed",
    options={
        "mixed_weights": (1, 2, 2, 0.25),
        "read_fraction": 0.25,
        "ops_per_key": 100,
        "retired_reads": 0.1,
        "sticky_ops": 20,
        # About two workers in three stuck at a time (a stint of 20 ops, then ~10 free
        # ones): the free ones find the new leader and write while the old one sleeps,
        # the stuck ones read from the sleeper.
        "sticky_fraction": 0.1,
        # A sticky worker re-sends its read to a frozen leader every 0.5 s, so the one
        # still waiting when it wakes was invoked after the new leader's commits
        # (docs/zoo.md, M3b).
        "read_timeout": 0.5,
    },
    concurrency=15,
    rate=60.0,
    # Below the stopped-leader motif's 3-4 s pause, as real clients' are: writes trapped
    # on the frozen leader give up and find the new one, which then commits while the
    # sleeper still sleeps.
    client_timeout=2.0,
)
"""The reference node's strongest workload (mode dledger): ``splitbrain run``'s default."""
BROKER_WORKLOAD = WorkloadChoice(name="queue", concurrency=6, rate=60.0)
"""Mode broker is checked as producers and consumers see it: sends, pulls, final drains."""


READ_MODES = ("index", "follower", "log")
"""The node's ``--read-mode`` values, its default first."""


class DLedgerDB(NodeLogEvents, DLedgerMembership, PidfileDaemonDB):
    """Installs, starts, faults and removes ``node_impl`` on every node of a test."""

    data_files = DataFiles(under="data", log=("data.log",), state=("term.json",))
    """The node's log and its term and vote (node_impl/store.py): what corrupt damages."""

    event_invariants = NodeLogEvents.event_invariants | {
        "leader-completeness", "follower-commit-bound"
    }  # fmt: skip
    """Modes dledger and broker (Raft's election) log commits and elections too, so leader
    completeness and the follower's commit bound are judged; mode ha's nodes log no commit
    events (node_impl/ha.py), which the check then says instead of judging them."""

    def event_kinds(self) -> frozenset[str]:
        ha = self.node_mode == "ha"
        extra = frozenset() if ha else frozenset({"commit", "elected"})
        return super().event_kinds() | extra

    read_modes: tuple[str, ...] = READ_MODES
    """The read modes whose paths differ (a subclass that reads another way has none)."""

    def configuration_dimensions(self) -> dict[str, tuple[str, ...]]:
        """Mode dledger's read modes: three read paths (node_impl/server.py,
        node_impl/follower_read.py); mode broker reads another way."""
        if self.node_mode != "dledger" or not self.read_modes:
            return {}
        return {"read_mode": self.read_modes}

    def configuration(self) -> dict[str, str]:
        if self.node_mode != "dledger" or not self.read_modes:
            return {}
        return {"read_mode": self.read_mode or self.read_modes[0]}

    @property
    def unreachable_situations(self) -> dict[str, str]:
        """Mode dledger with read mode index: only a leader that confirmed its leadership
        answers a read (spec §9); with read mode log, only a leader whose read entry
        committed in its own term (which a deposed leader cannot get: the majority moved
        on). So a correct node never lets a non-leader answer one (unreached in every
        read-mode-log run of docs/zoo.md's correct-node table). Mode ha and read mode
        follower declare nothing."""
        if self.node_mode != "dledger" or self.read_mode not in (None, "index", "log"):
            return {}
        how = (
            "a read entry committed in its own term (read mode log)"
            if self.read_mode == "log"
            else "confirmed its leadership (read index)"
        )
        return {
            "read-from-non-leader": f"the node answers a read only as a leader that has {how}: "
            "a correct run never reaches this; a run that does has found a stale read"
        }

    @property
    def node_mode(self) -> str:
        """The node's ``--mode`` among its arguments (``dledger`` when not given)."""
        args = self.extra_args.split()
        for i, a in enumerate(args):
            if a == "--mode" and i + 1 < len(args):
                return args[i + 1]
            if a.startswith("--mode="):
                return a.removeprefix("--mode=")
        return "dledger"

    def default_workload(self) -> WorkloadChoice:
        """Mode broker is a queue."""
        return BROKER_WORKLOAD if self.node_mode == "broker" else STRONGEST_WORKLOAD

    def __init__(
        self,
        *,
        root: str = "/var/lib/splitbrain/run",
        peer_port: int = 9000,
        client_port: int = 9001,
        remote_python: str | None = None,
        heartbeat_ms: int | None = None,
        election_timeout_ms: int | None = None,
        read_mode: str | None = None,
        leader_timeout: float | None = None,
        leave_running: bool = False,
        bug: str | None = None,
        extra_args: str = "",
        primaries_wait: float = 3.0,
        node_src: str | None = None,
    ) -> None:
        self.root = absolute_root(root)
        self.peer_port, self.client_port = peer_port, client_port
        self.remote_python = remote_python
        self.heartbeat_ms, self.election_timeout_ms = heartbeat_ms, election_timeout_ms
        self.read_mode = read_mode
        self.leader_timeout = leader_timeout
        self.leave_running = leave_running
        self.bug = bug
        self.extra_args = extra_args
        self.primaries_wait = primaries_wait
        if bug:
            check_bug(bug)
        self.node_src = node_source(node_src)
        self._python: dict[str, str] = {}
        self._cmd: dict[str, str] = {}
        self._lock = threading.Lock()
        self._idents: dict[str, str] = {}
        """The member id each node's host runs now, when not the node's own name (M6)."""
        self._generation: dict[str, int] = {}
        self._removed: set[str] = set()
        """Nodes removed from the configuration and stopped: a restart must not revive them."""
        self._old_logs: dict[str, list[str]] = {}
        """node.log files of members this host ran before it was re-added wiped."""

    def leader_wait(self, ctx: RunContext) -> float:
        """Seconds to wait for a leader: the option, else 30 (300 on emulated CPUs)."""
        if self.leader_timeout is not None:
            return self.leader_timeout
        return float(EMULATED_TIMING["leader_timeout"]) if emulated(ctx) else 30.0

    # layout -----------------------------------------------------------------
    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {
            "dir": d,
            "app": f"{d}/app",
            "data": f"{d}/data",
            "pid": f"{d}/node.pid",
            "stdout": f"{d}/stdout.log",
            "log": f"{d}/node.log",
        }

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        return list(self._ports(ctx)[node])

    def _ports(self, ctx: RunContext) -> dict[str, tuple[int, int]]:
        addrs = {n: ctx.hosts[n].address for n in ctx.nodes}
        return node_ports(addrs, self.peer_port, self.client_port)

    def client_addrs(self, ctx: RunContext) -> dict[str, tuple[str, int]]:
        ports = self._ports(ctx)
        return {n: (ctx.hosts[n].address, ports[n][1]) for n in ctx.nodes}

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {"client": self.client_addrs(ctx)}

    # install ----------------------------------------------------------------
    def _upload_code(self, remote: Remote, app: str) -> None:
        dest = f"{app}/node_impl"
        remote.run(f"rm -rf {shlex.quote(dest)} && mkdir -p {shlex.quote(app)}")
        if isinstance(remote, UploadsTrees):
            remote.upload_tree(str(self.node_src), dest)
            return
        # A Remote without upload_tree: ship one tarball.
        import tarfile

        with tempfile.TemporaryDirectory() as tmp:
            tgz = Path(tmp) / "node_impl.tgz"
            with tarfile.open(tgz, "w:gz") as tf:
                tf.add(
                    self.node_src,
                    arcname="node_impl",
                    filter=lambda ti: None if "__pycache__" in ti.name else ti,
                )
            remote.upload(str(tgz), f"{app}/node_impl.tgz")
        remote.run(f"cd {shlex.quote(app)} && tar xzf node_impl.tgz && rm node_impl.tgz")

    def _choose_python(self, remote: Remote) -> str:
        """A remote python that can import msgpack, installing msgpack if needed.

        Lab hosts share this machine's filesystem, so the harness's own
        interpreter works there; a VM gets ``python3`` plus ``pip install msgpack``.
        """
        if self.remote_python:
            return self.remote_python
        for py in (sys.executable, "python3"):
            probe = remote.run(f"{shlex.quote(py)} -c 'import msgpack'", check=False, timeout=30)
            if probe.ok:
                return py
        log.info("%s: installing msgpack for python3", remote.host.name)
        res = remote.run(
            "python3 -m pip install -q msgpack || "
            "python3 -m pip install -q --break-system-packages msgpack",
            check=False,
            timeout=300,
        )
        if not res.ok:
            raise RemoteError(
                "python3 on this host cannot import msgpack and `pip install "
                "msgpack` failed; pass --db-option remote_python=PATH",
                host=remote.host.name,
            )
        return "python3"

    def _command(self, ctx: RunContext, node: str, python: str) -> str:
        # An original member's --peers is the INITIAL member set, whatever the cluster is
        # now: the node uses --peers only while its log holds no config entry (M2.3).
        ports = self._ports(ctx)
        peers = ",".join(f"{n}={ctx.hosts[n].address}:{ports[n][0]}" for n in ctx.nodes)
        return self._node_command(ctx, node, python, ident=node, peers=peers, join=False)

    def _node_command(
        self, ctx: RunContext, node: str, python: str, *, ident: str, peers: str, join: bool
    ) -> str:
        """The node's command line on ``node``'s host as member ``ident`` (M6: ``join``)."""
        p = self._paths(ctx, node)
        ports = self._ports(ctx)
        args = [
            python,
            "-m",
            "node_impl",
            "--id",
            ident,
            "--peers",
            peers,
            "--data-dir",
            p["data"],
            "--log-file",
            p["log"],
            "--client-port",
            str(ports[node][1]),
        ]
        if join:
            args.append("--join")
        heartbeat, election = self.heartbeat_ms, self.election_timeout_ms
        if emulated(ctx):
            heartbeat = heartbeat or int(EMULATED_TIMING["heartbeat_ms"])
            election = election or int(EMULATED_TIMING["election_timeout_ms"])
        if heartbeat:
            args += ["--heartbeat-ms", str(heartbeat)]
        if election:
            args += ["--election-timeout-ms", str(election)]
        if self.read_mode:
            args += ["--read-mode", self.read_mode]
        bug = self._bug_for(ctx, node)
        if bug:
            args += ["--bug", bug]
        cmd = " ".join(shlex.quote(a) for a in args)
        if self.extra_args:
            cmd += " " + self.extra_args
        # PYTHONPATH set inline: an sshd may refuse environment variables from the client.
        return f"env PYTHONPATH={shlex.quote(p['app'])} {NO_COND_FIX} {cmd}"

    def _bug_for(self, ctx: RunContext, node: str) -> str | None:
        """The ``--bug`` ``node`` starts with (a rolling upgrade runs two modes, each its own)."""
        return self.bug if self.bug is not None else ctx.spec.bug

    def setup(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        if remote.daemon_running(p["pid"]):
            # Left running by an earlier --leave-db-running run of the same test.
            log.info("%s: stopping a node left running by an earlier run", node)
            remote.signal_daemon(p["pid"], "CONT")
            remote.stop_daemon(p["pid"], timeout=5)
        remote.run(
            f"rm -rf {shlex.quote(p['data'])} {shlex.quote(p['stdout'])} "
            f"{shlex.quote(p['log'])} && "
            f"mkdir -p {shlex.quote(p['data'])}"
        )
        self._upload_code(remote, p["app"])
        if remote.host.machine is not None:
            # A guest's power may be cut: the installed code and the data directory
            # must be on its disk, not in its page cache (the node syncs its own data).
            remote.run("sync", timeout=120)
        python = self._choose_python(remote)
        self._python[node] = python
        self._cmd[node] = self._command(ctx, node, python)
        self.start(ctx, node)
        self._await_leader(ctx, node)

    def _await_leader(self, ctx: RunContext, node: str) -> None:
        """Block until ``node`` knows a leader, so the test does not open with an election."""
        host, port = self.client_addrs(ctx)[node]
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        wait = self.leader_wait(ctx)
        known, last = await_status(
            remote,
            p["pid"],
            p["stdout"],
            what="node process",
            ask=lambda: _fetch_status(host, port, 1.0),
            done=lambda st: (
                st.get("leader") is not None and st.get("role") in ("leader", "follower")
            ),
            within=wait,
            lines=5,
        )
        if known and last is not None:
            log.info(
                "%s: up, role %s, leader %s, term %s",
                node,
                last.get("role"),
                last.get("leader"),
                last.get("term"),
            )
            return
        raise RemoteError(
            f"no leader known after {wait:g} s (last status: {last})",
            host=remote.host.name,
        )

    def wait_ready(self, ctx: RunContext, *, settle: float = 0.5) -> None:
        """After every node's setup: wait until all agree on one leader for ``settle`` s.

        Each node's setup only waits until it knows *a* leader; right after start
        the first elections may still churn, and a test that opens in the middle of
        one measures the election, not the fault. Not a failure if it never
        settles (the run goes on; the log says so).
        """
        addrs = self.client_addrs(ctx)
        wait = self.leader_wait(ctx)
        deadline = time.monotonic() + wait
        stable_since: float | None = None
        last: set[tuple[Any, Any] | None] | None = None
        while time.monotonic() < deadline:
            sts = list(map_values(addrs, lambda a: _fetch_status(a[0], a[1], 1.0)).values())
            views = {(st.get("term"), st.get("leader")) if st else None for st in sts}
            leader_roles = [
                st.get("role")
                for st, n in zip(sts, addrs, strict=True)
                if st and st.get("leader") == n
            ]
            agreed = len(views) == 1 and None not in views and leader_roles == ["leader"]
            if agreed:
                now = time.monotonic()
                if views == last and stable_since is not None and now - stable_since >= settle:
                    view = next(iter(views))
                    term, leader = view if view is not None else (None, None)
                    log.info("cluster ready: leader %s in term %s", leader, term)
                    return
                if views != last or stable_since is None:
                    stable_since = now
            else:
                stable_since = None
            last = views
            time.sleep(0.1)
        log.warning(
            "nodes did not agree on one leader within %gs (last view: %s)",
            wait,
            last,
        )

    # lifecycle ----------------------------------------------------------------
    def start(self, ctx: RunContext, node: str) -> None:
        if not self.should_start(ctx, node, self._removed):
            return
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        cmd = self._cmd.get(node)
        if cmd is None:
            self._python[node] = self._choose_python(remote)
            cmd = self._cmd[node] = self._command(ctx, node, self._python[node])
        remote.start_daemon(cmd, pidfile=p["pid"], logfile=p["stdout"], chdir=p["app"])

    def leaders_among(self, ctx: RunContext, nodes: list[str], timeout: float = 0.5) -> list[str]:
        """Which of ``nodes`` say they lead, asked once with a short timeout: a staged fault
        that must act the moment an election ends (nemesis/membership.py, ``race``)
        cannot wait for a slow node's answer as :meth:`primaries` does."""
        addrs = {n: a for n, a in self.client_addrs(ctx).items() if n in nodes}
        return _leaders_now(addrs, timeout=timeout, grace=0.05)

    def primaries(self, ctx: RunContext) -> list[str]:
        """Nodes that say they lead. When none does, ask again for a moment.

        A busy leader can take over a second to answer, and an election may be
        about to end; a leader-targeted fault that finds nobody does nothing, so
        a short wait here makes "isolate the leader" hit far more often.
        """
        addrs = self.client_addrs(ctx)
        deadline = time.monotonic() + self.primaries_wait
        while True:
            leaders = _leaders_now(addrs)
            if leaders or time.monotonic() >= deadline:
                return leaders
            time.sleep(0.2)

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        p = self._paths(ctx, node)
        return [p["log"], p["stdout"], *self._old_logs.get(node, [])]

    def teardown(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        if self.leave_running:
            log.info("%s: leaving the node running in %s", node, p["dir"])
            return
        # A paused process holds a pending TERM forever: continue it first.
        remote.signal_daemon(p["pid"], "CONT")
        remote.stop_daemon(p["pid"], timeout=5)
        if remote.daemon_running(p["pid"]):
            raise RemoteError(f"node process in {p['dir']} survived stop", host=remote.host.name)
        self.remove_node_dir(ctx, node)
