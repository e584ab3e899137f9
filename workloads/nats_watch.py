"""The watch workload's NATS JetStream client: acked publishes (one message, or one atomic
batch), subscriptions by an ordered consumer from a stream sequence, and a final read of
each subject's last message (nats-py, asyncio, driven from the worker's thread).

Layout: one JetStream stream per run (:data:`STREAM`, file storage, R = the node count up
to 5) captures ``<prefix>.>``; the workload's stream ``s`` is the subject ``<prefix>.s``.
A position is the JetStream *stream sequence*, one counter for the whole stream, so each
subject's positions rise but are not consecutive.

What JetStream promises, declared in :data:`PROMISES` (sources in brackets):

* ``ordered``: a consumer delivers a stream's messages in stream-sequence order [NATS docs,
  "Ordered consumers" (docs.nats.io/learn/jetstream/ordered-consumer): "every message in
  stream order, from your start point"; ADR-17, ordered consumer].
* ``no_gap``: an *ordered consumer* delivers every message after its start. The server does
  not redeliver to a consumer without acks, so the promise is the ordered consumer's own
  algorithm: the client checks that each message's consumer sequence follows the last one
  and, on a gap, recreates the consumer from the last stream sequence delivered plus one
  [docs.nats.io ordered-consumer page: the library "recreates it if it ever misses a
  message"; nats.net ``CreateOrderedPushConsumerAsync``: "recreating the underlying
  ephemeral consumer if it skips or mismatches sequences"]. This client does that itself
  over a pull consumer (below), and records each reset. A gap the checker finds is then a
  message the stream's replicas did not serve, not one lost on the wire.
* ``no_duplicate``: no redelivery (``ack_policy`` none) and a reset resumes after the last
  delivered sequence; a publish is stored once for its ``Nats-Msg-Id`` (= the value) within
  the stream's duplicate window, 2 min here [docs.nats.io/nats-concepts/jetstream/headers:
  ``Nats-Msg-Id`` "used by the server [to] apply de-duplication within the configured
  Duplicate Window"]. This client never re-sends, so a value at two sequences is a
  ``resumable`` anomaly (one value at two positions), not a delivery duplicate.
* ``resumable``: ``deliver_policy`` ``by_start_sequence`` with ``opt_start_seq`` = ``from`` +
  1 delivers exactly what follows ``from``; two values at one sequence are two replicas
  that diverged (the class docs/thirdparty.md measured on 2.9.10).
* ``atomic``: a multi-event publish is one *atomic batch* (``allow_atomic``, nats-server 2.12
  and later): "either all messages in the batch are stored or none"; a batch is scoped to
  one stream but may span its subjects [ADR-50, nats-io/nats-architecture-and-design
  adr/ADR-50.md; synadia.com/blog/atomic-batch-publishing-nats-2-12]; the commit's PubAck
  carries the last message's sequence and the batch size, the others take the sequences
  before it (ADR-50, "Publish Acknowledgements"). A batch is delivered as separate
  messages, so no ``batch`` is recorded (JetStream promises storage, not one delivery).
  On a server before 2.12 there is no multi-message atomic publish at all, so a
  multi-event publish is refused by this client (``fail``, nothing sent) rather than
  faked by several publishes: every transaction in a history was an atomic batch.
  Run ``--workload-option txn_percent=0`` on those releases to spend no ops on them.
* ``monotonic``: not declared. JetStream has no progress notifications (etcd's
  ``progress_notify``); nothing here could go back.
* ``final_state``: ``$JS.API.STREAM.MSG.GET`` with ``last_by_subj`` (answered by the
  stream leader, not a direct get: ``allow_direct`` off) after the heal and the
  convergence wait; an acked publish later than the final value is a lost write.
* ``scope``: ``stream``: each subject judged alone, as the workload docs suggest for NATS.
  The stream sequence also orders subjects against each other, but an atomic batch's
  events have consecutive, distinct sequences, and under scope ``subscription`` the
  checker reads a transaction as one position (etcd's revision), so a subscription
  resumed from the middle of a batch would be a false ``watch-non-atomic``.

Outcomes: a publish is ``fail`` when nothing can have been stored (never connected; no
responders; a batch refused or cut before its commit, which the server then abandons),
``info`` on any other error or timeout of the single publish or the batch's commit. A
subscription is ``ok`` with what was delivered (``ended`` says why it stopped early),
``fail`` when its first consumer was never created.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import json
import threading
import time
import uuid
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.workload import client_timeout
from workloads.addr import client_addr
from workloads.watch import perform

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext
    from workloads.watch import WatchOptions

__all__ = [
    "PREFIX",
    "PROMISES",
    "STREAM",
    "NatsWatchClient",
    "atomic_supported",
    "batch_positions",
    "event_of",
    "start_sequence",
    "stream_of",
    "subject_of",
]

STREAM = "SBWATCH"
PREFIX = "sbwatch"
PROMISES: Mapping[str, Any] = {
    "ordered": True,
    "no_gap": True,
    "no_duplicate": True,
    "resumable": True,
    "atomic": True,
    "monotonic": False,
    "final_state": True,
    "scope": "stream",
}
ATOMIC_SINCE = (2, 12)
"""The first nats-server minor release with atomic batch publish (ADR-50)."""
DUPLICATE_WINDOW_S = 120.0
QUIET_S = 1.0
"""A final subscription stops once caught up, or after this long with nothing new."""
PULL_BATCH = 256


# the value and position mapping (pure) -------------------------------------------------


def subject_of(prefix: str, stream: str) -> str:
    """The subject a workload stream is published on."""
    return f"{prefix}.{stream}"


def stream_of(prefix: str, subject: str) -> str:
    """The workload stream of a subject (a subject outside the prefix keeps its name)."""
    head = prefix + "."
    return subject[len(head) :] if subject.startswith(head) else subject


def event_of(prefix: str, subject: str, data: bytes, seq: int) -> dict[str, Any]:
    """A delivered message as the checker's event (a body that is not UTF-8 is kept as
    its repr, a value nobody published)."""
    try:
        value = data.decode()
    except UnicodeDecodeError:
        value = repr(data)
    return {"stream": stream_of(prefix, subject), "value": value, "pos": int(seq)}


def start_sequence(frm: int) -> int | None:
    """The consumer's ``opt_start_seq`` for a subscription after position ``frm`` (None:
    deliver everything)."""
    return None if frm <= 0 else frm + 1


def batch_positions(events: list[dict[str, Any]], ack: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events of an atomic batch with their sequences from the commit's PubAck: the
    last message has ``seq``, the others the ones before it (ADR-50). A ValueError when
    the ack does not account for exactly these events."""
    seq, count = ack.get("seq"), ack.get("count", len(events) if len(events) == 1 else None)
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < len(events):
        raise ValueError(f"no usable sequence in the ack {dict(ack)}")
    if count != len(events):
        raise ValueError(f"the ack counts {count} messages, the batch had {len(events)}")
    first = seq - len(events) + 1
    return [{**e, "pos": first + i} for i, e in enumerate(events)]


