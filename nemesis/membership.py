"""``start-membership`` / ``stop-membership``: the cluster's membership changed under load.

Any DB declaring :class:`harness.core.db.Reconfigurable` (the reference node, etcd) can be
reconfigured; a DB that only declares :class:`harness.core.db.TransfersLeadership`
(openmessaging DLedger 0.x: transfer, no membership change) plays the ``transfer``
variant alone, whatever was drawn (the draw is kept as ``drawn``); a DB with neither is
refused before the load, with its name. One ``start-membership`` plays one variant,
drawn from the seeded rng:

  remove-leader   the leader removed (and stopped); it stays out until the heal.
  remove-add      a follower removed, then added back wiped under a fresh identity:
                  the same host, an empty disk, a new member id (``n3.1``).
  partitioned     a partition (one side a minority, the leader on either side), then
                  a follower on the far side removed while it holds: with the leader
                  in the majority the change commits without the minority; with it in
                  the minority the change is appended and cannot commit, and a new
                  leader on the other side must cut it away. Healed at the end.
  double          two followers removed in quick succession: the second request
                  goes out while the first is still uncommitted (the recipe retries
                  ``CONFIG_CHANGE_PENDING``).
  transfer        a follower made to lag (cut off from its peers, or killed, for a
                  while: a kill when the value asks ``lag: kill`` or there is no
                  partition fault), then, the moment it is back (a killed one: once
                  it answers and follows the leader, ``back_s``), leadership
                  transferred to it, its log still behind.
  linger          a follower removed while the clients' writes are held, and left
                  running with a log as long as anyone's (M7.3): a correct removed
                  node holds the entry that removes it and never campaigns, and the
                  members refuse it anyway; one that campaigns can win, since nothing
                  newer than its log was written, once the members have no leader:
                  the leader of the moment is cut off alone and the others from each
                  other, each still reaching the removed node (a bridge).
                  Writes resume once it leads or after the hold; it stays out
                  (running) until the heal adds it back wiped.
  race            the 2015 single-server bug staged (docs/membership.md M3): with an
                  even voter set A, B, C, D (a fifth removed first), D lags; A is cut
                  off and asked to remove B (an entry only A holds); once B or C wins
                  the next term, the cluster is cut into {new leader, the other} and
                  {A, D} and the new leader is asked at once to remove A. A correct
                  leader refuses until its own-term entry commits (it cannot: 2 of 4);
                  with ``reconfig-before-term-commit`` both sides commit.

``partitioned``, ``transfer`` (its lag) and ``race`` cut the network through the
partition fault's own iptables code (journaled as partitions are), so they need
``partition`` among the run's faults; without it ``partitioned`` and ``race`` record that
they did nothing and ``transfer`` makes the follower lag with a kill (``Killable``).

Every change is recorded in the op's value: what was asked (``op``, ``node``, the
member ``id`` it had or got), how it ended (``ok`` or ``error``) and the configuration
the cluster reported after it (``members``: ``{voters, learners, pending, leader}``, by
node, each with the DB's own id). A transfer records the DB's answer (``result``:
``from``, ``leader``, ``outcome``, see ``TransfersLeadership``), its ``lag`` (``kill``
or ``cut``) and, when the DB declares ``transfer_hands_over``, ``promise:
"hands-over"``: the ``transfer`` checker (checker/transfer.py) judges those. Nodes are always named by their host: a node added
back keeps its node name and gets a fresh ``id``.

``stop-membership`` (and the final heal, and teardown) restores the original
membership: every node of the run a voter again, removed ones added back wiped, so the
final reads cover every node. A removal is journaled (kind ``membership``) before it
lands; the undo of a journal left by a killed harness stops that node's DB process by
pid file (membership itself cannot be restored without the dead run's view of who runs
which id, and the next run's clean start wipes every node anyway), so no removed node or
fresh member keeps running outside any run. The heal clears the entries.
"""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import nemesis.grudge as g
from harness.core.db import Reconfigurable
from harness.core.errors import NemesisError
from harness.core.fault import Draw, Effects, Fault, JournalKind, JournalRecord, Periods, Selected
from nemesis import journal
from nemesis.base import completion, leader_now, remote_of, stop_by_pidfile, sudo_kw
from nemesis.schedules import scaled

