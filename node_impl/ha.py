"""Mode ``ha``: RocketMQ's classic master/slave HAService (spec §9).

There is no election: one master (named by ``--ha-master``, or by ``term.json``
after a failover) writes, and slaves copy its ``data.log`` byte for byte. The
point of this mode is the contrast with DLedger: an async master acks after its
local write, so a failover loses whatever the promoted slave had not received; a
sync master waits for *any one* slave's offset report (push2SlaveMaxOffset is one
maximum over all slaves), so promoting the highest-offset slave loses nothing.

Both sides share the store format of mode ``dledger`` (offsets are ``pos`` values,
identical on every replica), so a slave validates every entry it receives with the
same chain checks and can later serve as master. Failover is the operator's job:
``ha-promote`` and ``ha-follow`` arrive on the client port.

Two small extensions to the spec's frames, both ignored by nothing else: ``ha-data``
carries the master's ``epoch`` and client address (so slaves report the right term
and can redirect), and a master refusing a report beyond its end sends one
``ha-refused`` frame before closing, so the operator's ``ha-follow`` can say why.

What is not HA-specific is shared with mode ``dledger`` rather than copied: the
client API (status, append and get are :class:`node_impl.server.LogAPI`; this
node only answers who may write and how far a read sees), group commit
(:mod:`node_impl.groupcommit`) and the store's byte-level reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from node_impl.api import Proposal, ReadView
from node_impl.config import NodeConfig
from node_impl.groupcommit import flush_on, group_commit
from node_impl.ha_broker import NO_PERMISSION, HABroker
from node_impl.nodelog import NodeLog
from node_impl.server import LogAPI, listen, send_frame, serve_requests
from node_impl.store import InconsistentState, LogStore, TermStore, parse_entries
from node_impl.wakeup import Signal, cancel_all
from node_impl.wire import MAX_FRAME, FrameError, encode_frame, read_frame

__all__ = ["HANode", "MASTER", "SLAVE"]

MASTER, SLAVE = "master", "slave"
CHUNK = 32 * 1024  # one ha-data frame (RocketMQ haTransferBatchSize)
SLAVE_FALL_BEHIND = 256 * 2**20  # RocketMQ haMaxGapNotInSync
RETRY_S = 1.0  # RocketMQ: 5 s
FLUSH_EVERY_S = 0.05


@dataclass(frozen=True, slots=True)
class _Ack:
    """An append's reply in the making (:class:`node_impl.api.Proposal`)."""

    fut: asyncio.Future[Any]


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Refused(Exception):
    """The master refused our report (we are ahead of it)."""


