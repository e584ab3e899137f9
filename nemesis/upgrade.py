"""The rolling upgrade from mode ``ha`` to mode ``broker``: one node per step, never undone.

RocketMQ's smooth upgrade to DLedger (docs/broker-mode.md B5a, B5b) is an operator's
procedure, and this nemesis follows it against an :class:`~harness.core.db.Upgradable`
DB while the load runs:

1. The first step seals the old master (brokerPermission read-only): sends fail
   with ``NO_PERMISSION`` from then on, and no old commitlog grows any more.
2. Each step switches one node: a slave once it holds the whole sealed log (its
   ``offset`` equals the master's), the master last, once every other node is a
   broker. Every node therefore keeps the same old commitlog and computes the
   same divided offset. Until two of three nodes are brokers, DLedger has no
   leader and sends fail: the failures the real procedure allows.
3. A step that cannot go ahead (the next slave is cut off, paused or dead and
   behind) waits up to ``wait_s``, then changes nothing and says why.

``start-upgrade`` takes one step; ``stop-upgrade`` ends the step's period and
changes nothing (an upgrade is not undone), except the final heal's
``stop-upgrade {"complete": true}``, which takes every remaining step so each run
ends on a fully upgraded cluster. Each switch is journaled (kind ``upgrade``)
before the node is stopped and cleared once it answers as a broker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.db import Upgradable
from harness.core.errors import NemesisError
from harness.core.fault import Fault, JournalKind, JournalRecord
from nemesis import journal
from nemesis.base import completion, stop_by_pidfile

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from harness.core.history import Op
    from harness.core.remote import Remote
    from harness.core.spec import RunContext

__all__ = ["UpgradeNemesis", "Step", "next_step", "WAIT_S", "POLL_S", "UPGRADE"]

log = logging.getLogger(__name__)

WAIT_S = 15.0
"""How long one step waits for its node to be ready (caught up, answering)."""
POLL_S = 0.2


@dataclass(frozen=True)
class Step:
    """What the upgrade does next: ``seal`` the master, ``switch`` a node, ``wait``, or ``done``."""

    action: str
    node: str | None = None
    why: str = ""


def _master(statuses: Mapping[str, dict | None], remaining: Sequence[str]) -> str | None:
    """The ha master, by its own word or, when it is silent, by its slaves'."""
    for n in remaining:
        st = statuses.get(n)
        if st and st.get("mode") == "ha" and st.get("role") == "master":
            return n
    named = {
        st.get("leader")
        for n in remaining
        if (st := statuses.get(n)) and st.get("mode") == "ha" and st.get("role") == "slave"
    }
    named.discard(None)
    return str(next(iter(named))) if len(named) == 1 else None


def next_step(
    nodes: Sequence[str], upgraded: frozenset[str], statuses: Mapping[str, dict | None]
) -> Step:
    """The next step of the rolling upgrade, from every node's status (pure)."""
    remaining = [n for n in nodes if n not in upgraded]
    if not remaining:
        return Step("done")
    master = _master(statuses, remaining)
    if master is None:
        if len(remaining) == 1 and statuses.get(remaining[0]) is None:
            return Step("wait", remaining[0], "the last node (the old master) does not answer")
        if len(remaining) == 1:
            return Step("switch", remaining[0])
        return Step("wait", None, "no node names the ha master")
    mst = statuses.get(master)
    if mst is None:
        return Step("wait", master, f"the ha master {master} does not answer")
    if not mst.get("sealed"):
        return Step("seal", master)
    slaves = [n for n in remaining if n != master]
    if not slaves:
        return Step("switch", master)
    end = mst.get("offset")
    ready = [
        n
        for n in slaves
        if (st := statuses.get(n)) and st.get("role") == "slave" and st.get("offset") == end
    ]
    if ready:
        return Step("switch", min(ready))
    behind = {n: (statuses.get(n) or {}).get("offset") for n in slaves}
    return Step("wait", None, f"no slave holds the sealed log (master {master} at {end}: {behind})")


