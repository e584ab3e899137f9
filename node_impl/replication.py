"""Leader-side replication: one EntryDispatcher per peer (spec §5).

A dispatcher first finds where the follower's log agrees with the leader's
(COMPARE, walking back one entry per round trip), cuts the follower there
(TRUNCATE) and then streams APPEND pushes, many entries per push, with up to
``MAX_PENDING`` pushes in flight. Replies raise the peer's water mark, which
drives the quorum checker. ``gen`` changes whenever the dispatcher restarts its
protocol, and a reply carrying an old gen is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from node_impl.node import Node
    from node_impl.peers import PeerLink

__all__ = ["compare_decision", "EntryDispatcher", "MAX_PENDING", "MAX_BATCH"]

MAX_PENDING = 1000  # maxPendingSize: pushes in flight per peer
# Pushes in flight per peer in steady state. While they travel, new entries gather and
# leave together in the next push: one frame per follower per batch, not per entry,
# which on the lab (a send through a veth and a bridge costs tens of microseconds of
# kernel time) was a third of the leader's CPU. Catch-up still streams MAX_BATCH per push.
MAX_INFLIGHT = 2
MAX_BATCH = 512  # entries per APPEND push
MAX_BATCH_BYTES = 1 << 20
PUSH_RETRY_S = 1.0  # maxPushTimeOutMs
COMPARE_TIMEOUT_S = 3.0
COMPARE_RETRY_S = 0.5
REJECT_RETRY_S = 0.05  # peer not yet following us: try again soon
MAX_LINK_BUFFER = 8 << 20


def compare_decision(
    c: int, l_begin: int, l_end: int, success: bool, f_begin: int, f_end: int
) -> tuple[str, int]:
    """The COMPARE table (spec §5.2): ("append", c) | ("truncate", t) | ("compare", c')."""
    if success:
        if c == f_end:
            return ("append", c)
        return ("truncate", c)  # the follower holds a longer, dirty suffix
    if f_end < l_begin or f_begin > l_end:
        return ("truncate", l_begin)  # disjoint, e.g. an empty follower
    if c < f_begin:
        return ("truncate", l_begin)
    nc = f_end if c > f_end else c - 1  # behind: jump to its end; divergent: step back
    if nc < l_begin:
        return ("truncate", l_begin)
    return ("compare", nc)


class EntryDispatcher:
    def __init__(self, node: Node, peer: str, link: PeerLink) -> None:
        self.node = node
        self.peer = peer
        self.link = link
        self.state = "COMPARE"
        self.term = -1
        self.gen = 0
        self.c = -1
        self.t = -1
        self.write_index = 0
        self.pending: dict[int, list] = {}  # first index -> [sent_at, count]
        self.last_push = 0.0
        self.last_sweep = 0.0
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def _sleep(self, timeout: float) -> None:
        if self._wake.is_set():
            self._wake.clear()
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)
        self._wake.clear()

    def refresh(self) -> None:
        self.term = self.node.term
        self.gen += 1
        self.pending.clear()
        self.c = -1
        self.state = "COMPARE"

    def _to_compare(self) -> None:
        self.gen += 1
        self.pending.clear()
        self.c = -1
        self.state = "COMPARE"
        self.wake()

    def _stale(self, gen: int, term: int) -> bool:
        n = self.node
        return gen != self.gen or term != n.term or n.role != "leader" or self.term != term

    def _msg(self, kind: str, entries: list) -> dict:
        n = self.node
        return {
            "type": "push",
            "kind": kind,
            "term": self.term,
            "leader": n.id,
            "commitIndex": n.committed,
            "gen": self.gen,
            "entries": entries,
        }

    def _check_term(self, resp: dict) -> bool:
        """(ours) a push-resp with a higher term demotes the leader. True if it did."""
        rterm = resp.get("term")
        if isinstance(rterm, int) and rterm > self.node.term:
            self.node.become_candidate(rterm, need_increase=True)
            return True
        return False

    async def run(self) -> None:
        node = self.node
        while not node.stopping:
            try:
                if node.role != "leader" or node.stopping:
                    self.term = -1
                    await self._sleep(0.1)
                    continue
                if self.term != node.term:
                    self.refresh()
                if self.state == "COMPARE":
                    await self._compare()
                elif self.state == "TRUNCATE":
                    await self._truncate()
                else:
                    await self._append()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                node.log.info("dispatcher-error", peer=self.peer, error=repr(e))
                await asyncio.sleep(0.1)

    async def _call(self, msg: dict, timeout: float) -> dict | None:
        return await self.link.request(msg, timeout)

    # ------------------------------------------------------------------ COMPARE / TRUNCATE

    async def _compare(self) -> None:
        store = self.node.store
        begin, end = store.begin_index, store.end_index
        if end < 0:
            await self._sleep(0.1)
            return
        if self.c == -1 or not begin <= self.c <= end:
            self.c = end
        gen, term, c = self.gen, self.term, self.c
        resp = await self._call(self._msg("COMPARE", [store.get(c).to_wire()]), COMPARE_TIMEOUT_S)
        if self._stale(gen, term):
            return
        if resp is None:
            await asyncio.sleep(COMPARE_RETRY_S)
            return
        if self._check_term(resp):
            return
        code = resp.get("code")
        if code not in ("SUCCESS", "INCONSISTENT_STATE"):
            await asyncio.sleep(REJECT_RETRY_S)
            return
        fb, fe = resp.get("beginIndex", -1), resp.get("endIndex", -1)
        action, x = compare_decision(
            c, store.begin_index, store.end_index, code == "SUCCESS", fb, fe
        )
        if action == "append":
            self.node.raise_mark(self.peer, c)
            self.write_index = c + 1
            self.state = "APPEND"
            self.last_push = time.monotonic()
        elif action == "truncate":
            self.t = x
            self.state = "TRUNCATE"
        else:
            self.c = x

    async def _truncate(self) -> None:
        store = self.node.store
        t = self.t
        if not 0 <= t <= store.end_index:
            self._to_compare()
            return
        gen, term = self.gen, self.term
        self.node.log.info("truncate-peer", peer=self.peer, index=t, term=term)
        resp = await self._call(self._msg("TRUNCATE", [store.get(t).to_wire()]), COMPARE_TIMEOUT_S)
        if self._stale(gen, term):
            return
        if resp is None:
            await asyncio.sleep(COMPARE_RETRY_S)
            self._to_compare()
            return
        if self._check_term(resp):
            return
        if resp.get("code") == "SUCCESS":
            self.node.raise_mark(self.peer, t)
            self.write_index = t + 1
            self.state = "APPEND"
            self.last_push = time.monotonic()
        else:
            self._to_compare()

    # ------------------------------------------------------------------ APPEND

    def _mark(self) -> int:
        return self.node.marks.get(self.peer, -1)

    def _sweep(self) -> None:
        mark = self._mark()
        for first in [f for f, (_, cnt) in self.pending.items() if f + cnt - 1 <= mark]:
            del self.pending[first]

    def _send_push(self, first: int, count: int) -> None:
        store = self.node.store
        entries = [e.to_wire() for e in store.entries(first, first + count - 1)]
        if not entries:
            return
        fut = self.link.send(self._msg("APPEND", entries))
        gen, term = self.gen, self.term
        fut.add_done_callback(lambda f: self._on_append_reply(f, gen, term, first))
        self.last_push = time.monotonic()

    def _on_append_reply(self, fut: asyncio.Future, gen: int, term: int, first: int) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if self._stale(gen, term):
            return
        if exc is not None:
            self._to_compare()  # connection lost: the peer may have restarted
            return
        resp = fut.result()
        if self._check_term(resp):
            return
        code = resp.get("code")
        if code == "SUCCESS":
            self.pending.pop(first, None)
            idx = resp.get("index")
            if isinstance(idx, int):
                self.node.raise_mark(self.peer, idx)
            self.wake()
        elif code == "INCONSISTENT_STATE":
            self._to_compare()

    def _check_retry(self, now: float) -> None:
        mark = self._mark()
        item = self.pending.get(mark + 1)
        if item is not None and now - item[0] > PUSH_RETRY_S:
            item[0] = now
            self._send_push(mark + 1, item[1])

    async def _append(self) -> None:
        node = self.node
        store = node.store
        now = time.monotonic()
        if not self.link.connected and not await self.link.connect(COMPARE_TIMEOUT_S):
            await asyncio.sleep(COMPARE_RETRY_S)
            self._to_compare()
            return
        if now - self.last_sweep > 1.0 or len(self.pending) >= MAX_INFLIGHT:
            self.last_sweep = now
            self._sweep()
        end = store.end_index
        if self.write_index > end:
            if now - self.last_push > node.cfg.heartbeat_s:
                fut = self.link.send(self._msg("COMMIT", []))
                fut.add_done_callback(_ignore)
                self.last_push = now
            self._check_retry(now)
            await self._sleep(min(0.1, node.cfg.heartbeat_s / 2))
            return
        if len(self.pending) >= MAX_INFLIGHT:
            self._check_retry(now)
            await self._sleep(0.05)
            return
        if self.link.buffered() > MAX_LINK_BUFFER:
            await self.link.drain(0.5)
            self._check_retry(time.monotonic())
            return
        first = self.write_index
        count = min(end - first + 1, MAX_BATCH)
        entries = store.entries(first, first + count - 1)
        size = 0
        for i, e in enumerate(entries):
            size += e.size
            if size > MAX_BATCH_BYTES and i > 0:
                entries = entries[:i]
                break
        count = len(entries)
        wire = [e.to_wire() for e in entries]
        gen, term = self.gen, self.term
        fut = self.link.send(self._msg("APPEND", wire))
        fut.add_done_callback(lambda f: self._on_append_reply(f, gen, term, first))
        self.pending[first] = [now, count]
        self.write_index = first + count
        self.last_push = now
        await asyncio.sleep(0)


def _ignore(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()
