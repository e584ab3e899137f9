"""Mode ``ha`` as a RocketMQ broker: send, pull and consume offsets on the classic commitlog.

A classic master/slave RocketMQ broker serves producers and consumers exactly as a
DLedger one does; only how its commitlog is replicated differs. So the queue
workload speaks the same requests to both modes (docs/broker-mode.md B4, B5a), and
one history can span the upgrade from one to the other:

* A message is an ``append`` entry whose payload is ``{"topic", "queue", "body",
  "keys"}``: the very record the broker reads back from the legacy commitlog after
  the upgrade (:func:`node_impl.broker.decode_msg`), at the same physical offset
  (``pos + 48``) and, since both walk the log in index order, the same queue offset.
* Consume queues are dispatched from the whole local log, master and slave alike:
  a classic master's ReputMessageService dispatches what it has written, and a
  slave holds a byte prefix of the master's log (this mode never truncates).
* ``ha-seal`` is the operator's ``updateBrokerConfig brokerPermission=read-only``
  that starts the upgrade: the master refuses every write from then on
  (``NO_PERMISSION``: nothing written) and keeps streaming to its slaves, so they
  can all reach the same, final old commitlog. It is kept in ``DIR/sealed`` (the
  broker's config file), so a restarted master stays read-only.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from node_impl.broker import MAX_PULL, ConsumeQueues, decode_msg, phys_offset
from node_impl.kv import body_append

if TYPE_CHECKING:
    from node_impl.ha import HANode

__all__ = ["HABroker", "SEALED_FILE", "NO_PERMISSION"]

SEALED_FILE = "sealed"
NO_PERMISSION = "NO_PERMISSION"
"""RocketMQ's answer to a send on a broker without write permission: nothing written."""


def _where(msg: dict) -> tuple[str, int] | None:
    topic, queue = msg.get("topic"), msg.get("queue")
    if not isinstance(topic, str) or not isinstance(queue, int) or isinstance(queue, bool):
        return None
    return topic, queue


class HABroker:
    """The broker requests of a mode-ha node, over its own log."""

    def __init__(self, node: HANode) -> None:
        self.node = node
        self.cq = ConsumeQueues()
        self.sealed = os.path.exists(node.cfg.data_dir / SEALED_FILE)
        self.handlers: dict[Any, Callable[[dict], Awaitable[dict]]] = {
            "send": self.send,
            "pull": self.pull,
            "commit-offset": self.commit_offset,
            "query-offset": self.query_offset,
            "ha-seal": self.seal,
        }

    def reput(self) -> None:
        store = self.node.store
        if store.end_index > self.cq.dispatched:
            self.cq.dispatch(store.entries(self.cq.dispatched + 1, store.end_index))

    def _redirect(self) -> dict:
        return {
            "type": "redirect",
            "code": "NOT_LEADER",
            "leader": self.node.leader_id,
            "leader_addr": self.node.leader_addr,
        }

    async def _write(self, payload: dict) -> tuple[dict | None, int]:
        """(error reply, None) or (None, log index) once the node's ack rule is met."""
        r = self.node.propose([body_append(payload)], "append")
        if isinstance(r, str):
            return (self._redirect() if r == "NOT_LEADER" else {"code": r}), -1
        code, res = await r.fut
        if code != "SUCCESS":
            return {"code": code}, -1
        return None, int(res["index"])

    async def send(self, msg: dict) -> dict:
        w = _where(msg)
        keys = msg.get("keys")
        if w is None or (keys is not None and not isinstance(keys, str)):
            return {"code": "UNSUPPORTED", "error": "send needs topic: str, queue: int, keys: str"}
        err, index = await self._write(
            {"topic": w[0], "queue": w[1], "body": msg.get("body"), "keys": keys}
        )
        if err is not None:
            return err
        self.reput()
        placed = self.cq.placed.get(index)
        if placed is None:
            return {"code": "UNKNOWN_OFFSET", "index": index}
        e = self.node.store.get(index)
        return {
            "code": "SUCCESS",
            "offset": phys_offset(e),
            "queue_offset": placed.queue_offset,
            "index": index,
            "term": e.term,
        }

    async def pull(self, msg: dict) -> dict:
        w = _where(msg)
        offset, n = msg.get("offset", 0), msg.get("max", 32)
        if w is None or not isinstance(offset, int) or not isinstance(n, int):
            return {"code": "UNSUPPORTED", "error": "pull needs topic, queue, offset, max"}
        self.reput()
        out: list[list[Any]] = []
        next_offset = max(offset, 0)
        for qo, index in self.cq.slice(w[0], w[1], offset, min(max(n, 0), MAX_PULL)):
            e = self.node.store.get(index)
            obj = decode_msg(e) or {}
            out.append([qo, phys_offset(e), obj.get("body"), obj.get("keys")])
            next_offset = qo + 1
        return {
            "code": "SUCCESS",
            "messages": out,
            "min_offset": 0,
            "max_offset": self.cq.max_offset(w[0], w[1]),
            "next_offset": next_offset,
            "role": self.node.role,
            "committedIndex": self.node.committed,
        }

    async def commit_offset(self, msg: dict) -> dict:
        w = _where(msg)
        group, offset = msg.get("group"), msg.get("offset")
        if w is None or not isinstance(group, str) or not isinstance(offset, int):
            return {
                "code": "UNSUPPORTED",
                "error": "commit-offset needs group, topic, queue, offset",
            }
        # no "topic" key at the top: the dispatcher (here and after the upgrade) skips it
        err, index = await self._write(
            {"consumer_offset": {"group": group, "topic": w[0], "queue": w[1], "offset": offset}}
        )
        if err is not None:
            return err
        key = (group, w[0], w[1])
        self.cq.consumer_offsets[key] = max(self.cq.consumer_offsets.get(key, -1), offset)
        return {"code": "SUCCESS", "index": index}

    async def query_offset(self, msg: dict) -> dict:
        w = _where(msg)
        group = msg.get("group")
        if w is None or not isinstance(group, str):
            return {"code": "UNSUPPORTED", "error": "query-offset needs group, topic, queue"}
        return {"code": "SUCCESS", "offset": self.cq.consumer_offsets.get((group, *w), -1)}

    async def seal(self, msg: dict) -> dict:
        """Read-only from now on (idempotent): the first step of the upgrade."""
        if not self.sealed:
            path = self.node.cfg.data_dir / SEALED_FILE
            with open(path, "w", encoding="utf-8") as f:
                f.write("brokerPermission=read-only\n")
                f.flush()
                os.fsync(f.fileno())
            self.sealed = True
            self.node.log.info("ha-seal", offset=self.node.store.data_length)
        return {"code": "SUCCESS", "offset": self.node.store.data_length}
