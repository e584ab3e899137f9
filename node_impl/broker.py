"""Mode ``broker``: a RocketMQ broker whose commitlog is the DLedger log (docs/broker-mode.md).

RocketMQ's ``DLedgerCommitLog`` puts each whole message record into one DLedger
entry body, so replication, election and commit stay DLedger's business and the
broker is only a layer on top of the committed log. This module is that layer on
the reference node (:class:`node_impl.node.Node`), which it reuses unchanged:

* **Commitlog.** A message ``{"op": "msg", "topic", "queue", "body", "keys"}`` is
  one entry; its physical offset is ``entry.pos + 48`` (the entry header size),
  stamped when the leader appends and so identical on every replica.
* **Consume queues.** A dispatcher (RocketMQ's ReputMessageService) walks the log
  up to the *committed* index and appends each message's log index to its
  (topic, queue) list; the position in that list is the message's queue offset.
  Queues are in memory and rebuilt from the committed log at start, so every
  replica derives the same offsets from the same committed prefix.
* **Role handler.** The broker is master exactly while its node leads and has
  committed everything up to its ledger end (the election NOOP included); it is
  slave otherwise. Sends need a master (DLedger refuses appends on a non-leader
  anyway); pulls are served by master and slave alike, from the consume queues,
  so a slave never shows an uncommitted message.

Two seeded bugs live here (``node_impl/bugs.py``, ``BROKER_BUGS``):
``broker-stale-master`` (the role handler never demotes, and a deposed master
keeps acking sends after its local write) and ``broker-cq-beyond-commit``
(consume queues rebuilt at start from every entry in the log, committed or not).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node_impl.config import NodeConfig
from node_impl.node import LEADER, Node
from node_impl.store import HEADER_SIZE, MAGIC_NOOP, Entry, LogStore, decode_body, encode_body

__all__ = [
    "BrokerNode",
    "BrokerAPI",
    "ConsumeQueues",
    "MASTER",
    "SLAVE",
    "body_msg",
    "body_consumer_offset",
    "decode_msg",
    "prepare_upgrade",
    "legacy_ref",
]

MASTER, SLAVE = "master", "slave"
MAX_PULL = 256  # messages per pull (RocketMQ maxMsgNums defaults to 32)
BROKER_FILE = "broker.json"  # {"dividedCommitlogOffset": D}, written at the first broker start
LEGACY_DIR = "legacy"  # the pre-upgrade (mode ha) commitlog, read-only
ROLE_POLL_S = 0.05


def body_msg(topic: str, queue: int, body: Any, keys: str | None) -> bytes:
    """The entry body of one message (RocketMQ: the whole message record)."""
    return encode_body({"op": "msg", "topic": topic, "queue": queue, "body": body, "keys": keys})


def body_consumer_offset(group: str, topic: str, queue: int, offset: int) -> bytes:
    """A consumer group's committed consume offset, replicated like any entry."""
    return encode_body(
        {"op": "coff", "group": group, "topic": topic, "queue": queue, "offset": offset}
    )


def decode_msg(e: Entry) -> dict | None:
    """The message or consumer-offset map an entry carries, None for anything else."""
    if e.magic == MAGIC_NOOP or not e.body:
        return None
    try:
        obj = decode_body(e.body)
    except Exception:
        return None
    if isinstance(obj, dict) and obj.get("op") in ("msg", "coff"):
        return obj
    if isinstance(obj, dict) and obj.get("op") == "append" and isinstance(obj.get("p"), dict):
        p = obj["p"]  # a message a producer wrote through mode ha's append (before the upgrade)
        if "topic" in p and "queue" in p:
            return {
                "op": "msg",
                "topic": p.get("topic"),
                "queue": p.get("queue"),
                "body": p.get("body"),
                "keys": p.get("keys"),
            }
    return None


def legacy_ref(index: int) -> int:
    """A consume-queue reference to entry ``index`` of the legacy commitlog (negative,
    so one int list holds both logs; DLedger entries are referenced by their index)."""
    return -1 - index


