"""NATS JetStream as a database under test: one ``nats-server`` per node, any served release.

By default the newest release the harness knows (:data:`NEWEST`) runs, built from the
server package of ``github.com/nats-io/nats-server/v2`` on the Go module proxy through
a wrapper main (``harness/dbs/go/nats``; :func:`build_nats`, cached per version by
:mod:`harness.dbs.gobuild`, built once ahead by ``scripts/setup.sh``). ``version=X``
picks another release (2.9.10, 2.10.29, 2.11.10, ... as the proxy serves them);
``version=debian`` runs the hosts' ``/usr/sbin/nats-server`` (Debian 12's 2.9.10). When
the default cannot be built (no Go, no network, no cache) and Debian's binary is
there, it runs instead, with a warning and the reason in ``test.json``'s ``artifacts``.

JetStream is clustered over routes between the hosts; the harness writes each server's
config (no init system) and starts it under a pid file. Per node, one directory holds
the config, pid file, log and JetStream store::

    /srv/splitbrain-nats/<lab or "hosts">/<node>/{nats.conf,pid,nats.log,store/}

That is the layout the workload ``nats-stream`` (the plugin ``examples/nats``) reads a
replica's message blocks from for its final reads; ``/srv`` is private to each lab host.
The monitoring helpers (:func:`jsz`, :func:`stream_leader`, :func:`meta_leader`,
:func:`replicas_converged`) are pure functions of ``/jsz`` and used by that plugin too.
"""

from __future__ import annotations

import json
import logging
import shlex
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.db import Convergence, ConvergenceReport, WorkloadChoice, poll_converged
from harness.core.errors import ConfigError, LabError, RemoteError
from harness.core.fanout import map_values
from harness.core.layout import safe_name
from harness.core.options import as_options, declares_options, option
from harness.dbs.daemon import PidfileDaemonDB, stop_process
from harness.dbs.gobuild import GoProgram, module_version

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = [
    "DEBIAN_BINARY",
    "HOSTS_PACKAGE",
    "NEWEST",
    "NatsDB",
    "NatsOptions",
    "build_nats",
    "factory",
    "jsz",
    "meta_leader",
    "node_dir",
    "replicas_converged",
    "stream_detail",
    "stream_leader",
]

log = logging.getLogger(__name__)

SERVER_MODULE = "github.com/nats-io/nats-server/v2"
WRAPPER = Path(__file__).parent / "go" / "nats"
"""harness/dbs/go/nats: the server's ``main`` again (a main package cannot be imported)."""

NEWEST = "2.15.2"
"""The newest release on the Go module proxy when this was written: the default, and
what ``scripts/setup.sh`` builds ahead."""

HOSTS_PACKAGE = "debian"
DEBIAN_BINARY = "/usr/sbin/nats-server"
"""Debian 12's ``nats-server`` package: 2.9.10."""

ROOT = "/srv/splitbrain-nats"
CLUSTER = "splitbrain"
STREAM = "SPLITBRAIN"
"""The stream the ``nats-stream`` workload writes: the one whose leader is the primary."""

WORKLOAD = "nats-stream"
PLUGIN_HINT = "pip install ./examples/nats (the plugin splitbrain-nats, which pulls nats-py)"


def build_nats(version: str) -> GoProgram:
    """``nats-server`` of release ``version`` (2.2 or newer: the ``/v2`` module), built
    once and cached."""
    from harness.dbs import gobuild

    v = buildable(version)
    return gobuild.build(
        WRAPPER, name="nats-server", modules={SERVER_MODULE: v}, binaries=["nats-server"]
    )


def buildable(version: str) -> str:
    """``version`` as the proxy names it if it is a ``/v2`` release (2.2.0 on); else a
    ConfigError naming the option. Checked before anything is built."""
    v = module_version(version)
    major, minor = v[1:].split(".")[:2]
    if major != "2" or int(minor) < 2:
        raise ConfigError(
            f"nats-server version {version!r}: only 2.2 and newer are modules of "
            f"{SERVER_MODULE}; version={HOSTS_PACKAGE} runs the hosts' {DEBIAN_BINARY}",
            field="version",
        )
    return v


