"""The watch workload's Kafka client: acknowledged produces (one record, or one transaction
over several partitions), subscriptions by a consumer assigned to partitions and seeked to
an offset, and a final read of each partition's last committed record, all through the
Kafka DB's client gateway (``splitbrain.kafka.Gateway``: Kafka's own Java clients).

Layout: the workload's stream ``s<i>`` is partition ``i`` of the gateway's topic (``t0``,
``--db-option partitions``, 4 by default: keep ``streams`` at or below it). A position is
the record's offset plus one, per partition (positions are >= 1; a subscription ``from``
position ``R`` reads from offset ``R``, the first record after it).

What Kafka promises, declared in :data:`PROMISES` (the DB narrows them to what its options
promise, :func:`harness.dbs.kafka.subscription_promises`):

* ``ordered``: a partition's records reach a consumer in offset order (Kafka's
  documentation, "Topics and Logs": each partition is an ordered, immutable sequence, and
  a consumer reads it in order by offset).
* ``no_gap``: a consumer seeked to an offset is handed every committed record after it, up
  to what it reached; with ``isolation.level=read_committed`` the records of aborted
  transactions and the transaction markers are skipped (they take offsets but are no
  events of ours; no publish of ours ended ``ok`` with them). ``auto.offset.reset=none``: a
  consumer that fell out of range fails (``ended``) instead of jumping.
* ``no_duplicate``: one consumer hands each offset once (no group, no rebalance, no
  rewind); the idempotent producer writes a retried record once.
* ``resumable``: ``seek(offset)`` then poll gives exactly the records from that offset:
  two values at one position of a partition, or one value at two, are replicas that
  disagree (consumers read the node's own replica, ``client.rack``, KIP-392).
* ``atomic``: a publish of several events is one transaction of a transactional producer
  (KIP-98: all of its records are committed or none; a read_committed consumer sees the
  committed ones only). Kafka does not promise one poll per transaction, so no ``batch``
  is recorded: a subscription to every partition is judged on having delivered the whole
  transaction once it reached past each of its records.
* ``monotonic``: the consumer's position after each poll is recorded as a progress mark of
  its partition (every committed record below it was returned); it never goes back
  within a subscription.
* ``final_state``: each partition's last committed record, read after the heal and the
  convergence wait, once no open transaction holds the last stable offset below the high
  watermark. A transaction still open 25 s after its producer's last write (its timeout,
  10 s, is when Kafka aborts it: ``transaction.timeout.ms``) is *hanging*: the snapshot
  then gives what a read_committed reader can read (``hanging`` names it), so acknowledged
  records it hides are a ``watch-final-mismatch``.
* ``scope``: ``stream``: a partition is its own sequence of offsets.

Outcomes: a publish is ``fail`` when nothing can be visible (refused before it was queued,
``NOT_ENOUGH_REPLICAS``, a transaction aborted before its commit was asked for, the gateway
not reachable), ``info`` on any other error or a timeout; a transaction needs ``acks=all``
and idempotence, so under other producer options every multi-event publish is ``fail``
(not sent). A subscription is ``ok`` with what was delivered (``ended`` says why it stopped
early), ``fail`` when it ended at once with nothing, ``info`` (nothing recorded) when the
gateway did not answer in time.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.workload import client_timeout
from workloads.addr import client_addr
from workloads.watch import perform

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext
    from node_impl.client import NodeClient
    from workloads.watch import WatchOptions

__all__ = [
    "PROMISES",
    "KafkaWatchClient",
    "partition_of",
    "publish_outcome",
    "publish_request",
    "snapshot_value",
    "stream_of",
    "subscribe_request",
    "subscription_value",
]

PROMISES: Mapping[str, Any] = {
    "ordered": True,
    "no_gap": True,
    "no_duplicate": True,
    "resumable": True,
    "atomic": True,
    "monotonic": True,
    "final_state": True,
    "scope": "stream",
}


# the mapping between the workload's events and the gateway's records (pure) -------------


def stream_of(partition: int) -> str:
    """The workload stream of a partition."""
    return f"s{int(partition)}"


def partition_of(stream: str) -> int:
    """The partition of a workload stream ``s<i>`` (ValueError for any other name)."""
    if not stream.startswith("s") or not stream[1:].isdigit():
        raise ValueError(f"stream {stream!r} is not s<partition>")
    return int(stream[1:])


def publish_request(events: Sequence[Mapping[str, Any]], timeout_ms: int) -> dict[str, Any]:
    """The gateway's ``wpublish`` (flat fields: the framing reads nested values as JSON)."""
    req: dict[str, Any] = {"type": "wpublish", "n": len(events), "timeout_ms": int(timeout_ms)}
    for i, e in enumerate(events):
        req[f"p{i}"] = partition_of(str(e["stream"]))
        req[f"v{i}"] = str(e["value"])
    return req