def prepare_upgrade(data_dir: os.PathLike[str] | str, *, divided_from_start: bool = False) -> int:
    """The smooth upgrade, done once at the first broker start in a data dir: returns
    the divided commitlog offset (0 when there is no older commitlog).

    A data dir with a ``data.log`` but no ``broker.json`` holds a commitlog written
    in another mode (``ha``). It moves, untouched, to ``legacy/``, where it stays
    readable at its old offsets; DLedger starts an empty log, and its physical
    offsets continue from the divided offset: the legacy commitlog's end (RocketMQ's
    ``dividedCommitlogOffset``). Seeded bug ``broker-divided-from-start`` takes the
    wrong end (the legacy start), so new offsets overlap old ones.
    """
    d = os.fspath(data_dir)
    meta = os.path.join(d, BROKER_FILE)
    if os.path.exists(meta):
        with open(meta, encoding="utf-8") as f:
            return int(json.load(f).get("dividedCommitlogOffset", 0))
    # No broker.json yet: a first start, or one that died half-way through this
    # function. Every step below is safe to redo, so a restart rolls the upgrade
    # forward (the old commitlog is never moved back: docs/broker-mode.md B5b).
    divided = 0
    legacy = os.path.join(d, LEGACY_DIR)
    data = os.path.join(d, "data.log")
    moved = os.path.exists(os.path.join(legacy, "data.log"))
    if moved or (os.path.exists(data) and os.path.getsize(data) > 0):
        os.makedirs(legacy, exist_ok=True)
        for name in ("data.log", "index.idx"):
            src = os.path.join(d, name)
            if os.path.exists(src):
                os.replace(src, os.path.join(legacy, name))
        _fsync_dir(legacy)
        _fsync_dir(d)
        with LogStore(Path(legacy)) as old:  # recovery cuts a torn tail: its end is the end
            divided = 0 if divided_from_start else old.data_length
        for name in ("checkpoint.json",):  # the old commit point says nothing about DLedger's log
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(d, name))
    tmp = meta + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"dividedCommitlogOffset": divided}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, meta)
    return divided


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def phys_offset(e: Entry) -> int:
    """The message's commitlog offset: where its record starts, past the entry header."""
    return e.pos + HEADER_SIZE


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a dispatched message landed: its queue and its offset there."""

    topic: str
    queue: int
    queue_offset: int


class ConsumeQueues:
    """The broker's derived state: consume queues and consumer offsets.

    Pure (no I/O): it is fed entries in log order by :meth:`dispatch` and
    remembers how far it got (``dispatched``), so the node can rebuild it at start
    and keep it current as the commit index rises. The unit tests drive it
    directly.
    """

    def __init__(self) -> None:
        self.queues: dict[tuple[str, int], list[int]] = {}  # (topic, queue) -> log indexes
        self.placed: dict[int, Placed] = {}  # log index -> placement
        self.consumer_offsets: dict[tuple[str, str, int], int] = {}
        self.dispatched = -1

    def dispatch_legacy(self, entries: list[Entry]) -> None:
        """The pre-upgrade commitlog's messages, ahead of everything DLedger holds."""
        for e in entries:
            obj = decode_msg(e)
            if obj is None or obj["op"] != "msg":
                continue
            topic, queue = obj.get("topic"), obj.get("queue")
            if isinstance(topic, str) and isinstance(queue, int):
                self.queues.setdefault((topic, queue), []).append(legacy_ref(e.index))

    def dispatch(self, entries: list[Entry]) -> None:
        for e in entries:
            if e.index <= self.dispatched:
                continue
            self.dispatched = e.index
            obj = decode_msg(e)
            if obj is None:
                continue
            topic, queue = obj.get("topic"), obj.get("queue")
            if not isinstance(topic, str) or not isinstance(queue, int):
                continue
            if obj["op"] == "msg":
                q = self.queues.setdefault((topic, queue), [])
                self.placed[e.index] = Placed(topic, queue, len(q))
                q.append(e.index)
            elif isinstance(obj.get("group"), str) and isinstance(obj.get("offset"), int):
                key = (obj["group"], topic, queue)
                self.consumer_offsets[key] = max(self.consumer_offsets.get(key, -1), obj["offset"])

    def max_offset(self, topic: str, queue: int) -> int:
        """The next queue offset to be assigned (RocketMQ's maxOffset)."""
        return len(self.queues.get((topic, queue), ()))

    def slice(self, topic: str, queue: int, offset: int, n: int) -> list[tuple[int, int]]:
        """``[(queue offset, log index)]`` for up to ``n`` messages from ``offset``."""
        q = self.queues.get((topic, queue), [])
        lo = max(offset, 0)
        return [(qo, q[qo]) for qo in range(lo, min(len(q), lo + n))]


