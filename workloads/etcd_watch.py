"""The watch workload's etcd client: puts and transactions, watches from a revision, a
final range read, all through etcd's v3 JSON gateway (no etcd library: clientv3 is Go).

Why the gateway: every etcd the harness runs (Debian's 3.4, and any release built with
``--db-option version=``) serves ``/v3/kv/*`` and ``/v3/watch`` on its client URL. A
watch is a POST of one ``create_request`` whose response is a chunked stream, one JSON
``WatchResponse`` per line; closing the connection cancels it.

What etcd promises of a watch (etcd's API guarantees), declared in :data:`PROMISES`:
events in revision order, none skipped and none repeated, resumable from any revision
not compacted, a transaction's events in one response, progress notifications that
never go back; and a linearizable range read gives the final state. Streams are keys
``<prefix><stream>``; a subscription to every stream watches the prefix range. A
revision is global, so the checker's scope is the whole subscription.

Outcomes: a publish refused at connect is ``fail``; any other error or timeout is
``info`` (it may have committed). A subscription is ``ok`` with what was delivered, also
when the stream broke after it was created (the reason in ``ended``; what arrived was
delivered all the same), and ``fail`` when it never was created (nothing delivered).
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import queue
import socket
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.core.workload import client_timeout
from workloads.addr import client_addr
from workloads.etcd import EtcdHTTP, b64, classify, describe, unb64

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext
    from workloads.watch import WatchOptions

__all__ = ["PREFIX", "PROMISES", "EtcdWatchClient", "prefix_end"]

PREFIX = "/splitbrain-watch/"
PROMISES: Mapping[str, Any] = {
    "ordered": True,
    "no_gap": True,
    "no_duplicate": True,
    "resumable": True,
    "atomic": True,
    "monotonic": True,
    "final_state": True,
    "scope": "subscription",
}
QUIET_S = 1.0
"""A final subscription stops once caught up, or after this long with nothing new."""


def prefix_end(prefix: str) -> str:
    """The range end that covers every key starting with ``prefix`` (its last byte + 1)."""
    raw = prefix.encode()
    return (raw[:-1] + bytes([raw[-1] + 1])).decode()


def _rev(header: Any) -> int | None:
    try:
        return int((header or {}).get("revision"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


class _Stream:
    """One watch: the POST, and a thread reading its responses into a queue, so the
    caller can stop at its own deadline (closing the socket ends the read)."""

    def __init__(self, host: str, port: int, body: Mapping[str, Any], timeout: float) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self.conn.request(
            "POST", "/v3/watch", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        self.sock = self.conn.sock
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            raise OSError(f"watch: HTTP {self.resp.status}: {self.resp.read()[:200]!r}")
        self.lines: queue.Queue[dict[str, Any] | BaseException | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True, name="etcd-watch")
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    break
                if line.strip():
                    self.lines.put(json.loads(line))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            self.lines.put(e)
            return
        self.lines.put(None)

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()
        self.thread.join(timeout=5)


class EtcdWatchClient:
    """Sends each op to the worker's node; declares etcd's watch guarantees."""

    promises: Mapping[str, Any] = PROMISES
    multi_stream = False
    read_fs = frozenset({"subscribe", "snapshot"})

    def __init__(self, *, timeout: float | None = None, watch_s: float = 1.0) -> None:
        self.timeout = timeout
        self.watch_s = watch_s
        self.node: str | None = None

    def configure(self, opts: WatchOptions) -> None:
        self.watch_s = opts.watch_s

    def open(self, ctx: RunContext, node: str) -> EtcdWatchClient:
        c = copy.copy(self)
        c.node = node
        if c.timeout is None:
            c.timeout = client_timeout(ctx)
        return c

    def setup(self, ctx: RunContext) -> None:
        pass

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        pass

    # ops ------------------------------------------------------------------------------
    def invoke(self, ctx: RunContext, op: Op) -> Op:
        node = op.node or self.node
        if node is None:
            return op.complete("fail", op.value, error="client error: no node")
        host, port = client_addr(ctx, node)
        timeout = self.timeout or client_timeout(ctx)
        if op.f == "publish":
            return self._publish(op, EtcdHTTP(host, port, timeout)).replace(node=node)
        if op.f == "subscribe":
            return self._subscribe(op, host, port, timeout).replace(node=node)
        if op.f == "snapshot":
            return self._snapshot(op, EtcdHTTP(host, port, timeout)).replace(node=node)
        return op.complete("fail", op.value, error=f"client error: watch cannot do {op.f!r}")

    def _publish(self, op: Op, api: EtcdHTTP) -> Op:
        events = list((op.value or {}).get("events") or [])
        try:
            if len(events) == 1:
                e = events[0]
                reply = api.call(
                    "/v3/kv/put", {"key": b64(PREFIX + e["stream"]), "value": b64(e["value"])}
                )
            else:
                puts = [
                    {"requestPut": {"key": b64(PREFIX + e["stream"]), "value": b64(e["value"])}}
                    for e in events
                ]
                reply = api.call("/v3/kv/txn", {"success": puts})
        except Exception as e:  # every failure of a request is a completion, never a crash
            return op.complete(classify("publish", e), op.value, error=describe(e))
        rev = _rev(reply.get("header"))
        if rev is None:
            return op.complete("info", op.value, error=f"etcd: no revision in {reply!r:.200}")
        return op.complete("ok", {"events": [{**e, "pos": rev} for e in events]})

    def _snapshot(self, op: Op, api: EtcdHTTP) -> Op:
        try:
            reply = api.call(
                "/v3/kv/range", {"key": b64(PREFIX), "range_end": b64(prefix_end(PREFIX))}
            )
        except Exception as e:  # noqa: BLE001
            return op.complete("fail", op.value, error=describe(e))
        streams = {}
        for kv in reply.get("kvs") or []:
            name = unb64(kv.get("key", ""))[len(PREFIX) :]
            streams[name] = {"value": unb64(kv.get("value", "")), "pos": int(kv["mod_revision"])}
        return op.complete("ok", {"pos": _rev(reply.get("header")), "streams": streams})

    def _subscribe(self, op: Op, host: str, port: int, timeout: float) -> Op:
        v = dict(op.value or {})
        streams = v.get("streams")
        final = bool(v.get("final"))
        start = int(v.get("from", 0))
        if streams is None:
            key, end = PREFIX, prefix_end(PREFIX)
        elif len(streams) == 1:
            key, end = PREFIX + streams[0], None
        else:
            return op.complete("fail", v, error="client error: etcd watches one key or the prefix")
        create: dict[str, Any] = {
            "key": b64(key),
            "start_revision": start + 1,
            "progress_notify": True,
        }
        if end is not None:
            create["range_end"] = b64(end)
        began = time.monotonic()
        # a subscription must end well within the watchdog's two client timeouts
        deadline = began + (0.8 * timeout if final else min(self.watch_s, 0.8 * timeout))
        try:
            stream = _Stream(host, port, {"create_request": create}, timeout)
        except Exception as e:  # noqa: BLE001 - never created: nothing delivered
            return op.complete("fail", v, error=describe(e))
        events: list[dict[str, Any]] = []
        marks: list[dict[str, Any]] = []
        out: dict[str, Any] = {"streams": streams, "from": start, "events": events}
        created_at: int | None = None
        ended: str | None = None
        batch = 0
        quiet_since = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                if final and now - quiet_since >= QUIET_S and created_at is not None:
                    break
                try:
                    item = stream.lines.get(timeout=min(0.1, max(0.0, deadline - now)))
                except queue.Empty:
                    continue
                if item is None:
                    ended = "the server closed the stream"
                    break
                if isinstance(item, BaseException):
                    ended = describe(item)
                    break
                if "error" in item:
                    ended = f"etcd: {item['error']}"
                    break
                res = item.get("result") or {}
                quiet_since = time.monotonic()
                if res.get("created"):
                    created_at = _rev(res.get("header"))
                    continue
                if res.get("canceled") or int(res.get("compact_revision") or 0):
                    ended = (
                        f"canceled: {res.get('cancel_reason') or ''} "
                        f"compact_revision={res.get('compact_revision') or 0}"
                    ).strip()
                    break
                evs = res.get("events") or []
                if not evs:
                    rev = _rev(res.get("header"))
                    if rev is not None:  # a progress notification
                        marks.append({"pos": rev, "after": len(events)})
                    continue
                for ev in evs:
                    kv = ev.get("kv") or {}
                    name = unb64(kv.get("key", ""))[len(PREFIX) :]
                    if ev.get("type") == "DELETE":
                        ended = f"unexpected delete of {name!r}"
                        continue
                    events.append(
                        {
                            "stream": name,
                            "value": unb64(kv.get("value", "")),
                            "pos": int(kv["mod_revision"]),
                            "batch": batch,
                        }
                    )
                batch += 1
                if final and created_at is not None and events and events[-1]["pos"] >= created_at:
                    break  # caught up with the store as it was when the watch began
        finally:
            stream.close()
        # what arrived after we stopped listening was delivered too
        while True:
            try:
                item = stream.lines.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, dict) and not (item.get("result") or {}).get("created"):
                res = item.get("result") or {}
                for ev in res.get("events") or []:
                    kv = ev.get("kv") or {}
                    if ev.get("type") == "DELETE":
                        continue
                    events.append(
                        {
                            "stream": unb64(kv.get("key", ""))[len(PREFIX) :],
                            "value": unb64(kv.get("value", "")),
                            "pos": int(kv["mod_revision"]),
                            "batch": batch,
                        }
                    )
                if res.get("events"):
                    batch += 1
        if created_at is None and not events:
            return op.complete("fail", v, error=ended or "watch not created before the deadline")
        if marks:
            out["progress"] = marks
        if created_at is not None:
            out["created_at"] = created_at
        if ended:
            out["ended"] = ended
        return op.complete("ok", out)