if TYPE_CHECKING:
    from harness.core.db import Members
    from harness.core.history import Op
    from harness.core.remote import Remote
    from harness.core.spec import RunContext

__all__ = [
    "VARIANTS",
    "MembershipNemesis",
    "MEMBERSHIP",
    "MEMBERSHIP_JOURNAL",
    "draw_membership",
    "usable",
]

log = logging.getLogger(__name__)

VARIANTS = ("remove-leader", "remove-add", "partitioned", "double", "transfer", "race", "linger")

WEIGHTS = {"race": 10, "linger": 10}
"""How often a variant is drawn relative to the others (1). Tuned as the ``figure8``
profile was, for issue 29's campaign (``--nemesis membership,partition,kill``, 60 s,
interval 5 s): the stock schedule gives membership a third of its ~6 starts, and the
2015 bug needs the race. At weight 3, 54% of 2000 simulated seeds drew a race in their
first 6 starts; at 10, 77% (the other variants keep 1/15 each). ``linger`` is the only
variant that leaves a removed node running, which is what ``removed-node-votes`` needs
(docs/membership.md M15): it gets the race's weight, so each is drawn 2 times in 5 and
the five others 1 in 25 each."""

_MIN_NODES = {"double": 4, "race": 4}

_NEEDS_LEADER = frozenset({"remove-leader", "transfer", "race", "partitioned", "linger"})


def usable(variant: str, n: int) -> bool:
    """Whether ``variant`` can do something on ``n`` nodes (never below 3: one removal
    must leave a majority able to commit)."""
    return n >= _MIN_NODES.get(variant, 3)


def draw_membership(d: Draw) -> dict[str, Any]:
    """A variant and a seeded ranking of the nodes; the landing picks the first node of
    the ranking that fits (a follower: not whoever leads then)."""
    pool = [v for v in (d.variants or VARIANTS) if usable(v, len(d.nodes))]
    if not d.leader_ok:
        pool = [v for v in pool if v not in _NEEDS_LEADER] or pool
    if not pool:
        raise NemesisError(f"membership: no variant can act on {len(d.nodes)} nodes")
    weights = [WEIGHTS.get(v, 1) for v in pool]
    variant = d.rng.choices(pool, weights=weights)[0]
    order = list(d.nodes)
    d.rng.shuffle(order)
    value: dict[str, Any] = {
        "variant": variant,
        "order": order,
        "hold": round(scaled(d.rng, d.interval, 0.6, 1.0), 3),
    }
    if variant == "partitioned":
        value["leader_side"] = d.rng.choice(("majority", "minority"))
    return value


class _Play(NamedTuple):
    """What a staged variant (partitioned, transfer, race, linger) plays from: the run, the
    op's value (the variant records in it what it did), the changes made so far, the nodes
    in the drawn order, the leader when the op landed, and the hold in seconds."""

    ctx: RunContext
    value: dict[str, Any]
    changes: list[dict[str, Any]]
    order: list[str]
    lead: str | None
    hold: float


