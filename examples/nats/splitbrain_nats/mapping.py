"""JetStream's answers as splitbrain's append-log history values (no I/O, no nats import).

The append-log checks (acknowledged message lost, duplicated, reordered; a
committed prefix diverging) judge an ``append``'s acked ``index`` and ``term``
against the ``[index, term, payload]`` entries that reads observed. A JetStream
stream is a replicated log whose positions are its stream sequence numbers
(from 1, never reused), so a publish ack's ``seq`` is the index and a read
message's ``Nats-Sequence`` its entry index. JetStream shows clients no Raft term
per message, so the term is null everywhere: two observations of one sequence
then agree exactly when their payloads do, which is all the checks need.

A stream replica stores a message only once its Raft group has committed it, so
everything a read returns is a committed observation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from harness.api import Op
from harness.dbs.nats import meta_leader, replicas_converged, stream_detail, stream_leader

__all__ = [
    "STREAM",
    "SUBJECT",
    "PublishError",
    "CERTAIN_FAILURES",
    "appended",
    "publish_failed",
    "entries",
    "read_value",
    "final_read_value",
    "stream_detail",
    "stream_leader",
    "meta_leader",
    "replicas_converged",
]

STREAM = "SPLITBRAIN"
SUBJECT = "splitbrain.log"

PublishError = Literal["no-responders", "not-connected", "timeout", "api-error", "connection"]
"""How a publish went wrong, as the client classified the exception."""

CERTAIN_FAILURES: frozenset[str] = frozenset({"no-responders", "not-connected"})
"""Publish errors that prove the message was stored nowhere.

``no-responders``: the server had no subscriber for the subject (no stream
leader reachable), so it delivered the message to nobody. ``not-connected``:
the connection could not be opened, so nothing was sent. Everything else (a
timeout, a JetStream API error, a connection lost mid-request) may come after
the leader proposed the message, so it is ``info``.
"""


def appended(op: Op, ack: Mapping[str, Any]) -> Op:
    """The completion of an ``append`` whose publish JetStream acknowledged.

    ``ack`` is the PubAck's JSON (``{"stream", "seq", "duplicate"?}``). An ack
    from another stream, or without an integer sequence, says the message went
    somewhere we cannot name: ``info``, never a wrong index for the checker.
    """
    payload = op.value["payload"]
    seq = ack.get("seq")
    if ack.get("stream") != STREAM or not isinstance(seq, int) or isinstance(seq, bool):
        return op.complete("info", op.value, error=f"unexpected ack: {dict(ack)}"[:200])
    value: dict[str, Any] = {"payload": payload, "index": seq, "term": None}
    if ack.get("duplicate"):
        # The server's dedupe (Nats-Msg-Id = payload) says it already held it at seq.
        value["duplicate"] = True
    return op.complete("ok", value)


def publish_failed(op: Op, kind: PublishError, detail: str) -> Op:
    """``fail`` when the message certainly was not stored (:data:`CERTAIN_FAILURES`), else ``info``."""
    return op.complete(
        "fail" if kind in CERTAIN_FAILURES else "info", op.value, error=f"{kind}: {detail}"[:200]
    )


def entries(msgs: Iterable[tuple[int, bytes | None]], *, upto: int | None = None) -> list[list[Any]]:
    """``[[seq, null, payload], ...]`` by sequence from ``(stream sequence, body)`` pairs.

    Bodies are the UTF-8 payloads this workload published; one that is not
    (foreign data in the stream) is kept as its ``repr`` so the checks see it
    as a payload nobody wrote. A sequence seen twice keeps its first body.
    ``upto`` drops sequences above it.
    """
    seen: dict[int, Any] = {}
    for seq, body in msgs:
        if upto is not None and seq > upto:
            continue
        try:
            payload: Any = None if body is None else body.decode()
        except UnicodeDecodeError:
            payload = repr(body)
        seen.setdefault(seq, payload)
    return [[seq, None, seen[seq]] for seq in sorted(seen)]


def read_value(msgs: Iterable[tuple[int, bytes | None]], *, upto: int) -> dict[str, Any]:
    """The ok value of a read through a consumer: only stored (committed) messages are delivered."""
    return {"entries": entries(msgs, upto=upto), "committed": None}


def final_read_value(
    msgs: Iterable[tuple[int, bytes | None]],
    *,
    end: int | None,
    frm: int = 1,
    to: int | None = None,
) -> dict[str, Any]:
    """The ok value of one chunk ``[frm, to]`` of a node's final read.

    ``end`` is the last sequence that node's own replica stores (read from its
    files), None when the node holds no replica of the stream. Everything a
    replica stores counts as committed: that is what JetStream promises, and a
    replica that stored more is what the divergence check is there to catch.
    """
    if end is None:
        return {"entries": [], "committed": None, "end": None, "replica": False}
    hi = end if to is None else min(to, end)
    chunk = [(seq, body) for seq, body in msgs if frm <= seq]
    return {"entries": entries(chunk, upto=hi), "committed": end, "end": end}
