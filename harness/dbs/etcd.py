"""etcd as a database under test: one member per node, any release from 3.5 built, or Debian's 3.4.

By default the newest release the harness knows (:data:`NEWEST`) runs, built with
etcdctl from etcd's own modules on the Go module proxy (:func:`build_etcd`, cached per
version: ``scripts/setup.sh`` builds it once). ``version=X`` (3.5 or newer) picks another
release; ``version=debian`` (or ``3.4``) runs the hosts' installed ``etcd`` (Debian's
``etcd-server``, 3.4, which has no server module to build). When the default cannot be
built (no Go, no network and no cache), the hosts' etcd runs instead, with a warning and
the reason in ``test.json``'s ``artifacts``: a version asked for by name never falls back.

A static cluster: every member is told the whole membership at start
(``--initial-cluster``), with a token unique to the test so members of another
run can never join. Per node, one directory holds the data and the output::

    <root>/[<lab>/]<test>/<node>/data        --data-dir
    <root>/[<lab>/]<test>/<node>/etcd.pid
    <root>/[<lab>/]<test>/<node>/etcd.log    etcd's stdout and stderr

Lab hosts share this machine's disk, hence the per-lab and per-node levels.
A restart after a kill reuses the data directory; etcd then ignores the
initial-cluster flags and rejoins as the member it was.

The binary is installed with apt when it is missing and we are root
(``etcd-server``); anything else is a clear error naming the host.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.db import DataFiles, Members, WorkloadChoice
from harness.core.errors import ConfigError, LabError, NemesisError, RemoteError
from harness.core.fanout import map_values
from harness.dbs.daemon import (
    PidfileDaemonDB,
    absolute_root,
    await_status,
    ensure_package,
    stop_process,
)
from harness.dbs.gobuild import GoProgram, module_version

if TYPE_CHECKING:
    from harness.core.remote import Remote
    from harness.core.spec import RunContext

__all__ = [
    "HOSTS_PACKAGE",
    "NEWEST",
    "EtcdDB",
    "build_etcd",
    "hosts_release",
    "member_urls",
]

log = logging.getLogger(__name__)


SERVER_MODULE = "go.etcd.io/etcd/server/v3"
CTL_MODULE = "go.etcd.io/etcd/etcdctl/v3"
WRAPPER = Path(__file__).parent / "go" / "etcd"
"""harness/dbs/go/etcd: one main package per binary, each calling etcd's own entry point."""


NEWEST = "3.7.3"
"""The newest release on the Go module proxy when this was written (etcd's server module):
the default, and what ``scripts/setup.sh`` builds ahead."""

HOSTS_PACKAGE = "debian"
"""``version=debian``: the hosts' own etcd, Debian's 3.4 (``3.4`` and ``3.4.N`` say the same
and check the installed one is of that release)."""


def hosts_release(version: str | None) -> bool:
    """Whether ``version`` names the hosts' own etcd rather than a build."""
    return version is not None and (
        version == HOSTS_PACKAGE or version == "3.4" or version.startswith("3.4.")
    )


def build_etcd(version: str) -> GoProgram:
    """etcd and etcdctl of release ``version`` (3.5 or newer: the modules of
    ``go.etcd.io/etcd/{server,etcdctl}/v3``), built once and cached."""
    from harness.dbs import gobuild

    v = buildable(version)
    return gobuild.build(
        WRAPPER,
        name="etcd",
        modules={SERVER_MODULE: v, CTL_MODULE: v},
        binaries=["etcd", "etcdctl"],
    )


def buildable(version: str) -> str:
    """``version`` as the proxy names it, if it is a release the modules exist for (3.5 on);
    a ConfigError naming the option otherwise. Checked before anything is built."""
    v = module_version(version)
    if not v.startswith("v3.") or v.split(".")[1] in ("0", "1", "2", "3", "4"):
        raise ConfigError(
            f"etcd version {version!r}: only 3.5 and newer are built from the module "
            f"proxy (3.4 has no server module); version={HOSTS_PACKAGE} (or 3.4) runs "
            "the hosts' etcd",
            field="version",
        )
    return v


def member_urls(
    addresses: dict[str, str], peer_port: int, client_port: int
) -> dict[str, tuple[str, str]]:
    """(peer URL, client URL) per node; ports spread when nodes share an address."""
    unique = len(set(addresses.values())) == len(addresses)
    out = {}
    for i, (node, addr) in enumerate(addresses.items()):
        step = 0 if unique else 10 * i
        out[node] = (f"http://{addr}:{peer_port + step}", f"http://{addr}:{client_port + step}")
    return out


