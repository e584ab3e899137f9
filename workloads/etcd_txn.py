"""The transactional workloads' etcd session: ``list-append`` and ``rw-register`` as etcd
transactions, through its v3 JSON gateway (the standard library only, as workloads/etcd.py).

Why optimistic: an etcd transaction is one round of compares and then puts or ranges; it
cannot read a value and write one computed from it in the same round. So each of our
transactions is two rounds, the way etcd's own STM (``concurrency.NewSTM``, serializable
mode) builds one:

1. **read**: one etcd txn without compares ranging over every key the transaction touches:
   one snapshot at one revision, a linearizable read (etcd's default range). The micro-ops
   are then run against that snapshot locally, in order, so a read after the
   transaction's own append or write sees it (Elle's internal consistency);
2. **commit** (only if the transaction writes): one etcd txn whose compares say that
   every key read or written still has the ``mod_revision`` the snapshot saw (0 for a key
   that did not exist: etcd compares a missing key as all zeros), and whose success branch
   puts each written key's final value once (etcd refuses two puts of one key in a txn).
   A failed compare means nothing was applied: the transaction ``fail``s (aborted).

So a committed transaction took effect atomically at its commit's revision with every
value it read unchanged since: strict serializability, which is what etcd promises of
its transactions (etcd's API guarantees: linearizable reads and writes, a txn atomic
and serializable at one revision), and what :meth:`EtcdTxn.claim` declares. A read-only
transaction is its snapshot alone.

Keys are ``/splitbrain-txn/<kind>/<k>``; a list is stored as its JSON text, a register as
the JSON of its value. Outcomes (workloads/txn.py): the read round failing changed
nothing, so the transaction fails; a refused connect on the commit too; a compare that did
not hold is an abort; any other error of the commit (a timeout, a dropped connection, a
leader change) leaves it unknown (``info``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from workloads.etcd import EtcdHTTP, b64, describe, unb64
from workloads.etcd import classify as _classify
from workloads.txn import TxnAborted

__all__ = ["CLAIM", "PREFIX", "EtcdTxnSession", "plan_commit", "run_local"]

PREFIX = "/splitbrain-txn/"
CLAIM = "strict-serializable"
"""The isolation level etcd promises of a transaction, as the txn checker names it."""


def _key(kind: str, k: Any) -> str:
    return f"{PREFIX}{kind}/{k}"


def run_local(
    kind: str, mops: list[list[Any]], snapshot: Mapping[Any, Any]
) -> tuple[list[list[Any]], dict[Any, Any]]:
    """The micro-ops run against ``snapshot`` (key -> list or value; absent: never written),
    in order: the completed micro-ops (reads filled) and each written key's final value.

    Pure, so the transaction semantics are tested apart from etcd."""
    state: dict[Any, Any] = {}
    out: list[list[Any]] = []
    for f, k, v in mops:
        if f == "r":
            if kind == "list-append":
                cur = state.get(k, snapshot.get(k))
                out.append(["r", k, list(cur) if cur is not None else []])
            else:
                out.append(["r", k, state[k] if k in state else snapshot.get(k)])
        elif f == "append":
            cur = state.get(k, snapshot.get(k))
            state[k] = [*(cur or []), v]
            out.append([f, k, v])
        else:
            state[k] = v
            out.append([f, k, v])
    return out, state


def plan_commit(
    kind: str, revisions: Mapping[Any, int], writes: Mapping[Any, Any]
) -> dict[str, Any]:
    """The commit round's etcd txn body: every touched key still at the revision the read
    saw, then one put per written key."""
    return {
        "compare": [
            {
                "key": b64(_key(kind, k)),
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": str(rev),
            }
            for k, rev in sorted(revisions.items(), key=lambda kv: str(kv[0]))
        ],
        "success": [
            {"requestPut": {"key": b64(_key(kind, k)), "value": b64(json.dumps(v))}}
            for k, v in sorted(writes.items(), key=lambda kv: str(kv[0]))
        ],
    }


class EtcdTxnSession:
    """One worker's transactions against one etcd member (module docstring)."""

    def __init__(self, host: str, port: int, kind: str, timeout: float) -> None:
        self.http = EtcdHTTP(host, port, timeout)
        self.kind = kind

    def _snapshot(self, keys: list[Any]) -> tuple[dict[Any, Any], dict[Any, int]]:
        body = {
            "success": [{"requestRange": {"key": b64(_key(self.kind, k))}} for k in keys],
        }
        try:
            reply = self.http.call("/v3/kv/txn", body)
        except Exception as e:  # noqa: BLE001 - a read round changes nothing
            raise TxnAborted(f"read: {describe(e)}") from e
        values: dict[Any, Any] = {}
        revisions: dict[Any, int] = {k: 0 for k in keys}
        responses = reply.get("responses") or []
        if len(responses) != len(keys):
            raise TxnAborted(f"read: {len(responses)} answers to {len(keys)} ranges")
        for k, resp in zip(keys, responses, strict=True):
            kvs = (resp.get("response_range") or resp.get("responseRange") or {}).get("kvs")
            if kvs:
                values[k] = json.loads(unb64(kvs[0].get("value", "")))
                revisions[k] = int(kvs[0].get("mod_revision") or kvs[0].get("modRevision") or 0)
        return values, revisions

    def transact(self, mops: list[list[Any]]) -> list[list[Any]]:
        keys = list(dict.fromkeys(k for _, k, _ in mops))
        snapshot, revisions = self._snapshot(keys)
        out, writes = run_local(self.kind, mops, snapshot)
        if not writes:
            return out
        try:
            reply = self.http.call("/v3/kv/txn", plan_commit(self.kind, revisions, writes))
        except Exception as e:
            if _classify("txn", e) == "fail":  # never sent, or refused before proposing
                raise TxnAborted(f"commit: {describe(e)}") from e
            raise
        if not reply.get("succeeded", False):  # proto3 JSON omits a false
            raise TxnAborted("commit: a key changed since the read (compare failed)")
        return out

    def close(self) -> None:
        pass
