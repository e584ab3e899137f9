"""Real node processes on loopback: election, replication, kv, failures, recovery."""

from __future__ import annotations

import json
import random
import time

import pytest

from tests.node_impl.cluster_helpers import (
    IsolatableCluster,
    append_ok,
    call_leader,
    committed_log,
    diverge_and_heal,
    local_log,
    needs_iptables,
    node_log,
    running_cluster,
    wait_all_committed,
)

pytestmark = pytest.mark.integration


def _one_leader(c) -> str:
    leader = c.wait_for_leader(15)
    st = c.status_all()
    term = st[leader]["term"]
    leaders = [n for n, s in st.items() if s and s["role"] == "leader" and s["term"] == term]
    assert leaders == [leader]
    return leader


def test_three_nodes_replicate_and_serve_kv(tmp_path) -> None:
    with running_cluster(tmp_path, 3) as c:
        leader = _one_leader(c)
        with c.client(leader) as cl:
            r1 = cl.append("a")
            rb = cl.append_batch(["b", "c", "d"])
            assert r1["code"] == rb["code"] == "SUCCESS"
            assert rb["indexes"] == [r1["index"] + 1, r1["index"] + 2, r1["index"] + 3]
            assert rb["index"] == rb["indexes"][-1] and rb["leader"] == leader
            assert cl.kv_write("k", 1)["code"] == "SUCCESS"
            r = cl.kv_read("k")
            assert (r["code"], r["found"], r["value"]) == ("SUCCESS", True, 1)
            assert r["readIndex"] >= rb["index"] + 1
            r = cl.kv_cas("k", 1, 2)
            assert (r["ok"], r["value"]) == (True, 2)
            r = cl.kv_cas("k", 1, 3)
            assert (r["code"], r["ok"], r["value"]) == ("SUCCESS", False, 2)
            assert cl.kv_read("missing")["found"] is False
            end = cl.status()["ledgerEndIndex"]
            assert cl.get(end + 5)["code"] == "NOT_COMMITTED"
            g = cl.get(frm=0, to=end)
            assert g["entries"][0][2] == "noop"  # (ours) the election NOOP
            assert [e[3] for e in g["entries"] if e[2] == "append"] == ["a", "b", "c", "d"]
            st = cl.status()
            for field in (
                "role",
                "term",
                "leader",
                "ledgerBeginIndex",
                "ledgerEndIndex",
                "committedIndex",
                "appliedIndex",
                "votedFor",
                "incarnation",
                "mode",
                "bug",
            ):
                assert field in st
            assert st["mode"] == "dledger" and st["bug"] is None
        wait_all_committed(c, end)
        logs = {n: local_log(c, n)[0][: end + 1] for n in c.nodes}
        assert logs["n1"] == logs["n2"] == logs["n3"]
        follower = next(n for n in c.nodes if n != leader)
        with c.client(follower) as cl:
            r = cl.append("x")
            assert r["type"] == "redirect" and r["code"] == "NOT_LEADER"
            assert r["leader"] == leader
            assert r["leader_addr"] == "{}:{}".format(*c.client_addr(leader))
            assert cl.kv_read("k")["type"] == "redirect"
            assert cl.get(0, local=True)["entries"][0][2] == "noop"
        assert f"ROLE term={st['term']} role=leader leader={leader}" in node_log(c, leader)


def test_five_nodes_elect_one_leader_and_replicate(tmp_path) -> None:
    with running_cluster(tmp_path, 5) as c:
        _one_leader(c)
        r = append_ok(c, "five")
        wait_all_committed(c, r["index"])
        for n in c.nodes:
            entries, _ = local_log(c, n)
            assert entries[r["index"]][3] == "five"


def test_new_leader_holds_every_committed_entry(tmp_path) -> None:
    with running_cluster(tmp_path, 3) as c:
        old = _one_leader(c)
        acked = [append_ok(c, f"v{i}")["index"] for i in range(10)]
        c.kill(old)
        new = c.wait_for_leader(10)
        assert new != old
        got = {e[0]: e[3] for e in committed_log(c)}
        assert all(got[i] == f"v{n}" for n, i in enumerate(acked))
        after = append_ok(c, "after")["index"]
        c.start(old)  # the old leader rejoins and catches up
        wait_all_committed(c, after, [old])
        entries, _ = local_log(c, old)
        assert entries[after][3] == "after"


