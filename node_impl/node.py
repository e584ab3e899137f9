"""One DLedger node: persisted state, roles, commit, apply and pending client ops.

The node is the single owner of mutable state; the elector (``election.py``), the
per-peer dispatchers (``replication.py``), the follower's entry handler
(``follower.py``) and the servers (``server.py``) call into it. Everything runs on
one asyncio loop, so a method that does not ``await`` is atomic; only fsyncs go to
a worker thread (group commit: one flush covers every entry appended before it).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from node_impl.api import ReadView
from node_impl.config import NodeConfig
from node_impl.election import Elector
from node_impl.follower import EntryHandler
from node_impl.groupcommit import group_commit
from node_impl.kv import KV, decode, is_plain_append
from node_impl.nodelog import NodeLog
from node_impl.peers import PeerLink
from node_impl.quorum import next_committed, quorum_index
from node_impl.replication import EntryDispatcher
from node_impl.server import Servers
from node_impl.store import MAGIC_NOOP, Checkpoint, InconsistentState, LogStore, TermStore
from node_impl.wakeup import Signal, cancel_all

__all__ = ["Node", "PendingOp", "LEADER", "FOLLOWER", "CANDIDATE"]

LEADER, FOLLOWER, CANDIDATE = "leader", "follower", "candidate"

MAX_PENDING_OPS = 10000  # §7.6 back-pressure
MAX_WAIT_ACK_S = 2.5  # §7.5 maxWaitAckTimeMs
CHECKPOINT_EVERY_S = 1.0  # R3


@dataclass
class PendingOp:
    """A client op waiting for its last entry to commit and apply."""

    first: int
    last: int
    term: int
    fut: asyncio.Future
    created: float
    kind: str
    indexes: list[int] = field(default_factory=list)

    def complete(self, code: str, result: dict | None = None) -> None:
        if not self.fut.done():
            self.fut.set_result((code, result))


class Node:
    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        self.bugs = cfg.bugs
        self.id = cfg.node_id
        self.n = cfg.n
        self.peer_ids = frozenset(cfg.peers)
        self.others = [p for p in cfg.peers if p != self.id]
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.log = NodeLog(cfg.data_dir / "node.log")
        # seeded bug skip-fsync: every write reaches the OS on the correct path, no sync
        sync = not self.bugs.skip_fsync
        self.store = LogStore(cfg.data_dir, fsync=sync and not self.bugs.no_fsync)
        self.term_store = TermStore(cfg.data_dir, fsync=sync)
        self.term, self.voted_for = self.term_store.load()
        self.checkpoint = Checkpoint(cfg.data_dir, fsync=sync)
        self.committed = min(self.checkpoint.load(), self.store.end_index)
        self._saved_commit = self.committed
        self._recovered_commit = self.committed  # what R3 recovery gave this incarnation
        self.applied = -1
        self.kv = KV()
        self.incarnation = random.getrandbits(63)
        self.role = CANDIDATE
        self.leader_id: str | None = None
        self.leader_addr: str | None = None
        self.known_max_term = self.term
        self.marks: dict[str, int] = {}
        self.pending: dict[int, PendingOp] = {}
        self.ready_index = -1  # a read needs this entry committed (the leader's NOOP)
        self.commit_signal = Signal()
        self.apply_signal = Signal()
        self.role_signal = Signal()
        self.stopping = False
        self._flush_wanted: asyncio.Event | None = None
        self._apply_wanted: asyncio.Event | None = None
        self._term_dirty = False
        self._last_role: tuple | None = None
        self._tasks: list[asyncio.Task] = []
        self._pool: ThreadPoolExecutor | None = None
        self._aux_pool: ThreadPoolExecutor | None = None
        own_host = cfg.peers[self.id][0]
        self.links = {
            p: PeerLink(self.id, p, *cfg.peers[p], local_host=own_host) for p in self.others
        }
        self.elector = Elector(self)
        self.handler = EntryHandler(self)
        self.dispatchers = {p: EntryDispatcher(self, p, self.links[p]) for p in self.others}
        self.servers: Servers | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._flush_wanted = asyncio.Event()
        self._apply_wanted = asyncio.Event()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="flush")
        self._aux_pool = ThreadPoolExecutor(1, thread_name_prefix="aux")
        self._apply_to_committed()  # R4: rebuild the kv map before serving anything
        self.log.info(
            "start",
            id=self.id,
            incarnation=self.incarnation,
            term=self.term,
            votedFor=self.voted_for,
            end=self.store.end_index,
            committed=self.committed,
            bug=self.cfg.bug_spec or None,
        )
        self._log_role()
        self.servers = Servers(self)
        await self.servers.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.elector.run()),
            loop.create_task(self.handler.run()),
            loop.create_task(self._flush_loop()),
            loop.create_task(self._apply_loop()),
            loop.create_task(self._maintenance_loop()),
        ] + [loop.create_task(d.run()) for d in self.dispatchers.values()]

    async def stop(self) -> None:
        """Clean shutdown: stop serving, write the checkpoint, close the store."""
        self.stopping = True
        if self.servers is not None:
            await self.servers.stop()
        await cancel_all(self._tasks)
        for link in self.links.values():
            link.close()
        self._fail_pending("TERM_CHANGED")
        with contextlib.suppress(Exception):
            self.store.close()
        if self._term_dirty:
            with contextlib.suppress(Exception):
                self._save_term_now()
        with contextlib.suppress(Exception):
            self.checkpoint.save(self.committed)
        self.log.info("stop", committed=self.committed, end=self.store.end_index)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._aux_pool is not None:
            self._aux_pool.shutdown(wait=True)
        self.log.close()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(t)
        t.add_done_callback(lambda x: self._tasks.remove(x) if x in self._tasks else None)
        return t

    # ------------------------------------------------------------------ persisted term (R1)

    def _save_term_now(self) -> None:
        voted = None if self.bugs.forget_vote else self.voted_for
        self.term_store.save(self.term, voted)
        self._term_dirty = False

    def persist_term(self) -> None:
        """R1: term.json is durable before any vote, vote request or push of this term."""
        if self.bugs.no_fsync:
            self._term_dirty = True  # written by the 1 s flusher, after the fact
            return
        self._save_term_now()

    # ------------------------------------------------------------------ roles

    def _log_role(self) -> None:
        key = (self.term, self.role, self.leader_id)
        if key != self._last_role:
            self._last_role = key
            self.log.role(self.term, self.role, self.leader_id)

    def next_term(self) -> None:
        """Candidate step 2: adopt max(knownMaxTerm, term+1), forget the vote, persist."""
        self.term = max(self.known_max_term, self.term + 1)
        self.known_max_term = max(self.known_max_term, self.term)
        self.voted_for = None
        self.persist_term()
        self._log_role()

    def grant_vote(self, candidate: str) -> None:
        self.voted_for = candidate
        self.persist_term()

    def become_candidate(self, term_hint: int, *, need_increase: bool) -> None:
        if term_hint < self.term:
            return
        self.known_max_term = max(self.known_max_term, term_hint)
        if need_increase:
            self.elector.need_increase = True
        if self.role == CANDIDATE:
            return
        was_leader = self.role == LEADER
        self.role = CANDIDATE
        self.leader_id = None
        self.leader_addr = None
        if was_leader:
            self._leave_leader()
        self.handler.reset()
        self._log_role()
        self.role_signal.notify()

    def become_follower(self, leader: str, leader_addr: str | None) -> None:
        self.role = FOLLOWER
        self.leader_id = leader
        self.leader_addr = leader_addr
        self.elector.last_leader_hb = time.monotonic()
        self.handler.reset()
        self._log_role()
        self.role_signal.notify()

    def become_leader(self) -> None:
        self.role = LEADER
        self.leader_id = self.id
        self.leader_addr = self.cfg.client_addr
        self.marks = {p: -1 for p in self.others}
        self.handler.reset()
        if self.bugs.commit_regress:
            # seeded bug: a new leader restarts its commit index from the checkpoint
            self.set_committed(min(self._recovered_commit, self.store.end_index))
        if self.bugs.commit_old_term:
            self.ready_index = self.store.end_index  # DLedger 0.2 writes nothing on election
        else:
            try:
                e = self.store.append_leader(self.term, b"", MAGIC_NOOP)
            except InconsistentState as exc:
                self.log.safety("leader-noop", term=self.term, error=exc)
                self.become_candidate(self.term, need_increase=True)
                return
            self.ready_index = e.index
        self.elector.on_become_leader()
        self._log_role()
        self.wake_replication()
        self.role_signal.notify()

    def _leave_leader(self) -> None:
        self.marks = {}
        self._fail_pending("TERM_CHANGED")

    def _fail_pending(self, code: str) -> None:
        ops, self.pending = self.pending, {}
        for op in ops.values():
            if self.bugs.ok_on_term_change:
                op.complete("SUCCESS", _ok_result(op))  # seeded bug: claims success
            else:
                op.complete(code)

    # ------------------------------------------------------------------ leader writes

    def wake_replication(self) -> None:
        assert self._flush_wanted is not None
        self._flush_wanted.set()
        for d in self.dispatchers.values():
            d.wake()

    def propose(self, bodies: list[bytes], kind: str) -> PendingOp | str:
        """Append client entries contiguously; the op completes after commit and apply."""
        if self.role != LEADER:
            return "NOT_LEADER"
        if len(self.pending) >= MAX_PENDING_OPS:
            return "LEADER_PENDING_FULL"
        term = self.term
        indexes = [self.store.append_leader(term, b).index for b in bodies]
        fut = asyncio.get_running_loop().create_future()
        op = PendingOp(indexes[0], indexes[-1], term, fut, time.monotonic(), kind, indexes)
        if self.bugs.ack_before_quorum and kind in ("append", "put"):
            op.complete("SUCCESS", _ok_result(op))  # seeded bug: ack after the local write
        else:
            self.pending[op.last] = op
        self.wake_replication()
        return op

    async def _flush_loop(self) -> None:
        """Group commit: each fsync covers every entry appended before it started."""
        assert self._flush_wanted is not None
        # seeded bug no-fsync: the leader counts unflushed entries
        await group_commit(
            self.store,
            self._pool,
            self._flush_wanted,
            log=self.log,
            running=lambda: not self.stopping,
            flushed=self.check_quorum,
            skip_flush=self.bugs.no_fsync,
        )

    async def flush(self) -> int:
        """Flush on the event loop itself (the follower's ack path).

        One fdatasync covers the whole batch of pushes being acked and costs about
        0.2 ms here, less than handing it to the flush thread and back: on a loaded
        machine each of those hand-offs is a wake-up that waits for a core, on the
        critical path of every acknowledged write.
        """
        if self.bugs.no_fsync:
            return self.store.end_index
        return self.store.flush()

    # ------------------------------------------------------------------ commit (§7)

    def raise_mark(self, peer: str, index: int) -> None:
        if self.role != LEADER:
            return
        if index > self.marks.get(peer, -1):
            self.marks[peer] = index
            self.check_quorum()

    def own_mark(self) -> int:
        return self.store.end_index if self.bugs.no_fsync else self.store.durable_end

    def check_quorum(self) -> None:
        if self.role != LEADER:
            return
        marks = dict(self.marks)
        marks[self.id] = self.own_mark()
        qi = quorum_index(marks, self.n)
        new = next_committed(
            self.committed,
            qi,
            self.store.term_at(qi),
            self.term,
            by_count=self.bugs.commit_old_term,
        )
        if new > self.committed:
            self.set_committed(new)

    def set_committed(self, value: int) -> None:
        end = self.store.end_index
        if value > end:
            self.log.safety("commit-beyond-end", committed=value, end=end)
            value = end
        if value < self.committed:
            if not self.bugs.commit_regress:
                return
            # seeded bug commit-regress: the assignment goes through; say so
            self.log.safety(
                "commit-regress",
                committed=self.committed,
                new=value,
                role=self.role,
                term=self.term,
            )
        if value == self.committed:
            return
        self.committed = value
        assert self._apply_wanted is not None
        self._apply_wanted.set()
        self.commit_signal.notify()

    # ------------------------------------------------------------------ apply (§7.4)

    def _apply_to_committed(self, limit: int | None = None) -> int:
        """Apply applied+1..committed; completes pending ops. Returns entries applied."""
        hi = min(self.committed, self.store.end_index)
        if limit is not None:
            hi = min(hi, self.applied + limit)
        if hi <= self.applied:
            return 0
        count = 0
        pending = self.pending
        for e in self.store.entries(self.applied + 1, hi):
            res = None if e.magic == MAGIC_NOOP or is_plain_append(e) else self.kv.apply(decode(e))
            self.applied = e.index
            count += 1
            if pending:
                op = pending.get(e.index)
                if op is not None:
                    del pending[e.index]
                    if op.term == e.term:
                        op.complete("SUCCESS", _ok_result(op, res))
                    else:
                        op.complete("TERM_CHANGED")
        # ops whose last entry is now applied but were not matched (defensive)
        while pending:
            k = next(iter(pending))
            if k > self.applied:
                break
            pending.pop(k).complete("TERM_CHANGED")
        return count

    async def _apply_loop(self) -> None:
        assert self._apply_wanted is not None
        while not self.stopping:
            await self._apply_wanted.wait()
            self._apply_wanted.clear()
            while self.applied < min(self.committed, self.store.end_index):
                self._apply_to_committed(limit=2048)
                self.apply_signal.notify()
                await asyncio.sleep(0)

    async def wait_applied(self, index: int, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.applied < index:
            left = deadline - loop.time()
            if left <= 0:
                return False
            await self.apply_signal.wait(left)
        return True

    # ------------------------------------------------------------------ reads (§8.3)

    async def read_barrier(self) -> tuple[str | None, int]:
        """Read-index: (None, readIndex) when the caller may read applied state, else (code, -1)."""
        if self.role != LEADER:
            return "NOT_LEADER", -1
        term = self.term
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.election_s
        while self.committed < self.ready_index:
            if self.role != LEADER or self.term != term:
                return "NOT_LEADER", -1
            left = deadline - loop.time()
            if left <= 0:
                return "LEADER_NOT_READY", -1
            await self.commit_signal.wait(left)
        read_index = self.committed
        if not await self.elector.confirm_leadership(term):
            return "NOT_LEADER", -1
        if not await self.wait_applied(read_index, self.cfg.election_s * 2):
            return ("NOT_LEADER" if self.role != LEADER else "LEADER_NOT_READY"), -1
        return None, read_index

    async def read_view(self, local: bool) -> ReadView | str:
        """A non-local get sees committed entries only, and only after a read barrier
        proves this node still leads (§8.3); a local get sees the whole local log."""
        if local:
            return ReadView(self.store.end_index, committed_only=False)
        if not self.bugs.stale_read:
            if self.role != LEADER:
                return "NOT_LEADER"
            if not (self.bugs.wallclock_lease and self.lease_valid_wallclock()):
                why, _ = await self.read_barrier()
                if why is not None:
                    return why
        return ReadView(self.committed, committed_only=True)

    def lease_valid_wallclock(self) -> bool:
        """Seeded bug ``wallclock-lease``: trust time.time() since the last quorum round."""
        return (
            self.role == LEADER
            and time.time() - self.elector.last_success_wall < self.cfg.election_s
        )

    # ------------------------------------------------------------------ housekeeping

    async def _maintenance_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_ckpt = time.monotonic() + CHECKPOINT_EVERY_S
        while not self.stopping:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            self._expire_pending(now)
            if now >= next_ckpt:
                next_ckpt = now + CHECKPOINT_EVERY_S
                if self.bugs.no_fsync:
                    # seeded bug: the process buffer reaches the OS once a second
                    await loop.run_in_executor(self._pool, self.store.flush)
                    if self._term_dirty:
                        self._save_term_now()
                if self.committed != self._saved_commit:
                    c = self.committed
                    try:
                        await loop.run_in_executor(self._aux_pool, self.checkpoint.save, c)
                        self._saved_commit = c
                    except Exception as e:
                        self.log.safety("checkpoint-failed", error=e)

    def _expire_pending(self, now: float) -> None:
        pending = self.pending
        while pending:
            k = next(iter(pending))
            op = pending[k]
            if now - op.created < MAX_WAIT_ACK_S:
                break
            del pending[k]
            if self.bugs.ok_on_term_change:
                op.complete("SUCCESS", _ok_result(op))  # seeded bug
            else:
                op.complete("WAIT_QUORUM_ACK_TIMEOUT")

    # ------------------------------------------------------------------ status (§8)

    def status(self) -> dict:
        return {
            "role": self.role,
            "term": self.term,
            "leader": self.leader_id,
            "ledgerBeginIndex": self.store.begin_index,
            "ledgerEndIndex": self.store.end_index,
            "committedIndex": self.committed,
            "appliedIndex": self.applied,
            "votedFor": self.voted_for,
            "incarnation": self.incarnation,
            "mode": self.cfg.mode,
            "bug": self.cfg.bug_spec or None,
        }


def _ok_result(op: PendingOp, res: dict | None = None) -> dict:
    out: dict = {"index": op.last, "term": op.term}
    if op.kind == "append" and len(op.indexes) > 1:
        out["indexes"] = op.indexes
    if res:
        out.update(res)
    return out
