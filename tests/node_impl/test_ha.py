"""Mode ``ha`` (classic RocketMQ master/slave) with real node processes and real signals.

Each test states what one mode promises on failover: an async master's acks past the
promoted slave's offset are lost, a sync master's are not (when the operator promotes
the highest-offset slave), and the two seeded ``ha-*`` bugs turn the sync promise into
an async one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from node_impl.bugs import parse_bugs
from node_impl.config import ConfigError, parse_args
from node_impl.local_cluster import LocalCluster
from node_impl.store import LogStore, last_index_within, parse_entries

pytestmark = pytest.mark.integration

TIMEOUT_MS = 600


@contextmanager
def ha_cluster(tmp: Path, n: int, *, sync: bool, bug: str | None = None) -> Iterator[LocalCluster]:
    args = ["--mode", "ha", "--ha-master", "n1", "--ha-slave-timeout-ms", str(TIMEOUT_MS)]
    if sync:
        args.append("--ha-sync")
    c = LocalCluster(n, tmp, bug=bug, extra_args=args)
    try:
        yield c
    finally:
        c.close()


def wait_slaves(c: LocalCluster, master: str, k: int, timeout: float = 10.0) -> None:
    c.wait_until(
        lambda: (c.status(master) or {}).get("slaves") == k,
        timeout,
        f"{k} slaves connected to {master}",
    )


def offset(c: LocalCluster, node: str, key: str = "offset") -> int:
    st = c.status(node)
    assert st is not None, f"{node} does not answer"
    return st[key]


def durable(c: LocalCluster, node: str) -> int:
    """The offset a SIGKILL keeps: ``offset`` also counts the process's unwritten buffer."""
    return offset(c, node, "durableOffset")


def local_log(c: LocalCluster, node: str) -> list[list]:
    with c.client(node) as cl:
        r = cl.call({"type": "get", "local": True})
    assert r["code"] == "SUCCESS", r
    return r["entries"]


def append_all(c: LocalCluster, node: str, tag: str, k: int) -> dict[str, dict]:
    out = {}
    with c.client(node, timeout=5.0) as cl:
        for i in range(k):
            out[f"{tag}{i}"] = cl.append(f"{tag}{i}")
    return out


def acked(replies: dict[str, dict]) -> set[str]:
    return {p for p, r in replies.items() if r["code"] == "SUCCESS"}


def payloads(entries: list[list]) -> set:
    return {e[3] for e in entries if e[2] == "append"}


def fail_over(c: LocalCluster, new_master: str, others: list[str], epoch: int) -> None:
    with c.client(new_master) as cl:
        assert cl.call({"type": "ha-promote", "epoch": epoch})["code"] == "SUCCESS"
    for o in others:
        with c.client(o, timeout=5.0) as cl:
            r = cl.call({"type": "ha-follow", "master": new_master, "epoch": epoch})
        assert r["code"] == "SUCCESS", r


# ---------------------------------------------------------------------- pure logic


def test_last_index_within_counts_only_whole_entries() -> None:
    pos = [0, 50, 120]  # entries end at 50, 120, 200
    assert last_index_within(pos, 200, 0) == -1
    assert last_index_within(pos, 200, 49) == -1
    assert last_index_within(pos, 200, 50) == 0
    assert last_index_within(pos, 200, 119) == 0
    assert last_index_within(pos, 200, 120) == 1
    assert last_index_within(pos, 200, 200) == 2
    assert last_index_within([], 0, 10) == -1


def test_parse_entries_keeps_a_split_entry_for_the_next_chunk(tmp_path) -> None:
    with LogStore(tmp_path) as s:
        for i in range(3):
            s.append_leader(1, f"body-{i}".encode() * 10)
        s.flush()
    raw = (tmp_path / "data.log").read_bytes()
    cut = len(raw) - 7
    got, used = parse_entries(raw[:cut], 0)
    assert [e.index for e in got] == [0, 1] and used == got[1].pos + got[1].size
    rest, used2 = parse_entries(raw[used:], 2)
    assert [e.body for e in rest] == [b"body-2" * 10] and used + used2 == len(raw)