@pytest.mark.slow
def test_kill_minorities_repeatedly_keeps_acked_appends(tmp_path) -> None:
    rng = random.Random(7)
    with running_cluster(tmp_path, 3) as c:
        c.wait_for_leader(15)
        acked: dict[int, str] = {}
        for rnd in range(4):
            victim = rng.choice(c.nodes)
            c.kill(victim)
            for i in range(5):
                body = f"r{rnd}-{i}"
                acked[append_ok(c, body, timeout=15)["index"]] = body
            c.start(victim)
        got = {e[0]: e[3] for e in committed_log(c)}
        assert {i: got.get(i) for i in acked} == acked


@needs_iptables
def test_isolated_leader_suffix_is_truncated(tmp_path) -> None:
    """The old leader takes writes nobody else sees; once healed, its suffix is cut."""
    with running_cluster(tmp_path, 3, cls=IsolatableCluster) as c:
        old, new, kept = diverge_and_heal(c)
        entries, committed = local_log(c, old)
        assert not any(str(e[3]).startswith("lost") for e in entries)
        assert entries[kept][3] == "new-leader-write"
        assert entries[: kept + 1] == local_log(c, new)[0][: kept + 1]
        assert "event=truncated" in node_log(c, old)
        assert "SAFETY" not in node_log(c, old)


def test_sigterm_checkpoints_and_restart_replays_kv(tmp_path) -> None:
    with running_cluster(tmp_path, 3) as c:
        c.wait_for_leader(15)
        assert call_leader(c, {"type": "kv-write", "key": "k", "value": "v1"})["code"] == "SUCCESS"
        idx = call_leader(c, {"type": "kv-write", "key": "k", "value": "v2"})["index"]
        wait_all_committed(c, idx)
        for n in c.nodes:
            assert c.stop(n) == 0
            ck = json.loads((c.data_dir(n) / "checkpoint.json").read_text())
            assert ck["committedIndex"] >= idx
        c.start_all()
        c.wait_for_leader(15)
        r = call_leader(c, {"type": "kv-read", "key": "k"})
        assert (r["code"], r["value"]) == ("SUCCESS", "v2")
        c.wait_until(
            lambda: all(s and s["appliedIndex"] >= idx for s in c.status_all().values()),
            10,
            "every node replays the log",
        )


def test_paused_majority_times_out_appends_as_info(tmp_path) -> None:
    with running_cluster(tmp_path, 3) as c:
        leader = _one_leader(c)
        for n in c.nodes:
            if n != leader:
                c.pause(n)
        t0 = time.monotonic()
        with c.client(leader, timeout=6) as cl:
            r = cl.append("unacked")
        # either the quorum-ack timeout (2.5 s) or the step-down (E) ends it; both are info
        assert r["code"] in ("WAIT_QUORUM_ACK_TIMEOUT", "TERM_CHANGED"), r
        assert time.monotonic() - t0 < 4


def test_single_node_with_log_mode_reads(tmp_path) -> None:
    with running_cluster(tmp_path, 1, extra_args=("--read-mode", "log")) as c:
        assert c.wait_for_leader(15) == "n1"
        with c.client("n1") as cl:
            w = cl.kv_write("k", "v")
            r = cl.kv_read("k")
            assert (r["code"], r["found"], r["value"]) == ("SUCCESS", True, "v")
            assert r["readIndex"] == w["index"] + 1  # the read went through the log
            g = cl.get(r["readIndex"])
            assert g["entries"][0][2] == "read"
            assert cl.call({"type": "bogus"})["code"] == "UNSUPPORTED"
            assert cl.call({"type": "append"})["code"] == "UNSUPPORTED"
            assert cl.get(-1)["code"] == "INDEX_OUT_OF_RANGE"


def test_port_in_use_exits_1_with_one_line(tmp_path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "node_impl",
                "--id",
                "n1",
                "--peers",
                f"n1=127.0.0.1:{port}",
                "--data-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert p.returncode == 1
    assert "cannot bind peer port" in p.stderr and len(p.stderr.strip().splitlines()) == 1
