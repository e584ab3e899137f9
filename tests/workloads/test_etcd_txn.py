"""etcd transactions (workloads/etcd_txn.py): the local run of the micro-ops over a snapshot
and the commit round's compares are pure; one real etcd shows a conflicting commit aborted
and a committed transaction atomic."""

from __future__ import annotations

import base64
import json
import time

import pytest

from workloads.etcd_txn import CLAIM, EtcdTxnSession, plan_commit, run_local
from workloads.txn import TxnAborted


def test_reads_see_the_snapshot_and_the_transactions_own_earlier_writes() -> None:
    out, writes = run_local(
        "list-append",
        [["r", 1, None], ["append", 1, 3], ["r", 1, None], ["r", 2, None], ["append", 2, 1]],
        {1: [1, 2]},
    )
    assert out == [["r", 1, [1, 2]], ["append", 1, 3], ["r", 1, [1, 2, 3]], ["r", 2, []],
                   ["append", 2, 1]]  # fmt: skip
    assert writes == {1: [1, 2, 3], 2: [1]}
    out, writes = run_local("rw-register", [["r", 5, None], ["w", 5, 9], ["r", 5, None]], {})
    assert out == [["r", 5, None], ["w", 5, 9], ["r", 5, 9]] and writes == {5: 9}
    assert run_local("rw-register", [["r", 5, None]], {5: 4}) == ([["r", 5, 4]], {})


def test_the_commit_compares_every_touched_key_and_puts_each_written_key_once() -> None:
    body = plan_commit("list-append", {1: 7, 2: 0}, {1: [1, 2, 3]})
    keys = [base64.b64decode(c["key"]).decode() for c in body["compare"]]
    assert keys == ["/splitbrain-txn/list-append/1", "/splitbrain-txn/list-append/2"]
    assert [c["mod_revision"] for c in body["compare"]] == ["7", "0"]  # 0: still absent
    assert {c["target"] for c in body["compare"]} == {"MOD"}
    (put,) = body["success"]
    assert json.loads(base64.b64decode(put["requestPut"]["value"])) == [1, 2, 3]
    assert CLAIM == "strict-serializable"


def _session(etcd: tuple[str, int]) -> EtcdTxnSession:
    """A session once the member serves (it may take connections before it has a leader)."""
    host, port = etcd
    deadline = time.monotonic() + 30
    while True:
        s = EtcdTxnSession(host, port, "list-append", 5.0)
        try:
            s.transact([["r", 0, None]])
            return s
        except TxnAborted:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_real_etcd_commits_atomically_and_aborts_a_commit_whose_read_went_stale(
    etcd: tuple[str, int],
) -> None:
    a, b = _session(etcd), _session(etcd)
    assert a.transact([["append", 1, 1], ["append", 2, 1]]) == [["append", 1, 1], ["append", 2, 1]]
    assert b.transact([["r", 1, None], ["r", 2, None]]) == [["r", 1, [1]], ["r", 2, [1]]]
    # b reads key 1, then a commits an append to it before b's commit: b must abort
    snapshot, revisions = b._snapshot([1])
    a.transact([["append", 1, 2]])
    out, writes = run_local("list-append", [["r", 1, None], ["append", 3, 1]], snapshot)
    reply = b.http.call("/v3/kv/txn", plan_commit("list-append", revisions, writes))
    assert not reply.get("succeeded", False)
    assert b.transact([["r", 1, None], ["r", 3, None]]) == [["r", 1, [1, 2]], ["r", 3, []]]
    # the same through transact: a conflicting writer between the rounds is an abort
    orig = b._snapshot

    def racing(keys):
        got = orig(keys)
        a.transact([["append", 1, 3]])
        return got

    b._snapshot = racing  # type: ignore[method-assign]
    with pytest.raises(TxnAborted, match="compare failed"):
        b.transact([["r", 1, None], ["append", 4, 1]])
    b._snapshot = orig  # type: ignore[method-assign]
    assert b.transact([["r", 4, None], ["r", 1, None]]) == [["r", 4, []], ["r", 1, [1, 2, 3]]]
