"""Mode ``broker`` (node_impl/broker.py): the consume-queue state machine, then a real cluster.

The unit tests feed :class:`ConsumeQueues` entries directly; the cluster tests run
three real node processes and check what a producer and a consumer see: offsets on
send, pulls from master and slave, a role switch when the leader dies, consume
queues rebuilt at restart, and the seeded ``broker-cq-beyond-commit`` bug.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from node_impl.broker import ConsumeQueues, body_consumer_offset, body_msg
from node_impl.config import ConfigError, parse_args
from node_impl.local_cluster import LocalCluster
from node_impl.store import HEADER_SIZE, MAGIC_NOOP, Entry
from tests.node_impl.cluster_helpers import running_cluster

RETRY_CODES = ("MASTER_NOT_READY", "LEADER_NOT_READY", "TERM_CHANGED", "WAIT_QUORUM_ACK_TIMEOUT")


def _entry(index: int, body: bytes, pos: int, magic: int = 1) -> Entry:
    return Entry(index, 1, magic, pos, HEADER_SIZE + len(body), 0, 0, body)


def test_consume_queues_dense_per_queue_and_skip_non_messages() -> None:
    cq = ConsumeQueues()
    es = [_entry(0, b"", 0, MAGIC_NOOP),
          _entry(1, body_msg("t", 0, "a", None), 48),
          _entry(2, body_msg("t", 1, "b", "k"), 200),
          _entry(3, body_consumer_offset("g", "t", 0, 1), 400),
          _entry(4, body_msg("t", 0, "c", None), 600)]
    cq.dispatch(es[:3])
    cq.dispatch(es[1:])  # re-feeding dispatched entries changes nothing
    assert cq.dispatched == 4
    assert cq.slice("t", 0, 0, 10) == [(0, 1), (1, 4)]
    assert cq.slice("t", 1, 0, 10) == [(0, 2)]
    assert cq.max_offset("t", 0) == 2 and cq.max_offset("x", 0) == 0
    assert cq.placed[4].queue_offset == 1
    assert cq.consumer_offsets[("g", "t", 0)] == 1
    assert cq.slice("t", 0, 1, 1) == [(1, 4)]


def test_broker_bugs_belong_to_broker_mode(tmp_path: Path) -> None:
    base = ["--id", "n1", "--peers", "n1=127.0.0.1:7001", "--data-dir", str(tmp_path)]
    with pytest.raises(ConfigError):
        parse_args([*base, "--bug", "broker-stale-master"])
    cfg = parse_args([*base, "--mode", "broker", "--bug", "broker-cq-beyond-commit"])
    assert cfg.bugs.broker_cq_beyond_commit and cfg.mode == "broker"


# ---------------------------------------------------------------- real clusters


def _call(c: LocalCluster, node: str, msg: dict, timeout: float = 2.0) -> dict | None:
    try:
        with c.client(node, timeout=timeout) as cl:
            return cl.call(msg)
    except (ConnectionError, TimeoutError, OSError):
        return None


def send_ok(c: LocalCluster, topic: str, queue: int, body: Any, *, timeout: float = 15.0) -> dict:
    """Send through whichever broker is master, retrying the transient codes."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        for node in c.nodes:
            if not c.is_running(node):
                continue
            r = _call(c, node, {"type": "send", "topic": topic, "queue": queue, "body": body})
            last = r
            if r is None or r.get("type") == "redirect" or r.get("code") in RETRY_CODES:
                continue
            assert r["code"] == "SUCCESS", r
            return r
        time.sleep(0.05)
    raise TimeoutError(f"no master took the send (last {last})")


def pull_all(c: LocalCluster, node: str, topic: str, queue: int) -> list[list]:
    out: list[list] = []
    while True:
        r = _call(c, node, {"type": "pull", "topic": topic, "queue": queue,
                            "offset": len(out), "max": 100})
        if r is None:  # down or still starting: what we have so far
            return out
        assert r["code"] == "SUCCESS", r
        if not r["messages"]:
            return out
        out.extend(r["messages"])


def wait_pulls(c: LocalCluster, nodes: list[str], topic: str, queue: int, n: int,
               timeout: float = 10.0) -> dict[str, list[list]]:
    deadline = time.monotonic() + timeout
    while True:
        got = {node: pull_all(c, node, topic, queue) for node in nodes}
        if all(len(v) >= n for v in got.values()) or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