def _status(host: str, port: int, timeout: float) -> dict[str, Any] | None:
    from workloads.etcd import EtcdHTTP

    try:
        return EtcdHTTP(host, port, timeout).status()
    except Exception as e:  # noqa: BLE001 - any failure means "not answering"
        log.debug("status of %s:%s failed: %s", host, port, e)
        return None


def _is_leader(st: dict[str, Any] | None) -> bool:
    if not st:
        return False
    member = (st.get("header") or {}).get("member_id")
    return member is not None and str(member) == str(st.get("leader"))


class EtcdDB(PidfileDaemonDB):
    """Installs, starts, faults and removes one etcd member per node."""

    data_files = DataFiles(under="data", log=("member/wal/*.wal",))
    """etcd's WAL segments (preallocated 64 MB; corrupt aims at the data's end). Term and
    vote are HardState records inside the WAL, so there is no state file to roll back."""

    def workload_defaults(self, workload: str) -> dict[str, Any]:
        """``-w watch`` subscribes with this system's own client (etcd)."""
        return {"client": "etcd"} if workload == "watch" else {}

    def default_workload(self) -> WorkloadChoice:
        """Linearizable registers through etcd's own transactions (workloads/etcd.py)."""
        return WorkloadChoice(name="etcd-register")

    def __init__(
        self,
        *,
        root: str = "/var/lib/splitbrain/etcd",
        peer_port: int = 2380,
        client_port: int = 2379,
        binary: str = "etcd",
        heartbeat_ms: int | None = None,
        election_timeout_ms: int | None = None,
        ready_timeout: float = 30.0,
        leave_running: bool = False,
        extra_args: str = "",
        version: str | None = None,
    ) -> None:
        self.root = absolute_root(root)
        self.peer_port, self.client_port = peer_port, client_port
        self.binary = binary
        self.heartbeat_ms, self.election_timeout_ms = heartbeat_ms, election_timeout_ms
        self.ready_timeout = ready_timeout
        self.leave_running = leave_running
        self.extra_args = extra_args
        if version is not None and not hosts_release(version):
            buildable(version)
        self.version = version
        """None: :data:`NEWEST` built (the hosts' etcd if it cannot be); ``debian``/``3.4``:
        the hosts' own ``binary``; else that release built from the module proxy."""
        self._resolved = False
        self._fallback: str | None = None
        """Why the default build could not be had, when the hosts' etcd runs instead."""
        self._program: GoProgram | None = None
        self._bins: dict[str, str] = {}
        """Per node: the etcd binary its host runs (the build's copy there)."""
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}
        """The member name each node's host runs now, when not the node's own (re-added)."""
        self._commands: dict[str, str] = {}
        """Command lines of re-added members (``--initial-cluster-state existing``)."""
        self._generation: dict[str, int] = {}
        self._removed: set[str] = set()

    # the build (ResolvesArtifacts) --------------------------------------------
    def resolve_artifacts(self) -> dict[str, Any]:
        """etcd and etcdctl built at ``version`` (default :data:`NEWEST`) from etcd's own
        modules (once per version: harness/dbs/gobuild.py), or the hosts' installed
        ``binary`` for ``version=debian``/``3.4`` and when the default cannot be built."""
        program = self._resolve()
        if program is None:
            out: dict[str, Any] = {
                "program": "etcd",
                "source": "the hosts' package",
                "binary": self.binary,
                "version": self.version or HOSTS_PACKAGE,
            }
            if self._fallback:
                out["fallback"] = self._fallback
            return out
        return {**program.manifest(), "version": program.properties[SERVER_MODULE]}

    def _resolve(self) -> GoProgram | None:
        """The build this run uses (None: the hosts' etcd), decided once per run."""
        with self._lock:
            if self._resolved:
                return self._program
            self._resolved = True
            if hosts_release(self.version):
                return None
            try:
                self._program = build_etcd(self.version or NEWEST)
            except (ConfigError, LabError) as e:
                if self.version is not None:
                    raise
                self._fallback = f"etcd {NEWEST} could not be built: {e}"
                log.warning("%s; running the hosts' etcd (Debian's 3.4)", self._fallback)
            return self._program

    def _binary(self, node: str) -> str:
        return self._bins.get(node, self.binary)

    # layout -----------------------------------------------------------------
    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {"dir": d, "data": f"{d}/data", "pid": f"{d}/etcd.pid", "log": f"{d}/etcd.log"}

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        return [int(u.rsplit(":", 1)[1]) for u in self._urls(ctx)[node]]

    def _urls(self, ctx: RunContext) -> dict[str, tuple[str, str]]:
        return member_urls(
            {n: ctx.hosts[n].address for n in ctx.nodes}, self.peer_port, self.client_port
        )

    def client_addrs(self, ctx: RunContext) -> dict[str, tuple[str, int]]:
        out = {}
        for n, (_, client) in self._urls(ctx).items():
            host, port = client.removeprefix("http://").rsplit(":", 1)
            out[n] = (host, int(port))
        return out

    def command(self, ctx: RunContext, node: str) -> str:
        urls = self._urls(ctx)
        peer, client = urls[node]
        cluster = ",".join(f"{n}={u[0]}" for n, u in urls.items())
        lab = ctx.hosts[node].extras.get("lab") or ""
        args = [
            self._binary(node),
            "--name",
            node,
            "--data-dir",
            self._paths(ctx, node)["data"],
            "--initial-advertise-peer-urls",
            peer,
            "--listen-peer-urls",
            peer,
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--initial-cluster",
            cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            f"splitbrain-{lab}-{ctx.spec.name}-{ctx.spec.seed}",
            "--logger",
            "zap",
        ]
        if self.heartbeat_ms:
            args += ["--heartbeat-interval", str(self.heartbeat_ms)]
        if self.election_timeout_ms:
            args += ["--election-timeout", str(self.election_timeout_ms)]
        cmd = " ".join(shlex.quote(a) for a in args)
        return f"{cmd} {self.extra_args}".rstrip()

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {"client": self.client_addrs(ctx)}

    # transactions (TransactionalDB: -w list-append, -w rw-register) ---------------------
    def txn_session(self, ctx: RunContext, node: str, kind: str) -> Any:
        """A session running each transaction as a read round and a compare-and-put round
        on ``node``'s member (workloads/etcd_txn.py)."""
        from harness.core.workload import client_timeout
        from workloads.etcd_txn import EtcdTxnSession

        host, port = self.client_addrs(ctx)[node]
        return EtcdTxnSession(host, port, kind, client_timeout(ctx))

    def checker_options(self) -> dict[str, dict[str, Any]]:
        """What etcd promises of a transaction: strict serializability (its API guarantees);
        the txn checker holds it to that unless the workload option ``isolation`` names
        another level."""
        from workloads.etcd_txn import CLAIM

        return {"txn": {"isolation": CLAIM}}

    # lifecycle ----------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        program = self._resolve()
        if program is not None:
            lib = program.install(remote, f"{self.root}/bin")
            self._bins[node] = program.binary("etcd", lib)
        else:
            ensure_package(remote, self.binary, "etcd-server etcd-client")
            if self.version not in (None, HOSTS_PACKAGE):
                self._check_hosts_release(remote, self.version or "")
        self.stop_leftover(ctx, node, "an etcd", "etcd")
        remote.run(
            f"mkdir -p {shlex.quote(p['dir'])} && find {shlex.quote(p['dir'])} -mindepth 1 -delete"
        )
        self.start(ctx, node)
        self._await_member(ctx, node)

    def _check_hosts_release(self, remote: Remote, version: str) -> None:
        """``version=3.4.N``: the hosts' etcd must be that release (``3.4``: any 3.4)."""
        out = remote.run(f"{shlex.quote(self.binary)} --version", check=False, timeout=30).stdout
        found = next(
            (ln.split(":", 1)[1].strip() for ln in out.splitlines() if "etcd Version" in ln), ""
        )
        if found != version and not found.startswith(version + "."):
            raise ConfigError(
                f"etcd version {version!r}: {remote.host.name}'s {self.binary} is "
                f"{found or 'of an unknown release'}",
                field="version",
            )

    def _await_member(self, ctx: RunContext, node: str) -> None:
        """Until this member knows a leader (the cluster formed), or its process died."""
        host, port = self.client_addrs(ctx)[node]
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        known, _ = await_status(
            remote,
            p["pid"],
            p["log"],
            what="etcd",
            ask=lambda: _status(host, port, 1.0),
            done=lambda st: str(st.get("leader", "0")) not in ("0", ""),
            within=self.ready_timeout,
            lines=5,
        )
        if not known:
            raise RemoteError(
                f"etcd member {node} knew no leader after {self.ready_timeout:g} s",
                host=remote.host.name,
            )

    def wait_ready(self, ctx: RunContext, *, settle: float = 0.5) -> None:
        """Until every member names the same leader for ``settle`` s (a log line if never)."""
        addrs = self.client_addrs(ctx)
        deadline = time.monotonic() + self.ready_timeout
        since: float | None = None
        while time.monotonic() < deadline:
            sts = list(map_values(addrs, lambda a: _status(a[0], a[1], 1.0)).values())
            leaders = {str(st.get("leader")) if st else None for st in sts}
            if len(leaders) == 1 and None not in leaders and "0" not in leaders:
                since = since or time.monotonic()
                if time.monotonic() - since >= settle:
                    log.info("etcd ready: %d members agree on one leader", len(addrs))
                    return
            else:
                since = None
            time.sleep(0.1)
        log.warning("etcd members did not agree on a leader within %gs", self.ready_timeout)

    def start(self, ctx: RunContext, node: str) -> None:
        # etcd refuses a removed member anyway; not starting it keeps its log quiet
        if not self.should_start(ctx, node, self._removed):
            return
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        cmd = self._commands.get(node) or self.command(ctx, node)
        remote.start_daemon(cmd, pidfile=p["pid"], logfile=p["log"], chdir=p["dir"])

    # membership (Reconfigurable) ----------------------------------------------
    def _etcdctl(
        self,
        ctx: RunContext,
        on: str,
        args: str,
        *,
        endpoint: str | None = None,
        timeout: float = 10,
    ) -> str:
        """``etcdctl`` on ``on``'s host against ``endpoint`` (default: that host's member)."""
        url = endpoint or self._urls(ctx)[on][1]
        binary = self._binary(on)
        ctl = binary.rsplit("/", 1)[0] + "/etcdctl" if "/" in binary else "etcdctl"
        cmd = (
            f"ETCDCTL_API=3 {shlex.quote(ctl)} --endpoints={shlex.quote(url)} "
            f"--dial-timeout=2s --command-timeout=5s {args}"
        )
        res = ctx.remotes[on].run(cmd, check=False, timeout=timeout)
        if not res.ok:
            raise NemesisError(f"{on}: etcdctl {args.split()[0:2]}: {res.stderr.strip()[-300:]}")
        return res.stdout

    def _node_by_peer(self, ctx: RunContext, peer_urls: list[str]) -> str | None:
        urls = self._urls(ctx)
        for n in ctx.nodes:
            if urls[n][0] in peer_urls:
                return n
        return None

    def _list(self, ctx: RunContext, on: str) -> tuple[Members, dict[str, str]]:
        """(the members ``on``'s member reports, {node: member id in hex})."""
        import json

        out = json.loads(self._etcdctl(ctx, on, "member list -w json"))
        voters: dict[str, str] = {}
        learners: dict[str, str] = {}
        ids: dict[str, str] = {}
        unknown = []
        for m in out.get("members") or []:
            node = self._node_by_peer(ctx, list(m.get("peerURLs") or []))
            name = str(m.get("name") or "") or "(unstarted)"
            hex_id = format(int(m["ID"]), "x")
            if node is None:
                unknown.append(f"{name}:{hex_id}")
                continue
            ids[node] = hex_id
            (learners if m.get("isLearner") else voters)[node] = f"{name}:{hex_id}"
        host, port = self.client_addrs(ctx)[on]
        st = _status(host, port, 2.0)
        leader = None
        if st:
            lead = format(int(st.get("leader") or 0), "x")
            leader = next((n for n, i in ids.items() if i == lead), None)
        return (
            Members(
                voters=voters, learners=learners, leader=leader, asked=on, unknown=tuple(unknown)
            ),
            ids,
        )

    def _answering(self, ctx: RunContext, via: str | None) -> list[str]:
        if via is not None:
            return [via]
        lead = [n for n in self.primaries(ctx) if n not in self._removed]
        return lead + [n for n in ctx.nodes if n not in lead and n not in self._removed]

    def members(self, ctx: RunContext, via: str | None = None) -> Members:
        errors = []
        for n in self._answering(ctx, via):
            try:
                return self._list(ctx, n)[0]
            except Exception as e:  # noqa: BLE001 - the next member may answer
                errors.append(f"{n}: {e}")
        raise NemesisError("no etcd member listed the members: " + "; ".join(errors))

    def remove_member(
        self, ctx: RunContext, node: str, *, via: str | None = None, wait: bool = True
    ) -> Members:
        """``etcdctl member remove``; once the list no longer names it, the member stopped."""
        deadline = time.monotonic() + 25.0
        last = "no attempt"
        while time.monotonic() < deadline:
            for n in self._answering(ctx, via):
                try:
                    view, ids = self._list(ctx, n)
                except Exception as e:  # noqa: BLE001
                    last = str(e)
                    continue
                if node not in ids:
                    if wait:
                        self._removed.add(node)
                        stop_process(ctx.remotes[node], self._paths(ctx, node)["pid"], "etcd")
                    return view
                try:
                    self._etcdctl(ctx, n, f"member remove {ids[node]}")
                except NemesisError as e:
                    last = str(e)
                if not wait:
                    return self._list(ctx, n)[0]
                break
            time.sleep(0.5)
        raise NemesisError(f"remove {node}: not done within 25 s (last: {last})")

    def add_member(self, ctx: RunContext, node: str) -> Members:
        """``node``'s host wiped, ``etcdctl member add`` under a fresh name, then etcd
        started there with ``--initial-cluster-state existing`` and awaited until listed
        with its name (started) and a leader known."""
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        view = self.members(ctx)
        if node in view.voters and not view.voters[node].startswith("(unstarted)"):
            raise NemesisError(f"add {node}: already a member as {view.voters[node]}")
        self._removed.add(node)
        stop_process(remote, p["pid"], "etcd")
        remote.run(f"rm -rf {shlex.quote(p['data'])}")
        k = self._generation[node] = self._generation.get(node, 0) + 1
        name = f"{node}.{k}"
        peer = self._urls(ctx)[node][0]
        out = ""
        deadline = time.monotonic() + 25.0
        last = "no attempt"
        while not out and time.monotonic() < deadline:
            for n in self._answering(ctx, None):
                if n == node:
                    continue
                try:
                    _, ids = self._list(ctx, n)
                    if node in ids:  # an earlier attempt got in: the new member is unstarted
                        self._etcdctl(ctx, n, f"member remove {ids[node]}")
                    out = self._etcdctl(
                        ctx, n, f"member add {shlex.quote(name)} --peer-urls={peer}"
                    )
                    break
                except NemesisError as e:
                    last = str(e)
            else:
                time.sleep(0.5)
        if not out:
            raise NemesisError(f"add {node}: member add failed within 25 s (last: {last})")
        cluster = next(
            (
                ln.split("=", 1)[1].strip().strip('"')
                for ln in out.splitlines()
                if ln.startswith("ETCD_INITIAL_CLUSTER=")
            ),
            None,
        )
        if not cluster:
            raise NemesisError(f"add {node}: member add printed no ETCD_INITIAL_CLUSTER: {out!r}")
        cmd = self.command(ctx, node)
        cmd = cmd.replace(f"--name {shlex.quote(node)} ", f"--name {shlex.quote(name)} ", 1)
        args = shlex.split(cmd)
        args[args.index("--initial-cluster") + 1] = cluster
        args[args.index("--initial-cluster-state") + 1] = "existing"
        self._commands[node] = " ".join(shlex.quote(a) for a in args)
        self._names[node] = name
        self._removed.discard(node)
        self.start(ctx, node)
        self._await_member(ctx, node)
        deadline = time.monotonic() + 20.0
        while True:
            view = self.members(ctx)
            if view.voters.get(node, "").startswith(f"{name}:"):
                return view
            if time.monotonic() >= deadline:
                raise NemesisError(f"add {node}: not listed as {name} after 20 s: {view}")
            time.sleep(0.5)

    def transfer_leader(self, ctx: RunContext, node: str) -> dict[str, Any]:
        """``etcdctl move-leader`` sent to the leader's endpoint."""
        lead = self.primaries(ctx)
        if not lead:
            raise NemesisError(f"transfer to {node}: no leader")
        _, ids = self._list(ctx, lead[0])
        if node not in ids:
            raise NemesisError(f"transfer to {node}: not a member")
        try:
            out = self._etcdctl(ctx, lead[0], f"move-leader {ids[node]}", timeout=15)
            code = "SUCCESS"
        except NemesisError as e:
            out, code = str(e), "FAILED"
        after = self.primaries(ctx)
        now = after[0] if after else None
        outcome = (
            "handed-over" if now == node else "kept" if now == lead[0] else "lost" if now else None
        )
        return {
            "code": code,
            "from": lead[0],
            "leader": now,
            "outcome": outcome,
            "output": out.strip()[-200:],
        }

    def primaries(self, ctx: RunContext) -> list[str]:
        """Members that say they are the leader (each compares its id with its leader id)."""
        addrs = self.client_addrs(ctx)
        sts = map_values(addrs, lambda a: _status(a[0], a[1], 1.0), what="status")
        return [n for n, st in sts.items() if _is_leader(st)]

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        return [self._paths(ctx, node)["log"]]

    def teardown(self, ctx: RunContext, node: str) -> None:
        self.stop_and_remove(ctx, node, "etcd", {"pid": "etcd"}, leave=self.leave_running)