def atomic_supported(version: str | None) -> bool:
    """Whether a nats-server version string (``2.15.2``, ``v2.12.0-RC.1``) has atomic
    batch publish."""
    if not version:
        return False
    parts = version.lstrip("v").split("-")[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return False
    return (major, minor) >= ATOMIC_SINCE


@dataclass
class _Delivery:
    """What one subscription delivered, across the consumers it had to recreate."""

    events: list[dict[str, Any]]
    resets: list[dict[str, Any]]
    ended: str | None = None
    created: bool = False
    last_seq: int = 0  # the last stream sequence delivered


def _status(msg: Any) -> str | None:
    """A JetStream status message's code (``404`` no messages, ``408`` request expired,
    ``409`` consumer gone or leadership changed, ``100`` heartbeat), None for a message."""
    status = (getattr(msg, "headers", None) or {}).get("Status")
    return None if status is None else str(status)


def _ack_parts(reply: str) -> tuple[int, int, int] | None:
    """(stream sequence, consumer sequence, pending) from a JetStream message's reply
    subject (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>``,
    with an optional domain and account hash before them from 2.9 on)."""
    toks = reply.split(".")
    if len(toks) < 9 or toks[0] != "$JS" or toks[1] != "ACK":
        return None
    tail = toks[-5:] if len(toks) >= 12 else toks[5:10]
    try:
        sseq, dseq, _ts, pending = int(tail[0]), int(tail[1]), int(tail[2]), int(tail[3])
    except (ValueError, IndexError):
        return None
    return sseq, dseq, pending


class _Loop:
    """One asyncio loop on a daemon thread; ``call`` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="nats-watch")
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"no answer in {timeout:g} s") from None

    def stop(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.call(cancel_all(), 2.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(2)
        if not self.thread.is_alive():
            self.loop.close()


async def _quiet(*_: Any) -> None:
    """nats-py's callbacks: reconnects and errors are the test's faults, not news."""


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:200]


class NatsWatchClient:
    """Sends each op to the worker's node's server; declares JetStream's guarantees."""

    promises: Mapping[str, Any] = PROMISES
    multi_stream = False
    read_fs = frozenset({"subscribe", "snapshot"})

    def __init__(
        self,
        *,
        stream: str = STREAM,
        prefix: str = PREFIX,
        replicas: int | None = None,
        timeout: float | None = None,
        watch_s: float = 1.0,
    ) -> None:
        self.stream, self.prefix, self.replicas = stream, prefix, replicas
        self.timeout, self.watch_s = timeout, watch_s
        self.node: str | None = None
        self.addr: tuple[str, int] | None = None
        # Shared by every copy open() makes: a client reopened after an info is not set
        # up again, and must still know whether the stream takes atomic batches.
        self._shared: dict[str, bool] = {}
        self._loop: _Loop | None = None
        self._nc: Any = None

    @property
    def atomic(self) -> bool | None:
        """Whether the stream takes atomic batches (None until a setup learned it)."""
        return self._shared.get("atomic")

    def configure(self, opts: WatchOptions) -> None:
        self.watch_s = opts.watch_s

    def open(self, ctx: RunContext, node: str) -> NatsWatchClient:
        c = copy.copy(self)
        c.node, c.addr = node, client_addr(ctx, node)
        c._loop, c._nc = None, None
        if c.timeout is None:
            c.timeout = client_timeout(ctx)
        if c.replicas is None:
            c.replicas = max(1, min(len(getattr(ctx, "nodes", ()) or ()), 5))
        return c

    # plumbing ---------------------------------------------------------------------------
    def _t(self) -> float:
        return float(self.timeout or 5.0)

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        if self._loop is None:
            self._loop = _Loop()
        return self._loop.call(coro, timeout)

    async def _conn(self) -> Any:
        if self._nc is not None and not self._nc.is_closed:
            return self._nc
        import nats

        assert self.addr is not None, "open() first"
        host, port = self.addr
        self._nc = await nats.connect(
            servers=[f"nats://{host}:{port}"],
            connect_timeout=min(2.0, self._t()),
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            error_cb=_quiet,
            disconnected_cb=_quiet,
            reconnected_cb=_quiet,
            closed_cb=_quiet,
        )
        return self._nc

    # roles ----------------------------------------------------------------------------
    def setup(self, ctx: RunContext) -> None:
        """Create the stream (every worker may: the same config again succeeds), retrying
        while the meta group elects a leader; learn whether it takes atomic batches."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self._shared["atomic"] = bool(self._call(self._add_stream(), self._t() * 3))
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    async def _add_stream(self) -> bool:
        from nats.js.api import StorageType, StreamConfig

        nc = await self._conn()
        atomic = atomic_supported(getattr(nc, "_server_info", {}).get("version"))
        js = nc.jetstream(timeout=self._t() * 2)
        cfg = StreamConfig(
            name=self.stream,
            subjects=[f"{self.prefix}.>"],
            storage=StorageType.FILE,
            num_replicas=self.replicas or 1,
            duplicate_window=DUPLICATE_WINDOW_S,
            allow_direct=False,
        )
        if atomic:
            cfg.allow_atomic = True
        info = await js.add_stream(cfg)
        return bool(atomic and getattr(info.config, "allow_atomic", False))

    async def _stream_atomic(self) -> bool:
        nc = await self._conn()
        info = await nc.jetstream(timeout=self._t()).stream_info(self.stream)
        return bool(getattr(info.config, "allow_atomic", False))

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        loop, nc, self._loop, self._nc = self._loop, self._nc, None, None
        if loop is None:
            return
        if nc is not None:
            with contextlib.suppress(Exception):
                loop.call(nc.close(), 2.0)
        loop.stop()

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        calls = {"publish": self._publish, "subscribe": self._subscribe, "snapshot": self._snapshot}
        return perform(op, op.node or self.node, calls)

    # publish --------------------------------------------------------------------------
    def _publish(self, op: Op) -> Op:
        events = list((op.value or {}).get("events") or [])
        if len(events) > 1 and self.atomic is None:
            with contextlib.suppress(Exception):  # not set up here yet: ask the stream
                self._shared["atomic"] = bool(self._call(self._stream_atomic(), self._t()))
        if len(events) > 1 and not self.atomic:
            return op.complete(
                "fail",
                op.value,
                error="client: this server has no atomic batch publish (nats-server 2.12+); "
                "a transaction is not sent",
            )
        try:
            self._call(self._conn(), self._t())
        except Exception as e:  # never connected: nothing was sent
            return op.complete("fail", op.value, error=f"not connected: {_describe(e)}")
        try:
            out = self._call(self._send(events), self._t() * (len(events) + 1))
        except TimeoutError as e:
            return op.complete("info", op.value, error=f"timeout: {e}")
        except Exception as e:  # noqa: BLE001 - a lost connection mid-request: unknown
            return op.complete("info", op.value, error=_describe(e))
        kind, value = out
        if kind == "ok":
            return op.complete("ok", value)
        return op.complete(kind, op.value, error=str(value)[:200])

    async def _send(self, events: list[dict[str, Any]]) -> tuple[str, Any]:
        import nats.errors

        nc = await self._conn()
        t = self._t()
        if len(events) == 1:
            e = events[0]
            hdrs = {"Nats-Msg-Id": str(e["value"]), "Nats-Expected-Stream": self.stream}
            try:
                reply = await nc.request(
                    subject_of(self.prefix, e["stream"]),
                    str(e["value"]).encode(),
                    timeout=t,
                    headers=hdrs,
                )
            except nats.errors.NoRespondersError:
                return "fail", "no responders: no stream leader took it"
            return self._acked(events, reply.data)
        batch = uuid.uuid4().hex
        for i, e in enumerate(events, start=1):
            hdrs = {
                "Nats-Msg-Id": str(e["value"]),
                "Nats-Batch-Id": batch,
                "Nats-Batch-Sequence": str(i),
            }
            last = i == len(events)
            if last:
                hdrs["Nats-Batch-Commit"] = "1"
            try:
                reply = await nc.request(
                    subject_of(self.prefix, e["stream"]),
                    str(e["value"]).encode(),
                    timeout=t,
                    headers=hdrs,
                )
            except nats.errors.NoRespondersError:
                if last:
                    return "info", "no responders to the batch's commit"
                return "fail", f"no responders to batch message {i}: not committed"
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                if last:
                    return "info", "timeout: the batch's commit was not answered"
                return "fail", f"timeout on batch message {i}: no commit sent, abandoned"
            if not last and reply.data:  # before the commit only an error has a body
                return "fail", f"batch message {i} refused: {reply.data[:150]!r}"
        return self._acked(events, reply.data)

    def _acked(self, events: list[dict[str, Any]], data: bytes) -> tuple[str, Any]:
        try:
            ack = json.loads(data)
        except ValueError:
            return "info", f"unreadable ack {data[:100]!r}"
        if not isinstance(ack, dict):
            return "info", f"unreadable ack {data[:100]!r}"
        if "error" in ack:
            return "info", f"jetstream: {ack['error']}"
        if ack.get("stream") != self.stream:
            return "info", f"ack from another stream: {ack!r}"
        try:
            placed = batch_positions(events, ack)
        except ValueError as e:
            return "info", str(e)
        value: dict[str, Any] = {"events": placed}
        if ack.get("duplicate"):
            value["duplicate"] = True  # the dedup window says it was stored already
        if len(events) > 1:
            value["batch"] = ack.get("batch")
        return "ok", value

    # subscribe ------------------------------------------------------------------------
    def _subscribe(self, op: Op) -> Op:
        v = dict(op.value or {})
        streams = v.get("streams")
        if streams is not None and len(streams) != 1:
            return op.complete("fail", v, error="client error: one subject or every subject")
        final = bool(v.get("final"))
        frm = int(v.get("from", 0))
        t = self._t()
        listen = 0.8 * t if final else min(self.watch_s, 0.8 * t)
        # The whole op ends within 1.5 client timeouts (the watchdog allows two): listening
        # starts once the consumer exists, but never runs past that bound.
        cap = time.monotonic() + 1.5 * t
        got = _Delivery(events=[], resets=[])
        try:
            self._call(self._consume(streams, frm, listen, cap, final, got), 1.5 * t + 1.5)
        except Exception as e:  # noqa: BLE001 - what arrived before it broke was delivered
            got.ended = got.ended or _describe(e)
        events = list(got.events)
        if not got.created and not events:
            return op.complete("fail", v, error=got.ended or "no consumer was created")
        out: dict[str, Any] = {"streams": streams, "from": frm, "events": events}
        if got.resets:
            out["resets"] = got.resets
        if got.ended:
            out["ended"] = got.ended
        return op.complete("ok", out)

    async def _create(self, js: Any, filt: str, start: int | None) -> str:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        name = f"sbw-{uuid.uuid4().hex[:16]}"
        cfg = ConsumerConfig(
            name=name,
            filter_subject=filt,
            deliver_policy=DeliverPolicy.ALL if start is None else DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=10.0,  # the server drops it if our delete is lost
        )
        await js.add_consumer(self.stream, config=cfg, timeout=self._t())
        return name

    async def _consume(
        self,
        streams: list[str] | None,
        frm: int,
        listen: float,
        cap: float,
        final: bool,
        got: _Delivery,
    ) -> None:
        """Pull from an ephemeral consumer until ``listen`` s have passed (a final one: until
        caught up and quiet), recreating the consumer after the last delivered sequence
        whenever its consumer sequence skips (the ordered consumer's rule)."""
        import nats.errors

        nc = await self._conn()
        js = nc.jetstream(timeout=self._t())
        filt = f"{self.prefix}.>" if streams is None else subject_of(self.prefix, streams[0])
        got.last_seq = frm
        name = await self._create(js, filt, start_sequence(frm))
        got.created = True
        deadline = min(time.monotonic() + listen, cap)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        expected = 1  # the next consumer sequence
        outstanding = 0  # messages the current pull request may still bring
        quiet_since = time.monotonic()
        caught_up = False
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                if final and caught_up and now - quiet_since >= QUIET_S:
                    break
                if outstanding <= 0:
                    expires = max(0.05, min(0.5, deadline - now))
                    req = {"batch": PULL_BATCH, "expires": int(expires * 1e9)}
                    await nc.publish(
                        f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{name}",
                        json.dumps(req).encode(),
                        reply=inbox,
                    )
                    outstanding = PULL_BATCH
                try:
                    msg = await sub.next_msg(timeout=max(0.01, min(1.0, deadline - now)))
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    outstanding = 0  # a lost request or reply: ask again
                    continue
                status = _status(msg)
                if status is not None:
                    if status.startswith("100"):
                        continue  # a heartbeat
                    if status.startswith(("404", "408")):
                        outstanding = 0  # nothing more now, or the request expired
                        caught_up = caught_up or status.startswith("404")
                        continue
                    why = f"status {status} {(msg.headers or {}).get('Description', '')}"
                    name, sub, expected = await self._reset(js, nc, filt, name, sub, got, why)
                    outstanding = 0
                    continue
                parts = _ack_parts(msg.reply or "")
                if parts is None:
                    got.ended = f"a message without JetStream metadata on {msg.subject}"
                    break
                sseq, dseq, pending = parts
                if dseq != expected:
                    why = f"consumer sequence {dseq}, expected {expected}"
                    name, sub, expected = await self._reset(js, nc, filt, name, sub, got, why)
                    outstanding = 0
                    continue
                expected += 1
                outstanding -= 1
                got.events.append(event_of(self.prefix, msg.subject, msg.data, sseq))
                got.last_seq = sseq
                quiet_since = time.monotonic()
                if pending == 0:
                    caught_up = True
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            with contextlib.suppress(Exception):  # else the inactive threshold drops it
                await asyncio.wait_for(js.delete_consumer(self.stream, name), 1.0)

    async def _reset(
        self, js: Any, nc: Any, filt: str, name: str, sub: Any, got: _Delivery, why: str
    ) -> tuple[str, Any, int]:
        """The ordered consumer's reset: drop the consumer and its inbox, start a new one
        right after the last stream sequence delivered."""
        got.resets.append({"after": got.last_seq, "why": why[:120]})
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(js.delete_consumer(self.stream, name), 1.0)
        name = await self._create(js, filt, start_sequence(got.last_seq))
        inbox = nc.new_inbox()
        return name, await nc.subscribe(inbox), 1

    # snapshot -------------------------------------------------------------------------
    def _snapshot(self, op: Op) -> Op:
        try:
            value = self._call(self._read_last(), self._t() * 3)
        except Exception as e:  # noqa: BLE001
            return op.complete("fail", op.value, error=_describe(e))
        return op.complete("ok", value)

    async def _read_last(self) -> dict[str, Any]:
        nc = await self._conn()
        js = nc.jetstream(timeout=self._t())
        info = await js.stream_info(self.stream, subjects_filter=f"{self.prefix}.>")
        subjects = sorted((info.state.subjects or {}).keys())
        return snapshot_value(
            self.prefix,
            info.state.last_seq,
            [(s, await js.get_last_msg(self.stream, s)) for s in subjects],
        )


def snapshot_value(prefix: str, last_seq: int | None, lasts: Iterable[tuple[str, Any]]) -> dict:
    """The snapshot's ok value from the stream's last sequence and each subject's last
    message (objects with ``seq`` and ``data``)."""
    streams: dict[str, dict[str, Any]] = {}
    for subject, m in lasts:
        e = event_of(prefix, subject, m.data or b"", int(m.seq))
        streams[e["stream"]] = {"value": e["value"], "pos": e["pos"]}
    return {"pos": last_seq, "streams": streams}