class MembershipNemesis:
    """Plays the variants through ``Reconfigurable``; remembers who is out, to heal."""

    def __init__(self) -> None:
        self.out: set[str] = set()
        self.can_cut = False
        self.killer: Any = None

    def fs(self) -> set[str]:
        return {"start-membership", "stop-membership"}

    def _db(self, ctx: RunContext) -> Any:
        from harness.core.db import Reconfigurable

        if not isinstance(ctx.db, Reconfigurable):
            raise NemesisError(
                f"the membership fault needs a DB that can change its membership "
                f"(Reconfigurable); {type(ctx.db).__name__} cannot"
            )
        return ctx.db

    def setup(self, ctx: RunContext) -> None:
        if _transfer_only(ctx.db):
            self.out = set()
            return
        db = self._db(ctx)
        check = getattr(db, "check_reconfigurable", None)
        if callable(check):
            check(ctx)  # e.g. the reference node in mode ha: refused before the load
        self.out = set()

    # the changes, each recorded ---------------------------------------------------
    def _members(self, ctx: RunContext) -> Members | None:
        if _transfer_only(ctx.db):
            return None  # a DB that only transfers reports no configuration
        try:
            m: Members = self._db(ctx).members(ctx)
            return m
        except Exception as e:  # noqa: BLE001 - a view we could not get is recorded as such
            log.info("membership: members not known: %s", e)
            return None

    def _record(
        self,
        ctx: RunContext,
        changes: list[dict[str, Any]],
        op: str,
        node: str,
        fn: Callable[[], Any],
        ident: str | None = None,
        until: float | None = None,
    ) -> bool:
        """``fn`` once (or, with ``until``, again every 0.1 s until it succeeds or that
        monotonic time passes), recorded as one change with its number of attempts."""
        entry: dict[str, Any] = {"op": op, "node": node}
        if ident:
            entry["id"] = ident
        attempts = 0
        while True:
            attempts += 1
            try:
                res = fn()
                break
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                if until is None or time.monotonic() >= until:
                    return self._failed(ctx, changes, entry, e, attempts)
                time.sleep(0.1)
        if attempts > 1:
            entry["attempts"] = attempts
        entry["ok"] = True
        if hasattr(res, "to_json"):
            entry["members"] = res.to_json()
            if op == "add":
                entry["id"] = res.voters.get(node) or res.learners.get(node)
        elif isinstance(res, Mapping):
            entry["result"] = dict(res)
        changes.append(entry)
        return True

    def _failed(
        self,
        ctx: RunContext,
        changes: list[dict[str, Any]],
        entry: dict[str, Any],
        e: Exception,
        attempts: int,
    ) -> bool:
        if attempts > 1:
            entry["attempts"] = attempts
        entry["ok"] = False
        entry["error"] = f"{type(e).__name__}: {e}"[:400]
        view = self._members(ctx)
        if view is not None:
            entry["members"] = view.to_json()
        changes.append(entry)
        log.info("membership %s %s failed: %s", entry["op"], entry["node"], e)
        return False

    def _ident(self, ctx: RunContext, node: str) -> str | None:
        """The member id ``node`` has now: the DB's own record if it keeps one (no round
        trip, for staged steps), else the cluster's report."""
        ident = getattr(ctx.db, "ident", None)
        if callable(ident):
            return str(ident(node))
        m = self._members(ctx)
        return None if m is None else (m.voters.get(node) or m.learners.get(node))

    def _remove(
        self,
        ctx: RunContext,
        changes: list[dict[str, Any]],
        node: str,
        *,
        via: str | None = None,
        wait: bool = True,
        until: float | None = None,
    ) -> bool:
        db = self._db(ctx)
        journal.note(
            ctx,
            node,
            "membership",
            "node",
            {"pidfiles": journal.db_pidfiles(ctx, node)},
            f"removed from the cluster (member {self._ident(ctx, node) or node})",
        )
        ok = self._record(
            ctx,
            changes,
            "remove" if wait else "remove-request",
            node,
            lambda: db.remove_member(ctx, node, via=via, wait=wait),
            self._ident(ctx, node),
            until=until,
        )
        if wait and ok:
            self.out.add(node)
        return ok

    def _add(self, ctx: RunContext, changes: list[dict[str, Any]], node: str) -> bool:
        db = self._db(ctx)
        journal.note(
            ctx,
            node,
            "membership",
            "node",
            {"pidfiles": journal.db_pidfiles(ctx, node)},
            "added back wiped under a fresh identity",
        )
        ok = self._record(ctx, changes, "add", node, lambda: db.add_member(ctx, node))
        if ok:
            self.out.discard(node)
        return ok

    # helpers --------------------------------------------------------------------
    def _leader(self, ctx: RunContext, among: list[str] | None = None) -> str | None:
        try:
            got = leader_now(ctx, ctx.rng, among)
        except Exception:  # noqa: BLE001 - no leader known
            return None
        return got[0] if got else None

    def _await_leader(self, ctx: RunContext, among: list[str], within: float) -> str | None:
        """The first of ``among`` to lead, polled every 50 ms (through the DB's quick
        ``leaders_among`` when it has one)."""
        quick = getattr(ctx.db, "leaders_among", None)
        deadline = time.monotonic() + within
        while True:
            if callable(quick):
                try:
                    got = quick(ctx, among)
                except Exception:  # noqa: BLE001 - asked again
                    got = []
                lead = got[0] if got else None
            else:
                lead = self._leader(ctx, among)
            if lead is not None or time.monotonic() >= deadline:
                return lead
            time.sleep(0.05)

    def _cut(self, ctx: RunContext, sides: list[list[str]]) -> dict[str, Any]:
        from nemesis import net

        grudge = g.complete_grudge(sides)
        errors = net.apply_grudge(ctx, grudge)
        if errors:
            raise NemesisError("partition failed: " + "; ".join(errors.values()))
        return g.grudge_to_json(grudge)

    def _heal_cut(self, ctx: RunContext) -> None:
        from nemesis import net

        errors = net.heal(ctx, ctx.nodes)
        if errors:
            log.error("membership: healing its partition: %s", errors)

    def _followers(self, order: list[str], lead: str | None) -> list[str]:
        return [n for n in order if n != lead and n not in self.out]

    # variants --------------------------------------------------------------------
    def invoke(self, ctx: RunContext, op: Op) -> Op:
        if op.f == "start-membership":
            value = dict(op.value or {})
            changes: list[dict[str, Any]] = []
            errors: dict[str, str] = {}
            try:
                self._play(ctx, value, changes)
            except Exception as e:  # noqa: BLE001 - recorded with what was done so far
                errors["cluster"] = f"{type(e).__name__}: {e}"[:400]
            value["changes"] = changes
            m = self._members(ctx)
            value["members"] = None if m is None else m.to_json()
            value["out"] = sorted(self.out)
            return completion(op, value, errors)
        if op.f == "stop-membership":
            return self._restore(ctx, op)
        raise NemesisError(f"membership nemesis cannot handle {op.f!r}")

    def _play(self, ctx: RunContext, value: dict[str, Any], changes: list[dict[str, Any]]) -> None:
        variant = value.get("variant", "remove-add")
        if _transfer_only(ctx.db) and variant != "transfer":
            value["drawn"], value["variant"] = variant, "transfer"
            variant = "transfer"
        order = [str(n) for n in value.get("order") or ctx.nodes if n in ctx.nodes]
        hold = float(value.get("hold", 2.0))
        lead = self._leader(ctx)
        value["leader"] = lead
        if variant == "remove-leader":
            if lead is None:
                raise NemesisError("no leader known; nothing done")
            self._remove(ctx, changes, lead)
            return
        if variant == "remove-add":
            victims = self._followers(order, lead)
            if not victims:
                raise NemesisError("no follower to remove")
            if self._remove(ctx, changes, victims[0]):
                time.sleep(hold / 2)
                self._add(ctx, changes, victims[0])
            return
        if variant == "double":
            victims = self._followers(order, lead)[:2]
            if len(victims) < 2 or len(ctx.nodes) - len(self.out) < 4:
                raise NemesisError("too few members left for two removals")
            # The second request goes out while the first is uncommitted.
            self._remove(ctx, changes, victims[0], wait=False)
            self._remove(ctx, changes, victims[1])
            self._remove(ctx, changes, victims[0])
            return
        staged = {
            "partitioned": self._partitioned,
            "transfer": self._transfer,
            "race": self._race,
            "linger": self._linger,
        }.get(variant)
        if staged is None:
            raise NemesisError(f"unknown membership variant {variant!r}")
        staged(_Play(ctx, value, changes, order, lead, hold))

    def _cut_members(
        self, ctx: RunContext, variant: str, lead: str | None
    ) -> tuple[str, list[str]]:
        """(the leader, the members) a variant that cuts the network works with, once it may
        run: it needs the partition fault's rules and a known leader."""
        if not self.can_cut:
            raise NemesisError(f"variant {variant} needs the partition fault in the run")
        if lead is None:
            raise NemesisError("no leader known; nothing done")
        return lead, [n for n in ctx.nodes if n not in self.out]

    def _partitioned(self, p: _Play) -> None:
        ctx, value, changes, order, lead, hold = p
        lead, members = self._cut_members(ctx, "partitioned", lead)
        k = max(1, (len(members) - 1) // 2)
        others = [n for n in order if n in members and n != lead]
        if value.get("leader_side") == "minority":
            near = [lead, *others[: k - 1]]
        else:
            near = [lead, *others[k:]]
        far = [n for n in members if n not in near]
        value["grudge"] = self._cut(ctx, [near, far, sorted(self.out)] if self.out else [near, far])
        try:
            victim = far[0] if value.get("leader_side") != "minority" else far[-1]
            if value.get("leader_side") == "minority":
                # appended by a leader that cannot commit it; the far side elects anew
                self._remove(ctx, changes, victim, via=lead, wait=False)
            else:
                self._remove(ctx, changes, victim)
            time.sleep(hold)
        finally:
            self._heal_cut(ctx)

    def _transfer(self, p: _Play) -> None:
        ctx, value, changes, order, lead, hold = p
        from harness.core.db import Killable, TransfersLeadership

        db = ctx.db
        if not isinstance(db, TransfersLeadership):
            raise NemesisError(f"{type(db).__name__} cannot transfer leadership")
        if lead is None:
            # A transfer needs a leader to ask: after a fault that left the cluster
            # electing (seen on DLedger under the deck), wait for one rather than do nothing.
            t0 = time.monotonic()
            lead = self._await_leader(ctx, [n for n in ctx.nodes if n not in self.out], 15.0)
            value["leader"], value["leader_wait_s"] = lead, round(time.monotonic() - t0, 3)
        followers = self._followers(order, lead)
        if lead is None or not followers:
            raise NemesisError("no leader and follower known; nothing done")
        target = followers[0]
        value["target"] = target
        if getattr(db, "transfer_hands_over", False) is True:
            value["promise"] = "hands-over"  # what checker/transfer.py judges it by
        if self.can_cut and not (value.get("lag") == "kill" and isinstance(db, Killable)):
            value["lag"] = "cut"
            value["grudge"] = self._cut(ctx, [[target], [n for n in ctx.nodes if n != target]])
            try:
                time.sleep(hold)
            finally:
                self._heal_cut(ctx)
        elif isinstance(db, Killable):
            value["lag"] = "kill"
            db.kill(ctx, target)
            try:
                time.sleep(hold)
            finally:
                db.start(ctx, target)
            value["back_s"] = _following(ctx, db, target, lead)
        self._record(
            ctx,
            changes,
            "transfer",
            target,
            lambda: db.transfer_leader(ctx, target),
            self._ident(ctx, target),
        )

    def _linger(self, p: _Play) -> None:
        """A removed follower left running in a quiet cluster (see the module's docstring).

        The writes are held first, so that the removed node's log is, and stays, as long
        as every member's: what keeps a removed node from leading is then the protocol
        alone (M5's voter check, M7.3), not a log check it would lose anyway under load.
        The leader stops telling it 2E after the removal commits; the hold is waited out
        past that, or until it leads.
        """
        ctx, value, changes, order, lead, hold = p
        victims = self._followers(order, lead)
        if lead is None or not victims:
            raise NemesisError("no leader and follower known; nothing done")
        node = victims[0]
        value["target"] = node
        held = not ctx.writes.lull
        if held:
            ctx.writes.hold()
        value["writes"] = "held" if held else "already held"
        try:
            time.sleep(0.5)  # the writes in flight complete
            if not self._remove(ctx, changes, node, via=lead, wait=False):
                return
            self.out.add(node)  # out of the configuration, still running: the heal re-adds
            deadline = time.monotonic() + 2 * hold + 2.0
            while time.monotonic() < deadline:
                m = self._members(ctx)
                if m is not None and node not in {*m.voters, *m.learners} and not m.pending:
                    value["committed"] = True
                    break
                time.sleep(0.1)
            value["removed_led"] = self._leader_gone(ctx, value, node, lead, hold + 3.0)
        finally:
            if held:
                ctx.writes.release()

    def _leader_gone(
        self, ctx: RunContext, value: dict[str, Any], node: str, lead: str, within: float
    ) -> bool:
        """Whether the removed ``node`` came to lead within ``within`` s, with the network
        cut so that only it could win an election.

        A removed node that campaigns (M7.3 broken) polls first in its current term, and
        members that have a leader refuse it (§4); members that lost theirs race it, and
        under a write load their logs are longer. So the leader of the moment is cut off
        alone and the other members from each other, each still reaching ``node`` (a
        bridge): no member can gather a majority, and ``node``, whose log is as long as
        theirs (the writes are held), can, if they vote for it. A correct cluster stays
        leaderless until the heal. Without the partition fault's rules it only waits.
        """
        if not self.can_cut:
            return self._await_leader(ctx, [node], within) is not None
        members = [n for n in ctx.nodes if n not in self.out]
        cur = self._leader(ctx, members) or lead
        others = sorted(self.out - {node})
        sides = [[cur], *([v, node] for v in members if v != cur), *([others] if others else [])]
        value["grudge"] = self._cut(ctx, sides)
        try:
            if self._await_leader(ctx, [node], within) is None:
                return False
            time.sleep(1.0)  # it leads on while the cut holds: long enough to be sampled
            return True
        finally:
            self._heal_cut(ctx)

    def _race(self, p: _Play) -> None:
        """The 2015 counterexample, staged (see the module's docstring)."""
        ctx, value, changes, order, lead, hold = p
        lead, members = self._cut_members(ctx, "race", lead)
        # an even voter set: single-server changes from one base can then have
        # disjoint majorities (with an odd one they always intersect)
        if len(members) % 2 == 1:
            spare = [n for n in order if n in members and n != lead][-1]
            if not self._remove(ctx, changes, spare):
                raise NemesisError("could not make the voter set even")
            members.remove(spare)
        lead = self._leader(ctx, members) or lead
        a = lead
        rest = [n for n in order if n in members and n != a]
        d, b, c = rest[0], rest[1], rest[2]
        extra = rest[3:]
        value["roles"] = {"A": a, "B": b, "C": c, "D": d}
        outside = sorted(set(ctx.nodes) - set(members))
        slowed = False
        try:
            # 1. D lags: cut off while A, B, C commit (so D cannot win the next term)
            self._cut(ctx, [[d], [a, b, c, *extra], *([outside] if outside else [])])
            time.sleep(hold / 2)
            # 2. A alone; asked to remove B: an entry (C1 = C0 - B) only A holds. D is
            # slowed down (stopped most of the time): it still votes, but the new leader's
            # first entries reach it only after a few of its waking slots, later than the
            # harness can see the new leader and cut (the counterexample's lost message).
            self._cut(ctx, [[a], [b, c, d, *extra], *([outside] if outside else [])])
            slowed = self._slow(ctx, d, value)
            self._remove(ctx, changes, b, via=a, wait=False)
            # 3. B or C wins the next term (D lags, it cannot): cut at once, ask it to remove A
            new = self._await_leader(ctx, [b, c, *extra], 4 * hold + 4.0)
            value["new_leader"] = new
            if new is None:
                raise NemesisError("no new leader among the majority side")
            mate = c if new == b else b
            value["grudge"] = self._cut(
                ctx, [[new, mate], [a, d, *extra], *([outside] if outside else [])]
            )
            if slowed:
                self._unslow(ctx, d)
                slowed = False
            self._remove(ctx, changes, a, via=new, wait=False, until=time.monotonic() + hold)
            # 4. both sides may now commit: A with D (C1), the new leader with its mate (C2)
            time.sleep(1.5 * hold)
        finally:
            if slowed:
                self._unslow(ctx, d)
            self._heal_cut(ctx)

    def _throttle_pidfile(self, ctx: RunContext, node: str) -> str | None:
        pidfiles = journal.db_pidfiles(ctx, node)
        return pidfiles[0].rsplit("/", 1)[0] + "/membership-slow.pid" if pidfiles else None

    def _slow(self, ctx: RunContext, node: str, value: dict[str, Any]) -> bool:
        """Run ``node``'s DB processes 20 ms in every 720 (a SIGCONT/SIGSTOP loop on its
        host, journaled: the undo stops the loop and continues the processes)."""
        from harness.core.db import Pausable

        tpid = self._throttle_pidfile(ctx, node)
        if tpid is None or not isinstance(ctx.db, Pausable):
            return False
        pidfiles = journal.db_pidfiles(ctx, node)
        journal.note(
            ctx,
            node,
            "membership",
            "slow",
            {"pidfiles": [tpid], "cont": pidfiles},
            "DB processes slowed by a SIGSTOP/SIGCONT loop",
        )
        pids = " ".join(f'"$(cat {shlex.quote(p)})"' for p in pidfiles)
        loop = f"while :; do kill -CONT {pids}; sleep 0.02; kill -STOP {pids}; sleep 0.7; done"
        remote = remote_of(ctx, node)
        remote.start_daemon(
            f"sh -c {shlex.quote(loop)}", pidfile=tpid, logfile=tpid.removesuffix(".pid") + ".log"
        )
        value["slowed"] = node
        return True

    def _unslow(self, ctx: RunContext, node: str) -> None:
        tpid = self._throttle_pidfile(ctx, node)
        if tpid is None:
            return
        remote = remote_of(ctx, node)
        stop_by_pidfile(remote, tpid)
        for pf in journal.db_pidfiles(ctx, node):
            remote.signal_daemon(pf, "CONT")
        journal.clear(ctx, node, "membership", "slow")

    # heal -------------------------------------------------------------------------
    def _restore(self, ctx: RunContext, op: Op) -> Op:
        if _transfer_only(ctx.db):  # nothing was removed: there is nothing to restore
            return completion(op, {"changes": [], "members": None, "restored": True}, {})
        changes: list[dict[str, Any]] = []
        errors: dict[str, str] = {}
        deadline = time.monotonic() + 90.0
        m = None
        while time.monotonic() < deadline:
            m = self._members(ctx)
            if m is None:
                time.sleep(1.0)
                continue
            missing = [n for n in ctx.nodes if n not in m.voters]
            if not missing and not m.pending:
                break
            if not missing:
                time.sleep(0.5)
                continue
            self._add(ctx, changes, missing[0])
        else:
            errors["cluster"] = "original membership not restored within 90 s"
        if m is not None and not errors:
            self.out = set()
            for n in ctx.nodes:
                journal.clear(ctx, n, "membership", "node")
        value: dict[str, Any] = {
            "changes": changes,
            "members": None if m is None else m.to_json(),
            "restored": not errors,
        }
        return completion(op, value, errors)

    def teardown(self, ctx: RunContext) -> None:
        if self.out:
            from harness.core.history import NEMESIS, Op

            done = self._restore(ctx, Op(type="invoke", process=NEMESIS, f="stop-membership"))
            if done.error:
                log.error("membership teardown: %s", done.error)


def _undo_membership(remote: Remote | None, entry: JournalRecord) -> None:
    remote = journal.connected(remote, entry)
    for pf in entry.undo.get("pidfiles", []):
        stop_by_pidfile(remote, str(pf))
    for pf in entry.undo.get("cont", []):  # a slowed node's processes, left stopped
        remote.signal_daemon(str(pf), "CONT", **sudo_kw(remote))


MEMBERSHIP_JOURNAL = JournalKind(
    name="membership",
    rank=45,
    undo=_undo_membership,
    doc="a node removed from the cluster or added back under a fresh identity: its DB "
    "process stopped by pid file (the next run's clean start wipes it)",
)


def _transfer_only(db: object) -> bool:
    """A DB that can hand over leadership but not change its membership."""
    from harness.core.db import TransfersLeadership

    return isinstance(db, TransfersLeadership) and not isinstance(db, Reconfigurable)


def _leader_seen_by(ctx: RunContext, db: Any, node: str) -> str | None:
    """The leader ``node`` names: its ``members`` view, or, for a DB that only transfers,
    its ``leader_seen_by`` (``TransfersLeadership``'s optional companion)."""
    if isinstance(db, Reconfigurable):
        return db.members(ctx, via=node).leader
    seen = getattr(db, "leader_seen_by", None)
    if not callable(seen):
        raise NemesisError(f"{type(db).__name__} cannot say whom {node} follows")
    got = seen(ctx, node)
    return None if got is None else str(got)


def _following(
    ctx: RunContext, db: Any, node: str, lead: str, within: float = 30.0
) -> float | None:
    """Seconds until restarted ``node`` answers and names ``lead`` as its leader (None if
    not within ``within``: a JVM restarted on a loaded 2-core lab took over 10 s).

    A transfer asked before then tests only that a process is starting: the leader's
    request cannot reach it, and every DB keeps its leader. Asked now, the target is
    reachable and still behind (the entries written while it was down are on their
    way): the moment a transfer must first catch it up.
    """
    t0 = time.monotonic()
    while time.monotonic() - t0 < within and not ctx.stop.is_set():
        try:
            if _leader_seen_by(ctx, db, node) == lead:
                return round(time.monotonic() - t0, 3)
        except Exception:  # noqa: BLE001 - still starting
            pass
        time.sleep(0.05)
    return None


def _refuse(db: object, hosts: Any) -> str | None:
    """Reconfigurable (and in a mode that can change), or a DB that only transfers."""
    if _transfer_only(db):
        return None
    if not isinstance(db, Reconfigurable):
        return "membership needs a DB that declares Reconfigurable (or TransfersLeadership)"
    if not getattr(db, "reconfigurable", True):
        return f"{type(db).__name__} cannot change its membership in this mode"
    return None


def _link(nem: MembershipNemesis, built: Mapping[str, object]) -> None:
    """Cuts need the partition fault's iptables chain (set up and healed by it); a lag
    without it is made with a kill."""
    nem.can_cut = "partition" in built
    nem.killer = built.get("kill")


def _nemesis(chosen: Mapping[str, Selected]) -> MembershipNemesis:
    return MembershipNemesis()


MEMBERSHIP = Fault(
    name="membership",
    nemesis=_nemesis,
    heal_rank=85,
    draw=draw_membership,
    variants=VARIANTS,
    aliases={f"membership-{v}": (v,) for v in VARIANTS},
    usable=usable,
    targets="cluster",
    needs=frozenset({"primaries"}),
    refuse=_refuse,
    link=_link,
    journal=(MEMBERSHIP_JOURNAL,),
    effects=Effects(changes_membership=True),
    periods=Periods(hit=()),  # the cluster's configuration, not a set of nodes
    colour="#16a085",
    doc="membership changed (Reconfigurable): nodes removed, added back wiped, leadership "
    "transferred; the heal restores the original members",
)