class UpgradeNemesis:
    """``start-upgrade`` / ``stop-upgrade`` against an :class:`Upgradable` DB."""

    def __init__(self, *, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s

    def fs(self) -> set[str]:
        return {"start-upgrade", "stop-upgrade"}

    def _db(self, ctx: RunContext) -> Upgradable:
        if not isinstance(ctx.db, Upgradable):
            raise NemesisError(
                "the upgrade fault needs a DB that switches nodes to a new mode "
                "(--db dledger --db-option mode=broker: the cluster then starts in mode ha; "
                "--db rocketmq --db-option mode=master-slave --db-option upgrade_to=dledger); "
                f"{type(ctx.db).__name__} cannot"
            )
        return ctx.db

    def setup(self, ctx: RunContext) -> None:
        self._db(ctx)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        db = self._db(ctx)
        value: dict[str, Any] = dict(op.value or {})
        if op.f == "start-upgrade":
            done, divided, errors = self._steps(ctx, db, 1)
        elif op.f == "stop-upgrade":
            if not value.get("complete"):
                return completion(op, {**value, "nodes": [], "upgraded": sorted(db.upgraded(ctx))})
            done, divided, errors = self._steps(ctx, db, len(ctx.nodes))
        else:
            raise NemesisError(f"upgrade nemesis cannot handle {op.f!r}")
        up = db.upgraded(ctx)
        value.update(
            {
                "nodes": done,
                "divided": divided,
                "upgraded": sorted(up),
                "remaining": [n for n in ctx.nodes if n not in up],
            }
        )
        return completion(op, value, errors)

    def _steps(
        self, ctx: RunContext, db: Upgradable, limit: int
    ) -> tuple[list[str], dict[str, int], dict[str, str]]:
        """Up to ``limit`` switches; each waits at most ``wait_s`` for its node."""
        done: list[str] = []
        divided: dict[str, int] = {}
        errors: dict[str, str] = {}
        while len(done) < limit:
            deadline = time.monotonic() + self.wait_s
            while True:
                step = next_step(ctx.nodes, db.upgraded(ctx), db.statuses(ctx))
                if step.action == "seal" and step.node is not None:
                    log.info("upgrade: sealing the ha master %s (read-only)", step.node)
                    db.seal(ctx, step.node)
                    continue
                if step.action != "wait" or time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
            if step.action == "done":
                break
            if step.action == "wait":
                errors[step.node or "cluster"] = f"nothing switched: {step.why}"
                break
            node = str(step.node)
            journal.note(
                ctx,
                node,
                "upgrade",
                "db",
                {"pidfiles": journal.db_pidfiles(ctx, node)},
                "switching to mode broker",
            )
            try:
                divided[node] = db.switch(ctx, node)
            except Exception as e:  # noqa: BLE001 - the node is a broker from now on anyway
                errors[node] = f"{type(e).__name__}: {e}"
                break
            journal.clear(ctx, node, "upgrade", "db")
            done.append(node)
        return done, divided, errors

    def teardown(self, ctx: RunContext) -> None:
        """Nothing to heal: an upgrade is not undone. A switch that failed half-way left
        its journal entry; its node starts as a broker whatever happens (roll forward)
        and the DB's teardown, next, stops and wipes it, so the entry goes now."""
        db = ctx.db
        if isinstance(db, Upgradable):
            for n in db.upgraded(ctx):
                journal.clear(ctx, n, "upgrade", "db")


def _undo_upgrade(remote: Remote | None, entry: JournalRecord) -> None:
    """A node caught between modes: its process stops here, and the run's db-node entry
    wipes it with the rest of the cluster (a test's cluster never outlives it)."""
    remote = journal.connected(remote, entry)
    for pf in entry.undo.get("pidfiles", []):
        stop_by_pidfile(remote, str(pf))


SWITCHING = JournalKind(
    name="upgrade",
    rank=50,
    undo=_undo_upgrade,
    doc="a node caught mid-switch by the rolling upgrade: stopped",
)

UPGRADE = Fault(
    name="upgrade",
    nemesis=lambda chosen: UpgradeNemesis(),
    heal_rank=100,
    targets="cluster",
    journal=(SWITCHING,),
    heal_value={"complete": True},
    rolling=True,  # one node per start, early in the run (the schedule starts it first)
    colour="#2b9348",
    doc="the rolling upgrade of a mode-ha cluster to mode broker, one node per step",
)