class HANode:
    """One broker of a master/slave group; same lifecycle as :class:`node_impl.node.Node`."""

    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        self.bugs = cfg.bugs
        self.id = cfg.node_id
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.log = NodeLog(cfg.log_path)
        self.store = LogStore(cfg.data_dir)
        self.term_store = TermStore(cfg.data_dir)
        epoch, master = self.term_store.load()
        if master is None or master not in cfg.peers or epoch < 1:
            epoch, master = 1, cfg.ha_master
        self.epoch: int = epoch
        self.master: str = master  # type: ignore[assignment]
        self.term_store.save(self.epoch, self.master)
        self.role = MASTER if self.master == self.id else SLAVE
        self.master_client_addr: str | None = cfg.client_addr if self.role == MASTER else None
        self.incarnation = random.getrandbits(63)
        self.committed = self.store.end_index if self.role == SLAVE else -1
        self.push2slave = 0  # one maximum over all slaves (RocketMQ push2SlaveMaxOffset)
        self.slaves: dict[int, str] = {}  # connection id -> peer address, after a first report
        self.stopping = False
        self.offset_signal = Signal()  # push2slave rose
        self.data_signal = Signal()  # the master appended
        self.slave_state = "idle"  # slave side: idle / connecting / streaming / refused
        self.slave_state_signal = Signal()
        self._slave_writer: asyncio.StreamWriter | None = None
        self._flush_wanted: asyncio.Event | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._conns: set[asyncio.StreamWriter] = set()
        self._ha_conns: set[asyncio.StreamWriter] = set()  # master side, one per slave
        self._tasks: set[asyncio.Task] = set()
        self._conn_ids = 0
        self._last_role: tuple | None = None
        self._slave_flush = asyncio.Event()
        self.api = LogAPI(self)
        self.broker = HABroker(self)  # send/pull/consume offsets (node_impl/ha_broker.py)

    @property
    def leader_id(self) -> str:
        return self.master

    @property
    def leader_addr(self) -> str | None:
        return self.master_client_addr

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._flush_wanted = asyncio.Event()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="flush")
        self.log.info(
            "start",
            id=self.id,
            incarnation=self.incarnation,
            term=self.epoch,
            master=self.master,
            end=self.store.end_index,
            mode="ha",
            sync=self.cfg.ha_sync,
            bug=self.cfg.bug_spec or None,
        )
        self._log_role()
        host = self.cfg.host
        for port, handler, what in (
            (self.cfg.peer_port, self._peer_conn, "peer"),
            (self.cfg.client_port, self._client_conn, "client"),
        ):
            self._servers.append(await listen(host, port, handler, what))
        # the master's own flush, paced like RocketMQ's async flush service
        self._spawn(
            group_commit(
                self.store,
                self._pool,
                self._flush_wanted,
                log=self.log,
                running=lambda: not self.stopping,
                retry_s=FLUSH_EVERY_S,
                pace_s=FLUSH_EVERY_S,
            )
        )
        self._spawn(self._ha_client_loop())

    async def stop(self) -> None:
        self.stopping = True
        for s in self._servers:
            s.close()
        for w in list(self._conns):
            with contextlib.suppress(Exception):
                w.close()
        await cancel_all(self._tasks)
        with contextlib.suppress(Exception):
            self.store.close()
        self.log.info("stop", end=self.store.end_index, offset=self.store.data_length)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.log.close()

    def _spawn(self, coro: Any) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    def _log_role(self) -> None:
        key = (self.epoch, self.role, self.master)
        if key != self._last_role:
            self._last_role = key
            self.log.role(self.epoch, self.role, self.master)

    # ------------------------------------------------------------------ commit view

    def _raise_committed(self) -> None:
        """committedIndex as §9 defines it, never lowered within an incarnation (I1)."""
        if self.role == SLAVE:
            new = self.store.end_index
        else:
            new = self.store.index_within(self.push2slave)
        self.committed = max(self.committed, min(new, self.store.end_index))

    def _raise_push2slave(self, offset: int) -> None:
        if offset > self.push2slave:
            self.push2slave = offset
            self._raise_committed()
            self.offset_signal.notify()

    # ------------------------------------------------------------------ master: HAConnection

    async def _peer_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        self._ha_conns.add(writer)
        _nodelay(writer)
        self._conn_ids += 1
        cid = self._conn_ids
        peer = writer.get_extra_info("peername")
        pusher: asyncio.Task | None = None
        try:
            while not self.stopping:
                msg = await read_frame(reader)
                if msg.get("type") != "ha-report":
                    send_frame(
                        writer,
                        {
                            "type": f"{msg.get('type')}-resp",
                            "rid": msg.get("rid"),
                            "code": "UNSUPPORTED",
                        },
                    )
                    continue
                off = msg.get("offset")
                if self.role != MASTER or type(off) is not int or off < 0:
                    break
                if off > self.store.data_length:
                    self.log.info(
                        "ha-slave-ahead", peer=peer, offset=off, mine=self.store.data_length
                    )
                    send_frame(
                        writer,
                        {
                            "type": "ha-refused",
                            "rid": 0,
                            "code": "SLAVE_AHEAD",
                            "offset": self.store.data_length,
                            "epoch": self.epoch,
                        },
                    )
                    with contextlib.suppress(Exception):
                        await writer.drain()
                    break
                if pusher is None:  # the first report sets slaveRequest
                    self.slaves[cid] = str(peer)
                    self.log.info(
                        "ha-slave-connected", peer=peer, offset=off, mine=self.store.data_length
                    )
                    pusher = self._spawn(self._push(writer, off))
                if not self.bugs.ha_ack_on_send:  # seeded bug: sends count instead (_push)
                    self._raise_push2slave(off)
        except (OSError, EOFError, FrameError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            if self.slaves.pop(cid, None) is not None:
                self.log.info("ha-slave-gone", peer=peer)
            if pusher is not None:
                pusher.cancel()
            self._conns.discard(writer)
            self._ha_conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _push(self, writer: asyncio.StreamWriter, next_from: int) -> None:
        """WriteSocketService: stream data.log from slaveRequest; heartbeat when idle."""
        h = self.cfg.heartbeat_s
        last_send = 0.0
        with contextlib.suppress(OSError, asyncio.CancelledError, ConnectionError):
            while not self.stopping and self.role == MASTER and not writer.is_closing():
                data = self.store.read_data(next_from, CHUNK)
                now = time.monotonic()
                if not data and now - last_send < h:
                    await self.data_signal.wait(h - (now - last_send))
                    continue
                writer.write(
                    encode_frame(
                        {
                            "type": "ha-data",
                            "rid": 0,
                            "offset": next_from,
                            "data": data,
                            "epoch": self.epoch,
                            "clientAddr": self.cfg.client_addr,
                        }
                    )
                )
                await writer.drain()
                last_send = time.monotonic()
                next_from += len(data)
                if self.bugs.ha_ack_on_send and data:
                    self._raise_push2slave(next_from)  # seeded bug: sent is not received

    # ------------------------------------------------------------------ slave: HAClient

    async def _ha_client_loop(self) -> None:
        while not self.stopping:
            if self.role != SLAVE:
                await self.slave_state_signal.wait(0.2)
                continue
            master = self.master
            host, port = self.cfg.peers[master]
            self._set_slave_state("connecting")
            # everything we hold is durable before the first report names it
            await flush_on(self._pool, self.store)
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port, limit=MAX_FRAME + 8), RETRY_S
                )
            except (OSError, asyncio.TimeoutError):
                await asyncio.sleep(RETRY_S)
                continue
            _nodelay(writer)
            self._slave_writer = writer
            self._conns.add(writer)
            reporter = self._spawn(self._report_loop(writer))
            flusher = self._spawn(self._slave_flush_loop(writer))
            try:
                await self._slave_session(reader, writer, master)
            except _Refused:
                self._set_slave_state("refused")
            except (
                OSError,
                EOFError,
                FrameError,
                asyncio.IncompleteReadError,
                asyncio.TimeoutError,
                InconsistentState,
            ) as e:
                self.log.info("ha-client-reconnect", master=master, error=repr(e))
            finally:
                reporter.cancel()
                flusher.cancel()
                self._conns.discard(writer)
                self._slave_writer = None
                with contextlib.suppress(Exception):
                    writer.close()
            if self.slave_state != "refused":
                self._set_slave_state("connecting")
            if master == self.master and not self.stopping:
                await asyncio.sleep(RETRY_S)

    def _set_slave_state(self, s: str) -> None:
        if s != self.slave_state:
            self.slave_state = s
            self.slave_state_signal.notify()

    def _report(self, writer: asyncio.StreamWriter) -> None:
        send_frame(writer, {"type": "ha-report", "rid": 0, "offset": self._durable_offset()})

    def _durable_offset(self) -> int:
        return self.store.end_offset(self.store.durable_end)

    async def _report_loop(self, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            while not writer.is_closing():
                self._report(writer)
                await asyncio.sleep(self.cfg.heartbeat_s)

    async def _slave_session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, master: str
    ) -> None:
        partial = bytearray()
        silence = 4 * self.cfg.election_s
        while not self.stopping and self.role == SLAVE and self.master == master:
            msg = await asyncio.wait_for(read_frame(reader), silence)
            t = msg.get("type")
            if t == "ha-refused":
                self.log.info(
                    "ha-refused",
                    master=master,
                    master_offset=msg.get("offset"),
                    mine=self.store.data_length,
                )
                raise _Refused()
            if t != "ha-data":
                continue
            off, data = msg.get("offset"), msg.get("data")
            if type(off) is not int or not isinstance(data, bytes):
                raise FrameError("ha-data without int offset and bin data")
            self._set_slave_state("streaming")
            ep = msg.get("epoch")
            if type(ep) is int and ep > self.epoch:
                self.epoch = ep
                self.term_store.save(self.epoch, self.master)
                self._log_role()
            if isinstance(msg.get("clientAddr"), str):
                self.master_client_addr = msg["clientAddr"]
            mine = self.store.data_length + len(partial)
            if mine != off:
                self.log.info("ha-offset-mismatch", master=master, offset=off, mine=mine)
                return  # close; the loop retries after RETRY_S
            if not data:
                continue
            partial += data
            # MAX_FRAME bounds an entry (it came in one client frame), so a garbage
            # header cannot make us buffer without end
            entries, used = parse_entries(partial, self.store.end_index + 1, max_size=MAX_FRAME)
            del partial[:used]
            for e in entries:
                self.store.append_follower(e)  # InconsistentState -> reconnect
            if entries:
                self._raise_committed()
                self._slave_flush.set()  # group commit: one fsync, then one report

    async def _slave_flush_loop(self, writer: asyncio.StreamWriter) -> None:
        """Fsync what arrived, then report it: the report is the slave's durable ack."""
        with contextlib.suppress(asyncio.CancelledError):
            await group_commit(
                self.store,
                self._pool,
                self._slave_flush,
                log=self.log,
                running=lambda: not writer.is_closing(),
                flushed=lambda: self._report(writer),
            )

    # ------------------------------------------------------------------ failover

    async def promote(self, epoch: Any) -> dict:
        if type(epoch) is not int or epoch < 1:
            return {"code": "UNSUPPORTED", "error": "'epoch' must be a positive int"}
        if self.role == MASTER:
            if epoch == self.epoch:
                return {"code": "SUCCESS", "offset": self.store.data_length}
            return {"code": "UNSUPPORTED", "error": f"already master of epoch {self.epoch}"}
        if epoch <= self.epoch:
            return {
                "code": "UNSUPPORTED",
                "error": f"epoch {epoch} does not exceed the current epoch {self.epoch}",
            }
        self.epoch, self.master, self.role = epoch, self.id, MASTER
        self.term_store.save(self.epoch, self.master)
        self.master_client_addr = self.cfg.client_addr
        if self._slave_writer is not None:
            self._slave_writer.close()
        await flush_on(self._pool, self.store)
        self.push2slave = 0
        self._raise_committed()
        self._log_role()
        self.log.info("ha-promote", epoch=epoch, offset=self.store.data_length)
        self.slave_state_signal.notify()
        return {"code": "SUCCESS", "offset": self.store.data_length}

    async def follow(self, master: Any, epoch: Any) -> dict:
        if not isinstance(master, str) or master not in self.cfg.peers or master == self.id:
            return {
                "code": "UNSUPPORTED",
                "error": f"'master' must be another peer id, got {master!r}",
            }
        if epoch is not None and (type(epoch) is not int or epoch < 1):
            return {"code": "UNSUPPORTED", "error": "'epoch' must be a positive int"}
        if epoch is not None and epoch < self.epoch:
            return {
                "code": "UNSUPPORTED",
                "error": f"epoch {epoch} is below the current epoch {self.epoch}",
            }
        if epoch is not None:
            self.epoch = epoch
        was_master = self.role == MASTER
        self.master, self.role = master, SLAVE
        self.master_client_addr = None
        self.term_store.save(self.epoch, self.master)
        if was_master:
            for w in list(self._ha_conns):  # drop our slaves' connections
                with contextlib.suppress(Exception):
                    w.close()
        elif self._slave_writer is not None:
            self._slave_writer.close()
        self._set_slave_state("connecting")
        self._log_role()
        self.log.info("ha-follow", master=master, epoch=self.epoch)
        # The operator's answer should say whether the new master took us (or refused us as
        # ahead of it); 2 s was not always enough for the handshake on a loaded 2-core
        # machine, and the answer then said SUCCESS, connected false. Below the 5 s an
        # operator's client waits.
        deadline = time.monotonic() + 4.0
        while self.slave_state == "connecting" and time.monotonic() < deadline:
            await self.slave_state_signal.wait(deadline - time.monotonic())
        if self.slave_state == "refused":
            return {
                "code": "SLAVE_AHEAD",
                "offset": self.store.data_length,
                "error": f"{self.id} holds more data than master {master}",
            }
        return {
            "code": "SUCCESS",
            "offset": self.store.data_length,
            "connected": self.slave_state == "streaming",
        }

    # ------------------------------------------------------------------ client API

    async def _client_conn(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await serve_requests(
            reader,
            writer,
            self.handle,
            running=lambda: not self.stopping,
            spawn=self._spawn,
            conns=self._conns,
            log=self.log,
        )

    async def handle(self, msg: dict) -> dict:
        t = msg.get("type")
        if t in ("kv-write", "kv-read", "kv-cas"):
            return {"code": "UNSUPPORTED", "error": "mode ha has no kv state machine"}
        if t == "ha-promote":
            return await self.promote(msg.get("epoch"))
        if t == "ha-follow":
            return await self.follow(msg.get("master"), msg.get("epoch"))
        fn = self.broker.handlers.get(t)
        if fn is not None:
            return await fn(msg)
        return await self.api.handle(msg)  # status, append, get

    def propose(self, bodies: list[bytes], kind: str) -> Proposal | str:
        """An ASYNC_MASTER acks after its local write; a SYNC_MASTER once any one slave
        reports an offset past the last entry (push2SlaveMaxOffset)."""
        if self.role != MASTER:
            return "NOT_LEADER"
        if self.broker.sealed:  # read-only for the upgrade (ha-seal): nothing written
            return NO_PERMISSION
        epoch = self.epoch
        entries = [self.store.append_leader(epoch, b) for b in bodies]
        # RocketMQ writes into a mapped file: the page cache has it at once, so a
        # killed master never comes back shorter than what its slaves were sent
        self.store.hand_to_os()
        last = entries[-1]
        assert self._flush_wanted is not None
        self._flush_wanted.set()
        self.data_signal.notify()
        ok = (
            "SUCCESS",
            {"index": last.index, "term": last.term, "indexes": [e.index for e in entries]},
        )
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self.cfg.ha_sync:
            fut.set_result(ok)  # ASYNC_MASTER: acked after the local write
            return _Ack(fut)
        o = last.pos + last.size
        if not self.slaves or o - self.push2slave >= SLAVE_FALL_BEHIND:
            fut.set_result(ok if self.bugs.ha_ok_on_timeout else ("SLAVE_NOT_AVAILABLE", None))
            return _Ack(fut)
        return _Ack(self._spawn(self._wait_slave(o, ok)))

    async def _wait_slave(self, offset: int, ok: tuple[str, dict]) -> tuple[str, dict | None]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.ha_slave_timeout_ms / 1000.0
        while self.push2slave < offset:
            left = deadline - loop.time()
            if left <= 0 or self.stopping:
                return ok if self.bugs.ha_ok_on_timeout else ("FLUSH_SLAVE_TIMEOUT", None)
            await self.offset_signal.wait(left)
        return ok

    async def read_view(self, local: bool) -> ReadView | str:
        """Only the master answers a non-local get, and it serves everything it has
        written, committed or not (RocketMQ reads the commitlog, not a quorum)."""
        if not local and self.role != MASTER:
            return "NOT_LEADER"
        self._raise_committed()
        return ReadView(self.store.end_index, committed_only=False)

    def status(self) -> dict:
        self._raise_committed()
        return {
            "role": self.role,
            "term": self.epoch,
            "leader": self.master,
            "ledgerBeginIndex": self.store.begin_index,
            "ledgerEndIndex": self.store.end_index,
            "committedIndex": self.committed,
            "appliedIndex": self.committed,
            "votedFor": self.master,
            "incarnation": self.incarnation,
            "mode": "ha",
            "bug": self.cfg.bug_spec or None,
            "sync": self.cfg.ha_sync,
            "offset": self.store.data_length,
            # what a SIGKILL cannot take back: "offset" counts bytes still in the
            # process's write buffer
            "durableOffset": self._durable_offset(),
            "push2SlaveMaxOffset": self.push2slave,
            "slaves": len(self.slaves),
            "haState": self.slave_state if self.role == SLAVE else None,
            "sealed": self.broker.sealed,
        }
