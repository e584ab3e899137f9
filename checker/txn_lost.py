"""Acknowledged commits whose writes vanished (``lost-commit``), the failover that lost
them, and the loss window measured.

Why its own module: Adya's anomalies are about the order of the committed transactions;
a lost commit is about durability, which every isolation level takes for granted: a
transaction was acknowledged, and later the database's state shows it never happened.
A primary failed over to an asynchronous standby does exactly that to the commits the
standby had not received (PostgreSQL's manual, "Log-Shipping Standby Servers", says so),
and a database that declares such a *loss window* (checker option ``loss_window``, in
words, as the queue checker takes one) is not held to have kept them: each failover's
losses are measured (how many acknowledged commits, acknowledged over how many ms before
the promotion) and the rest of the history is judged as the promoted standby kept it.

What counts as lost, from the history alone (so a lost commit is seen only when the key
was read, and written, after it):

* **list-append**: an acknowledged append ``x`` to ``k`` is absent from ``k``'s last
  read, which was invoked after ``x``'s transaction was acknowledged and holds an append
  by a transaction invoked after that acknowledgement too. The key's state moved on past
  the commit without it: not a stale read (a prefix missing its newest elements) but a
  history rewritten.
* **rw-register**: a transaction invoked after an acknowledged write ``v`` of ``k`` read
  a version of ``k`` older than ``v`` in real time (the initial null, or a value whose
  writer was acknowledged before ``v``'s writer was invoked) and wrote ``k`` over it, and
  no read invoked after that overwrite returned ``v``: the state went back and was built
  upon. That overwriting transaction's read is the evidence.

A lost commit is *in a failover's window* when its transaction was acknowledged before
that failover's promotion completed and the evidence read was invoked after the failover
began (the old primary's kill). Only those are the declared window's; a commit lost with
no failover between its acknowledgement and the read, or acknowledged after the
promotion, is a ``lost-commit`` anomaly whatever the window says.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checker.txn_infer import OK, Graph, Txns
from harness.core.op import NEMESIS, Op

__all__ = [
    "FAILOVER_F",
    "Failover",
    "Lost",
    "failovers",
    "lost_writes",
    "in_window",
    "lost_examples",
    "window_stats",
    "strip",
]

FAILOVER_F = "start-failover"
"""The fault record of nemesis/failover.py: its completion names the promoted node."""


@dataclass(frozen=True)
class Failover:
    """One failover that promoted a standby, as its fault records show it."""

    n: int
    """1, 2, ...: its place among the history's failovers."""
    inv: int
    """History index of the invocation (the old primary is killed right after it)."""
    comp: int
    """History index of the completion (the standby promoted, the others pointed at it)."""
    kill_time: int
    """When the old primary was killed: the invocation's time plus the completion's
    ``kill_ms`` (nemesis/failover.py), else the invocation's time."""
    promoted_time: int
    """When the promoted node took over: the invocation's time plus ``promote_ms``, else
    the completion's time."""
    killed: Any
    promoted: Any

    def describe(self) -> dict[str, Any]:
        return {
            "failover": self.n,
            "indexes": [self.inv, self.comp],
            "killed": self.killed,
            "promoted": self.promoted,
            "ms": round((self.promoted_time - self.kill_time) / 1e6, 1),
        }


@dataclass(frozen=True)
class Lost:
    """One acknowledged write absent from its key's last read."""

    txn: int
    key: Any
    value: Any
    read_by: int
    """The txn whose read of ``key`` is the evidence."""
    read: Any


def failovers(faults: Sequence[Op]) -> list[Failover]:
    """Every failover of the fault records that promoted someone, in history order."""
    out: list[Failover] = []
    pending: Op | None = None
    for op in faults:
        if op.process != NEMESIS or op.f != FAILOVER_F:
            continue
        if op.type == "invoke":
            pending = op
            continue
        if pending is None:
            continue
        v = op.value if isinstance(op.value, dict) else {}
        if v.get("promoted"):
            out.append(
                Failover(
                    n=len(out) + 1,
                    inv=pending.index,
                    comp=op.index,
                    kill_time=_at(pending.time, v.get("kill_ms"), pending.time),
                    promoted_time=min(_at(pending.time, v.get("promote_ms"), op.time), op.time),
                    killed=v.get("killed"),
                    promoted=v.get("promoted"),
                )
            )
        pending = None
    return out