@pytest.mark.integration
def test_send_pull_role_switch_and_rebuild(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3, extra_args=("--mode", "broker")) as c:
        acks = [send_ok(c, "t", i % 2, f"m{i}") for i in range(10)]
        offs = [a["offset"] for a in acks]
        assert offs == sorted(offs) and len(set(offs)) == 10
        assert [a["queue_offset"] for a in acks if a["queue_offset"] is not None][:4] == [0, 0, 1, 1]
        master = c.leader()
        assert master is not None
        st = c.status(master)
        assert st is not None and st["brokerRole"] == "master"
        slave = next(n for n in c.nodes if n != master)
        r = _call(c, slave, {"type": "send", "topic": "t", "queue": 0, "body": "x"})
        assert r is not None and r["type"] == "redirect" and r["code"] == "NOT_LEADER"
        got = wait_pulls(c, c.nodes, "t", 0, 5)
        for node, msgs in got.items():  # master and slaves serve the same committed queue
            assert [m[2] for m in msgs] == [f"m{i}" for i in range(0, 10, 2)], node
            assert [m[0] for m in msgs] == list(range(5))
            assert [m[1] for m in msgs] == [offs[i] for i in range(0, 10, 2)]
        # consume offsets are replicated entries
        r = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = _call(c, c.leader() or master, {"type": "commit-offset", "group": "g", "topic": "t",
                                                "queue": 0, "offset": 3})
            if r and r.get("code") == "SUCCESS":
                break
            time.sleep(0.05)
        assert r and r["code"] == "SUCCESS", r
        # role switch: the master dies, another broker becomes master and continues the queue
        c.kill(master)
        a = send_ok(c, "t", 0, "after")
        assert a["queue_offset"] == 5 and a["offset"] > max(offs)
        new_master = c.leader()
        assert new_master not in (None, master)
        q = _call(c, new_master, {"type": "query-offset", "group": "g", "topic": "t", "queue": 0})
        assert q is not None and q["offset"] == 3
        # the old master restarts as a slave and rebuilds its consume queues from the log
        c.start(master)
        got = wait_pulls(c, [master], "t", 0, 6)
        assert [m[2] for m in got[master]] == [f"m{i}" for i in range(0, 10, 2)] + ["after"]
        deadline = time.monotonic() + 10
        while (c.status(master) or {}).get("brokerRole") != "slave" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (c.status(master) or {}).get("brokerRole") == "slave"


# ---------------------------------------------------------------- the upgrade from mode ha


def _ha_cluster_with_messages(tmp_path: Path, k: int) -> list[dict]:
    """A sync master/slave cluster that takes ``k`` messages through mode ha's append,
    then stops cleanly once every slave holds the master's whole commitlog (the
    operator's part of the upgrade: equal commitlogs, so one divided offset)."""
    c = LocalCluster(3, tmp_path, extra_args=("--mode", "ha", "--ha-master", "n1", "--ha-sync"),
                     heartbeat_ms=50, election_timeout_ms=500)
    try:
        c.start_all()
        c.wait_until(lambda: (c.status("n1") or {}).get("slaves") == 2, 10, "slaves connected")
        acks = []
        with c.client("n1", timeout=5.0) as cl:
            for i in range(k):
                r = cl.call({"type": "append",
                             "body": {"topic": "t", "queue": i % 2, "body": f"old{i}"}})
                assert r["code"] == "SUCCESS", r
                acks.append(r)
        end = (c.status("n1") or {})["ledgerEndIndex"]
        c.wait_until(lambda: all((c.status(n) or {}).get("ledgerEndIndex") == end
                                 for n in c.nodes), 10, "slaves caught up")
        for node in c.nodes:  # the operator stops the brokers cleanly (kill -9 loses page cache)
            assert c.stop(node) == 0
    finally:
        c.close()
    return acks


@pytest.mark.integration
@pytest.mark.parametrize("bug", [None, "broker-divided-from-start"])
def test_upgrade_from_ha_keeps_old_messages_and_continues_offsets(tmp_path: Path,
                                                                   bug: str | None) -> None:
    _ha_cluster_with_messages(tmp_path, 6)
    # The same data dirs, restarted as DLedger brokers (new ports: a new cluster object).
    with running_cluster(tmp_path, 3, bug=bug, extra_args=("--mode", "broker")) as c:
        old = wait_pulls(c, c.nodes, "t", 0, 3)
        for node, msgs in old.items():  # the old commitlog stays readable at its old offsets
            assert [m[2] for m in msgs] == ["old0", "old2", "old4"], node
        old_offsets = [m[1] for m in old["n1"]]
        assert old_offsets == sorted(old_offsets)
        divided = (c.status("n1") or {})["dividedCommitlogOffset"]
        a = send_ok(c, "t", 0, "new0")
        assert a["queue_offset"] == 3  # the queue continues past the old messages
        if bug is None:
            assert divided > max(old_offsets) and a["offset"] > max(old_offsets)
            got = wait_pulls(c, c.nodes, "t", 0, 4)
            assert all([m[2] for m in v] == ["old0", "old2", "old4", "new0"] for v in got.values())
        else:  # the wrong end: DLedger's offsets land on the old commitlog's
            assert divided == 0 and a["offset"] <= max(old_offsets)
