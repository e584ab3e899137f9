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
from node_impl.follower_read import FollowerReads
from node_impl.groupcommit import group_commit
from node_impl.kv import KV, decode, is_plain_append
from node_impl.membership import (
    CONFIG_PREFIX,
    Config,
    ConfigError,
    add_learner,
    caught_up,
    change_precondition,
    config_in_force,
    decode_config,
    encode_config,
    remove,
    voter_quorum_index,
)
from node_impl.nodelog import NodeLog, boot_id
from node_impl.peers import PeerLink
from node_impl.quorum import next_committed
from node_impl.replication import EntryDispatcher
from node_impl.server import Servers
from node_impl.store import (
    MAGIC_NOOP,
    Checkpoint,
    Entry,
    InconsistentState,
    LogStore,
    TermStore,
    reconcile_term,
)
from node_impl.wakeup import Signal, cancel_all

__all__ = ["Node", "PendingOp", "Transfer", "LEADER", "FOLLOWER", "CANDIDATE"]

LEADER, FOLLOWER, CANDIDATE = "leader", "follower", "candidate"

MAX_PENDING_OPS = 10000  # §7.6 back-pressure
CATCHUP_MAX_LAG = 64  # docs/membership.md M4: a learner this close, holding all committed
REMOVED_GRACE_E = 2.0  # M7: keep replicating to a removed node for up to 2E after commit
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
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.log = NodeLog(cfg.log_path)
        # seeded bug skip-fsync: every write reaches the OS on the correct path, no sync
        sync = not self.bugs.skip_fsync
        self.store = LogStore(
            cfg.data_dir,
            fsync=sync and not self.bugs.no_fsync,
            verify_crc=not self.bugs.skip_crc,
            trust_torn_tail=self.bugs.trust_torn_tail,
        )
        self.term_store = TermStore(cfg.data_dir, fsync=sync)
        self.term, self.voted_for = self.term_store.load()
        if not self.bugs.trust_term_file:  # seeded bug trust-term-file: no check
            term, voted = reconcile_term(self.term, self.voted_for, self.store.end_term)
            if term != self.term:
                self.log.info("term-file-behind-log", term=self.term, log_term=term)
                self.term, self.voted_for = term, voted
                self._save_term_now()
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
        self._read_refusal_role: tuple | None = ("none yet",)  # the role stint last logged one
        self._tasks: list[asyncio.Task] = []
        self._pool: ThreadPoolExecutor | None = None
        self._aux_pool: ThreadPoolExecutor | None = None
        self.elector = Elector(self)
        self.handler = EntryHandler(self)
        self.follower_reads = FollowerReads(self)
        # ---- membership (docs/membership.md)
        startup = {p: f"{h}:{port}" for p, (h, port) in cfg.peers.items()}
        if cfg.join:  # M6: a joining node is a learner of the configuration it was given
            self.startup_config = Config.of(
                {p: a for p, a in startup.items() if p != self.id}, {self.id: startup[self.id]}
            )
        else:
            self.startup_config = Config.of(startup)
        self.config_history: list[tuple[int, Config]] = self._scan_configs()
        self.config_index, self.config = -1, self.startup_config
        self.known_ids: set[str] = set(cfg.peers)  # every id any config named (heartbeats)
        self.transfer: Transfer | None = None
        self._removed_since: dict[str, float] = {}  # peer -> when its removal was seen committed
        self._peer_tasks: dict[str, asyncio.Task] = {}
        self.links: dict[str, PeerLink] = {}
        self.dispatchers: dict[str, EntryDispatcher] = {}
        self.others: list[str] = []
        self.voters: frozenset[str] = frozenset()
        self._refresh_config()
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
            boot=boot_id(),
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
        ]
        self._peer_tasks = {p: loop.create_task(d.run()) for p, d in self.dispatchers.items()}

    async def stop(self) -> None:
        """Clean shutdown: stop serving, write the checkpoint, close the store."""
        self.stopping = True
        if self.servers is not None:
            await self.servers.stop()
        await cancel_all(self._tasks + list(self._peer_tasks.values()))
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

    def _move_term(self, term: int, voted_for: str | None) -> None:
        """Take ``term`` and ``voted_for`` only once they are durable (R1): a write that
        fails (a disk fault's EIO) leaves the node in its old, persisted term and vote.
        Measured: with the term taken first, a candidate whose term.json writes failed
        climbed from term 14 to 53 in memory in 0.4 s, answered a vote request in term
        38, and came back in term 14 after a power cut (term-regress on the correct node)."""
        old = (self.term, self.voted_for, self.known_max_term)
        self.term, self.voted_for = term, voted_for
        try:
            self.persist_term()
        except BaseException:
            self.term, self.voted_for, self.known_max_term = old
            raise

    # ------------------------------------------------------------------ roles

    def _log_role(self) -> None:
        key = (self.term, self.role, self.leader_id)
        if key != self._last_role:
            self._last_role = key
            self.log.role(self.term, self.role, self.leader_id)

    def next_term(self) -> None:
        """Candidate step 2: adopt max(knownMaxTerm, term+1), forget the vote, persist."""
        term = max(self.known_max_term, self.term + 1)
        self._move_term(term, None)
        self.known_max_term = max(self.known_max_term, self.term)
        self._log_role()

    def adopt_term(self, term: int) -> None:
        """A non-voter's only term change: take a higher term it has seen (membership M6)."""
        if term > self.term:
            self._move_term(term, None)
            self._log_role()

    def grant_vote(self, candidate: str) -> None:
        self._move_term(self.term, candidate)

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
        self._sync_peers()
        self.marks = {p: -1 for p in self.others}
        self.handler.reset()
        self.transfer = None
        # the log this leader starts its term with, before its no-op: leader completeness
        # asks it hold every entry committed in an earlier term (checker/node_events.py)
        self.log.info(
            "elected", term=self.term, end=self.store.end_index, eterm=self.store.end_term
        )
        if self.bugs.commit_regress:
            # seeded bug: a new leader restarts its commit index from the checkpoint
            self.set_committed(min(self._recovered_commit, self.store.end_index))
        if self.bugs.commit_old_term:
            self.ready_index = self.store.end_index  # DLedger 0.2 writes nothing on election
        else:
            try:
                e = self.store.append_leader(self.term, b"", MAGIC_NOOP)
            except InconsistentState as exc:
                # the store refused the write (a disk fault): the node steps down; INFO,
                # since nothing it promised is broken (SAFETY lines are broken invariants)
                self.log.info("leader-noop-failed", term=self.term, error=exc)
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
        if self.transfer is not None:
            return "LEADER_TRANSFERRING"  # M9: no writes while handing leadership over
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
        # M5: a majority of the voters of the configuration in force; learners and a
        # leader that is removing itself hold entries but do not count
        qi = voter_quorum_index(marks, self.voters)
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
        old = self.committed
        self.committed = value
        # What the checker's leader-completeness and follower-commit-bound need: the
        # entry committed (index and term) and, on a follower, how far its log is known
        # to match the leader's (checker/node_events.py)
        self.log.info(
            "commit",
            index=value,
            eterm=self.store.term_at(value),
            term=self.term,
            role=self.role,
            match=self.handler.match_index if self.role == FOLLOWER else None,
        )
        if self.last_config_index() > old:
            self._refresh_config()  # a change committed (M7, M8; bug config-on-commit)
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
                self._step_down_if_removed()
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

    def _refuse_read(self, code: str, stage: str, term: int) -> tuple[str, int]:
        """A read refused, logged: a leader that refuses is one that could have answered
        stale; a non-leader's refusals are logged once per role stint (cheap)."""
        if stage != "not-leader" or self._read_refusal_role != self._last_role:
            self._read_refusal_role = self._last_role
            self.log.info("read-refused", why=stage, code=code, term=term, role=self.role)
        return code, -1

    async def leader_read_index(self) -> tuple[str | None, int]:
        """The leader's read index (§8.3): (None, readIndex) once its NOOP has committed
        and a heartbeat round started after this call confirmed it still leads, else
        (code, -1). Its own reads and its followers' (§8.3a) both take it."""
        if self.role != LEADER:
            return self._refuse_read("NOT_LEADER", "not-leader", self.term)
        term = self.term
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.election_s
        while self.committed < self.ready_index:
            if self.role != LEADER or self.term != term:
                return self._refuse_read("NOT_LEADER", "deposed", term)
            left = deadline - loop.time()
            if left <= 0:
                return self._refuse_read("LEADER_NOT_READY", "not-ready", term)
            await self.commit_signal.wait(left)
        read_index = self.committed
        if self.bugs.wallclock_lease and self.lease_valid_wallclock():
            return None, read_index  # seeded bug: the lease stands in for the round (§8.3a too)
        if not await self.elector.confirm_leadership(term):
            return self._refuse_read("NOT_LEADER", "confirm-failed", term)
        return None, read_index

    async def answer_read_index(self, msg: dict) -> dict:
        """A follower's ``read-index`` request (§8.3a): the index a read of ours would take."""
        why, index = await self.leader_read_index()
        return {"code": why or "SUCCESS", "index": index, "term": self.term}

    def serves_reads(self) -> bool:
        """Whether this node may take a linearizable read now rather than redirect it:
        a leader, or in read mode ``follower`` a follower within reach of its leader."""
        if self.role == LEADER:
            return True
        return (
            self.cfg.read_mode == "follower"
            and self.role == FOLLOWER
            and self.follower_reads.leader_in_reach()
        )

    async def read_barrier(self) -> tuple[str | None, int]:
        """Read-index: (None, readIndex) when the caller may read applied state, else (code, -1)."""
        if not self.serves_reads():
            return self._refuse_read("NOT_LEADER", "not-leader", self.term)
        term = self.term
        if self.role == LEADER:
            why, read_index = await self.leader_read_index()
            if why is not None:
                return why, -1
        else:
            got = await self.follower_reads.read_index()
            if got is None:
                return self._refuse_read("NOT_LEADER", "leader-unconfirmed", term)
            read_index = got
        if not await self.wait_applied(read_index, self.cfg.election_s * 2):
            code = "NOT_LEADER" if not self.serves_reads() else "LEADER_NOT_READY"
            return self._refuse_read(code, "apply-timeout", term)
        return None, read_index

    async def read_view(self, local: bool) -> ReadView | str:
        """A non-local get sees committed entries only, and only after a read barrier
        (§8.3); a local get sees the whole local log."""
        if local:
            return ReadView(self.store.end_index, committed_only=False)
        # Seeded bugs skip the barrier; it refuses a node that may not serve reads (a
        # valid wall-clock lease is a leader's).
        lease = self.bugs.wallclock_lease and self.lease_valid_wallclock()
        if not self.bugs.stale_read and not lease:
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
            if self.role == LEADER:
                self._step_down_if_removed()
                self._promote_learners()
                if self._removed_since or self.config_index > self.committed:
                    self._sync_peers()  # M7: stop replicating to removed nodes in time
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
                        # the disk's trouble, not a broken invariant: INFO (nodelog.py)
                        self.log.info("checkpoint-failed", error=e)

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

    # ------------------------------------------------------------------ membership

    def _scan_configs(self) -> list[tuple[int, Config]]:
        """M2 recovery: every config entry in the log, read once at startup."""
        out: list[tuple[int, Config]] = []
        store, lo = self.store, 0
        while lo <= store.end_index:
            hi = min(store.end_index, lo + 4095)
            for e in store.entries(lo, hi):
                if e.body.startswith(CONFIG_PREFIX):
                    c = decode_config(e.body)
                    if c is not None:
                        out.append((e.index, c))
            lo = hi + 1
        return out

    @property
    def n(self) -> int:
        """The number of voters in the configuration in force (quorums are over them)."""
        return len(self.voters)

    @property
    def peer_ids(self) -> frozenset[str]:
        return self.voters

    def last_config_index(self) -> int:
        """Index of the last config entry in the log, in force or not (-1: none)."""
        return self.config_history[-1][0] if self.config_history else -1

    def note_appended(self, e: Entry) -> None:
        """Follower hook after each appended entry: a config takes effect once logged (M2)."""
        if not e.body.startswith(CONFIG_PREFIX):
            return
        c = decode_config(e.body)
        if c is None:
            return
        self.config_history = [x for x in self.config_history if x[0] < e.index]
        self.config_history.append((e.index, c))
        self._refresh_config()

    def note_truncated(self, e: Entry) -> None:
        """Follower hook after TRUNCATE(e): e is now the last entry; any config entry cut
        away stops being in force and the previous one applies again (M2)."""
        before = len(self.config_history)
        self.config_history = [x for x in self.config_history if x[0] < e.index]
        c = decode_config(e.body) if e.body.startswith(CONFIG_PREFIX) else None
        if c is not None:
            self.config_history.append((e.index, c))
        if c is not None or len(self.config_history) != before:
            self._refresh_config()

    def _refresh_config(self) -> None:
        """Recompute the configuration in force, the voters and the replication set."""
        idx, cfg = config_in_force(
            self.config_history,
            self.startup_config,
            self.store.end_index,
            self.committed,
            on_commit=self.bugs.config_on_commit,  # seeded bug: only committed configs count
        )
        if (idx, cfg) != (self.config_index, self.config):
            self.log.info("config", index=idx, **cfg.to_dict())
        self.config_index, self.config = idx, cfg
        self.voters = cfg.voter_ids
        self.known_ids |= cfg.members
        self._sync_peers()

    def _replication_set(self) -> dict[str, str]:
        """Peers that get heartbeats and pushes: the members of the config in force, plus
        (M7) members it removed, until they hold the entry that removes them (at most
        2E after the removal commits), so a removed node learns it and goes quiet."""
        out = {p: a for p, a in (*self.config.voters, *self.config.learners) if p != self.id}
        if self.config_index >= 0:
            _, prev = config_in_force(
                self.config_history, self.startup_config, self.config_index - 1, self.committed
            )
            now = time.monotonic()
            for p, a in (*prev.voters, *prev.learners):
                if p == self.id or p in out:
                    continue
                if self.config_index <= self.committed:
                    since = self._removed_since.setdefault(p, now)
                    done = self.marks.get(p, -1) >= self.config_index or self.role != LEADER
                    if done or now - since > REMOVED_GRACE_E * self.cfg.election_s:
                        continue
                out[p] = a
        self._removed_since = {p: t for p, t in self._removed_since.items() if p in out}
        return out

    def _sync_peers(self) -> None:
        """Open links and start dispatchers for new peers; stop those no longer wanted."""
        want = self._replication_set()
        own_host = self.cfg.peers[self.id][0]
        running = self._flush_wanted is not None and not self.stopping
        for p in list(self.links):
            link = self.links[p]
            if p in want and want[p] == f"{link.host}:{link.port}":
                continue
            task = self._peer_tasks.pop(p, None)
            if task is not None:
                task.cancel()
            link.close()
            del self.links[p]
            del self.dispatchers[p]
            self.marks.pop(p, None)
        for p, addr in want.items():
            if p in self.links:
                continue
            host, _, port = addr.rpartition(":")
            link = PeerLink(self.id, p, host, int(port), local_host=own_host)
            d = EntryDispatcher(self, p, link)
            self.links[p], self.dispatchers[p] = link, d
            if self.role == LEADER:
                self.marks.setdefault(p, -1)
            if running:
                self._peer_tasks[p] = asyncio.get_running_loop().create_task(d.run())
                d.wake()
        self.others = list(want)

    def members_view(self) -> dict:
        """The ``members`` reply body (and ``status``'s ``config``)."""
        last = self.last_config_index()
        return {
            "voters": dict(self.config.voters),
            "learners": dict(self.config.learners),
            "configIndex": self.config_index,
            "pending": last > self.committed,
            "transferring": None if self.transfer is None else self.transfer.target,
        }

    def propose_config(self, new: Config) -> PendingOp | str:
        """Append one configuration entry (M3 preconditions); completes once it commits."""
        if self.role != LEADER:
            return "NOT_LEADER"
        why = change_precondition(
            committed=self.committed,
            ready_index=self.ready_index,
            config_index=self.last_config_index(),
            transferring=self.transfer is not None,
            skip_term_commit=self.bugs.reconfig_before_term_commit,  # seeded bug
        )
        if why is not None:
            return why
        e = self.store.append_leader(self.term, encode_config(new))
        self.config_history.append((e.index, new))
        self._refresh_config()  # M2: in force at once, on the leader too
        fut = asyncio.get_running_loop().create_future()
        op = PendingOp(e.index, e.index, self.term, fut, time.monotonic(), "config", [e.index])
        self.pending[e.index] = op
        self.log.info("config-proposed", index=e.index, term=self.term, **new.to_dict())
        self.wake_replication()
        return op

    def add_member(self, node: str, addr: str) -> PendingOp | str:
        """M6: a new node joins as a learner; :meth:`_promote_learners` makes it a voter."""
        if self.role != LEADER:
            return "NOT_LEADER"
        try:
            return self.propose_config(add_learner(self.config, node, addr))
        except ConfigError as e:
            return f"UNSUPPORTED:{e}"

    def remove_member(self, node: str) -> PendingOp | str:
        if self.role != LEADER:
            return "NOT_LEADER"
        try:
            return self.propose_config(remove(self.config, node))
        except ConfigError as e:
            return f"UNSUPPORTED:{e}"

    def _promote_learners(self) -> None:
        """M4: the leader promotes a caught-up learner, one change at a time."""
        if self.role != LEADER or not self.config.learners or self.transfer is not None:
            return
        for p, _ in self.config.learners:
            if caught_up(
                self.marks.get(p, -1), self.committed, self.store.end_index, CATCHUP_MAX_LAG
            ):
                new = Config((*self.config.voters, (p, self.config.addr(p) or "")), ())
                new = Config(new.voters, tuple(x for x in self.config.learners if x[0] != p))
                r = self.propose_config(new)
                if not isinstance(r, str):
                    self.log.info("promote", peer=p, index=r.last, mark=self.marks.get(p, -1))
                return

    def _step_down_if_removed(self) -> None:
        """M8: a leader outside the committed configuration steps down (after applying it,
        so the remove-member reply goes out first) and hands over to its best voter."""
        if (
            self.role != LEADER
            or self.id in self.voters
            or self.config_index > self.committed
            or self.applied < self.config_index
        ):
            return
        best = max(self.voters, key=lambda p: self.marks.get(p, -1), default=None)
        self.log.info("removed-step-down", term=self.term, config=self.config_index, next=best)
        term = self.term
        if best is not None and self.marks.get(best, -1) >= self.store.end_index:
            link = self.links.get(best)
            if link is not None:
                fut = link.send({"type": "timeout-now", "term": term, "leader": self.id})
                fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.become_candidate(term, need_increase=False)

    def handle_timeout_now(self, msg: dict) -> dict:
        """The transfer target (M9): start an election at once if this comes from the
        leader we follow, in our term, and we are a voter."""
        term, leader = msg.get("term"), msg.get("leader")
        out = {"type": "timeout-now-resp", "rid": msg.get("rid"), "term": self.term}
        if not isinstance(term, int) or not isinstance(leader, str):
            return {**out, "code": "BAD_REQUEST"}
        if self.id not in self.voters:
            return {**out, "code": "NOT_VOTER"}
        if term != self.term or self.role != FOLLOWER or leader != self.leader_id:
            return {**out, "code": "INCONSISTENT_LEADER"}
        self.log.info("timeout-now", term=term, leader=leader)
        # Take the next term now, not on the elector's next tick: a heartbeat of the
        # current term arriving in between would make us follow the old leader again.
        self.become_candidate(term, need_increase=False)
        self.next_term()
        self.elector.last_result = "WAIT_TO_REVOTE"
        self.elector.next_vote_at = 0.0  # campaign on the next tick, no backoff
        return {**out, "code": "SUCCESS"}

    async def transfer_leader(self, target: str, timeout: float) -> tuple[str, dict]:
        """M9: stop writes, bring ``target`` up to date, tell it to campaign now, and wait
        to see it lead; after ``timeout`` the leader resumes writes."""
        if self.role != LEADER:
            return "NOT_LEADER", {}
        if target == self.id:
            return "SUCCESS", {"leader": self.id, "term": self.term}
        if target not in self.voters:
            return "UNSUPPORTED", {"error": f"{target} is not a voter"}
        if self.transfer is not None:
            return "LEADER_TRANSFERRING", {}
        if self.last_config_index() > self.committed:
            return "CONFIG_CHANGE_PENDING", {}
        loop = asyncio.get_running_loop()
        term = self.term
        t = Transfer(target, term, loop.time() + timeout)
        self.transfer = t
        self.log.info("transfer-start", target=target, term=term, end=self.store.end_index)

        def left() -> float:
            return t.deadline - loop.time()

        async def pause() -> None:  # poll: each wait below is a few ticks at most
            await asyncio.sleep(max(0.0, min(0.01, left())))

        try:
            # 1. catch up: the target durably holds our whole log (writes are stopped)
            while not self.bugs.transfer_skip_catchup:  # seeded bug: no catch-up
                if self.role != LEADER or self.term != term or left() <= 0:
                    break
                if self.marks.get(target, -1) >= self.store.end_index:
                    break
                d = self.dispatchers.get(target)
                if d is not None:
                    d.wake()
                await pause()
            # 2. tell it to campaign at once (a TimeoutNow)
            if self.role == LEADER and self.term == term and left() > 0:
                mark, end = self.marks.get(target, -1), self.store.end_index
                link = self.links.get(target)
                r = (
                    None
                    if link is None
                    else await link.request(
                        {"type": "timeout-now", "term": term, "leader": self.id}, max(0.01, left())
                    )
                )
                code = None if r is None else r.get("code")
                self.log.info("transfer-timeout-now", target=target, mark=mark, end=end, reply=code)
            # 3. wait until we have stepped down and learned who leads
            while left() > 0 and self.role == LEADER and self.term == term:
                await pause()
            while left() > 0 and self.role != LEADER and self.leader_id is None:
                await pause()
            if self.role == LEADER and self.term == term:
                self.log.info("transfer-timeout", target=target, term=term)
                return "TRANSFER_TIMEOUT", {"leader": self.id, "term": self.term}
            if self.leader_id == target:
                return "SUCCESS", {"leader": target, "term": self.term}
            return "TRANSFER_FAILED", {"leader": self.leader_id, "term": self.term}
        finally:
            if self.transfer is t:
                self.transfer = None

    # ------------------------------------------------------------------ status (§8)

    def status(self) -> dict:
        return {
            "id": self.id,  # the member answering: a host re-added wiped runs a new one
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
            "config": self.members_view(),
        }


@dataclass
class Transfer:
    """A leadership transfer in progress (docs/membership.md M9); writes wait it out."""

    target: str
    term: int
    deadline: float


def _ok_result(op: PendingOp, res: dict | None = None) -> dict:
    out: dict = {"index": op.last, "term": op.term}
    if op.kind == "append" and len(op.indexes) > 1:
        out["indexes"] = op.indexes
    if res:
        out.update(res)
    return out
