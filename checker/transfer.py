"""Leadership transfers that lost the leadership: a DB's answers to the harness's own
requests, judged by what the DB promised.

A transfer (docs/membership.md M9, Raft's TimeoutNow, DLedger's preferred leader) is
meant to move leadership without an election anyone loses: the leader stops writes,
brings the target up to date, and only then tells it to campaign, so the target wins.
Skip the catch-up and the target campaigns with a short log, every voter refuses it,
its higher term deposes the leader anyway, and the cluster sits without a leader until
someone else wins: nothing acknowledged is lost, no term has two leaders, so no safety
check can see it, yet every client waits out an election the operator asked to avoid.

The ``membership`` fault records each transfer it asks (nemesis/membership.py): the
DB's answer (``result``: ``from``, ``leader``, ``outcome``), how the target was made to
lag (``lag``), and ``promise: "hands-over"`` when the DB declares
``transfer_hands_over`` (harness/core/db.py, ``TransfersLeadership``). This checker reads
those fault records only (``CheckerSpec.faults``) and reports ``transfer-lost``: a
transfer a DB promised to hand over (or keep) whose answer says leadership was lost,
asked while the cluster was quiet:

- the target lagged by a kill, not a cut (a cut-off node campaigns alone and raises its
  term, and that term, not the transfer, then deposes the leader);
- no other fault was in force at any moment of the membership op (a partition or kill
  of the moment may legitimately cost the target its election).

Transfers outside those conditions, or of a DB that promises nothing, are counted as
not judged, with the reason; a history with no judged transfer is valid with
``judged: 0`` in its stats (there was nothing the promise covers). The examples carry
the history indexes of the membership op's invocation and completion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.core.checker import CheckConfig, CheckerSpec, OpShape
from harness.core.op import Op
from harness.core.paired import PairedHistory

__all__ = ["TRANSFER", "MEMBERSHIP_F", "check_transfers", "lost_transfers"]

MEMBERSHIP_F = "start-membership"


def _open_spans(faults: Sequence[Op]) -> list[tuple[str, int, int | None]]:
    """Every other fault's span in history indexes: ``(kind, start completion, stop
    completion or None while it stayed in force)``, pairing ``start-X`` with the next
    ``stop-X`` completion."""
    spans: list[tuple[str, int, int | None]] = []
    open_at: dict[str, list[int]] = {}
    for op in faults:
        if op.type == "invoke" or not isinstance(op.f, str) or op.index is None:
            continue
        if op.f.startswith("start-"):
            kind = op.f.removeprefix("start-")
            if kind != "membership":
                open_at.setdefault(kind, []).append(op.index)
        elif op.f.startswith("stop-"):
            kind = op.f.removeprefix("stop-")
            for start in open_at.pop(kind, []):
                spans.append((kind, start, op.index))
    for kind, starts in open_at.items():
        spans.extend((kind, start, None) for start in starts)
    return spans


def _in_force(spans: Sequence[tuple[str, int, int | None]], inv: Op, comp: Op) -> bool:
    """Whether another fault was in force at some moment between ``inv`` and ``comp``."""
    lo, hi = inv.index, comp.index
    if lo is None or hi is None:
        return False
    return any(start < hi and (stop is None or stop > lo) for _kind, start, stop in spans)


def _membership_ops(faults: Sequence[Op]) -> list[tuple[Op, Op]]:
    """``(invocation, completion)`` of each ``start-membership`` (the nemesis runs one
    fault op at a time, so a completion closes the latest open invocation)."""
    out: list[tuple[Op, Op]] = []
    pending: Op | None = None
    for op in faults:
        if op.f != MEMBERSHIP_F:
            continue
        if op.type == "invoke":
            pending = op
        elif pending is not None:
            out.append((pending, op))
            pending = None
    return out


def lost_transfers(faults: Sequence[Op]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The ``transfer-lost`` examples and the count of transfers per reason not judged.

    Example: ``{"target", "from", "leader", "outcome", "code", "indexes": [membership
    invocation index, completion index]}`` (``code`` is the DB's own answer code).
    """
    spans = _open_spans(faults)
    found: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    judged = 0

    def skip(why: str) -> None:
        skipped[why] = skipped.get(why, 0) + 1

    for inv, comp in _membership_ops(faults):
        value = comp.value if isinstance(comp.value, Mapping) else {}
        for change in value.get("changes") or ():
            if not isinstance(change, Mapping) or change.get("op") != "transfer":
                continue
            result = change.get("result")
            if value.get("promise") != "hands-over":
                skip("the DB promises no handover")
            elif not change.get("ok") or not isinstance(result, Mapping):
                skip("no answer from the DB")
            elif value.get("lag") != "kill":
                skip("the target lagged by a cut (its own term rose)")
            elif _in_force(spans, inv, comp):
                skip("another fault was in force")
            elif result.get("outcome") not in ("handed-over", "kept", "lost"):
                skip("the answer gives no outcome")
            else:
                judged += 1
                if result.get("outcome") == "lost":
                    found.append(
                        {
                            "target": change.get("node"),
                            "from": result.get("from"),
                            "leader": result.get("leader"),
                            "outcome": "lost",
                            "code": result.get("code"),
                            "indexes": sorted(i for i in (inv.index, comp.index) if i is not None),
                        }
                    )
    skipped["judged"] = judged
    return sorted(found, key=lambda e: e["indexes"]), skipped


