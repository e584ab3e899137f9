"""The upgrade from mode ha to mode broker, node by node, on a cluster taking messages.

Real processes throughout: a sync master/slave group takes sends through mode ha's
broker requests, is sealed read-only, and its nodes are restarted one at a time in
mode broker with their data, as the ``upgrade`` fault does (nemesis/upgrade.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from node_impl.broker import BROKER_FILE, LEGACY_DIR, prepare_upgrade
from node_impl.kv import body_append
from node_impl.local_cluster import LocalCluster
from node_impl.store import LogStore
from tests.node_impl.test_broker import RETRY_CODES, _call, pull_all, wait_pulls

HA = ("--mode", "ha", "--ha-master", "n1", "--ha-sync")


def _switch(c: LocalCluster, node: str, bug: str | None) -> None:
    """The operator's step: stop cleanly, start again as a DLedger broker."""
    assert c.stop(node) == 0
    c.node_args[node] = ("--mode", "broker", *(("--bug", bug) if bug else ()))
    c.start(node)
    c.wait_until(
        lambda: "dividedCommitlogOffset" in (c.status(node) or {}), 15, f"{node} as a broker"
    )


def _send_broker(c: LocalCluster, body: str, timeout: float = 20.0) -> dict:
    """Send to whichever node takes it; the sealed ha master refuses (NO_PERMISSION)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        for node in c.nodes:
            r = last = _call(c, node, {"type": "send", "topic": "t", "queue": 0, "body": body})
            if r is None or r.get("type") == "redirect":
                continue
            if r["code"] in (*RETRY_CODES, "NO_PERMISSION"):
                continue
            assert r["code"] == "SUCCESS", r
            return r
        time.sleep(0.05)
    raise TimeoutError(f"no broker took the send (last {last})")


def _caught_up(c: LocalCluster, node: str) -> bool:
    st, m = c.status(node) or {}, c.status("n1") or {}
    return st.get("offset") is not None and st.get("offset") == m.get("offset")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("bug", [None, "broker-divided-from-start"])
def test_rolling_upgrade_keeps_offsets_and_every_acked_message(
    tmp_path: Path, bug: str | None
) -> None:
    c = LocalCluster(3, tmp_path, extra_args=HA, heartbeat_ms=50, election_timeout_ms=500)
    try:
        c.start_all()
        c.wait_until(lambda: (c.status("n1") or {}).get("slaves") == 2, 10, "slaves connected")
        old = []
        for i in range(6):  # mode ha answers sends with both offsets, like a broker
            r = _call(c, "n1", {"type": "send", "topic": "t", "queue": 0, "body": f"old{i}"}, 5)
            assert r is not None and r["code"] == "SUCCESS", r
            assert r["queue_offset"] == i
            old.append(r)
        r = _call(c, "n2", {"type": "send", "topic": "t", "queue": 0, "body": "x"})
        assert r is not None and r.get("type") == "redirect" and r["leader"] == "n1"
        old_offsets = [a["offset"] for a in old]
        assert old_offsets == sorted(old_offsets)
        got = wait_pulls(c, c.nodes, "t", 0, 6)
        for node, msgs in got.items():  # slaves serve the same queue at the same offsets
            assert [(m[0], m[1], m[2]) for m in msgs] == [
                (i, old_offsets[i], f"old{i}") for i in range(6)
            ], node

        # the seal: read-only from now on, and it survives a restart of the master
        assert (_call(c, "n1", {"type": "ha-seal"}) or {}).get("code") == "SUCCESS"
        r = _call(c, "n1", {"type": "send", "topic": "t", "queue": 0, "body": "refused"})
        assert r is not None and r["code"] == "NO_PERMISSION"
        c.kill("n1")
        c.start("n1")
        c.wait_until(lambda: (c.status("n1") or {}).get("sealed") is True, 10, "n1 back sealed")
        r = _call(c, "n1", {"type": "append", "body": "refused too"})
        assert r is not None and r["code"] == "NO_PERMISSION"

        # slaves first, each once it holds the whole sealed log; the master last
        for node in ("n2", "n3"):
            c.wait_until(lambda n=node: _caught_up(c, n), 15, f"{node} caught up")
            _switch(c, node, bug)
            assert pull_all(c, node, "t", 0)[:6] == pull_all(c, "n1", "t", 0)[:6]
        new = _send_broker(c, "new0")  # n2 and n3 are a DLedger majority
        assert new["queue_offset"] == 6  # the queue continues past the old messages
        _switch(c, "n1", bug)
        divided = {n: (c.status(n) or {})["dividedCommitlogOffset"] for n in c.nodes}
        assert len(set(divided.values())) == 1, divided  # one old log, one divided offset
        new2 = _send_broker(c, "new1")
        got = wait_pulls(c, c.nodes, "t", 0, 8)
        bodies = [f"old{i}" for i in range(6)] + ["new0", "new1"]
        for node, msgs in got.items():  # every acked message, at its acked offsets
            assert [m[2] for m in msgs] == bodies, node
            assert [m[1] for m in msgs] == [*old_offsets, new["offset"], new2["offset"]], node
        if bug is None:  # physical offsets continue past the divided offset
            assert divided["n1"] > max(old_offsets)
            assert max(old_offsets) < new["offset"] < new2["offset"]
        else:  # the wrong end: DLedger's offsets land on the old commitlog's
            assert divided["n1"] == 0 and new["offset"] <= max(old_offsets)
    finally:
        c.close()


def test_a_half_done_move_rolls_forward(tmp_path: Path) -> None:
    """A broker start that died after moving data.log, before broker.json: the next start
    finishes the move and takes the divided offset from the old log's end, not 0."""
    d = tmp_path / "data"
    d.mkdir()
    with LogStore(d) as s:
        for i in range(3):
            s.append_leader(1, body_append({"topic": "t", "queue": 0, "body": i}))
        s.flush()
        end = s.data_length
    (d / LEGACY_DIR).mkdir()
    (d / "data.log").replace(d / LEGACY_DIR / "data.log")  # died here: index.idx left behind
    assert (d / "index.idx").exists()
    assert prepare_upgrade(d) == end
    assert not (d / "index.idx").exists() and (d / LEGACY_DIR / "index.idx").exists()
    assert json.loads((d / BROKER_FILE).read_text()) == {"dividedCommitlogOffset": end}
    assert prepare_upgrade(d) == end  # later starts read it back