class BrokerNode(Node):
    """The DLedger node plus the broker layer: consume queues and the role handler."""

    def __init__(self, cfg: NodeConfig) -> None:
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        # before the node opens its store: an older commitlog moves aside first
        self.divided = prepare_upgrade(
            cfg.data_dir, divided_from_start=cfg.bugs.broker_divided_from_start
        )
        legacy = cfg.data_dir / LEGACY_DIR
        self.legacy: LogStore | None = LogStore(legacy) if (legacy / "data.log").exists() else None
        super().__init__(cfg)
        self.cq = ConsumeQueues()
        self.broker_role = SLAVE
        self.master_term = -1  # the term this broker became master in
        self._broker_tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        # DefaultMessageStore#load: consume queues come back from the commitlog
        # before the broker serves anything.
        if self.legacy is not None:
            self.cq.dispatch_legacy(self.legacy.entries(0, self.legacy.end_index))
        hi = self.store.end_index if self.bugs.broker_cq_beyond_commit else self.committed
        self.cq.dispatch(self.store.entries(0, hi))
        self.log.info(
            "broker-load",
            dispatched=self.cq.dispatched,
            committed=self.committed,
            end=self.store.end_index,
            divided=self.divided,
            legacy_end=None if self.legacy is None else self.legacy.end_index,
        )
        await super().start()
        assert self.servers is not None
        self.servers.api.handlers.update(BrokerAPI(self).handlers)
        loop = asyncio.get_running_loop()
        self._broker_tasks = [
            loop.create_task(self._reput_loop()),
            loop.create_task(self._role_loop()),
        ]

    async def stop(self) -> None:
        for t in self._broker_tasks:
            t.cancel()
        for t in self._broker_tasks:
            with contextlib.suppress(BaseException):
                await t
        await super().stop()
        if self.legacy is not None:
            with contextlib.suppress(Exception):
                self.legacy.close()

    # ------------------------------------------------------------------ dispatch

    def reput(self) -> None:
        """Dispatch committed entries not yet in the consume queues (never past commit)."""
        hi = min(self.committed, self.store.end_index)
        if hi > self.cq.dispatched:
            self.cq.dispatch(self.store.entries(self.cq.dispatched + 1, hi))

    async def _reput_loop(self) -> None:
        while not self.stopping:
            self.reput()
            await self.commit_signal.wait(ROLE_POLL_S)

    # ------------------------------------------------------------------ role handler

    def _should_master(self) -> bool:
        """DLedgerRoleChangeHandler: master once leading with ledgerEnd = committed."""
        return (
            self.role == LEADER
            and self.committed >= self.ready_index
            and self.committed >= self.store.end_index
        )

    def handle_role(self) -> None:
        want = MASTER if self.role == LEADER and self._should_master() else SLAVE
        if self.broker_role == MASTER and self.role == LEADER and self.term == self.master_term:
            want = MASTER  # stays master while leading in the same term, however busy
        if want == SLAVE and self.broker_role == MASTER and self.bugs.broker_stale_master:
            return  # seeded bug: the handler never demotes a master
        if want != self.broker_role:
            self.broker_role = want
            if want == MASTER:
                self.master_term = self.term
            self.log.line("BROKER", role=want, term=self.term)

    async def _role_loop(self) -> None:
        while not self.stopping:
            self.handle_role()
            await self.role_signal.wait(ROLE_POLL_S)

    def status(self) -> dict:
        out = super().status()
        out["brokerRole"] = self.broker_role
        out["dispatchedIndex"] = self.cq.dispatched
        out["dividedCommitlogOffset"] = self.divided
        return out

    # ------------------------------------------------------------------ sends

    async def send(self, topic: str, queue: int, body: Any, keys: str | None) -> dict:
        """Put one message; the reply map (without rid) per docs/broker-mode.md."""
        self.handle_role()
        raw = body_msg(topic, queue, body, keys)
        if self.broker_role == MASTER and self.role != LEADER and self.bugs.broker_stale_master:
            return self._send_deposed(topic, queue, raw)
        if self.role != LEADER:
            return {
                "type": "redirect",
                "code": "NOT_LEADER",
                "leader": self.leader_id,
                "leader_addr": self.leader_addr,
            }
        if self.broker_role != MASTER:
            return {"code": "MASTER_NOT_READY"}
        r = self.propose([raw], "append")
        if isinstance(r, str):
            if r == "NOT_LEADER":
                return {
                    "type": "redirect",
                    "code": "NOT_LEADER",
                    "leader": self.leader_id,
                    "leader_addr": self.leader_addr,
                }
            return {"code": r}
        code, res = await r.fut
        if code != "SUCCESS":
            return {"code": code}
        index = res["index"]
        self.reput()
        placed = self.cq.placed.get(index)
        if placed is None:  # committed and applied, yet not dispatched: cannot say where
            return {"code": "UNKNOWN_OFFSET", "index": index}
        e = self.store.get(index)
        return {
            "code": "SUCCESS",
            "offset": self.divided + phys_offset(e),
            "queue_offset": placed.queue_offset,
            "index": index,
            "term": res["term"],
        }

    def _send_deposed(self, topic: str, queue: int, raw: bytes) -> dict:
        """Seeded bug ``broker-stale-master``: a deposed master writes locally and acks.

        The entry carries the term it mastered in, so its log never looks newer
        than the real leader's; the leader's next COMPARE finds it and truncates.
        """
        e = self.store.append_leader(max(self.master_term, self.store.end_term), raw)
        return {
            "code": "SUCCESS",
            "offset": self.divided + phys_offset(e),
            "queue_offset": self.cq.max_offset(topic, queue),
            "index": e.index,
            "term": e.term,
        }

    async def commit_offset(self, group: str, topic: str, queue: int, offset: int) -> dict:
        self.handle_role()
        if self.role != LEADER:
            return {
                "type": "redirect",
                "code": "NOT_LEADER",
                "leader": self.leader_id,
                "leader_addr": self.leader_addr,
            }
        r = self.propose([body_consumer_offset(group, topic, queue, offset)], "append")
        if isinstance(r, str):
            return {"code": r}
        code, res = await r.fut
        if code != "SUCCESS":
            return {"code": code}
        return {"code": "SUCCESS", "index": res["index"]}

    # ------------------------------------------------------------------ pulls

    def pull(self, topic: str, queue: int, offset: int, n: int) -> dict:
        """Messages from the consume queue: committed ones only, on master and slave."""
        self.reput()
        out: list[list[Any]] = []
        next_offset = max(offset, 0)
        for qo, index in self.cq.slice(topic, queue, offset, min(max(n, 0), MAX_PULL)):
            try:
                if index < 0:  # the legacy commitlog, at its old offsets
                    assert self.legacy is not None
                    e = self.legacy.get(legacy_ref(index))
                    off = phys_offset(e)
                else:
                    e = self.store.get(index)
                    off = self.divided + phys_offset(e)
            except Exception:
                break  # the queue points past the log (only under a seeded bug)
            obj = decode_msg(e) or {}
            out.append([qo, off, obj.get("body"), obj.get("keys")])
            next_offset = qo + 1
        return {
            "code": "SUCCESS",
            "messages": out,
            "min_offset": 0,
            "max_offset": self.cq.max_offset(topic, queue),
            "next_offset": next_offset,
            "role": self.broker_role,
            "committedIndex": self.committed,
        }


