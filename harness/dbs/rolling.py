"""A mode-``ha`` cluster that the ``upgrade`` fault switches, node by node, to mode ``broker``.

Chosen with ``--db dledger --db-option mode=broker --db-option upgrade_from=ha``,
which ``splitbrain run`` adds by itself when ``upgrade`` is in ``--nemesis``
(:func:`upgrade_options`): the cluster starts as RocketMQ's classic master/slave
(:class:`harness.dbs.ha.HADB`, sync by default), takes load, and each
``start-upgrade`` switches one node to the DLedger broker in place, with its data
(docs/broker-mode.md B5a, B5b). Which node, and when, is the nemesis's business;
this class is the operator's hands: seal the old master, stop a node cleanly,
start it again as a broker, for good.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError, NemesisError, RemoteError
from harness.dbs.dledger import BROKER_WORKLOAD, DLedgerDB, _fetch_status
from harness.dbs.ha import HADB

if TYPE_CHECKING:
    from harness.core.db import WorkloadChoice
    from harness.core.spec import RunContext

__all__ = ["RollingUpgradeDB", "upgrade_options"]

log = logging.getLogger(__name__)


def upgrade_options(db: str, rolling: bool, options: Mapping[str, Any]) -> dict[str, Any]:
    """The DB options of a run: mode broker under a rolling fault (``Fault.rolling``: the
    upgrade) starts in mode ha.

    The fault switches a cluster *to* mode broker, so a broker cluster under it
    must begin as the classic one it is upgraded from.
    """
    out = dict(options)
    if db == "dledger" and out.get("mode") == "broker" and rolling:
        out.setdefault("upgrade_from", "ha")
    return out


class RollingUpgradeDB(HADB):
    """Mode ``ha`` at setup; nodes in :attr:`switched` run mode ``broker`` from then on."""

    def default_workload(self) -> WorkloadChoice:
        """It ends as a broker: producers and consumers see the switch."""
        return BROKER_WORKLOAD

    def __init__(
        self,
        *,
        upgrade_from: str = "ha",
        sync: Any = True,
        switch_timeout: float = 30.0,
        **options: Any,
    ) -> None:
        if upgrade_from != "ha":
            raise ConfigError(
                f"the upgrade to mode broker starts from mode ha, got upgrade_from={upgrade_from!r}",
                field="upgrade_from",
            )
        super().__init__(mode="ha", sync=sync, **options)
        self.switch_timeout = switch_timeout
        self.switched: set[str] = set()

    def setup(self, ctx: RunContext, node: str) -> None:
        with self._lock:  # a DB reused by a later test starts that test in mode ha again
            self.switched.discard(node)
        super().setup(ctx, node)

    def _bug_for(self, ctx: RunContext, node: str) -> str | None:
        """A broker bug only once the node is a broker, an ha bug only before."""
        bug = super()._bug_for(ctx, node)
        if not bug:
            return bug
        return bug if bug.startswith("ha-") != (node in self.switched) else None

    def _command(self, ctx: RunContext, node: str, python: str) -> str:
        if node in self.switched:
            return DLedgerDB._command(self, ctx, node, python) + " --mode broker"
        return super()._command(ctx, node, python)

    def primaries(self, ctx: RunContext) -> list[str]:
        """The ha master (while there is one) and the DLedger leader(s) that say so."""
        return [
            n
            for n, st in self.statuses(ctx).items()
            if st and st.get("role") in ("master", "leader")
        ]

    # the operator's hands (harness.core.db.Upgradable) ---------------------------
    def upgraded(self, ctx: RunContext) -> frozenset[str]:
        with self._lock:
            return frozenset(self.switched)

    def seal(self, ctx: RunContext, node: str) -> None:
        """brokerPermission=read-only on the ha master: from now on the old log only grows on slaves."""
        from node_impl.client import NodeClient

        host, port = self.client_addrs(ctx)[node]
        with NodeClient(host, port, timeout=5.0) as c:
            r = c.call({"type": "ha-seal"}, 5.0)
        if r.get("code") != "SUCCESS":
            raise NemesisError(f"{node}: ha-seal answered {r.get('code')} {r.get('error') or ''}")

    def switch(self, ctx: RunContext, node: str) -> int:
        """Stop ``node`` cleanly, start it in mode broker; its divided commitlog offset.

        The node counts as switched *before* it is stopped: whatever happens next
        (a kill, a harness restart of it), it starts as a broker, whose first start
        completes a half-done move of the old commitlog (roll forward).
        """
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        with self._lock:
            self.switched.add(node)
            self._cmd[node] = self._command(
                ctx, node, self._python.get(node) or self._choose_python(remote)
            )
        remote.signal_daemon(p["pid"], "CONT")  # a stopped process never handles TERM
        remote.stop_daemon(p["pid"], timeout=10)
        if remote.daemon_running(p["pid"]):
            raise RemoteError(f"{node} did not stop cleanly for its upgrade", host=remote.host.name)
        self.start(ctx, node)
        host, port = self.client_addrs(ctx)[node]
        deadline = time.monotonic() + self.switch_timeout
        while time.monotonic() < deadline:
            st = _fetch_status(host, port, 1.0)
            if st is not None and "dividedCommitlogOffset" in st:
                log.info(
                    "%s: upgraded to mode broker, divided offset %s",
                    node,
                    st["dividedCommitlogOffset"],
                )
                return int(st["dividedCommitlogOffset"])
            if st is None and not remote.daemon_running(p["pid"]):
                tail = remote.run(
                    f"tail -n 5 {shlex.quote(p['stdout'])}", check=False
                ).stdout.strip()
                raise RemoteError(
                    f"{node} exited starting in mode broker: {tail}", host=remote.host.name
                )
            time.sleep(0.2)
        raise RemoteError(
            f"{node}: no broker status {self.switch_timeout:g} s after the switch",
            host=remote.host.name,
        )
