"""Follower reads: read index served by a follower (read mode ``follower``, spec §8.3a).

A follower that is asked a linearizable read asks its leader for a read index over
the peer link, waits until it has applied that index, and answers from its own
state. The leader's half is the read index it would take for its own reads (its
NOOP committed, a heartbeat round started after the request confirming it still
leads), so the answer reflects every write acknowledged before the read arrived.
It saves the client the redirect and the second request, which on a five-node
cluster is four reads in five, and spreads the reads over every node.

Why a batch: concurrent reads share one request, but only reads that arrived
before it was *sent*: a read index taken before a read began could miss a write
acknowledged in between.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from node_impl.node import Node

__all__ = ["FollowerReads", "READ_INDEX"]

READ_INDEX = "read-index"
"""The peer request a follower sends its leader; the reply carries ``index`` and ``term``."""


class FollowerReads:
    """One follower's batched read-index requests to the leader it follows."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._waiters: list[asyncio.Future[int | None]] = []
        self._task: asyncio.Task | None = None

    def leader_in_reach(self) -> bool:
        """Worth asking: a leader is known, linked, and heard from within E. A follower
        cut off from it redirects at once instead of holding the read for a timeout."""
        n = self.node
        leader = n.leader_id
        return (
            leader is not None
            and leader in n.links
            and time.monotonic() - n.elector.last_leader_hb <= n.cfg.election_s
        )

    async def read_index(self) -> int | None:
        """The leader's read index for a read that arrived now, or None if it gave none."""
        fut: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if self._task is None or self._task.done():
            self._task = self.node.spawn(self._loop())
        return await fut

    async def _loop(self) -> None:
        while self._waiters:
            waiters, self._waiters = self._waiters, []
            try:
                index = await self._ask()
            except Exception as e:  # a waiter must never hang on a failed request
                self.node.log.info("read-index-error", error=repr(e))
                index = None
            for w in waiters:
                if not w.done():
                    w.set_result(index)

    async def _ask(self) -> int | None:
        n = self.node
        leader, term = n.leader_id, n.term
        link = n.links.get(leader) if leader is not None else None
        if link is None:
            return None
        r = await link.request({"type": READ_INDEX, "term": term}, n.cfg.election_s)
        if r is None or r.get("code") != "SUCCESS":
            return None
        index = r.get("index")
        if type(index) is not int:
            return None
        if r.get("term") == n.term == term and n.leader_id == leader:
            # The leader's commit index at the read, from our leader in our term: the
            # same thing a push's commitIndex is, and bounded the same way (match index).
            n.handler.take_commit(index)
        return index
