"""Leader election as DLedger's DLedgerLeaderElector does it (spec §4).

One loop ticks every 10 ms and acts by role: a leader sends a heartbeat round
every H and steps down when it has not had a quorum for E; a follower becomes a
candidate after E without a valid heartbeat; a candidate polls for votes. The
decisions themselves are pure functions in ``voting.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from node_impl.voting import (
    VoteRequest,
    VoterState,
    candidate_outcome,
    decide_heartbeat,
    decide_vote,
    is_quorum,
    tally_votes,
)

if TYPE_CHECKING:
    from node_impl.node import Node

__all__ = ["Elector", "RoundResult"]

TICK_S = 0.01


@dataclass
class RoundResult:
    success: int = 1  # the leader counts itself
    not_ready: int = 0
    max_term: int = 0
    inconsistent_leader: bool = False


class Elector:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.need_increase = False
        self.last_result = "WAIT_TO_REVOTE"
        self.next_vote_at = 0.0
        self.last_leader_hb = time.monotonic()
        self.last_send_hb = 0.0
        self.last_success = time.monotonic()
        self.last_success_wall = 0.0
        self._confirm_waiters: list[asyncio.Future] = []
        self._confirm_task: asyncio.Task | None = None
        self._candidacy_term = -1  # the last term a candidacy line was written for
        self._last_refusal: tuple[int, str, str] | None = None  # (term, candidate, result)

    def backoff(self) -> float:
        e = self.node.cfg.election_s
        return random.uniform(e / 4, e / 2)

    # ------------------------------------------------------------------ main loop

    async def run(self) -> None:
        node = self.node
        while not node.stopping:
            try:
                if node.role == "leader":
                    await self._maintain_leader()
                elif node.role == "follower":
                    self._maintain_follower()
                else:
                    await self._maintain_candidate()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                node.log.info("elector-error", error=repr(e))
            await asyncio.sleep(TICK_S)

    def on_become_leader(self) -> None:
        now = time.monotonic()
        self.last_send_hb = 0.0
        self.last_success = now
        self.last_success_wall = time.time()

    # ------------------------------------------------------------------ leader

    def _heartbeat_msg(self, term: int) -> dict:
        return {
            "type": "heartbeat",
            "term": term,
            "leader": self.node.id,
            "client_addr": self.node.cfg.client_addr,
        }

    async def heartbeat_round(self, term: int) -> RoundResult:
        """Send one heartbeat to every peer; end at a quorum of SUCCESS or after H."""
        node = self.node
        # membership M5: learners get heartbeats too, but only voters' answers count
        voters = node.voters
        n = len(voters)
        res = RoundResult(success=int(node.id in voters), max_term=term)
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        h = node.cfg.heartbeat_s
        targets = list(node.others)
        outstanding = len(targets)
        if is_quorum(res.success, n) or outstanding == 0:
            return res

        def on_reply(pid: str, r: dict | None) -> None:
            nonlocal outstanding
            outstanding -= 1
            if r is not None:
                code, rterm = r.get("code"), r.get("term", 0)
                if isinstance(rterm, int):
                    res.max_term = max(res.max_term, rterm)
                if code == "SUCCESS":
                    res.success += pid in voters
                elif code == "TERM_NOT_READY":
                    res.not_ready += pid in voters
                elif code == "INCONSISTENT_LEADER":
                    res.inconsistent_leader = True
            if not done.done() and (is_quorum(res.success, n) or outstanding == 0):
                done.set_result(None)

        async def one(pid: str) -> None:
            link = node.links.get(pid)
            r = None if link is None else await link.request(self._heartbeat_msg(term), h)
            on_reply(pid, r)

        # Peers still connecting keep their (H-bounded) request after the round ends:
        # cancelling it would starve a reconnecting peer of heartbeats.
        for p in targets:
            node.spawn(one(p))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(done), h)
        return replace(res)  # a snapshot: later replies must not change this round

    def _lease_expired(self, now: float) -> bool:
        e = self.node.cfg.election_s
        if self.node.bugs.wallclock_lease:
            return time.time() - self.last_success_wall >= e  # seeded bug: wall clock
        return now - self.last_success >= e

    def _note_success(self, started: float, started_wall: float) -> None:
        self.last_success = max(self.last_success, started)
        self.last_success_wall = max(self.last_success_wall, started_wall)

    async def _maintain_leader(self) -> None:
        node = self.node
        now = time.monotonic()
        if now - self.last_send_hb < node.cfg.heartbeat_s:
            return
        self.last_send_hb = now
        wall = time.time()
        term = node.term
        r = await self.heartbeat_round(term)
        if node.role != "leader" or node.term != term:
            return
        if is_quorum(r.success, node.n):
            self._note_success(now, wall)
        elif is_quorum(r.success + r.not_ready, node.n):
            self.last_send_hb = 0.0  # resend at once
        elif r.max_term > term:
            node.become_candidate(r.max_term, need_increase=True)
        elif r.inconsistent_leader or self._lease_expired(time.monotonic()):
            node.log.info("step-down", term=term, inconsistent=r.inconsistent_leader)
            node.become_candidate(term, need_increase=False)

    async def confirm_leadership(self, term: int) -> bool:
        """A heartbeat round started after this call got a quorum in ``term`` (read-index)."""
        fut = asyncio.get_running_loop().create_future()
        self._confirm_waiters.append(fut)
        if self._confirm_task is None or self._confirm_task.done():
            self._confirm_task = self.node.spawn(self._confirm_loop())
        return await fut

    async def _confirm_loop(self) -> None:
        node = self.node
        while self._confirm_waiters:
            waiters, self._confirm_waiters = self._confirm_waiters, []
            term = node.term
            ok = False
            while node.role == "leader" and node.term == term and not node.stopping:
                started, wall = time.monotonic(), time.time()
                r = await self.heartbeat_round(term)
                if node.role != "leader" or node.term != term:
                    break
                if is_quorum(r.success, node.n):
                    self._note_success(started, wall)
                    ok = True
                    break
                if r.max_term > term:
                    node.become_candidate(r.max_term, need_increase=True)
                    break
                await asyncio.sleep(min(0.05, node.cfg.heartbeat_s))
            for w in waiters:
                if not w.done():
                    w.set_result(ok and node.term == term)

    # ------------------------------------------------------------------ follower

    def _maintain_follower(self) -> None:
        node = self.node
        if time.monotonic() - self.last_leader_hb > node.cfg.election_s:
            node.log.info("leader-timeout", term=node.term, leader=node.leader_id)
            self.last_result = "WAIT_TO_REVOTE"
            self.next_vote_at = 0.0  # first poll in the current term (a weak pre-vote)
            node.become_candidate(node.term, need_increase=False)

    # ------------------------------------------------------------------ candidate

    async def _maintain_candidate(self) -> None:
        node = self.node
        if node.id not in node.voters and not node.bugs.removed_node_votes:
            # membership M6-M7: a learner, or a node removed from the configuration in
            # force, never campaigns (seeded bug removed-node-votes: it does); it still
            # adopts a higher term it has seen, so the leader's heartbeats can reach it
            if self.need_increase and node.known_max_term > node.term:
                node.adopt_term(node.known_max_term)
            self.need_increase = False
            return
        now = time.monotonic()
        if now < self.next_vote_at and not self.need_increase:
            return
        if self.last_result == "WAIT_TO_VOTE_NEXT" or self.need_increase:
            node.next_term()
            self.last_result = "WAIT_TO_REVOTE"
        if self.need_increase:
            self.need_increase = False
            self.next_vote_at = time.monotonic() + self.backoff()
            return
        term = node.term
        replies = await self._vote_round(term)
        if node.role != "candidate":
            return
        out = candidate_outcome(tally_votes(term, replies), node.n)
        self.last_result = out.result
        e = node.cfg.election_s
        now = time.monotonic()
        if out.delay == "backoff":
            self.next_vote_at = now + self.backoff()
        elif out.delay == "backoff+E":
            self.next_vote_at = now + self.backoff() + e
        elif out.delay == "backoff+E/2":
            self.next_vote_at = now + self.backoff() + e / 2
        else:
            self.next_vote_at = 0.0
        if out.new_term_hint is not None:
            node.become_candidate(out.new_term_hint, need_increase=False)
        elif out.result == "PASSED" and node.term == term and node.role == "candidate":
            node.become_leader()

    async def _vote_round(self, term: int) -> list[tuple[str, int] | None]:
        node = self.node
        store = node.store
        req = {
            "type": "vote",
            "term": term,
            "candidate": node.id,
            "ledgerEndIndex": store.end_index,
            "ledgerEndTerm": store.end_term,
        }
        if self._candidacy_term != term:
            # one line per term asked for: concurrent candidacies are what a voter that
            # can vote twice needs, and a candidate's own vote may be refused
            self._candidacy_term = term
            node.log.info("candidacy", term=term, end=store.end_index, end_term=store.end_term)
        own = self.handle_vote(dict(req), from_self=True)
        replies: list[tuple[str, int] | None] = [(own["result"], own["term"])]
        if node.role != "candidate" or node.term != term:
            return replies
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        accepted = 1 if own["result"] == "ACCEPT" else 0
        not_ready = 1 if own["result"] == "REJECT_TERM_NOT_READY" else 0
        electorate = [p for p in node.voters if p != node.id]  # membership M5
        n = len(node.voters)
        outstanding = len(electorate)

        def on_reply(r: dict | None) -> None:
            nonlocal outstanding, accepted, not_ready
            outstanding -= 1
            decided = False
            if r is None or not isinstance(r.get("result"), str):
                replies.append(None)
            else:
                t = r.get("term")
                rterm = t if isinstance(t, int) else 0
                replies.append((r["result"], rterm))
                res = r["result"]
                accepted += res == "ACCEPT"
                not_ready += res == "REJECT_TERM_NOT_READY"
                # (ours) also stop waiting once the outcome cannot change for the
                # better: a higher term (row 1), or a quorum of ACCEPT+NOT_READY, which
                # revotes at once anyway; waiting E on an unresponsive peer here lets
                # two candidates livelock, each missing the other's short backoff.
                decided = (
                    res == "REJECT_ALREADY_HAS_LEADER"
                    or rterm > term
                    or is_quorum(accepted + not_ready, n)
                )
            if not done.done() and (decided or is_quorum(accepted, n) or outstanding == 0):
                done.set_result(None)

        async def one(pid: str) -> None:
            link = node.links.get(pid)
            on_reply(None if link is None else await link.request(dict(req), node.cfg.election_s))

        for p in electorate:
            node.spawn(one(p))
        if not electorate:
            done.set_result(None)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(done), node.cfg.election_s)
        tally = list(replies)  # a snapshot: later replies must not change this round
        tally += [None] * (n - len(tally))  # peers that never answered are not valid
        return tally

    # ------------------------------------------------------------------ handlers

    def handle_vote(self, msg: dict, *, from_self: bool = False) -> dict:
        node = self.node
        store = node.store
        term, cand = msg.get("term"), msg.get("candidate")
        end_index, end_term = msg.get("ledgerEndIndex"), msg.get("ledgerEndTerm")
        # Exact types, not int()/str() coercion: int(float("inf")) raises OverflowError,
        # and int(1.9) or str(None) would turn garbage into a vote for someone.
        if not (
            type(term) is int
            and type(cand) is str
            and type(end_index) is int
            and type(end_term) is int
        ):
            return {
                "type": "vote-resp",
                "rid": msg.get("rid"),
                "code": "BAD_REQUEST",
                "term": node.term,
                "result": "REJECT_UNKNOWN_LEADER",
            }
        req = VoteRequest(term, cand, end_index, end_term)
        # membership M7: only voters of the configuration in force may be elected (seeded
        # bug removed-node-votes: any node this one ever knew, removed ones included)
        electorate = frozenset(node.known_ids) if node.bugs.removed_node_votes else node.voters
        state = VoterState(
            node.id,
            electorate,
            node.term,
            node.voted_for,
            node.leader_id,
            store.end_index,
            store.end_term,
            store.term_at(node.config_index),
        )
        d = decide_vote(
            state, req, from_self=from_self, skip_log_check=node.bugs.vote_without_log_check
        )
        if d.grant:
            if node.voted_for != req.candidate:
                # Votes are the evidence an operator needs when a term has two leaders.
                node.log.info("vote", term=req.term, candidate=req.candidate)
            node.grant_vote(req.candidate)
        else:
            if not from_self:
                # a candidate re-asks every backoff: one line per (term, candidate, why)
                key = (req.term, req.candidate, d.result)
                if key != self._last_refusal:
                    self._last_refusal = key
                    node.log.info(
                        "vote-refused",
                        term=req.term,
                        candidate=req.candidate,
                        why=d.result,
                        my_term=node.term,
                        voted=node.voted_for,
                    )
            if d.step_to_candidate:
                node.become_candidate(req.term, need_increase=True)
        return {
            "type": "vote-resp",
            "rid": msg.get("rid"),
            "code": "SUCCESS",
            "term": d.reply_term,
            "result": d.result,
        }

    def handle_heartbeat(self, msg: dict) -> dict:
        node = self.node
        term, leader = msg.get("term"), msg.get("leader")
        if not isinstance(term, int) or not isinstance(leader, str):
            return {
                "type": "heartbeat-resp",
                "rid": msg.get("rid"),
                "code": "BAD_REQUEST",
                "term": node.term,
            }
        # any node a configuration ever named may lead (a leader removing itself leads
        # until the change commits, and a learner must follow the leader)
        known = frozenset(node.known_ids)
        d = decide_heartbeat(node.id, known, node.term, node.leader_id, term, leader)
        addr = msg.get("client_addr") if isinstance(msg.get("client_addr"), str) else None
        if d.follow:
            if node.voted_for != leader:
                # (ours) Following a leader of this term counts as this node's vote for it
                # (persisted, R1). DLedger's voters refuse another candidate of a term only
                # while they remember a vote; a node that joined the term by a heartbeat
                # (a fresh member added mid-term, one that had voted for a loser) kept
                # none, and once its leader fell silent it granted a same-term candidate:
                # measured, n4 won term 3 with two re-added members' votes while n5 had
                # led it (two leaders in one term, on the correct node).
                node.grant_vote(leader)
            node.become_follower(leader, addr)
        elif d.refresh:
            self.last_leader_hb = time.monotonic()
            if addr:
                node.leader_addr = addr
        elif d.step_to_candidate:
            node.become_candidate(term, need_increase=True)
        return {"type": "heartbeat-resp", "rid": msg.get("rid"), "code": d.code, "term": node.term}
