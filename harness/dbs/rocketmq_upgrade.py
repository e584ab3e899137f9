"""A RocketMQ master/slave group that the ``upgrade`` fault switches, one broker at a time, to
the DLedger commitlog (``--db rocketmq --db-option mode=master-slave --db-option
upgrade_to=dledger --nemesis upgrade``).

RocketMQ's own procedure (docs/en/dledger/deploy_guide.md, "Upgrade old cluster"): stop the
brokers, make sure the old commitlogs are the same on every broker of the group, set
``enableDLegerCommitLog=true``, ``dLegerGroup``, ``dLegerPeers`` and ``dLegerSelfId``, start
them again. ``DLedgerCommitLog`` keeps the old commitlog readable: on its first start it
recovers the old files, seals the last one with a blank record and begins the DLedger files
at the *divided commitlog offset*, the end of that last old file
(``dividedCommitlogOffset = fileFromOffset + fileSize``, logged by the store), so every
physical offset after the switch is past every old one. A follower's DLedger files must
begin where its leader's do, and every broker re-dispatches the old messages into its own
consume queues, so every broker must hold the same old commitlog.

Done here under load, one broker per ``start-upgrade`` (nemesis/upgrade.py decides which):

1. the seal: RocketMQ's ``updateBrokerConfig brokerPermission=4`` on the master (sent by
   the gateway, UPDATE_BROKER_CONFIG). A read-only broker refuses sends naming a queue only
   for an *order* topic (``AbstractSendMessageProcessor.msgCheck``), so this DB makes the
   test's topic an order topic (created with ``order=true``, and put in the name server's
   ``ORDER_TOPIC_CONFIG``, which 4.x needs: its admin topic creation drops the flag and its
   brokers take it from the name server at their next registration); once the broker says
   both (``brokerPermission`` 4, the topic ordered), the master answers ``NO_PERMISSION`` (a
   fail: nothing written) and its commitlog stops growing;
2. a slave is switched once its ``commitLogMaxOffset`` equals the sealed master's; the master
   goes last. Switching: clean stop (SIGTERM: the broker's shutdown hook flushes and removes
   the abort file), ``broker.conf`` rewritten for DLedger (peers: every broker of the group,
   ``dLegerSelfId`` by its place), start, and the store's ``dividedCommitlogOffset=`` line;
3. with four brokers the DLedger group elects once three are switched; until then no send
   is taken (the sealed master refuses, DLedger has no quorum): the outage the procedure
   allows. The last switch, the old master, joins the elected group as a follower.

The name servers have nothing to switch and count as upgraded from the start.
"""

from __future__ import annotations

import logging
import re
import shlex
import time
from typing import TYPE_CHECKING, Any

from harness.core.errors import NemesisError, RemoteError
from harness.core.fanout import map_values
from harness.dbs.gateway import gateway_status
from harness.dbs.rocketmq import RocketMQDB, _int

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["RocketMQUpgradeDB", "divided_offset"]

log = logging.getLogger(__name__)

SEAL_WAIT_S = 30.0
"""How long the seal waits for the broker to say it is read-only and the topic is ordered
(a 4.x broker takes the order-topic configuration at its next registration, 10 s here)."""
SEAL_SETTLE_S = 1.0
"""After the broker took the seal: a send past its permission check is in the commitlog."""

_DIVIDED = re.compile(r"dividedCommitlogOffset=(\d+)")


def divided_offset(store_log: str) -> int | None:
    """The last ``dividedCommitlogOffset=N`` DLedgerCommitLog logged (its first start after
    the switch), or None."""
    found = _DIVIDED.findall(store_log)
    return int(found[-1]) if found else None


def _seal_holds(status: dict[str, Any]) -> bool:
    """The broker is read-only and holds the test's topic as an order topic: only then does
    it refuse sends naming a queue (``AbstractSendMessageProcessor.msgCheck``)."""
    return status.get("broker_permission") == "4" and status.get("order_topic") is True