def test_config_ties_ha_bugs_to_mode_ha() -> None:
    base = ["--id", "n1", "--peers", "n1=127.0.0.1:7001,n2=127.0.0.1:7002", "--data-dir", "/tmp/x"]
    assert parse_bugs("ha-ack-on-send").ha_ack_on_send
    with pytest.raises(ConfigError, match="belongs to --mode ha"):
        parse_args(base + ["--bug", "ha-ok-on-timeout"])
    with pytest.raises(ConfigError, match="--ha-master"):
        parse_args(base + ["--mode", "ha"])
    with pytest.raises(ConfigError, match="not among --peers"):
        parse_args(base + ["--mode", "ha", "--ha-master", "n7"])
    cfg = parse_args(
        base + ["--mode", "ha", "--ha-master", "n2", "--ha-sync", "--bug", "ha-ack-on-send"]
    )
    assert cfg.ha_sync and cfg.bugs.names == ["ha-ack-on-send"]


# ---------------------------------------------------------------------- processes


def test_async_master_acks_and_slaves_converge(tmp_path) -> None:
    with ha_cluster(tmp_path, 3, sync=False) as c:
        c.start_all()
        c.wait_ready()
        wait_slaves(c, "n1", 2)
        replies = append_all(c, "n1", "a", 30)
        assert acked(replies) == set(replies)
        with c.client("n1") as cl:
            big = cl.append("B" * 100_000)  # bigger than one 32 KiB chunk
        assert big["code"] == "SUCCESS"
        end = offset(c, "n1")
        c.wait_until(
            lambda: offset(c, "n2") == end and offset(c, "n3") == end, 10, "slaves caught up"
        )
        master_log = local_log(c, "n1")
        assert local_log(c, "n2") == master_log == local_log(c, "n3")
        # a slave's offset counts at the master only once its post-fsync report arrives
        c.wait_until(
            lambda: (c.status("n1") or {}).get("committedIndex") == 30,
            10,
            "master saw the slaves' reports",
        )
        st = c.status("n1")
        assert st["role"] == "master" and st["committedIndex"] == st["ledgerEndIndex"] == 30
        with c.client("n2") as cl:
            r = cl.append("on-a-slave")
            assert r["type"] == "redirect" and r["leader"] == "n1"
            assert cl.call({"type": "kv-write", "key": "k", "value": 1})["code"] == "UNSUPPORTED"


def test_sync_master_waits_for_a_slave(tmp_path) -> None:
    with ha_cluster(tmp_path, 2, sync=True) as c:
        c.start("n1")
        c.wait_ready(["n1"])
        with c.client("n1") as cl:
            assert cl.append("alone")["code"] == "SLAVE_NOT_AVAILABLE"
        c.start("n2")
        wait_slaves(c, "n1", 1)
        with c.client("n1") as cl:
            assert cl.append("with-slave")["code"] == "SUCCESS"
        c.pause("n2")
        try:
            t0 = time.monotonic()
            with c.client("n1", timeout=5.0) as cl:
                assert cl.append("paused")["code"] == "FLUSH_SLAVE_TIMEOUT"
            assert time.monotonic() - t0 >= TIMEOUT_MS / 1000 * 0.9
        finally:
            c.resume("n2")
        # info, not fail: the entry stays on the master and reaches the slave later
        c.wait_until(lambda: "paused" in payloads(local_log(c, "n2")), 10, "slave got it")


def test_bug_ha_ok_on_timeout_says_success(tmp_path) -> None:
    with ha_cluster(tmp_path, 2, sync=True, bug="ha-ok-on-timeout") as c:
        c.start("n1")
        c.wait_ready(["n1"])
        with c.client("n1") as cl:
            assert cl.append("alone")["code"] == "SUCCESS"
        c.start("n2")
        wait_slaves(c, "n1", 1)
        c.pause("n2")
        try:
            with c.client("n1", timeout=5.0) as cl:
                assert cl.append("paused")["code"] == "SUCCESS"
        finally:
            c.resume("n2")


def test_bug_ha_ack_on_send_acks_while_the_slave_is_stopped(tmp_path) -> None:
    for bug, want in ((None, "FLUSH_SLAVE_TIMEOUT"), ("ha-ack-on-send", "SUCCESS")):
        with ha_cluster(tmp_path / (bug or "correct"), 2, sync=True, bug=bug) as c:
            c.start_all()
            c.wait_ready()
            wait_slaves(c, "n1", 1)
            c.pause("n2")
            try:
                with c.client("n1", timeout=5.0) as cl:
                    assert cl.append("x")["code"] == want, bug
            finally:
                c.resume("n2")