def _at(start: int, ms: Any, otherwise: int) -> int:
    """``start`` plus ``ms`` (the nemesis's own measure) in the history's ns, else
    ``otherwise``."""
    return start + int(ms * 1e6) if isinstance(ms, (int, float)) else otherwise


def lost_writes(t: Txns, g: Graph, kind: str) -> list[Lost]:
    """Every acknowledged write its key's last read shows was lost (module docstring)."""
    return _lost_list(t, g) if kind == "list-append" else _lost_register(t, g)


def _lost_list(t: Txns, g: Graph) -> list[Lost]:
    out: list[Lost] = []
    inv, comp, status = t.inv, t.comp, t.status
    for k, (r, seen) in g.last_read.items():
        wk = g.by_key.get(k)
        if not wk or len(seen) >= len(wk):
            continue  # the last read holds as many elements as were ever appended
        newest = -1
        for x in seen:
            w = wk.get(x, -1)
            if w >= 0 and inv[w] > newest:
                newest = inv[w]
        r_inv = inv[r]
        have = set(seen)
        for x, w in wk.items():
            if x in have or w == r or status[w] != OK:
                continue
            c = comp[w]
            if c < r_inv and newest > c:
                out.append(Lost(w, k, x, r, seen))
    return out


def _lost_register(t: Txns, g: Graph) -> list[Lost]:
    inv, comp, status = t.inv, t.comp, t.status
    entries: dict[Any, list[tuple[Any, list[int]]]] = {}
    for (k, u), ups in g.follows.items():
        entries.setdefault(k, []).append((u, ups))
    out: list[Lost] = []
    for k, es in entries.items():
        ws = sorted((w for w in g.writers_of.get(k, ()) if status[w] == OK), key=comp.__getitem__)
        if not ws:
            continue
        comps = [comp[w] for w in ws]
        # best[j]: the latest invocation among the writers acknowledged first, up to j
        best, m = [], -1
        for w in ws:
            m = max(m, inv[w])
            best.append(m)
        for u, ups in es:
            if u is None:
                older = -1  # the initial version precedes every write
            else:
                wu = g.writer.get((k, u), -1)
                if wu < 0 or status[wu] != OK:
                    continue
                older = comp[wu]
            hi = max(inv[x] for x in ups)
            j = bisect_left(comps, hi)  # writers acknowledged before the last overwriter began
            if j == 0 or best[j - 1] <= older:
                continue  # none of them began after u's writer was acknowledged
            for w in ws[:j]:
                v = g.writes[w][k]
                if v == u or inv[w] <= older:
                    continue
                over = [x for x in ups if inv[x] > comp[w] and x != w]
                if not over:
                    continue
                x = min(over, key=inv.__getitem__)
                if any(inv[r] > comp[x] for r in g.readers.get((k, v), ())):
                    continue  # read again after it was overwritten: not lost
                out.append(Lost(w, k, v, x, u))
    return out


def in_window(t: Txns, lost: Lost, fos: Sequence[Failover], acked: int) -> Failover | None:
    """The first failover whose window holds ``lost``: its txn acknowledged (at time
    ``acked``) before the promotion took effect, its evidence read invoked after the
    failover began; None when none does. A commit the new primary acknowledged while the
    other standbys were still being pointed at it is not the window's."""
    c, r = t.comp[lost.txn], t.inv[lost.read_by]
    for fo in fos:
        if c < fo.comp and acked < fo.promoted_time and fo.inv < r:
            return fo
    return None


def _by_txn(lost: Sequence[Lost]) -> dict[int, list[Lost]]:
    out: dict[int, list[Lost]] = {}
    for x in lost:
        out.setdefault(x.txn, []).append(x)
    return out


