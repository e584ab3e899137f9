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

from harness.api import Convergence, Op

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


def stream_detail(jsz: Mapping[str, Any], stream: str = STREAM) -> Mapping[str, Any] | None:
    """This server's own view of ``stream`` from its ``/jsz?accounts=1&streams=1``, if it holds it."""
    for account in jsz.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            if detail.get("name") == stream:
                return detail
    return None


def stream_leader(jsz: Mapping[str, Any], stream: str = STREAM) -> str | None:
    """The stream's Raft leader as this server sees it."""
    detail = stream_detail(jsz, stream)
    leader = ((detail or {}).get("cluster") or {}).get("leader")
    return leader if isinstance(leader, str) and leader else None


def meta_leader(jsz: Mapping[str, Any]) -> str | None:
    """The JetStream meta group's leader (which places streams) as this server sees it."""
    leader = (jsz.get("meta_cluster") or {}).get("leader")
    return leader if isinstance(leader, str) and leader else None


def _streams(jsz: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Every stream this server holds a replica of, by ``account/name``."""
    out: dict[str, Mapping[str, Any]] = {}
    for account in jsz.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            out[f"{account.get('name', '?')}/{detail.get('name', '?')}"] = detail
    return out


def _peer_off(peer: Mapping[str, Any]) -> str | None:
    """What keeps a replica, as its leader reports it, from being caught up (None: nothing)."""
    if peer.get("offline"):
        return "offline"
    if not peer.get("current"):
        return "not current"
    if peer.get("lag"):
        return f"lag {peer.get('lag')}"
    return None


def replicas_converged(views: Mapping[str, Mapping[str, Any] | None]) -> Convergence:
    """One look at the cluster from every server's ``/jsz``: have the replicas caught up?

    Yes when every server answers, all agree on one meta leader and, for every stream, on
    one stream leader, and that leader reports every other replica current (its last Raft
    index at or past the leader's applied index), online, with lag 0 (the leader's commit
    index minus the replica's last index): what nats-server 2.9 itself offers on this.
    Only the leader's replica list counts (a follower's is not maintained). The look also
    records each replica's own stream state (first, last sequence, message count), which
    is not part of the answer: it shows, beside the leader's word, what each one holds.
    """
    off: list[str] = []
    silent = sorted(n for n, v in views.items() if v is None)
    if silent:
        off.append(f"no /jsz answer from {', '.join(silent)}")
    live = {n: v for n, v in views.items() if v is not None}
    metas = {n: meta_leader(v) for n, v in live.items()}
    meta = next(iter(set(metas.values())), None) if len(set(metas.values())) == 1 else None
    if meta is None:
        off.append(f"no agreed meta leader ({_compact(metas)})")
    seen: dict[str, Any] = {"meta_leader": meta if meta else metas, "streams": {}}
    token: list[Any] = [meta]
    held: dict[str, dict[str, Mapping[str, Any]]] = {}
    for node, view in live.items():
        for name, detail in _streams(view).items():
            held.setdefault(name, {})[node] = detail
    for name in sorted(held):
        holders = held[name]
        leaders = {n: ((d.get("cluster") or {}).get("leader") or None) for n, d in holders.items()}
        states = {
            n: [
                (d.get("state") or {}).get("first_seq"),
                (d.get("state") or {}).get("last_seq"),
                (d.get("state") or {}).get("messages"),
            ]
            for n, d in sorted(holders.items())
        }
        leader = next(iter(set(leaders.values())), None) if len(set(leaders.values())) == 1 else None
        entry: dict[str, Any] = {"leader": leader or leaders, "state": states}
        seen["streams"][name] = entry
        token.append((name, leader, tuple(tuple(s) for s in states.values())))
        if leader is None or leader not in holders:
            off.append(f"{name}: no agreed leader ({_compact(leaders)})")
            continue
        peers = (holders[leader].get("cluster") or {}).get("replicas") or []
        replicas: dict[str, Any] = {}
        for p in peers:
            pname = str(p.get("name"))
            replicas[pname] = {
                "current": bool(p.get("current")),
                "lag": int(p.get("lag") or 0),
                **({"offline": True} if p.get("offline") else {}),
            }
            why = _peer_off(p)
            if why:
                off.append(f"{name}: {pname} {why}")
        entry["replicas"] = replicas
        missing = sorted(set(holders) - {leader} - set(replicas))
        if missing:
            off.append(f"{name}: the leader does not list {', '.join(missing)}")
    converged = not off
    return Convergence(converged, seen, token=tuple(token), why="; ".join(off) or None)


def _compact(by_node: Mapping[str, Any]) -> str:
    return ", ".join(f"{n}: {v}" for n, v in sorted(by_node.items()))
