"""Follower-side replication: the EntryHandler (spec §6).

Pushes pass a gate (ours: only from the leader we follow, in our term). COMPARE
and TRUNCATE are handled in arrival order ahead of any APPEND; APPENDs wait in
``write_buf`` by first index until they fit at the end of the log. One worker
appends every push that fits, fsyncs once for all of them (group commit, R2) and
only then answers SUCCESS. ``match_index`` — how far this log is known to equal
the leader's in this term — bounds the commit index we take from the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from node_impl.quorum import follower_commit
from node_impl.store import Entry, InconsistentState, LogStore

if TYPE_CHECKING:
    from node_impl.node import Node

__all__ = ["EntryHandler", "gate"]

GAP_WAIT_S = 1.0

Reply = Callable[[dict], None]


def gate(role: str, term: int, leader: str | None, req_term: int, req_leader: str) -> str | None:
    """None if a push may be handled, else the rejection code (spec §6.1)."""
    if req_term < term:
        return "EXPIRED_TERM"
    if req_term > term:
        return "INCONSISTENT_TERM"
    if leader is not None and req_leader != leader:
        return "INCONSISTENT_LEADER"
    if role != "follower" or leader is None:
        return "NOT_FOLLOWER"
    return None


def term_runs(store: LogStore, lo: int, hi: int) -> str:
    """The terms of entries ``lo..hi`` as ``term:first-last`` runs joined by commas (a
    log's terms never decrease, so a range has few runs)."""
    runs: list[list[int]] = []
    for i in range(lo, hi + 1):
        t = store.term_at(i)
        if runs and runs[-1][0] == t:
            runs[-1][2] = i
        else:
            runs.append([t, i, i])
    return ",".join(f"{t}:{a}-{b}" for t, a, b in runs)


class _Push:
    __slots__ = ("req", "entries", "reply", "arrived")

    def __init__(self, req: dict, entries: list[Entry], reply: Reply) -> None:
        self.req, self.entries, self.reply = req, entries, reply
        self.arrived = time.monotonic()

    @property
    def first(self) -> int:
        return self.entries[0].index

    @property
    def last(self) -> int:
        return self.entries[-1].index


class EntryHandler:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.match_index = -1
        self.write_buf: dict[int, _Push] = {}
        self._heap: list[int] = []
        self._control: deque[_Push] = deque()
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------ state

    def reset(self) -> None:
        """Term or leader changed: nothing is known to match any more."""
        self.match_index = -1
        self._drop_buffered()

    def _drop_buffered(self) -> None:
        bufs, self.write_buf, self._heap = self.write_buf, {}, []
        for p in bufs.values():
            self._reply(p, "INCONSISTENT_STATE")

    def _reply(self, p: _Push, code: str, index: int | None = None) -> None:
        n = self.node
        store = n.store
        p.reply(
            {
                "type": "push-resp",
                "rid": p.req.get("rid"),
                "code": code,
                "term": n.term,
                "index": p.last if index is None else index,
                "beginIndex": store.begin_index,
                "endIndex": store.end_index,
                "gen": p.req.get("gen"),
            }
        )

    def take_commit(self, leader_commit: object) -> None:
        """Adopt the leader's commit index as far as our log is known to match its own
        (a push's ``commitIndex``, or a read index from the leader we follow)."""
        if not isinstance(leader_commit, int):
            return
        n = self.node
        if n.bugs.lax_push_term:
            # seeded bug (DLedger 0.2): cap at our ledger end, not at what we know matches
            v = min(leader_commit, n.store.end_index)
            n.set_committed(max(n.committed, v))
            return
        if n.bugs.commit_regress and self.match_index >= 0:
            n.set_committed(
                follower_commit(n.committed, leader_commit, self.match_index, assign=True)
            )
            return
        n.set_committed(follower_commit(n.committed, leader_commit, self.match_index))

    # ------------------------------------------------------------------ entry point

    def handle_push(self, msg: dict, reply: Reply) -> None:
        n = self.node
        kind = msg.get("kind")
        rterm, rleader = msg.get("term"), msg.get("leader")
        base = {
            "type": "push-resp",
            "rid": msg.get("rid"),
            "term": n.term,
            "gen": msg.get("gen"),
            "beginIndex": n.store.begin_index,
            "endIndex": n.store.end_index,
            "index": -1,
        }
        if not isinstance(rterm, int) or not isinstance(rleader, str):
            reply({**base, "code": "BAD_REQUEST"})
            return
        raw = msg.get("entries")
        if raw is not None and not isinstance(raw, list):
            # a non-list (an int, a float, a map) would raise TypeError below
            reply({**base, "code": "BAD_REQUEST"})
            return
        try:
            entries = [Entry.from_wire(d) for d in raw or []]
        except ValueError as e:
            n.log.info("bad-push", error=e)
            reply({**base, "code": "BAD_REQUEST"})
            return
        why = gate(n.role, n.term, n.leader_id, rterm, rleader)
        lax = kind == "COMPARE" or (kind == "COMMIT" and rterm >= n.term)
        if why is not None and n.bugs.lax_push_term and lax:
            # seeded bug: DLedger 0.2 takes COMPARE from anyone, COMMIT from any term >= ours
            why = None
        if why is not None:
            reply({**base, "code": why})
            return
        if kind == "COMMIT":
            self.take_commit(msg.get("commitIndex"))
            reply({**base, "code": "SUCCESS"})
            return
        if kind in ("COMPARE", "TRUNCATE"):
            if len(entries) != 1:
                reply({**base, "code": "BAD_REQUEST"})
                return
            self._drop_buffered()
            self._control.append(_Push(msg, entries, reply))
            self._wake.set()
            return
        if kind == "APPEND":
            if not entries or any(
                b.index != a.index + 1 for a, b in zip(entries, entries[1:], strict=False)
            ):
                reply({**base, "code": "BAD_REQUEST"})
                return
            p = _Push(msg, entries, reply)
            if p.first in self.write_buf:
                self._reply(p, "REPEATED_PUSH")
                return
            self.write_buf[p.first] = p
            heapq.heappush(self._heap, p.first)
            self.take_commit(msg.get("commitIndex"))
            self._wake.set()
            return
        reply({**base, "code": "UNSUPPORTED"})

    # ------------------------------------------------------------------ worker

    async def run(self) -> None:
        while not self.node.stopping:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.25)
            self._wake.clear()
            try:
                while self._control:
                    self._do_control(self._control.popleft())
                if self.write_buf:
                    await self._do_appends()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.node.log.info("handler-error", error=repr(e))

    def _still_valid(self, p: _Push) -> bool:
        n = self.node
        if n.bugs.lax_push_term and p.req.get("kind") == "COMPARE":
            return True
        return gate(n.role, n.term, n.leader_id, p.req["term"], p.req["leader"]) is None

    def _do_control(self, p: _Push) -> None:
        n = self.node
        store = n.store
        e = p.entries[0]
        if not self._still_valid(p):
            self._reply(p, "INCONSISTENT_LEADER")
            return
        if p.req.get("kind") == "COMPARE":
            ok = store.begin_index <= e.index <= store.end_index and store.get(e.index).same_as(e)
            if ok and not n.bugs.no_fsync and e.index > store.durable_end:
                # R2 holds for COMPARE too: the leader counts a SUCCESS as this node
                # holding the entry, so it must be durable, not only written. (Found by
                # the lazy fs: a follower whose flush failed still matched at compare,
                # the leader committed, and a power cut lost the acked entry.)
                try:
                    store.flush()
                except OSError as exc:
                    n.log.info("compare-flush-failed", index=e.index, error=exc)
                ok = e.index <= store.durable_end
            if ok:
                self.match_index = e.index
                self.take_commit(p.req.get("commitIndex"))
            self._reply(p, "SUCCESS" if ok else "INCONSISTENT_STATE", e.index)
            return
        # TRUNCATE
        if n.bugs.no_truncate and e.index <= store.end_index:
            self.match_index = e.index  # seeded bug: ack without cutting anything
            self._reply(p, "SUCCESS", e.index)
            return
        end = store.end_index
        first_removed = None
        if e.index <= end:
            same = store.get(e.index).same_as(e)
            if not same:
                first_removed = e.index
            elif end > e.index:
                first_removed = e.index + 1
        # the terms of what is about to be cut, as runs ``term:first-last``: the checker
        # asks whether a committed entry was among them (leader completeness)
        removed = term_runs(store, first_removed, end) if first_removed is not None else None
        try:
            store.truncate(e)
        except InconsistentState as exc:
            n.log.info("truncate-refused", index=e.index, error=exc)
            self._reply(p, "INCONSISTENT_STATE", e.index)
            return
        n.note_truncated(e)  # a config entry cut away is no longer in force (membership M2)
        if first_removed is not None:
            n.log.info(
                "truncated",
                at=first_removed,
                old_end=end,
                new_end=store.end_index,
                term=n.term,
                leader=n.leader_id,
                removed=removed,
            )
            if first_removed <= n.committed:
                n.log.safety(
                    "truncate-below-commit",
                    at=first_removed,
                    committed=n.committed,
                    old_end=end,
                    term=n.term,
                    leader=n.leader_id,
                )
        self.match_index = e.index
        self.take_commit(p.req.get("commitIndex"))
        self._reply(p, "SUCCESS", e.index)

    async def _do_appends(self) -> None:
        n = self.node
        store = n.store
        done: list[_Push] = []
        best_commit = -1
        heap, buf = self._heap, self.write_buf
        while heap:
            first = heap[0]
            p = buf.get(first)
            if p is None:
                heapq.heappop(heap)
                continue
            end = store.end_index
            if first > end + 1:
                if time.monotonic() - p.arrived > GAP_WAIT_S:
                    heapq.heappop(heap)
                    del buf[first]
                    self._reply(p, "INCONSISTENT_STATE")
                    continue
                break
            heapq.heappop(heap)
            del buf[first]
            if not self._still_valid(p):
                self._reply(p, "INCONSISTENT_LEADER")
                continue
            ok = True
            try:
                for e in p.entries:
                    if e.index <= store.end_index:
                        if n.bugs.no_truncate:
                            continue  # seeded bug: an index we hold is taken as equal
                        if not store.get(e.index).same_as(e):
                            ok = False
                            break
                    else:
                        store.append_follower(e)
                        n.note_appended(e)  # a config takes effect once logged (membership M2)
            except InconsistentState as exc:
                n.log.info("append-refused", index=p.first, error=exc)
                ok = False
            if not ok:
                self._reply(p, "INCONSISTENT_STATE")
                continue
            done.append(p)
            c = p.req.get("commitIndex")
            if isinstance(c, int):
                best_commit = max(best_commit, c)
        if not done:
            return
        term, leader = n.term, n.leader_id
        if not n.bugs.no_fsync:
            await n.flush()  # R2: durable before SUCCESS
        if n.term != term or n.leader_id != leader:
            for p in done:
                self._reply(p, "INCONSISTENT_STATE")
            return
        self.match_index = max(self.match_index, done[-1].last)
        self.take_commit(best_commit)
        for p in done:
            self._reply(p, "SUCCESS")
