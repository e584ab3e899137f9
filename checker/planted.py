"""Small histories with planted anomalies, one set per built-in checker (their
``CheckerSpec.examples``).

The engine-agreement test (tests/checker/test_engines_agree.py) runs every registered
checker's examples through both engines and compares verdicts and anomaly kinds, so a
checker is covered the moment it is registered. The histories are small on purpose:
Spark runs each in ``local[1]`` within the default test run. The log and register
histories come from the simulation (:mod:`checker.synth`), whose validity does not
depend on any checker; the queue and set ones are built op by op, each anomaly named
where it is planted.
"""

from __future__ import annotations

from typing import Any

from checker.synth import LOG_ANOMALIES, generate
from harness.core.checker import Example
from harness.core.op import Op

__all__ = ["linearizable", "log_safety", "queue", "sets", "total_queue"]


class _Builder:
    """Ops in history order: ``op`` adds an invocation and its completion (or none)."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def op(
        self,
        process: int,
        f: str,
        inv: Any,
        typ: str | None,
        out: Any = None,
        *,
        key: str | None = None,
        node: str | None = None,
    ) -> None:
        invocation = Op("invoke", process, f, inv, key=key, node=node, index=len(self.ops))
        self.ops.append(invocation)
        if typ is not None:
            self.ops.append(invocation.replace(type=typ, value=out, index=len(self.ops)))


def linearizable() -> dict[str, Example]:
    """Per-key registers: valid, and with a read no linearization explains."""
    kw: dict[str, Any] = {"workload": "register", "keys": 8, "concurrency": 4}
    return {
        "valid": (list(generate(400, seed=21, **kw)), {}, ()),
        "stale-read": (
            list(generate(400, anomaly="nonlinearizable", seed=22, **kw)),
            {},
            ("nonlinearizable",),
        ),
    }


def log_safety() -> dict[str, Example]:
    """The append workload with every log anomaly planted, a history whose lost acks and
    the append-order they cause mode ha with an async master measures as its loss window
    (notes, not anomalies), a restart's committed index starting lower (a note), the
    membership checks' histories, committed entries that some client proposed or that
    nobody did (unproposed-committed), and values JSON keeps apart though Python equates
    them. Together they hold every kind of :data:`checker.log_anomalies.KINDS`."""
    lost = list(generate(400, workload="append", anomaly=("lost-ack", "append-order"), seed=24))
    return {
        "every-anomaly": (
            list(generate(500, workload="append", anomaly=LOG_ANOMALIES, seed=23)),
            {},
            LOG_ANOMALIES,
        ),
        "ha-async-loss-window": (lost, {"options": {"log-safety": {"ha": {"sync": False}}}}, ()),
        "restart": (_restart(), {}, ()),
        "membership-stale": (_membership(stale=True), {}, ()),
        "membership-violations": (
            _membership(stale=False),
            {},
            ("leader-after-removal", "ack-after-removal"),
        ),
        "proposed-only": (_unproposed(bad=False), {}, ("failed-append-present",)),
        "unproposed": (
            _unproposed(bad=True),
            {},
            ("failed-append-present", "unproposed-committed"),
        ),
        "json-types": (_json_types(), {}, ("lost-ack", "unproposed-committed")),
    }


def _restart() -> list[Op]:
    """A valid history with the note committed-regress-restart: n1 restarted (incarnation
    2) reports committed 2 after 5, and climbs back; its term holds."""
    b = _Builder()
    b.op(0, "append", {"payload": "a"}, "ok", {"payload": "a", "index": 1, "term": 1}, node="n1")
    for inc, committed in ((1, 5), (2, 2), (2, 5)):
        out = {"role": "follower", "term": 1, "leader": "n2", "begin": 0, "end": 5}
        out |= {"committed": committed, "incarnation": inc}
        b.op(9, "sample", None, "ok", out, node="n1")
    b.op(1, "read", {"from": 0, "to": 5, "final": True}, "ok", {"entries": [[1, 1, "a"]]})
    return b.ops


def _json_types() -> list[Op]:
    """Values Python equates and JSON does not (checker.log_anomalies: Equality): an append
    acked with the payload ``true`` and term 1 whose index the log holds as ``1`` (so the
    ack is lost and ``1`` is unproposed), one acked in term 1 held in term ``1.0`` (lost),
    a failed append of ``1.0`` (not present: the log holds ``1``), and ``1`` at one index
    beside ``true`` at another (no duplicate)."""
    b = _Builder()
    b.op(0, "append", {"payload": True}, "ok", {"payload": True, "index": 1, "term": 1})
    b.op(1, "append", {"payload": "a"}, "ok", {"payload": "a", "index": 2, "term": 1})
    b.op(2, "append", {"payload": 1.0}, "fail", None)
    b.op(3, "append", {"payload": True}, "ok", {"payload": True, "index": 3, "term": 1})
    log = [[1, 1, 1], [2, 1.0, "a"], [3, 1, True]]
    b.op(4, "read", {"from": 0, "to": 3, "final": True}, "ok", {"entries": log, "committed": 3})
    return b.ops


def _unproposed(*, bad: bool) -> list[Op]:
    """A committed log of what unproposed-committed must let pass: an entry from before
    the run (below the lowest ack), a NOOP, acked payloads (one an object whose keys the
    log lists in another order), a failed append's payload (failed-append-present's), an
    info append's, one never completed, and system entries (``"kind"`` beside a scalar and
    beside an object); past ``committed``, an entry nobody wrote.

    ``bad`` adds, committed, what it must flag: a torn record the node could not decode,
    a string nobody appended, and an object whose only ``"kind"`` is nested.
    """
    b = _Builder()
    b.op(0, "append", {"payload": "a"}, "ok", {"payload": "a", "index": 3, "term": 1})
    obj = {"y": 1, "x": [2, {"kind": "not-system"}]}
    b.op(1, "append", {"payload": obj}, "ok", {"payload": obj, "index": 4, "term": 1})
    b.op(2, "append", {"payload": "b"}, "fail", {"payload": "b"})
    b.op(3, "append", {"payload": "c"}, "info")
    b.op(4, "append", {"payload": "d"}, None)
    log: list[list[Any]] = [
        [1, 1, "left-over"],
        [2, 1, None],
        [3, 1, "a"],
        [4, 1, {"x": [2, {"kind": "not-system"}], "y": 1}],
        [5, 1, "b"],
        [6, 1, "c"],
        [7, 1, "d"],
        [8, 1, {"at": 8, "kind": "kv-write", "op": {"k": "k0", "v": 3}}],
        [9, 1, {"at": {"index": 9}, "kind": "config", "op": None}],
    ]
    if bad:
        log += [
            [10, 1, {"undecodable": "7b227061796c6f6164223a2270000000"}],
            [11, 1, "nobody"],
            [12, 1, {"op": {"kind": "kv-write"}}],
        ]
    top = len(log)
    log.append([top + 1, 1, "uncommitted"])
    for p, node in ((5, "n1"), (6, "n2")):
        v = {"from": 0, "to": top + 1, "final": True}
        b.op(p, "read", v, "ok", {"entries": log, "committed": top, "end": top + 1}, node=node)
    b.op(7, "read", {"from": 0, "to": top}, "ok", {"entries": log[-4:], "committed": top})
    return b.ops


def _membership(*, stale: bool) -> list[Op]:
    """Samples that name their member and configuration (docs/membership.md M14). n5 led
    term 1, was removed by C1 (index 6), seen committed by n2 in term 2.

    ``stale``: all of it is allowed. n5 goes on reporting its term-1 leadership and
    uncommitted tail (stale, not divergent); its host is re-added wiped as member n5.1,
    whose term and committed index start again (a new member, no regression); n2 commits
    8 under C1 and acks it.

    Else n5, cut off before it learnt of C1, leads term 3 (leader-after-removal) and acks
    an append in it (ack-after-removal).
    """
    b = _Builder()
    c0 = {"voters": ["n1", "n2", "n3", "n4", "n5"], "learners": [], "index": -1}
    c1 = {"voters": ["n1", "n2", "n3", "n4"], "learners": [], "index": 6}

    def sample(node: str, term: int, role: str, end: int, committed: int, **kw: Any) -> None:
        cfg, member = kw.get("config", c1), kw.get("member", node)
        out = {"role": role, "term": term, "leader": kw.get("leader"), "begin": 0, "end": end}
        out |= {"committed": committed, "incarnation": 1, "member": member, "config": cfg}
        b.op(100 + int(node[1:]), "sample", None, "ok", out, node=node)

    sample("n5", 1, "leader", 7, 5, config=c0, leader="n5")
    sample("n2", 2, "follower", 8, 8, leader="n2")
    for node in ("n1", "n3", "n4"):
        sample(node, 2, "follower", 8, 8, leader="n2")
    if stale:
        sample("n2", 2, "leader", 8, 8, leader="n2")
        b.op(
            1, "append", {"payload": "y"}, "ok", {"payload": "y", "index": 8, "term": 2}, node="n2"
        )
        sample("n5", 1, "leader", 7, 5, config=c0, leader="n5")
        for node in ("n1", "n2", "n3", "n4"):
            sample(node, 2, "follower" if node != "n2" else "leader", 8, 8, leader="n2")
        joined = {"voters": ["n1", "n2", "n3", "n4"], "learners": ["n5.1"], "index": -1}
        sample("n5", 0, "candidate", -1, -1, member="n5.1", config=joined)
        c3 = {"voters": ["n1", "n2", "n3", "n4", "n5.1"], "learners": [], "index": 10}
        sample("n5", 2, "follower", 10, 10, member="n5.1", config=c3, leader="n2")
        final = [[6, 2, None], [7, 2, None], [8, 2, "y"]]
    else:
        sample("n5", 3, "leader", 12, 12, config=c0, leader="n5")
        b.op(
            1, "append", {"payload": "x"}, "ok", {"payload": "x", "index": 9, "term": 3}, node="n5"
        )
        sample("n5", 3, "leader", 12, 12, config=c0, leader="n5")
        for _ in range(2):
            for node in ("n1", "n2", "n3"):
                sample(node, 3, "follower", 8, 8, leader="n5")
        final = [[9, 3, "x"]]
    b.op(2, "read", {"from": 0, "to": 20, "final": True}, "ok", {"entries": final}, node="n1")
    return b.ops


def queue() -> dict[str, Example]:
    """Broker sends and final drains: an acked send no drain holds (queue-lost), and two
    nodes' drains that disagree at a position (queue-divergence), which puts two
    bodies at one physical offset (queue-phys-conflict)."""
    b = _Builder()
    for p, body, off in ((0, "a", 48), (1, "b", 148), (3, "d", 248)):
        v = {"topic": "t", "queue": 0, "body": body}
        b.op(p, "send", v, "ok", {**v, "offset": off, "queue_offset": len(b.ops) // 2})
    b.op(2, "send", {"topic": "t", "queue": 0, "body": "c"}, "info")
    for p, node, msgs in (
        (4, "n1", [[0, 48, "a"], [1, 148, "c"]]),
        (5, "n2", [[0, 48, "a"], [1, 148, "b"]]),
    ):
        v = {"topic": "t", "queue": 0, "offset": 0, "max": 100, "final": True}
        b.op(p, "pull", v, "ok", {**v, "messages": msgs}, node=node)
    return {
        "lost-and-divergent": (b.ops, {}, ("queue-lost", "queue-divergence", "queue-phys-conflict"))
    }


def sets() -> dict[str, Example]:
    """Adds and a final read: valid, and one that lost an acked add and shows an element
    nobody added."""
    out: dict[str, Example] = {}
    for label, final, kinds in (
        ("valid", [0, 1, 2, 3, 5], ()),
        ("lost-and-unexpected", [0, 1, 2, 5, 99], ("set-lost", "set-unexpected")),
    ):
        b = _Builder()
        for e in range(4):
            b.op(e, "add", e, "ok", e)
        b.op(4, "add", 4, "fail", 4)
        b.op(5, "add", 5, "info", 5)
        b.op(6, "read", None, "ok", final)
        out[label] = (b.ops, {}, kinds)
    return out


def total_queue() -> dict[str, Example]:
    """Consume-and-ack queues: valid, and with every anomaly planted: ``b`` never
    delivered though a final drain saw the queue empty (lost), ``a`` delivered again
    after its ack (duplicated), ``d`` delivered though its enqueue failed, ``zz`` never
    enqueued (unexpected), and ``f`` overtaking ``e`` (order, with the option ``ordered``)."""

    def deliveries(*bodies: str) -> dict[str, Any]:
        return {"messages": [{"body": x, "acked": True} for x in bodies]}

    out: dict[str, Example] = {}
    for label, during, kinds in (
        ("valid", [("a", "b", "c"), ("e", "f")], ()),
        (
            "every-anomaly",
            [("a", "c", "f"), ("a", "d", "zz", "e")],
            ("lost", "duplicated", "failed-enqueue-delivered", "unexpected", "order"),
        ),
    ):
        b = _Builder()
        for p, body in enumerate("abcef"):
            b.op(p, "enqueue", {"body": body}, "ok", {"body": body})
        b.op(5, "enqueue", {"body": "d"}, "fail", {"body": "d"})
        for p, bodies in enumerate(during, 6):
            b.op(p, "dequeue", {}, "ok", deliveries(*bodies))
        b.op(9, "dequeue", {"final": True}, "ok", deliveries())
        out[label] = (b.ops, {"options": {"total-queue": {"ordered": True}}}, kinds)
    return out