def node_dir(ctx: RunContext, node: str) -> str:
    """Where a node's config, pid file, log and JetStream store (``store/``) live on its host."""
    lab = ctx.hosts[node].extras.get("lab", "hosts")
    return f"{ROOT}/{safe_name(str(lab))}/{safe_name(node)}"


# the monitoring endpoint: pure readings of /jsz ------------------------------------
def jsz(host: str, port: int, timeout: float = 1.0) -> Mapping[str, Any] | None:
    """A server's JetStream report (``/jsz`` with accounts and streams), None if it does not answer."""
    url = f"http://{host}:{port}/jsz?accounts=true&streams=true"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _healthy(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=timeout) as r:
            return bool(json.loads(r.read()).get("status") == "ok")
    except (OSError, ValueError, AttributeError):
        return False


def stream_detail(view: Mapping[str, Any], stream: str = STREAM) -> Mapping[str, Any] | None:
    """This server's own view of ``stream`` from its ``/jsz?accounts=1&streams=1``, if it holds it."""
    for account in view.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            if detail.get("name") == stream:
                return dict(detail)
    return None


def stream_leader(view: Mapping[str, Any], stream: str = STREAM) -> str | None:
    """The stream's Raft leader as this server sees it."""
    detail = stream_detail(view, stream)
    leader = ((detail or {}).get("cluster") or {}).get("leader")
    return leader if isinstance(leader, str) and leader else None


def meta_leader(view: Mapping[str, Any]) -> str | None:
    """The JetStream meta group's leader (which places streams) as this server sees it."""
    leader = (view.get("meta_cluster") or {}).get("leader")
    return leader if isinstance(leader, str) and leader else None