def check_transfers(faults: Sequence[Op]) -> dict[str, Any]:
    """The checker's result map over a history's fault records."""
    found, counts = lost_transfers(faults)
    judged = counts.pop("judged")
    return {
        "valid": not found,
        "anomalies": {"transfer-lost": found} if found else {},
        "stats": {"judged": judged, "not_judged": counts},
    }


def _claims(shape: OpShape, config: CheckConfig) -> str | None:
    return None  # fault records only (CheckerSpec.faults)


def _local(history: PairedHistory, config: CheckConfig) -> dict[str, Any]:
    return check_transfers(config.faults)


def examples() -> dict[str, Any]:
    """A lost transfer in a quiet cluster, and the same answer while a partition held."""

    def op(index: int, typ: str, f: str, value: Any = None) -> Op:
        return Op(type=typ, process="nemesis", f=f, value=value, index=index, time=index)

    def transfer(outcome: str, code: str, leader: str) -> dict[str, Any]:
        return {
            "variant": "transfer",
            "target": "n2",
            "lag": "kill",
            "promise": "hands-over",
            "changes": [
                {
                    "op": "transfer",
                    "node": "n2",
                    "ok": True,
                    "result": {"code": code, "from": "n1", "leader": leader, "outcome": outcome},
                }
            ],
        }

    client = [
        Op(type="invoke", process=0, f="append", value={"payload": "0-1"}, index=0, time=0),
        Op(
            type="ok",
            process=0,
            f="append",
            value={"payload": "0-1", "index": 1, "term": 1},
            index=1,
            time=1,
        ),
    ]
    lost = client + [
        op(2, "invoke", MEMBERSHIP_F, {"variant": "transfer"}),
        op(3, "info", MEMBERSHIP_F, transfer("lost", "TRANSFER_FAILED", "n3")),
        op(4, "invoke", "stop-membership"),
        op(5, "info", "stop-membership", {}),
    ]
    handed = client + [
        op(2, "invoke", MEMBERSHIP_F, {"variant": "transfer"}),
        op(3, "info", MEMBERSHIP_F, transfer("handed-over", "SUCCESS", "n2")),
    ]
    partitioned = client + [
        op(2, "invoke", "start-partition", {"shape": "halves"}),
        op(3, "info", "start-partition", {}),
        op(4, "invoke", MEMBERSHIP_F, {"variant": "transfer"}),
        op(5, "info", MEMBERSHIP_F, transfer("lost", "TRANSFER_FAILED", "n3")),
        op(6, "invoke", "stop-partition"),
        op(7, "info", "stop-partition", {}),
    ]
    return {
        "lost in a quiet cluster": (lost, {}, ("transfer-lost",)),
        "handed over": (handed, {}, ()),
        "lost under a partition (not judged)": (partitioned, {}, ()),
    }


TRANSFER = CheckerSpec(
    name="transfer",
    claims=_claims,
    anomalies=("transfer-lost",),
    local=_local,
    faults=frozenset({MEMBERSHIP_F}),
    on_faults_alone=True,
    doc="leadership transfers a DB promised to hand over that lost the leadership instead",
    examples=examples,
)