def _short(v: Any, n: int = 6) -> str:
    if isinstance(v, list) and len(v) > n:
        return "[..., " + ", ".join(map(repr, v[-n:])) + "]"
    return repr(v)


def lost_examples(
    t: Txns,
    lost: Sequence[Lost],
    windows: dict[int, Failover | None],
    ack_time: dict[int, int],
) -> list[dict[str, Any]]:
    """One example per lost transaction: what it wrote that vanished, the reads that show
    it, and the failover whose window it fell in (if any), with how long before the
    promotion it was acknowledged."""
    out = []
    for w, xs in sorted(_by_txn(lost).items()):
        readers = sorted({x.read_by for x in xs})
        lines = [
            f"T{t.inv[w]} was acknowledged (op {t.comp[w]}) and wrote {x.value!r} to key "
            f"{x.key!r}; T{t.inv[x.read_by]}, invoked after, read the key as {_short(x.read)}"
            for x in xs
        ]
        ex: dict[str, Any] = {
            "indexes": sorted({*t.indexes(w), *(i for r in readers for i in t.indexes(r))}),
            "txn": f"T{t.inv[w]}",
            "lost": [[x.key, x.value] for x in xs],
            "why": "; ".join(lines),
            "txns": [
                {"name": f"T{t.inv[i]}", "process": t.process[i], "value": t.mops[i]}
                for i in [w, *readers]
            ],
        }
        fo = windows.get(w)
        if fo is not None:
            ex["failover"] = fo.describe()
            ex["acked_ms_before_promotion"] = round((fo.promoted_time - ack_time[w]) / 1e6, 1)
        out.append(ex)
    return out


def window_stats(
    lost: Sequence[Lost],
    windows: dict[int, Failover | None],
    ack_time: dict[int, int],
    fos: Sequence[Failover],
) -> dict[str, Any]:
    """What each failover lost: acknowledged commits, and the span of their
    acknowledgements before the promotion (``window_ms``: the oldest one's age when the
    standby was promoted; ``newest_ms``: the newest one's)."""
    txns = sorted({x.txn for x in lost})
    per: list[dict[str, Any]] = []
    for fo in fos:
        mine = [w for w in txns if windows.get(w) is fo]
        row = {**fo.describe(), "lost_commits": len(mine)}
        if mine:
            acks = [ack_time[w] for w in mine]
            row["window_ms"] = round((fo.promoted_time - min(acks)) / 1e6, 1)
            row["newest_ms"] = round((fo.promoted_time - max(acks)) / 1e6, 1)
        per.append(row)
    return {
        "lost_commits": len(txns),
        "in_window": sum(1 for w in txns if windows.get(w) is not None),
        "failovers": per,
    }


def strip(
    pairs: Sequence[tuple[Op, Op | None]], t: Txns, lost: Sequence[Lost], kind: str
) -> list[tuple[Op, Op | None]]:
    """The history as the promoted standby kept it: the lost transactions gone, their
    writes struck from every read (a list without their appends; a register read of one
    of their values dropped), so what survived is judged on its own."""
    gone = {x.txn for x in lost}
    struck: set[tuple[Any, Any]] = set()
    for w in gone:
        for f, k, v in t.mops[w]:
            if f != "r":
                struck.add((k, v))
    out: list[tuple[Op, Op | None]] = []
    for i, (inv, comp) in enumerate(pairs):
        if i in gone:
            continue
        if comp is None or comp.type != "ok":
            out.append((inv, comp))
            continue
        keep: list[int] = []
        done: list[list[Any]] = []
        changed = False
        for j, (f, k, v) in enumerate(comp.value):
            if f != "r":
                keep.append(j)
                done.append([f, k, v])
            elif kind == "list-append":
                vv = [x for x in v if (k, x) not in struck]
                changed |= len(vv) != len(v)
                keep.append(j)
                done.append([f, k, vv])
            elif (k, v) in struck:
                changed = True
            else:
                keep.append(j)
                done.append([f, k, v])
        if changed:
            inv = inv.replace(value=[inv.value[j] for j in keep])
            comp = comp.replace(value=done)
        out.append((inv, comp))
    return out