def test_async_failover_loses_acks_past_the_promoted_offset(tmp_path) -> None:
    with ha_cluster(tmp_path, 3, sync=False) as c:
        c.start_all()
        c.wait_ready()
        wait_slaves(c, "n1", 2)
        first = append_all(c, "n1", "a", 10)
        end = offset(c, "n1")
        c.wait_until(lambda: durable(c, "n2") == end == durable(c, "n3"), 10, "slaves caught up")
        c.kill("n2")
        c.kill("n3")
        window = append_all(c, "n1", "w", 8)  # acked with no slave at all
        assert acked(window) == set(window)
        c.kill("n1")
        c.start("n2")
        c.start("n3")
        c.wait_ready(["n2", "n3"])
        fail_over(c, "n2", ["n3"], epoch=2)
        with c.client("n2") as cl:
            r = cl.append("after")
        assert r["code"] == "SUCCESS" and r["term"] == 2
        log = payloads(local_log(c, "n2"))
        lost = (acked(first) | acked(window)) - log
        assert lost == acked(window)  # the measured loss window: exactly the unreplicated acks
        c.wait_until(lambda: "after" in payloads(local_log(c, "n3")), 10, "n3 follows n2")


def test_sync_failover_to_the_highest_slave_loses_nothing(tmp_path) -> None:
    with ha_cluster(tmp_path, 3, sync=True) as c:
        c.start_all()
        c.wait_ready()
        wait_slaves(c, "n1", 2)
        first = append_all(c, "n1", "a", 10)
        c.kill("n3")  # n3 lags from here on; n2's acks alone satisfy the sync master
        second = append_all(c, "n1", "b", 10)
        assert acked(first) | acked(second) == set(first) | set(second)
        c.kill("n1")
        c.start("n3")
        c.wait_ready(["n2", "n3"])
        ok = acked(first) | acked(second)
        assert offset(c, "n2") > offset(c, "n3")
        assert ok - payloads(local_log(c, "n3"))  # promoting the laggard would lose acks
        fail_over(c, "n2", ["n3"], epoch=2)
        assert ok - payloads(local_log(c, "n2")) == set()
        with c.client("n2") as cl:
            assert cl.append("after")["code"] == "SUCCESS"
        c.wait_until(lambda: ok | {"after"} <= payloads(local_log(c, "n3")), 10, "n3 caught up")


def test_slave_ahead_of_the_new_master_is_refused(tmp_path) -> None:
    with ha_cluster(tmp_path, 3, sync=False) as c:
        c.start_all()
        c.wait_ready()
        wait_slaves(c, "n1", 2)
        append_all(c, "n1", "a", 3)
        c.kill("n3")
        append_all(c, "n1", "b", 3)
        end = offset(c, "n1")
        c.wait_until(lambda: offset(c, "n2") == end, 10, "n2 caught up")
        c.kill("n1")
        c.start("n3")
        c.wait_ready(["n3"])
        with c.client("n3") as cl:  # the operator promotes the laggard
            assert cl.call({"type": "ha-promote", "epoch": 2})["code"] == "SUCCESS"
        with c.client("n2", timeout=5.0) as cl:
            r = cl.call({"type": "ha-follow", "master": "n3", "epoch": 2})
        assert r["code"] == "SLAVE_AHEAD", r


def test_live_master_demoted_by_ha_follow_becomes_a_slave(tmp_path) -> None:
    with ha_cluster(tmp_path, 2, sync=False) as c:
        c.start_all()
        c.wait_ready()
        wait_slaves(c, "n1", 1)
        append_all(c, "n1", "a", 3)
        end = offset(c, "n1")
        c.wait_until(lambda: offset(c, "n2") == end, 10, "n2 caught up")
        fail_over(c, "n2", ["n1"], epoch=2)  # the old master is still alive: demote it
        st = c.status("n1")
        assert st["role"] == "slave" and st["leader"] == "n2" and st["term"] == 2
        with c.client("n2") as cl:
            assert cl.append("after")["code"] == "SUCCESS"
        c.wait_until(lambda: "after" in payloads(local_log(c, "n1")), 10, "n1 follows n2")
        with c.client("n1") as cl:
            assert cl.append("x")["type"] == "redirect"
