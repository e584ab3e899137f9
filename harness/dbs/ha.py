"""The reference node in mode ``ha`` (RocketMQ classic master/slave) as a database under test.

Chosen with ``--db dledger --db-option mode=ha [--db-option sync=true]``. Install,
start, kill and teardown are DLedgerDB's; what differs is the command line (one
master, the others its slaves), what "ready" means (the master sees every slave),
who the primary is (the node whose role is ``master``), and two operator actions
the failover nemesis needs: reading every node's status, and turning a dead old
master into an empty slave of the new one (classic HA cannot truncate its tail).
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from typing import TYPE_CHECKING, Any

from harness.core.db import WorkloadChoice
from harness.core.errors import ConfigError, RemoteError
from harness.core.fanout import map_values
from harness.dbs.dledger import DLedgerDB, _fetch_status

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["HADB"]

log = logging.getLogger(__name__)


def _as_bool(v: Any, name: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false", "yes", "no", "on", "off"):
        return v.lower() in ("true", "yes", "on")
    raise ConfigError(f"db option {name} must be true or false, got {v!r}", field=name)


class HADB(DLedgerDB):
    """``node_impl --mode ha``: master ``master`` (default: the first node), slaves the rest."""

    reconfigurable = False
    """Mode ha has a fixed master and slaves: no membership changes (docs/membership.md)."""
    read_modes = ()
    """Mode ha reads from its master's log: no read modes to cover."""

    def default_workload(self) -> WorkloadChoice:
        """Mode ha has no election and no kv: its log, appended and read back."""
        return WorkloadChoice(name="append", concurrency=5, rate=50.0)

    def __init__(
        self,
        *,
        mode: str = "ha",
        sync: Any = False,
        master: str | None = None,
        slave_timeout_ms: int | None = None,
        **options: Any,
    ) -> None:
        if mode != "ha":
            raise ConfigError(f"HADB runs mode ha, got mode={mode!r}", field="mode")
        super().__init__(**options)
        self.sync = _as_bool(sync, "sync")
        self.master = master
        if slave_timeout_ms is not None and (
            not isinstance(slave_timeout_ms, int) or slave_timeout_ms <= 0
        ):
            raise ConfigError(
                f"slave_timeout_ms must be a positive int, got {slave_timeout_ms!r}",
                field="slave_timeout_ms",
            )
        self.slave_timeout_ms = slave_timeout_ms

    def initial_master(self, ctx: RunContext) -> str:
        m = self.master or ctx.nodes[0]
        if m not in ctx.nodes:
            raise ConfigError(
                f"db option master={m!r} is not a node ({', '.join(ctx.nodes)})", field="master"
            )
        return m

    def _command(self, ctx: RunContext, node: str, python: str) -> str:
        args = ["--mode", "ha", "--ha-master", self.initial_master(ctx)]
        if self.sync:
            args.append("--ha-sync")
        if self.slave_timeout_ms:
            args += ["--ha-slave-timeout-ms", str(self.slave_timeout_ms)]
        return super()._command(ctx, node, python) + " " + " ".join(map(shlex.quote, args))

    def _await_leader(self, ctx: RunContext, node: str) -> None:
        host, port = self.client_addrs(ctx)[node]
        pid = self._paths(ctx, node)["pid"]
        remote = ctx.remotes[node]
        wait = self.leader_wait(ctx)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            st = _fetch_status(host, port, 1.0)
            if st is not None and st.get("role") in ("master", "slave"):
                log.info(
                    "%s: up as %s of %s, epoch %s",
                    node,
                    st.get("role"),
                    st.get("leader"),
                    st.get("term"),
                )
                return
            if st is None and not remote.daemon_running(pid):
                raise RemoteError("node process exited during startup", host=remote.host.name)
            time.sleep(0.2)
        raise RemoteError(f"no status after {wait:g} s", host=remote.host.name)

    def statuses(self, ctx: RunContext, timeout: float = 2.0) -> dict[str, dict | None]:
        """Every node's status (None: not answering), asked in parallel."""
        addrs = self.client_addrs(ctx)
        return map_values(addrs, lambda a: _fetch_status(a[0], a[1], timeout), what="status")

    def wait_ready(self, ctx: RunContext, *, settle: float = 0.5) -> None:
        """Wait until the master has every slave connected (a warning if it never does)."""
        m = self.initial_master(ctx)
        host, port = self.client_addrs(ctx)[m]
        want = len(ctx.nodes) - 1
        wait = self.leader_wait(ctx)
        deadline = time.monotonic() + wait
        st: dict | None = None
        while time.monotonic() < deadline:
            st = _fetch_status(host, port, 1.0)
            if st is not None and st.get("role") == "master" and st.get("slaves", 0) >= want:
                log.info("ha group ready: master %s with %d slaves (sync=%s)", m, want, self.sync)
                time.sleep(settle)
                return
            time.sleep(0.1)
        log.warning(
            "master %s did not see %d slaves within %gs (last status: %s)",
            m,
            want,
            wait,
            st,
        )

    def primaries(self, ctx: RunContext) -> list[str]:
        return [n for n, st in self.statuses(ctx).items() if st and st.get("role") == "master"]

    # FailsOver: the operator's hands for the failover fault -----------------------------
    def _call(self, ctx: RunContext, node: str, msg: dict[str, Any], timeout: float = 5.0) -> dict:
        from node_impl.client import NodeClient

        host, port = self.client_addrs(ctx)[node]
        with NodeClient(host, port, timeout=timeout) as c:
            answer: dict = c.call(msg, timeout)
        return answer

    def promote(self, ctx: RunContext, node: str, epoch: int) -> None:
        """``ha-promote``: ``node`` becomes the master of ``epoch``."""
        r = self._call(ctx, node, {"type": "ha-promote", "epoch": epoch})
        if r.get("code") != "SUCCESS":
            raise RemoteError(
                f"ha-promote: {r.get('code')} {r.get('error') or ''}".strip(), host=node
            )

    def follow(self, ctx: RunContext, node: str, master: str, epoch: int) -> bool:
        """``ha-follow``: ``node`` replicates from ``master`` (False: it refused)."""
        r = self._call(ctx, node, {"type": "ha-follow", "master": master, "epoch": epoch})
        return r.get("code") == "SUCCESS"

    def reset_as_slave(self, ctx: RunContext, node: str, master: str, epoch: int) -> None:
        """Empty ``node``'s data dir and point it at ``master`` (the operator's rejoin)."""
        remote = ctx.remotes[node]
        data = self._paths(ctx, node)["data"]
        term = json.dumps({"term": epoch, "votedFor": master})
        remote.run(
            f"rm -rf {shlex.quote(data)} && mkdir -p {shlex.quote(data)} && "
            f"printf '%s' {shlex.quote(term)} > {shlex.quote(data + '/term.json')}"
        )
