"""The watch workload's ZooKeeper client: setData and multi publishes, subscriptions by a
persistent watch and reads, a final synced read of every stream (through the harness's
ZooKeeper gateway, ``splitbrain.zookeeper.Watches``: ZooKeeper's client is Java).

Layout: the workload's stream ``s`` is the znode ``/splitbrain-watch/s``, its value the
znode's UTF-8 data, and a position is the *zxid* of the transaction that wrote it (the
znode's ``mzxid``): one counter for the whole ensemble, so each stream's positions rise
but are not consecutive. Setup makes the root and one empty znode per stream (an empty
znode is no event).

* ``publish``: one event is a ``setData``; several are one ``multi`` of ``setData`` (one
  transaction, applied whole or not at all, every part at one zxid). The position of each
  event is the ``mzxid`` of the stat ZooKeeper returns.
* ``subscribe``: a session of its own to the worker's server, a persistent watch on the
  stream's znode (``AddWatchMode.PERSISTENT``) or a persistent recursive watch on the root
  (several streams or every one; ZooKeeper 3.6+), a read of each watched znode, then one
  read of a znode per notification, for ``watch_s``. ZooKeeper's watch events carry no
  data (a path and a type), so the delivered events are the *reads*: each a state of the
  znode (its data and ``mzxid``, read together). :func:`events_of` turns the reads into
  the history's events (pure, tested without a server).
* ``snapshot``: ``sync``, then each stream's data and ``mzxid``.

What ZooKeeper promises, and so what :data:`PROMISES` declares (ZooKeeper Programmer's
Guide, "ZooKeeper Watches" and "Consistency Guarantees"):

* ``ordered`` (scope ``stream``): a client sees a watch event for a znode before it sees
  the new data, watch events are ordered with respect to other events and responses, and
  a client never sees an older view of the service than one it has seen ("single system
  image"; reads of one session reflect non-decreasing states). So the reads of one znode
  on one session never go back: its ``mzxid`` never falls. The client never sorts or drops
  a lower one (only a read that repeats the last delivered state, and the first reads at
  or before the start, below), so a fall is ZooKeeper's and the checker reports it.
  Across znodes the reads are *not* ordered (a znode read after a notification may carry
  a later write than another znode read after a later notification), so the scope is each
  stream alone.
* ``no_gap``: **not promised**. "Because watches are one time triggers and there is
  latency between getting the event and sending a new request to get a watch you cannot
  reliably see every change that happens to a node"; a persistent watch removes the
  re-arm, but not the read: two writes before the read are one state. And on a reconnect
  a persistent watch is registered again without replaying what changed meanwhile.
* ``no_duplicate``: not declared: one change fires one notification, but the deliveries
  are reads, and a read that repeats the last delivered state (two notifications read
  after both writes) is collapsed here, so a duplicate could only be this client's.
* ``resumable``: **not promised**. Watch events are not replayable from a past zxid; a
  subscription "from" ``R`` reads the present state and drops what is at or before ``R``
  (the client's filter, not a ZooKeeper guarantee).
* ``atomic``: not declared for deliveries. A ``multi`` is atomic *in zxid* (every part at
  one zxid, applied whole), which the publishes' positions show; but each znode is read
  on its own after its notification, so one part may be overwritten before it is read.
* ``monotonic``: not declared: ZooKeeper has no progress notifications.
* ``final_state``: ``sync`` then ``getData`` after the heal and the convergence wait: the
  server has caught up with the leader as of the sync, so an acknowledged or delivered
  write later than the final value is a lost write.

A subscription ends at its session's first disconnection (``ended``): what it read before
was delivered all the same. Outcomes: a publish is ``fail`` when nothing can have been
applied (no connected session, a refused request), ``info`` on a lost connection, a
timeout or any other error. A subscription is ``ok`` with what it read, ``fail`` when its
session or watch was never set up.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.workload import client_timeout
from workloads.addr import client_addr
from workloads.watch import perform

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext
    from node_impl.client import NodeClient
    from workloads.watch import WatchOptions

__all__ = ["PROMISES", "ROOT", "ZkWatchClient", "events_of", "publish_outcome"]

log = logging.getLogger(__name__)

ROOT = "/splitbrain-watch"
"""The znode the gateway keeps the streams under (``Watches.ROOT``)."""
PROMISES: Mapping[str, Any] = {
    "ordered": True,
    "no_gap": False,
    "no_duplicate": False,
    "resumable": False,
    "atomic": False,
    "monotonic": False,
    "final_state": True,
    "scope": "stream",
}
FAIL_CODES = frozenset({"LEADER_NOT_READY", "NONODE", "BADARGUMENTS", "UNSUPPORTED", "NOAUTH"})
"""Gateway codes after which a publish certainly did not happen: no session was connected
(nothing handed to ZooKeeper's client), or ZooKeeper refused it (a multi is refused whole)."""
QUIET_S = 1.0
"""A final subscription stops after this long with no notification."""
CONNECT_S = 1.5
"""How long a subscription waits for its own session to connect."""


def publish_outcome(code: str) -> str:
    """A gateway code as a publish's outcome: ``ok``, ``fail`` (certainly not applied) or
    ``info`` (handed to ZooKeeper, outcome unknown: a lost connection may hide a commit)."""
    if code == "SUCCESS":
        return "ok"
    return "fail" if code in FAIL_CODES else "info"


def events_of(reads: Iterable[Sequence[Any]], start: int) -> tuple[list[dict[str, Any]], int]:
    """The history's events of a subscription from ``start``, from the gateway's reads
    ``[stream, value or None, mzxid, why]`` in the order they were made; and how many reads
    were collapsed (no new state).

    Per stream: a read with no value (an empty or missing znode) is no event; until the
    stream delivered something, a read at or before ``start`` is the state the
    subscription resumes after, not an event; after that, a read at the last delivered
    ``mzxid`` is the same state read again (a notification whose change an earlier read
    already saw). Every other read is delivered as it came, a lower ``mzxid`` included:
    the checker, not this function, judges the order.
    """
    events: list[dict[str, Any]] = []
    last: dict[str, int] = {}
    collapsed = 0
    for row in reads:
        stream, value, zxid = str(row[0]), row[1], int(row[2])
        if value is None:
            continue
        prev = last.get(stream)
        if (prev is None and zxid <= start) or prev == zxid:
            collapsed += 1
            continue
        last[stream] = zxid
        events.append({"stream": stream, "value": str(value), "pos": zxid})
    return events, collapsed


class ZkWatchClient:
    """Sends each op to the worker's node's gateway port; declares ZooKeeper's guarantees."""

    promises: Mapping[str, Any] = PROMISES
    multi_stream = True
    read_fs = frozenset({"subscribe", "snapshot"})

    def __init__(
        self, *, timeout: float | None = None, watch_s: float = 1.0, streams: int = 4
    ) -> None:
        self.timeout = timeout
        self.watch_s = watch_s
        self.streams = streams
        self.node: str | None = None
        self._conn: NodeClient | None = None

    def configure(self, opts: WatchOptions) -> None:
        self.watch_s, self.streams = opts.watch_s, opts.streams

    def open(self, ctx: RunContext, node: str) -> ZkWatchClient:
        from node_impl.client import NodeClient

        c = copy.copy(self)
        c.node = node
        if c.timeout is None:
            c.timeout = client_timeout(ctx)
        host, port = client_addr(ctx, node)
        c._conn = NodeClient(host, port, timeout=c.timeout)
        return c

    def _t(self) -> float:
        return float(self.timeout or 5.0)

    def _call(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self._conn is not None, "open() first"
        return self._conn.call(msg, timeout)

    def setup(self, ctx: RunContext) -> None:
        """The root and the streams' znodes (every worker may: made once, found after).
        One try, not fatal: a publish to a missing znode makes it, and a retry here would
        hold every worker's start while the faults (already playing) keep a server down."""
        names = [f"s{i}" for i in range(self.streams)]
        try:
            reply = self._call({"type": "watch-setup", "streams": names}, self._t())
            why = (
                None
                if reply.get("code") == "SUCCESS"
                else f"{reply.get('code')}: {reply.get('error')}"
            )
        except Exception as e:  # noqa: BLE001 - left to the publishes
            why = f"{type(e).__name__}: {e}"
        if why is not None:
            log.info("zk watch setup on %s: %s (publishes make the znodes)", self.node, why)

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        if self._conn is not None:
            self._conn.close()

    # ops ------------------------------------------------------------------------------
    def invoke(self, ctx: RunContext, op: Op) -> Op:
        calls = {"publish": self._publish, "subscribe": self._subscribe, "snapshot": self._snapshot}
        return perform(op, op.node or self.node, calls)

    def _publish(self, op: Op) -> Op:
        events = [
            {"stream": str(e["stream"]), "value": str(e["value"])}
            for e in (op.value or {}).get("events") or []
        ]
        try:
            reply = self._call({"type": "watch-publish", "events": events}, self._t())
        except ConnectionError as e:
            # refused at connect: nothing was sent; broken mid-request: unknown
            kind = "fail" if "connect failed" in str(e) else "info"
            return op.complete(kind, op.value, error=str(e)[:200])
        except Exception as e:  # noqa: BLE001 - a timeout or a bad frame: unknown
            return op.complete("info", op.value, error=f"{type(e).__name__}: {e}"[:200])
        code = str(reply.get("code"))
        kind = publish_outcome(code)
        if kind != "ok":
            return op.complete(kind, op.value, error=f"{code}: {reply.get('error')}"[:200])
        zxids = reply.get("zxids") or []
        if len(zxids) != len(events):
            return op.complete("info", op.value, error=f"zookeeper: zxids {zxids!r} for {events}")
        return op.complete(
            "ok", {"events": [{**e, "pos": int(z)} for e, z in zip(events, zxids, strict=True)]}
        )

    def _subscribe(self, op: Op) -> Op:
        v = dict(op.value or {})
        final = bool(v.get("final"))
        start = int(v.get("from", 0))
        t = self._t()
        # a subscription must end well within the watchdog's two client timeouts
        watch = 0.5 * t if final else min(self.watch_s, 0.5 * t)
        connect = min(CONNECT_S, 0.25 * t)
        msg = {
            "type": "watch-subscribe",
            "streams": v.get("streams"),
            "watch_ms": int(watch * 1000),
            "connect_ms": int(connect * 1000),
            "final": final,
            "quiet_ms": int(QUIET_S * 1000) if final else 0,
            "sync": final,
        }
        try:
            reply = self._call(msg, min(1.8 * t, watch + connect + 2.5))
        except Exception as e:  # noqa: BLE001 - what the gateway read is lost with the reply
            return op.complete("fail", v, error=f"{type(e).__name__}: {e}"[:200])
        if reply.get("code") != "SUCCESS":
            return op.complete("fail", v, error=f"{reply.get('code')}: {reply.get('error')}"[:200])
        reads = reply.get("reads") or []
        events, collapsed = events_of(reads, start)
        out: dict[str, Any] = {
            "streams": v.get("streams"),
            "from": start,
            "events": events,
            "reads": len(reads),
            "collapsed": collapsed,
            "notifications": int(reply.get("notifications") or 0),
        }
        if reply.get("ended"):
            out["ended"] = str(reply["ended"])
        return op.complete("ok", out)

    def _snapshot(self, op: Op) -> Op:
        t = self._t()
        try:
            reply = self._call({"type": "watch-snapshot", "sync_ms": int(0.6 * t * 1000)}, t)
        except Exception as e:  # noqa: BLE001
            return op.complete("fail", op.value, error=f"{type(e).__name__}: {e}"[:200])
        if reply.get("code") != "SUCCESS":
            return op.complete(
                "fail", op.value, error=f"{reply.get('code')}: {reply.get('error')}"[:200]
            )
        streams = {
            str(s): {"value": str(e["value"]), "pos": int(e["pos"])}
            for s, e in (reply.get("streams") or {}).items()
        }
        return op.complete("ok", {"pos": None, "streams": streams})