def _streams(view: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Every stream this server holds a replica of, by ``account/name``."""
    out: dict[str, Mapping[str, Any]] = {}
    for account in view.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            out[f"{account.get('name', '?')}/{detail.get('name', '?')}"] = detail
    return out


def _peer_off(peer: Mapping[str, Any]) -> str | None:
    """What keeps a replica, as its leader reports it, from being caught up (None: nothing)."""
    if peer.get("offline"):
        return "offline"
    if not peer.get("current"):
        return "not current"
    if peer.get("lag"):
        return f"lag {peer.get('lag')}"
    return None


def _one(values: Mapping[str, Any]) -> Any:
    distinct = set(values.values())
    return next(iter(distinct)) if len(distinct) == 1 else None


def replicas_converged(views: Mapping[str, Mapping[str, Any] | None]) -> Convergence:
    """One look at the cluster from every server's ``/jsz``: have the replicas caught up?

    Yes when every server answers, all agree on one meta leader and, for every stream, on
    one stream leader, and that leader reports every other replica current (its last Raft
    index at or past the leader's applied index), online, with lag 0 (the leader's commit
    index minus the replica's last index): what nats-server itself offers on this (2.9 to
    2.15 alike). Only the leader's replica list counts (a follower's is not maintained).
    The look also records each replica's own stream state (first, last sequence, message
    count), which is not part of the answer: it shows, beside the leader's word, what
    each one holds.
    """
    off: list[str] = []
    silent = sorted(n for n, v in views.items() if v is None)
    if silent:
        off.append(f"no /jsz answer from {', '.join(silent)}")
    live = {n: v for n, v in views.items() if v is not None}
    metas = {n: meta_leader(v) for n, v in live.items()}
    meta = _one(metas)
    if meta is None:
        off.append(f"no agreed meta leader ({_compact(metas)})")
    seen: dict[str, Any] = {"meta_leader": meta if meta else metas, "streams": {}}
    token: list[Any] = [meta]
    held: dict[str, dict[str, Mapping[str, Any]]] = {}
    for node, view in live.items():
        for name, detail in _streams(view).items():
            held.setdefault(name, {})[node] = detail
    for name in sorted(held):
        holders = held[name]
        leaders = {n: ((d.get("cluster") or {}).get("leader") or None) for n, d in holders.items()}
        states = {
            n: [
                (d.get("state") or {}).get("first_seq"),
                (d.get("state") or {}).get("last_seq"),
                (d.get("state") or {}).get("messages"),
            ]
            for n, d in sorted(holders.items())
        }
        leader = _one(leaders)
        entry: dict[str, Any] = {"leader": leader or leaders, "state": states}
        seen["streams"][name] = entry
        token.append((name, leader, tuple(tuple(s) for s in states.values())))
        if leader is None or leader not in holders:
            off.append(f"{name}: no agreed leader ({_compact(leaders)})")
            continue
        peers = (holders[leader].get("cluster") or {}).get("replicas") or []
        replicas: dict[str, Any] = {}
        for p in peers:
            pname = str(p.get("name"))
            replicas[pname] = {
                "current": bool(p.get("current")),
                "lag": int(p.get("lag") or 0),
                **({"offline": True} if p.get("offline") else {}),
            }
            why = _peer_off(p)
            if why:
                off.append(f"{name}: {pname} {why}")
        entry["replicas"] = replicas
        missing = sorted(set(holders) - {leader} - set(replicas))
        if missing:
            off.append(f"{name}: the leader does not list {', '.join(missing)}")
    return Convergence(not off, seen, token=tuple(token), why="; ".join(off) or None)


def _compact(by_node: Mapping[str, Any]) -> str:
    return ", ".join(f"{n}: {v}" for n, v in sorted(by_node.items()))


# the DB ---------------------------------------------------------------------------
class NatsDB(PidfileDaemonDB):
    """Killable, Pausable, HasPrimaries, HasLogFiles, WaitsReady, Addressable, Converges,
    HasFootprint, ResolvesArtifacts, HasDefaultWorkload (``nats-stream``)."""

    def __init__(
        self,
        *,
        client_port: int = 4222,
        cluster_port: int = 6222,
        monitor_port: int = 8222,
        ready_timeout: float = 90.0,
        version: str | None = None,
        leave_running: bool = False,
    ) -> None:
        if version is not None and version != HOSTS_PACKAGE:
            buildable(version)
        self.root = ROOT
        self.client_port, self.cluster_port = client_port, cluster_port
        self.monitor_port, self.ready_timeout = monitor_port, ready_timeout
        self.version = version
        """None: :data:`NEWEST` built (Debian's binary if it cannot be); ``debian``: the
        hosts' :data:`DEBIAN_BINARY`; else that release built from the module proxy."""
        self.leave_running = leave_running
        self._lock = threading.Lock()
        self._resolved = False
        self._program: GoProgram | None = None
        self._fallback: str | None = None
        self._bins: dict[str, str] = {}

    def workload_defaults(self, workload: str) -> dict[str, Any]:
        """``-w watch`` subscribes with this system's own client (nats)."""
        return {"client": "nats"} if workload == "watch" else {}

    def default_workload(self) -> WorkloadChoice:
        """Acked publishes to one replicated stream, read back and, after the heal, read
        from every replica's files: the plugin ``examples/nats`` (it needs nats-py)."""
        from harness.core import plugins

        if WORKLOAD not in plugins.names("workload"):
            raise ConfigError(
                f"db nats runs the workload {WORKLOAD}, which is not installed: {PLUGIN_HINT}",
                field="workload",
            )
        return WorkloadChoice(name=WORKLOAD)

    # the build (ResolvesArtifacts) --------------------------------------------
    def resolve_artifacts(self) -> dict[str, Any]:
        """nats-server built at ``version`` (default :data:`NEWEST`) from the module proxy,
        or Debian's binary for ``version=debian`` and when the default cannot be built."""
        program = self._resolve()
        if program is None:
            out: dict[str, Any] = {
                "program": "nats-server",
                "source": "the hosts' package (Debian's nats-server)",
                "binary": DEBIAN_BINARY,
                "version": HOSTS_PACKAGE,
            }
            if self._fallback:
                out["fallback"] = self._fallback
            return out
        return {**program.manifest(), "version": program.properties[SERVER_MODULE]}

    def _resolve(self) -> GoProgram | None:
        with self._lock:
            if self._resolved:
                return self._program
            self._resolved = True
            if self.version == HOSTS_PACKAGE:
                return None
            try:
                self._program = build_nats(self.version or NEWEST)
            except (ConfigError, LabError) as e:
                if self.version is not None or not Path(DEBIAN_BINARY).exists():
                    raise
                self._fallback = f"nats-server {NEWEST} could not be built: {e}"
                log.warning("%s; running Debian's %s", self._fallback, DEBIAN_BINARY)
            return self._program

    # layout (HasFootprint) ------------------------------------------------------
    def node_dir(self, ctx: RunContext, node: str) -> str:
        return node_dir(ctx, node)

    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {
            "dir": d,
            "conf": f"{d}/nats.conf",
            "pid": f"{d}/pid",
            "log": f"{d}/nats.log",
            "store": f"{d}/store",
        }

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        return [self.client_port, self.cluster_port, self.monitor_port]

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {
            "client": {n: (ctx.hosts[n].address, self.client_port) for n in ctx.nodes},
            "monitor": {n: (ctx.hosts[n].address, self.monitor_port) for n in ctx.nodes},
        }

    def config(self, ctx: RunContext, node: str) -> str:
        """The server's config: its name is the node's, routes go to every other host."""
        addr, p = ctx.hosts[node].address, self._paths(ctx, node)
        routes = ", ".join(
            f'"nats-route://{ctx.hosts[n].address}:{self.cluster_port}"'
            for n in ctx.nodes
            if n != node
        )
        return (
            f'server_name: "{node}"\n'
            f'listen: "{addr}:{self.client_port}"\n'
            f'http: "{addr}:{self.monitor_port}"\n'
            "jetstream {\n"
            f'  store_dir: "{p["store"]}"\n'
            "  max_memory_store: 64MB\n"
            "  max_file_store: 1GB\n"
            "}\n"
            "cluster {\n"
            f'  name: "{CLUSTER}"\n'
            f'  listen: "{addr}:{self.cluster_port}"\n'
            # Clients stay on the server they were given, so a fault on it reaches them.
            "  no_advertise: true\n"
            f"  routes: [{routes}]\n"
            "}\n"
        )

    # lifecycle ----------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        """Stop and wipe leftovers, write the config, start the server."""
        self._stop_and_wipe(ctx, node)
        remote, p = ctx.remotes[node], self._paths(ctx, node)
        program = self._resolve()
        if program is not None:
            lib = program.install(remote, f"{ROOT}/bin")
            self._bins[node] = program.binary("nats-server", lib)
        elif not remote.run(f"test -x {DEBIAN_BINARY}", check=False).ok:
            raise ConfigError(
                f"{DEBIAN_BINARY} is missing on {node}: apt-get install nats-server",
                field="version",
            )
        remote.run(f"mkdir -p {shlex.quote(p['store'])}")
        remote.run(f"cat > {shlex.quote(p['conf'])}", stdin=self.config(ctx, node))
        self.start(ctx, node)

    def start(self, ctx: RunContext, node: str) -> None:
        # Left under the lab's libfaketime: nats-server runs, but Go reads the clock
        # through the vDSO, not libc, so the faked offset never reaches it.
        remote, p = ctx.remotes[node], self._paths(ctx, node)
        if remote.daemon_running(p["pid"]):
            return
        binary = self._bins.get(node, DEBIAN_BINARY)
        remote.start_daemon(
            f"{shlex.quote(binary)} -c {shlex.quote(p['conf'])}",
            pidfile=p["pid"],
            logfile=p["log"],
            chdir=p["dir"],
        )

    def _stop_and_wipe(self, ctx: RunContext, node: str) -> None:
        remote, p = ctx.remotes[node], self._paths(ctx, node)
        stop_process(remote, p["pid"], "nats-server")
        # A lazy fs the disk faults mounted on it stays: then only its contents go.
        d = shlex.quote(p["dir"])
        remote.run(f"rm -rf {d} 2>/dev/null || find {d} -mindepth 1 -delete")

    def teardown(self, ctx: RunContext, node: str) -> None:
        if self.leave_running:
            log.info("%s: leaving nats-server running in %s", node, self.node_dir(ctx, node))
            return
        self._stop_and_wipe(ctx, node)

    def kill(self, ctx: RunContext, node: str) -> None:
        """SIGKILL, then wait (up to 10 s) until the process is gone."""
        remote, pid = ctx.remotes[node], self._paths(ctx, node)["pid"]
        remote.signal_daemon(pid, "KILL")
        deadline = time.monotonic() + 10
        while remote.daemon_running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def primaries(self, ctx: RunContext) -> list[str]:
        """Servers that call themselves the stream's leader (the meta leader before the
        stream exists)."""
        views = map_values(
            {n: ctx.hosts[n].address for n in ctx.nodes},
            lambda a: jsz(a, self.monitor_port),
            what="jsz",
        )
        leaders = [n for n, v in views.items() if v is not None and stream_leader(v) == n]
        if leaders:
            return leaders
        return [n for n, v in views.items() if v is not None and meta_leader(v) == n]

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        p = self._paths(ctx, node)
        return [p["log"], p["conf"]]

    def wait_ready(self, ctx: RunContext) -> None:
        """Every server is healthy and knows the JetStream meta leader (the cluster formed)."""
        deadline = time.monotonic() + self.ready_timeout
        waiting = list(ctx.nodes)
        while waiting:
            waiting = [n for n in waiting if not self._ready(ctx.hosts[n].address)]
            if not waiting:
                return
            dead = [
                n for n in waiting if not ctx.remotes[n].daemon_running(self._paths(ctx, n)["pid"])
            ]
            if dead or time.monotonic() > deadline:
                n = (dead or waiting)[0]
                tail = (
                    ctx.remotes[n]
                    .run(f"tail -n 5 {shlex.quote(self._paths(ctx, n)['log'])}", check=False)
                    .stdout.strip()
                )
                why = (
                    "exited" if dead else f"joined no JetStream cluster in {self.ready_timeout:g} s"
                )
                raise RemoteError(
                    f"nats-server on {', '.join(dead or waiting)} {why}: {tail or 'no output'}",
                    host=n,
                )
            time.sleep(0.3)

    def wait_converged(self, ctx: RunContext, deadline: float) -> ConvergenceReport:
        """Every stream's leader reports every replica current with lag 0, twice in a row.

        Two looks 0.5 s apart with the same leaders and stream states: one look can catch
        a replica that calls itself current just before it hears of the next entry.
        """

        def look() -> Convergence:
            return replicas_converged(
                {n: jsz(ctx.hosts[n].address, self.monitor_port) for n in ctx.nodes}
            )

        return poll_converged(look, deadline, stable=2, interval=0.5)

    def _ready(self, address: str) -> bool:
        view = jsz(address, self.monitor_port)
        return (
            view is not None
            and meta_leader(view) is not None
            and _healthy(address, self.monitor_port)
        )


@dataclass(frozen=True)
class NatsOptions:
    """``--db nats``'s options (the defaults are :class:`NatsDB`'s)."""

    version: str | None = option(
        None,
        "a nats-server release (2.2 or newer) built from the Go module proxy and cached, or "
        f"'{HOSTS_PACKAGE}' for the hosts' {DEBIAN_BINARY} (Debian 12: 2.9.10) "
        f"(default: the newest, {NEWEST})",
    )
    client_port: int = option(4222, "client port", minimum=1, maximum=65535)
    cluster_port: int = option(6222, "route (cluster) port", minimum=1, maximum=65535)
    monitor_port: int = option(8222, "monitoring (HTTP) port", minimum=1, maximum=65535)
    ready_timeout: float = option(
        90.0, "seconds for every server to join the JetStream cluster", minimum=0
    )
    leave_running: bool = option(
        False, "leave the servers running after the test (set by --leave-db-running)"
    )


@declares_options(NatsOptions)
def factory(options: NatsOptions | Mapping[str, Any]) -> NatsDB:
    """``--db nats``."""
    return NatsDB(**asdict(as_options(NatsOptions, options, role="db nats")))