def publish_outcome(
    events: Sequence[Mapping[str, Any]], reply: Mapping[str, Any]
) -> tuple[str, dict[str, Any] | None, str | None]:
    """(type, ok value or None, error) of a publish from the gateway's reply: ``ok`` with
    each event at its offset + 1; ``fail`` when the gateway says nothing was written;
    else ``info``."""
    if reply.get("code") == "SUCCESS":
        offsets = reply.get("offsets")
        if not isinstance(offsets, list) or len(offsets) != len(events):
            return "info", None, f"acknowledged without an offset per event: {dict(reply)!r:.200}"
        placed = [{**dict(e), "pos": int(off) + 1} for e, off in zip(events, offsets, strict=True)]
        return "ok", {"events": placed}, None
    why = f"{reply.get('code')}: {reply.get('error') or ''}".strip()[:200]
    return ("fail" if reply.get("written") == "no" else "info"), None, why


def subscribe_request(
    streams: Sequence[str] | None, frm: int, listen_s: float, *, final: bool
) -> dict[str, Any]:
    """The gateway's ``wsubscribe``: what follows position ``frm`` is offset ``frm``."""
    req: dict[str, Any] = {
        "type": "wsubscribe",
        "from": max(0, int(frm)),
        "listen_ms": max(1, int(listen_s * 1000)),
        "final": bool(final),
    }
    if streams is not None:
        req["partitions"] = ",".join(str(partition_of(s)) for s in streams)
    return req


def subscription_value(
    streams: Sequence[str] | None, frm: int, reply: Mapping[str, Any]
) -> dict[str, Any]:
    """A subscription's ok value from the gateway's records ``[partition, offset, value]``
    (in the order poll returned them) and positions ``[partition, position, after]``: a
    position ``q`` says every committed record below offset ``q``, so up to position ``q``,
    was delivered."""
    events = [
        {"stream": stream_of(p), "value": str(v), "pos": int(off) + 1}
        for p, off, v in reply.get("events") or []
    ]
    out: dict[str, Any] = {"streams": streams, "from": frm, "events": events}
    marks = [
        {"stream": stream_of(p), "pos": int(q), "after": int(after)}
        for p, q, after in reply.get("marks") or []
        if int(q) >= 1
    ]
    if marks:
        out["progress"] = marks
    if reply.get("ended"):
        out["ended"] = str(reply["ended"])[:200]
    return out