class RocketMQUpgradeDB(RocketMQDB):
    """Mode master-slave at setup; brokers in :attr:`switched` run the DLedger commitlog from
    then on (every start, a kill's restart included: their ``broker.conf`` says so)."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.switched: set[str] = set()
        self.sealed: set[str] = set()

    # the mode of each node ------------------------------------------------------------
    def runs_dledger(self, ctx: RunContext, node: str) -> bool:
        return node in self.switched

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        """A broker's ports in either mode (HA port before, DLedger port after)."""
        if self.layout(ctx)[node] == "namesrv":
            return super().ports(ctx, node)
        p = self.options.broker_port
        return [p, p + 1, p + 2]

    @property
    def elected(self) -> bool:
        """Once a broker runs DLedger, the master is whom the name server routes as id 0."""
        return bool(self.switched)

    def gateway_command(self, ctx: RunContext) -> list[str]:
        """The test's topic is an order topic, so the seal stops sends (module docstring)."""
        return [*super().gateway_command(ctx), "--order-topic", "true"]

    def resolve_artifacts(self) -> dict[str, Any]:
        return {**super().resolve_artifacts(), "upgrade_to": self.options.upgrade_to}

    def setup(self, ctx: RunContext, node: str) -> None:
        with self._lock:  # a DB reused by a later test starts it in master/slave again
            self.switched.discard(node)
            self.sealed.discard(node)
        super().setup(ctx, node)

    # the operator's hands (harness.core.db.Upgradable) --------------------------------
    def configured_master(self, ctx: RunContext) -> str:
        return next(n for n, r in self.layout(ctx).items() if r == "master")

    def upgraded(self, ctx: RunContext) -> frozenset[str]:
        """The switched brokers, and the name servers (nothing to switch)."""
        with self._lock:
            done = set(self.switched)
        return frozenset(done | {n for n, r in self.layout(ctx).items() if r == "namesrv"})

    def statuses(self, ctx: RunContext) -> dict[str, dict | None]:
        """Each broker as nemesis/upgrade.py reads it: ``mode`` ``ha`` (classic) or ``broker``
        (DLedger), ``role``, ``offset`` (RocketMQ's ``commitLogMaxOffset``), ``sealed`` (the
        broker's own brokerPermission is 4), ``leader`` (a slave's master); None when the
        broker does not answer."""
        addrs = self.addresses(ctx)["client"]
        lay = self.layout(ctx)
        master = self.configured_master(ctx)
        brokers = [n for n, r in lay.items() if r != "namesrv"]
        sts = map_values(
            {n: addrs[n] for n in brokers},
            lambda a: gateway_status(a, 3.0),
            what="rocketmq status",
        )
        out: dict[str, dict | None] = {
            n: {"mode": "namesrv"} for n, r in lay.items() if r == "namesrv"
        }
        for n in brokers:
            st = sts.get(n)
            offset = _int(((st or {}).get("runtime") or {}).get("commitLogMaxOffset"))
            if st is None or offset is None:
                out[n] = None
                continue
            switched = n in self.switched
            out[n] = {
                "mode": "broker" if switched else "ha",
                "role": "master" if n == master and not switched else "slave",
                "offset": offset,
                "sealed": n in self.sealed and _seal_holds(st),
                "leader": master,
            }
        return out

    def seal(self, ctx: RunContext, node: str) -> None:
        """brokerPermission=4 on the master (through the gateway); the broker then refuses
        every send to the test's order topic with NO_PERMISSION."""
        from node_impl.client import NodeClient

        host, port = self.addresses(ctx)["client"][node]
        with NodeClient(host, port, timeout=10.0) as c:
            r = c.call({"type": "seal"}, 10.0)
        if r.get("code") != "SUCCESS":
            raise NemesisError(f"{node}: seal answered {r.get('code')} {r.get('error') or ''}")
        deadline = time.monotonic() + SEAL_WAIT_S
        st = gateway_status((host, port), 3.0) or {}
        while not _seal_holds(st):
            if time.monotonic() >= deadline:
                raise NemesisError(
                    f"{node}: not sealed {SEAL_WAIT_S:g} s after brokerPermission=4 "
                    f"(brokerPermission {st.get('broker_permission')}, order topic "
                    f"{st.get('order_topic')})"
                )
            time.sleep(0.5)
            st = gateway_status((host, port), 3.0) or {}
        time.sleep(SEAL_SETTLE_S)
        with self._lock:
            self.sealed.add(node)
        log.info("upgrade: %s sealed (brokerPermission=4)", node)

    def switch(self, ctx: RunContext, node: str) -> int:
        """Stop ``node``'s broker cleanly, start it on the DLedger commitlog; the divided
        commitlog offset its store logged.

        The node counts as switched *before* it is stopped, and its ``broker.conf`` is
        rewritten before it starts: whatever happens next (a kill, a restart), it starts on
        DLedger (roll forward, as docs/broker-mode.md B5a decides for the reference node).
        """
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        q = shlex.quote
        store_log = f"{p['logs']}/store.log"
        with self._lock:
            self.switched.add(node)
        remote.signal_daemon(p["pid"], "CONT")  # a stopped process never handles TERM
        remote.stop_daemon(p["pid"], timeout=60)
        if remote.daemon_running(p["pid"]):
            raise RemoteError(f"{node} did not stop cleanly for its upgrade", host=remote.host.name)
        before = remote.run(f"cat {q(store_log)} 2>/dev/null | wc -c", check=False).stdout.strip()
        skip = int(before) if before.isdigit() else 0
        remote.run(f"cat > {q(p['conf'])}", stdin=self._conf(ctx, node))
        self.start(ctx, node)
        deadline = time.monotonic() + self.options.switch_timeout
        while time.monotonic() < deadline:
            text = remote.run(
                f"tail -c +{skip + 1} {q(store_log)} 2>/dev/null | grep -o 'dividedCommitlogOffset=[0-9]*'",
                check=False,
            ).stdout
            d = divided_offset(text)
            if d is not None:
                log.info("%s: on the DLedger commitlog, divided offset %d", node, d)
                return d
            if not remote.daemon_running(p["pid"]):
                tail = remote.run(f"tail -n 5 {q(p['stdout'])}", check=False).stdout.strip()
                raise RemoteError(
                    f"{node} exited starting on DLedger: {tail}", host=remote.host.name
                )
            time.sleep(1.0)
        raise RemoteError(
            f"{node}: no dividedCommitlogOffset in store.log {self.options.switch_timeout:g} s "
            "after the switch",
            host=remote.host.name,
        )
