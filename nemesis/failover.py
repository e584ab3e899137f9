"""Classic master/slave failover, done the way an operator does it (spec §9).

``start-failover`` kills the master with SIGKILL, promotes the slave that holds the
most data (``ha-promote`` with a new epoch) and points the other slaves at it
(``ha-follow``). ``stop-failover`` brings the old master back as a slave of the
current master, with an emptied data dir: classic HA cannot cut a divergent tail,
so this is the only safe rejoin. What the promotion loses is not the nemesis's
business; the checker measures it (async: a loss window; sync: a violation). For that
measure the completion says when the kill and the promotion took effect: ``kill_ms`` and
``promote_ms``, the ms from the op's start until just before the kill and until the
promoted node answered (asking every node's status comes first, and the op's own
completion later, after the other slaves were pointed at it).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from harness.core.db import FailsOver
from harness.core.errors import NemesisError
from harness.core.fault import Effects, Fault, Periods
from nemesis.base import completion

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = ["FailoverNemesis", "choose_new_master", "FAILOVER"]

log = logging.getLogger(__name__)


def choose_new_master(statuses: dict[str, dict | None], dead: str) -> str | None:
    """The live slave with the highest offset (ties: the lowest node name), or None."""
    live = [
        (n, st)
        for n, st in statuses.items()
        if n != dead and st and st.get("role") == "slave" and isinstance(st.get("offset"), int)
    ]
    if not live:
        return None
    return min(live, key=lambda x: (-x[1]["offset"], x[0]))[0]


class FailoverNemesis:
    def __init__(self) -> None:
        self.rejoin: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-failover", "stop-failover"}

    def _db(self, ctx: RunContext) -> FailsOver:
        db = ctx.db
        if not isinstance(db, FailsOver):
            raise NemesisError(
                f"failover needs a master/slave DB an operator can fail over (FailsOver: "
                f"statuses, promote, follow, reset_as_slave, kill, start; e.g. --db dledger "
                f"--db-option mode=ha); {type(db).__name__} is not"
            )
        return db

    def setup(self, ctx: RunContext) -> None:
        self._db(ctx)
        self.rejoin = set()

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        db = self._db(ctx)
        if op.f == "start-failover":
            return self._start(ctx, db, op)
        if op.f == "stop-failover":
            done, errors = self._rejoin(ctx, db)
            return completion(op, {"rejoined": done}, errors)
        raise NemesisError(f"failover nemesis cannot handle {op.f!r}")

    def _start(self, ctx: RunContext, db: FailsOver, op: Op) -> Op:
        t0 = time.monotonic()
        value: dict[str, Any] = dict(op.value or {})
        why = FAILOVER.declined_by(db)
        if why:  # named by hand (the deck leaves it out): nothing is killed
            return completion(op, {**value, "nodes": []}, {"cluster": f"refused by the DB: {why}"})
        before = db.statuses(ctx)
        masters = [n for n, st in before.items() if st and st.get("role") == "master"]
        if not masters:
            return completion(
                op, {**value, "nodes": []}, {"cluster": "no master answers; nothing done"}
            )
        old = max(masters, key=lambda n: (before[n] or {}).get("term") or 0)
        kill_ms = round((time.monotonic() - t0) * 1000, 1)
        db.kill(ctx, old)
        self.rejoin.add(old)
        after = db.statuses(ctx)
        epoch = max([st.get("term") or 0 for st in (*before.values(), *after.values()) if st]) + 1
        new = choose_new_master(after, old)
        value.update(
            {
                "nodes": [old],
                "killed": old,
                "offsets": {n: st.get("offset") for n, st in after.items() if st},
                "master_offset": (before[old] or {}).get("offset"),
                "kill_ms": kill_ms,
            }
        )
        if new is None:
            return completion(op, value, {"cluster": "no live slave to promote"})
        errors: dict[str, str] = {}
        try:
            db.promote(ctx, new, epoch)
        except Exception as e:  # noqa: BLE001 - a refused promotion is the op's error
            errors[new] = f"promote: {e}"
            return completion(op, {**value, "promoted": None}, errors)
        value["promote_ms"] = round((time.monotonic() - t0) * 1000, 1)
        followed: list[str] = []
        refused: list[str] = []
        for n, st in after.items():
            if n in (new, old) or st is None:
                continue
            try:
                ok = db.follow(ctx, n, new, epoch)
            except Exception as e:  # one unreachable slave must not stop the others
                errors[n] = f"follow: {e}"
                continue
            (followed if ok else refused).append(n)
        value.update({"promoted": new, "epoch": epoch, "followed": followed, "refused": refused})
        log.info(
            "failover: killed %s, promoted %s (epoch %d), followed %s, refused %s",
            old,
            new,
            epoch,
            followed,
            refused,
        )
        return completion(op, value, errors)

    def _rejoin(self, ctx: RunContext, db: FailsOver) -> tuple[list[str], dict[str, str]]:
        done: list[str] = []
        errors: dict[str, str] = {}
        if not self.rejoin:
            return done, errors
        sts = db.statuses(ctx)
        masters = [n for n, st in sts.items() if st and st.get("role") == "master"]
        if not masters:
            return done, {n: "no master to rejoin" for n in self.rejoin}
        m = max(masters, key=lambda n: (sts[n] or {}).get("term") or 0)
        epoch = (sts[m] or {}).get("term") or 1
        for n in sorted(self.rejoin):
            try:
                db.reset_as_slave(ctx, n, m, epoch)
                db.start(ctx, n)
            except Exception as e:
                errors[n] = f"{type(e).__name__}: {e}"
                continue
            done.append(n)
            self.rejoin.discard(n)
        return done, errors

    def teardown(self, ctx: RunContext) -> None:
        if self.rejoin:
            for n, err in sorted(self._rejoin(ctx, self._db(ctx))[1].items()):
                log.error("rejoining old master %s failed: %s", n, err)


FAILOVER = Fault(
    name="failover",
    nemesis=lambda chosen: FailoverNemesis(),
    heal_rank=80,
    db_needs=(FailsOver,),
    draw=lambda d: {"target": "master"},
    targets="cluster",
    # The old master is killed (db.kill) and comes back as a slave on stop-failover.
    effects=Effects(kills=True),
    periods=Periods(hit=("killed", "nodes"), ended=("rejoined",)),
    colour="#3a86ff",
    doc="an operator's failover of a mode-ha cluster (the master's successor promoted)",
)