def snapshot_value(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot's ok value from each partition's last record ``{partition: [offset,
    value]}`` (no position across partitions: ``pos`` null); ``hanging`` names the
    transactions that held a partition's stable offset far past their timeout."""
    streams = {
        stream_of(int(p)): {"value": str(v), "pos": int(off) + 1}
        for p, (off, v) in sorted((reply.get("partitions") or {}).items())
    }
    out: dict[str, Any] = {"pos": None, "streams": streams}
    if reply.get("hanging"):
        out["hanging"] = str(reply["hanging"])[:400]
    return out


class KafkaWatchClient:
    """Sends each op to the gateway's port of the worker's node; declares Kafka's
    guarantees (:data:`PROMISES`)."""

    promises: Mapping[str, Any] = PROMISES
    multi_stream = True
    read_fs = frozenset({"subscribe", "snapshot"})

    def __init__(self, *, timeout: float | None = None, watch_s: float = 1.0) -> None:
        self.timeout, self.watch_s = timeout, watch_s
        self.node: str | None = None
        self.addr: tuple[str, int] | None = None
        self._conn: NodeClient | None = None

    def configure(self, opts: WatchOptions) -> None:
        self.watch_s = opts.watch_s

    def open(self, ctx: RunContext, node: str) -> KafkaWatchClient:
        c = copy.copy(self)
        c.node, c.addr, c._conn = node, client_addr(ctx, node), None
        if c.timeout is None:
            c.timeout = client_timeout(ctx)
        return c

    def setup(self, ctx: RunContext) -> None:
        """Nothing: the gateway created the topic before the DB was ready."""

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _t(self) -> float:
        return float(self.timeout or 5.0)

    def _call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        from node_impl.client import NodeClient

        if self._conn is None:
            assert self.addr is not None, "open() first"
            self._conn = NodeClient(self.addr[0], self.addr[1], timeout=timeout)
        return self._conn.call(req, timeout)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        calls = {"publish": self._publish, "subscribe": self._subscribe, "snapshot": self._snapshot}
        return perform(op, op.node or self.node, calls)

    def _publish(self, op: Op) -> Op:
        events = list((op.value or {}).get("events") or [])
        t = self._t()
        try:
            # An acks=all produce of a loaded lab takes seconds: the gateway may wait 1.4
            # client timeouts (the watchdog allows two), then answers TIMEOUT (unknown).
            req = publish_request(events, int(1.4 * t * 1000))
        except ValueError as e:
            return op.complete("fail", op.value, error=f"client error: {e}")
        try:
            reply = self._call(req, 1.6 * t)
        except ConnectionError as e:  # the gateway is on this machine: refused means not sent
            kind = "fail" if "connect failed" in str(e) else "info"
            return op.complete(kind, op.value, error=str(e)[:200])
        except Exception as e:  # noqa: BLE001 - a timeout or a broken reply: unknown
            return op.complete("info", op.value, error=f"{type(e).__name__}: {e}"[:200])
        kind, value, error = publish_outcome(events, reply)
        if kind == "ok":
            return op.complete("ok", value)
        return op.complete(kind, op.value, error=error)

    def _subscribe(self, op: Op) -> Op:
        v = dict(op.value or {})
        streams = v.get("streams")
        final = bool(v.get("final"))
        frm = int(v.get("from", 0))
        t = self._t()
        listen = 0.8 * t if final else min(self.watch_s, 0.8 * t)
        try:
            req = subscribe_request(streams, frm, listen, final=final)
        except ValueError as e:
            return op.complete("fail", v, error=f"client error: {e}")
        try:
            # within the watchdog's two client timeouts: listening, then the gateway's last
            # poll and position lookups
            reply = self._call(req, listen + 0.9 * t)
        except ConnectionError as e:
            kind = "fail" if "connect failed" in str(e) else "info"
            return op.complete(kind, v, error=str(e)[:200])
        except Exception as e:  # noqa: BLE001 - what the gateway got never reached us
            return op.complete("info", v, error=f"{type(e).__name__}: {e}"[:200])
        if reply.get("code") != "SUCCESS":
            return op.complete("fail", v, error=f"{reply.get('code')}: {reply.get('error')}")
        out = subscription_value(streams, frm, reply)
        if out.get("ended") and not out["events"] and not out.get("progress"):
            return op.complete("fail", v, error=out["ended"])
        return op.complete("ok", out)

    def _snapshot(self, op: Op) -> Op:
        t = self._t()
        try:
            reply = self._call({"type": "wsnapshot", "timeout_ms": int(0.8 * t * 1000)}, 1.7 * t)
        except Exception as e:  # noqa: BLE001 - a read: nothing to be unsure of
            return op.complete("fail", op.value, error=f"{type(e).__name__}: {e}"[:200])
        if reply.get("code") != "SUCCESS":
            return op.complete("fail", op.value, error=f"{reply.get('code')}: {reply.get('error')}")
        return op.complete("ok", snapshot_value(reply))