class BrokerAPI:
    """The broker's client requests, added to the node's (``status`` adds brokerRole)."""

    def __init__(self, node: BrokerNode) -> None:
        self.node = node
        self.handlers: dict[Any, Callable[[dict], Awaitable[dict]]] = {
            "send": self.send,
            "pull": self.pull,
            "commit-offset": self.commit_offset,
            "query-offset": self.query_offset,
        }

    @staticmethod
    def _where(msg: dict) -> tuple[str, int] | None:
        topic, queue = msg.get("topic"), msg.get("queue")
        if not isinstance(topic, str) or not isinstance(queue, int) or isinstance(queue, bool):
            return None
        return topic, queue

    async def send(self, msg: dict) -> dict:
        w = self._where(msg)
        keys = msg.get("keys")
        if w is None or (keys is not None and not isinstance(keys, str)):
            return {"code": "UNSUPPORTED", "error": "send needs topic: str, queue: int, keys: str"}
        return await self.node.send(w[0], w[1], msg.get("body"), keys)

    async def pull(self, msg: dict) -> dict:
        w = self._where(msg)
        offset, n = msg.get("offset", 0), msg.get("max", 32)
        if w is None or not isinstance(offset, int) or not isinstance(n, int):
            return {"code": "UNSUPPORTED", "error": "pull needs topic, queue, offset, max"}
        return self.node.pull(w[0], w[1], offset, n)

    async def commit_offset(self, msg: dict) -> dict:
        w = self._where(msg)
        group, offset = msg.get("group"), msg.get("offset")
        if w is None or not isinstance(group, str) or not isinstance(offset, int):
            return {
                "code": "UNSUPPORTED",
                "error": "commit-offset needs group, topic, queue, offset",
            }
        return await self.node.commit_offset(group, w[0], w[1], offset)

    async def query_offset(self, msg: dict) -> dict:
        w = self._where(msg)
        group = msg.get("group")
        if w is None or not isinstance(group, str):
            return {"code": "UNSUPPORTED", "error": "query-offset needs group, topic, queue"}
        self.node.reput()
        return {
            "code": "SUCCESS",
            "offset": self.node.cq.consumer_offsets.get((group, w[0], w[1]), -1),
        }
