"""The DB: one ``nats-server`` per node, JetStream clustered over routes between the hosts.

No init system runs on the hosts, so the plugin writes each server's config and
starts Debian's binary itself over SSH. Each node keeps its JetStream store in
its own directory, so a killed server restarts with what it had written.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Mapping
from typing import Any

from harness.api import ConfigError, ConvergenceReport, RunContext, poll_converged

from .mapping import meta_leader, replicas_converged, stream_leader

__all__ = ["NatsServer", "jsz", "node_dir"]

BINARY = "/usr/sbin/nats-server"
CLUSTER = "splitbrain"


def jsz(host: str, port: int, timeout: float = 1.0) -> Mapping[str, Any] | None:
    """A server's JetStream report (``/jsz`` with accounts and streams), None if it does not answer."""
    url = f"http://{host}:{port}/jsz?accounts=true&streams=true"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            data = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def node_dir(ctx: RunContext, node: str) -> str:
    """Where a node's config, pid file, log and JetStream store (``store/``) live on its host."""
    return f"/srv/splitbrain-nats/{ctx.hosts[node].extras.get('lab', 'hosts')}/{node}"


def _healthy(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=timeout) as r:
            return json.loads(r.read()).get("status") == "ok"
    except (OSError, ValueError, AttributeError):
        return False


class NatsServer:
    """Killable, Pausable, HasPrimaries, HasLogFiles, WaitsReady, Addressable, Converges."""

    def __init__(
        self,
        client_port: int = 4222,
        cluster_port: int = 6222,
        monitor_port: int = 8222,
        ready_timeout: int = 90,
        **_: Any,
    ) -> None:
        for name, v in (
            ("client_port", client_port),
            ("cluster_port", cluster_port),
            ("monitor_port", monitor_port),
            ("ready_timeout", ready_timeout),
        ):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"a positive integer, not {v!r}", field=name)
        self.client_port, self.cluster_port = client_port, cluster_port
        self.monitor_port, self.ready_timeout = monitor_port, ready_timeout

    def _dir(self, ctx: RunContext, node: str) -> str:
        return node_dir(ctx, node)

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {
            "client": {n: (ctx.hosts[n].address, self.client_port) for n in ctx.nodes},
            "monitor": {n: (ctx.hosts[n].address, self.monitor_port) for n in ctx.nodes},
        }

    def config(self, ctx: RunContext, node: str) -> str:
        """The server's config: its name is the node's, routes go to every other host."""
        addr, d = ctx.hosts[node].address, self._dir(ctx, node)
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
            f'  store_dir: "{d}/store"\n'
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

    def setup(self, ctx: RunContext, node: str) -> None:
        """Stop and wipe leftovers, write the config, start the server."""
        self.teardown(ctx, node)
        d, remote = self._dir(ctx, node), ctx.remotes[node]
        if not remote.run(f"test -x {BINARY}", check=False).ok:
            raise ConfigError(
                f"{BINARY} is missing on {node}: apt-get install nats-server", field="db"
            )
        remote.run(f"mkdir -p {d}/store")
        remote.run(f"cat > {d}/nats.conf", stdin=self.config(ctx, node))
        self.start(ctx, node)

    def start(self, ctx: RunContext, node: str) -> None:
        # Left under the lab's libfaketime: nats-server runs, but Go reads the clock
        # through the vDSO, not libc, so the faked offset never reaches it.
        d = self._dir(ctx, node)
        ctx.remotes[node].start_daemon(
            f"{BINARY} -c {d}/nats.conf", pidfile=f"{d}/pid", logfile=f"{d}/nats.log", chdir=d
        )

    def teardown(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].stop_daemon(f"{self._dir(ctx, node)}/pid")
        ctx.remotes[node].run(f"rm -rf {self._dir(ctx, node)}")

    def kill(self, ctx: RunContext, node: str) -> None:
        pidfile = f"{self._dir(ctx, node)}/pid"
        ctx.remotes[node].signal_daemon(pidfile, "KILL")
        deadline = time.monotonic() + 10
        while ctx.remotes[node].daemon_running(pidfile) and time.monotonic() < deadline:
            time.sleep(0.05)

    def pause(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(f"{self._dir(ctx, node)}/pid", "STOP")

    def resume(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(f"{self._dir(ctx, node)}/pid", "CONT")

    def primaries(self, ctx: RunContext) -> list[str]:
        """Nodes that call themselves the stream's leader (the meta leader before the stream exists)."""
        views = {n: jsz(ctx.hosts[n].address, self.monitor_port) for n in ctx.nodes}
        leaders = [n for n, v in views.items() if v is not None and stream_leader(v) == n]
        if leaders:
            return leaders
        return [n for n, v in views.items() if v is not None and meta_leader(v) == n]

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        return [f"{self._dir(ctx, node)}/nats.log", f"{self._dir(ctx, node)}/nats.conf"]

    def wait_ready(self, ctx: RunContext) -> None:
        """Every server is healthy and knows the JetStream meta leader (the cluster has formed)."""
        deadline = time.monotonic() + self.ready_timeout
        waiting = list(ctx.nodes)
        while waiting:
            waiting = [n for n in waiting if not self._ready(ctx.hosts[n].address)]
            if waiting and time.monotonic() > deadline:
                raise ConfigError(
                    f"nats-server on {', '.join(waiting)} never joined a JetStream cluster "
                    "(see nodes/<node>/nats.log)",
                    field="db",
                )
            time.sleep(0.3)

    def wait_converged(self, ctx: RunContext, deadline: float) -> ConvergenceReport:
        """Every stream's leader reports every replica current with lag 0, twice in a row.

        Two looks 0.5 s apart with the same leaders and stream states: one look can catch
        a replica that calls itself current just before it hears of the next entry.
        """

        def look() -> Any:
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