def test_a_fresh_broker_has_no_divided_offset(tmp_path: Path) -> None:
    assert prepare_upgrade(tmp_path) == 0
    assert not (tmp_path / LEGACY_DIR).exists()


@pytest.mark.integration
def test_a_killed_ha_master_comes_back_with_everything_its_slaves_were_sent(
    tmp_path: Path,
) -> None:
    """kill -9 right after acked sends: the master's log reached the OS at append time
    (RocketMQ's mapped commitlog), so no slave is left ahead of it, diverging."""
    c = LocalCluster(3, tmp_path, extra_args=HA, heartbeat_ms=50, election_timeout_ms=500)
    try:
        c.start_all()
        c.wait_until(lambda: (c.status("n1") or {}).get("slaves") == 2, 10, "slaves connected")
        for i in range(30):
            r = _call(c, "n1", {"type": "send", "topic": "t", "queue": 0, "body": f"m{i}"}, 5)
            assert r is not None and r["code"] == "SUCCESS", r
        c.kill("n1")
        slaves = {n: (c.status(n) or {}).get("offset") for n in ("n2", "n3")}
        c.start("n1")
        c.wait_until(lambda: (c.status("n1") or {}).get("slaves") == 2, 15, "slaves back")
        end = (c.status("n1") or {})["offset"]
        assert all(isinstance(o, int) and o <= end for o in slaves.values()), (slaves, end)
        r = _call(c, "n1", {"type": "send", "topic": "t", "queue": 0, "body": "after"}, 5)
        assert r is not None and r["code"] == "SUCCESS" and r["queue_offset"] == 30, r
        got = wait_pulls(c, c.nodes, "t", 0, 31)
        assert all(
            [m[2] for m in v] == [*(f"m{i}" for i in range(30)), "after"] for v in got.values()
        )
    finally:
        c.close()
