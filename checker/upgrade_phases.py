"""The acked sends of a rolling upgrade, by phase: before, during and after the switch.

The rolling ``upgrade`` fault (nemesis/upgrade.py) switches a broker group to a new mode
while the queue workload runs: the reference node from mode ``ha`` to ``broker``
(docs/broker-mode.md B5b), RocketMQ's master/slave group to the DLedger commitlog
(docs/rocketmq.md). The ``queue`` checker judges every send of such a run; this one says
which part of the run each acked send belongs to, and whether the final drains hold it, so
the verdict names what was acked before the switch (the old mode's messages, which the new
mode must keep readable), during it, and after it (the new mode's own):

- **before**: acked before the first ``start-upgrade`` was invoked (the step that seals
  the old master);
- **after**: invoked after the step whose completion left no node ``remaining``;
- **during**: the rest (a send in flight across a boundary is counted during).

``upgrade-phase-lost``: an acked send in no node's final drain of its queue, with its
phase (the queue checker reports the same send as ``queue-lost``; here it is placed in the
upgrade). It claims the queue workload's ``send`` and ``pull`` ops, reads the fault records
(``CheckerSpec.faults``) and joins the checks of any run whose workload selects its own
(``on_faults_alone``); a history without an upgrade is not judged (``stats.judged`` false).
``stats.phases`` has each phase's ``acked`` and ``lost``, ``stats.upgrade_done`` when (ns)
the upgrade finished, or None.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from harness.core.checker import ALL, CheckConfig, CheckerSpec, OpShape
from harness.core.op import Op
from harness.core.paired import PairedHistory

__all__ = ["PHASES", "UPGRADE_PHASES", "acked_by_phase", "phase_counts"]

PHASES = ("before", "during", "after")
START, STOP = "start-upgrade", "stop-upgrade"


def phase_counts(
    sends: Iterable[tuple[Op, Op | None]],
    pulls: Iterable[tuple[Op, Op | None]],
    faults: Sequence[Op],
) -> dict[str, Any]:
    """Each phase's acked sends and lost ones (pure): ``sends`` and ``pulls`` are
    (invocation, completion or None) pairs, ``faults`` the nemesis records in history order."""
    seal: int | None = None
    done: int | None = None
    for op in faults:
        if op.f == START and op.type == "invoke" and seal is None:
            seal = op.time
        if op.type != "invoke" and op.f in (START, STOP) and done is None:
            v = op.value if isinstance(op.value, dict) else {}
            if v.get("remaining") == []:
                done = op.time
    drained: set[tuple[Any, Any, str]] = set()
    for inv, comp in pulls:
        if comp is None:
            continue
        v = comp.value if isinstance(comp.value, dict) else {}
        asked = inv.value if isinstance(inv.value, dict) else {}
        if comp.type == "ok" and asked.get("final"):
            for m in v.get("messages") or []:
                drained.add((asked.get("topic"), asked.get("queue"), str(m[2])))
    counts = {p: {"acked": 0, "lost": 0} for p in PHASES}
    lost: list[dict[str, Any]] = []
    for inv, comp in sends:
        if comp is None or comp.type != "ok":
            continue
        asked = inv.value if isinstance(inv.value, dict) else {}
        if seal is None or comp.time < seal:
            phase = "before"
        elif done is not None and inv.time > done:
            phase = "after"
        else:
            phase = "during"
        counts[phase]["acked"] += 1
        where = (asked.get("topic"), asked.get("queue"), str(asked.get("body")))
        if where not in drained:
            counts[phase]["lost"] += 1
            lost.append(
                {
                    "phase": phase,
                    "body": where[2],
                    "queue": where[1],
                    "indexes": [inv.index, comp.index],
                }
            )
    return {"phases": counts, "upgrade_started": seal, "upgrade_done": done, "lost": lost}


def acked_by_phase(ops: Iterable[Op]) -> dict[str, Any]:
    """:func:`phase_counts` of a whole history (client ops and fault records mixed)."""
    open_: dict[Any, Op] = {}
    sends: list[tuple[Op, Op | None]] = []
    pulls: list[tuple[Op, Op | None]] = []
    faults: list[Op] = []
    for op in ops:
        if op.process == "nemesis":
            faults.append(op)
        elif op.type == "invoke":
            open_[op.process] = op
        elif (inv := open_.pop(op.process, None)) is not None:
            (sends if op.f == "send" else pulls if op.f == "pull" else []).append((inv, op))
    return phase_counts(sends, pulls, faults)


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    return ALL if shape.f in ("send", "pull") else None


def _local(history: PairedHistory, config: CheckConfig) -> dict[str, Any]:
    """Judges only a history holding the upgrade's records: the ``queue`` checker alone
    judges every other queue history, so no loss is reported twice outside an upgrade."""
    if not any(op.f in (START, STOP) for op in config.faults):
        return {"valid": True, "anomalies": {}, "stats": {"judged": False}}
    out = phase_counts(history.pairs("send"), history.pairs("pull"), list(config.faults))
    lost = out.pop("lost")
    stats = {**out, "judged": out["upgrade_started"] is not None}
    if not lost:
        return {"valid": True, "anomalies": {}, "stats": stats}
    return {"valid": False, "anomalies": {"upgrade-phase-lost": lost}, "stats": stats}


def examples() -> dict[str, Any]:
    """An upgrade whose after-phase send no drain holds, and the same history drained."""

    def op(i: int, typ: str, process: Any, f: str, value: Any = None) -> Op:
        return Op(type=typ, process=process, f=f, value=value, index=i, time=i)

    def send(i: int, p: int, body: str) -> list[Op]:
        v = {"topic": "t0", "queue": 0, "body": body}
        return [op(i, "invoke", p, "send", v), op(i + 1, "ok", p, "send", {**v, "offset": i})]

    def drain(i: int, bodies: list[str]) -> list[Op]:
        v = {"topic": "t0", "queue": 0, "offset": 0, "max": 200, "final": True}
        msgs = [[k, k, b] for k, b in enumerate(bodies)]
        return [op(i, "invoke", 9, "pull", v), op(i + 1, "ok", 9, "pull", {**v, "messages": msgs})]

    base = [
        *send(0, 0, "a"),
        op(2, "invoke", "nemesis", START, {}),
        op(3, "info", "nemesis", START, {"nodes": ["n2"], "remaining": []}),
        *send(4, 1, "b"),
    ]
    return {
        "lost after the switch": ([*base, *drain(6, ["a"])], {}, ("upgrade-phase-lost",)),
        "every phase drained": ([*base, *drain(6, ["a", "b"])], {}, ()),
    }


UPGRADE_PHASES = CheckerSpec(
    name="upgrade-phases",
    claims=_claims,
    anomalies=("upgrade-phase-lost",),
    local=_local,
    faults=frozenset({START, STOP}),
    on_faults_alone=True,
    doc="acked sends before, during and after a rolling upgrade, each in the final drains",
    examples=examples,
)
