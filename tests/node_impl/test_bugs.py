"""Each seeded bug (spec §11): the anomaly it causes, and that the correct node avoids it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from node_impl.bugs import BUGS, UnknownBug, parse_bugs
from node_impl.local_cluster import LocalCluster
from node_impl.wire import encode_frame, recv_frame
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
    stable_leader,
    try_append,
    wait_all_committed,
    wait_new_leader,
)

# ---------------------------------------------------------------------- registry and CLI


def test_registry_names_every_required_bug() -> None:
    for name in (
        "ack-before-quorum",
        "no-truncate",
        "commit-old-term",
        "vote-without-log-check",
        "stale-read",
        "wallclock-lease",
        "no-fsync",
        "commit-regress",
        "forget-vote",
        "lax-push-term",
        "ok-on-term-change",
    ):
        assert name in BUGS and BUGS[name]
        assert parse_bugs(name).names == [name]
    with pytest.raises(UnknownBug, match="nope"):
        parse_bugs("nope")
    assert parse_bugs("ha-ack-on-send").names == ["ha-ack-on-send"]  # mode ha (config checks)


def test_cli_lists_bugs() -> None:
    from node_impl.cli import node

    r = CliRunner().invoke(node, ["--list-bugs"])
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert any(ln.startswith("no-fsync ") and "buffer" in ln for ln in lines)
    assert len(lines) >= len(BUGS)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--bug", "nope"], "unknown bug 'nope'"),
        (["--mode", "ha"], "needs --ha-master"),
        (["--id", "n9"], "not among --peers"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, extra, needle) -> None:
    args = ["--id", "n1", "--peers", "n1=127.0.0.1:1", "--data-dir", str(tmp_path)]
    p = subprocess.run(
        [sys.executable, "-m", "node_impl", *args, *extra],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2
    assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------- helpers


def _others(c: LocalCluster, node: str) -> list[str]:
    return [n for n in c.nodes if n != node]


def _kv_write(c: LocalCluster, key: str, value: object) -> int:
    r = call_leader(c, {"type": "kv-write", "key": key, "value": value})
    assert r["code"] == "SUCCESS", r
    return r["index"]


# ---------------------------------------------------------------------- ack-before-quorum


@pytest.mark.integration
@needs_iptables
@pytest.mark.parametrize("bug", [None, "ack-before-quorum"])
def test_ack_before_quorum(tmp_path, bug) -> None:
    with running_cluster(tmp_path, 3, bug=bug, cls=IsolatableCluster) as c:
        append_ok(c, "warm")
        leader = stable_leader(c)
        c.isolate(leader)
        r = try_append(c, leader, "solo", 1.0)
        if bug is None:
            assert r is None or r["code"] != "SUCCESS"
            return
        assert r is not None and r["code"] == "SUCCESS"  # acked with no follower reachable
        c.kill(leader)
        # heal only after the others have moved on: the dead leader's kernel still
        # retransmits its unsent push, which a follower of its term would take
        wait_new_leader(c, leader)
        c.heal()
        assert "solo" not in [e[3] for e in committed_log(c)]  # the acked append is lost


# ---------------------------------------------------------------------- no-truncate


@pytest.mark.integration
@needs_iptables
def test_no_truncate_leaves_divergent_committed_prefixes(tmp_path) -> None:
    """Correct counterpart: test_cluster.py::test_isolated_leader_suffix_is_truncated."""
    with running_cluster(tmp_path, 3, bug="no-truncate", cls=IsolatableCluster) as c:
        old, new, kept = diverge_and_heal(c)
        mine, my_commit = local_log(c, old)
        theirs, _ = local_log(c, new)
        diverged = [i for i in range(min(my_commit, len(theirs) - 1) + 1) if mine[i] != theirs[i]]
        assert diverged, "old leader kept no divergent committed entry"
        assert any(str(mine[i][3]).startswith("lost") for i in diverged)


# ---------------------------------------------------------------------- commit-old-term


@pytest.mark.integration
@pytest.mark.slow
@needs_iptables
@pytest.mark.parametrize("bug", [None, "commit-old-term"])
def test_figure8_overwrites_a_committed_entry(tmp_path, bug) -> None:
    """Raft Figure 8: an old-term entry committed by counting is later overwritten."""
    with running_cluster(tmp_path, 3, bug=bug, cls=IsolatableCluster) as c:
        a = stable_leader(c)
        # 1. A, cut off, takes X
        c.isolate(a)
        try_append(c, a, "X", 0.2)
        # 2. the other two elect W; W, cut off in turn, takes Y
        w = wait_new_leader(c, a)
        z = next(n for n in c.nodes if n not in (a, w))
        c.isolate(w)
        try_append(c, w, "Y", 0.2)
        # 3. A and Z meet: someone leads and commits what it can
        c.heal_pair(a, z)
        l3 = wait_new_leader(c, w)
        time.sleep(0.5)
        seen = committed_log(c)
        other = a if l3 == z else z
        c.wait_until(
            lambda: c.status(other)["committedIndex"] >= len(seen) - 1, 5, "commit spreads"
        )
        # 4. W meets the other one while the step-3 leader is cut off
        c.heal()
        c.isolate(l3)
        time.sleep(1.5)
        c.heal()
        c.wait_for_leader(10)
        time.sleep(0.5)
        final = committed_log(c)
        overwritten = [e for e in seen if e[0] >= len(final) or final[e[0]] != e]
        if bug is None:
            assert not overwritten
            assert all("SAFETY" not in node_log(c, n) for n in c.nodes)
        else:
            assert any(e[3] == "X" for e in seen), seen  # X committed by counting alone
            assert overwritten, (seen, final)
            assert any("SAFETY check=truncate-below-commit" in node_log(c, n) for n in c.nodes)


# ---------------------------------------------------------------------- vote-without-log-check


@pytest.mark.integration
@pytest.mark.slow
@needs_iptables
@pytest.mark.parametrize("bug", [None, "vote-without-log-check"])
def test_lagging_node_elected(tmp_path, bug) -> None:
    # n3 campaigns late (long backoff), so it is the voter; the others are quick
    slow = {
        "n1": ["--election-timeout-ms", "300"],
        "n2": ["--election-timeout-ms", "300"],
        "n3": ["--election-timeout-ms", "4000"],
    }
    with running_cluster(tmp_path, 3, bug=bug, cls=IsolatableCluster, node_args=slow) as c:
        a = stable_leader(c)
        if a == "n3":
            pytest.skip("the slow node won the first election")
        voter = "n3"
        lag = next(n for n in c.nodes if n not in (a, voter))
        c.isolate(lag)
        acked = {append_ok(c, f"w{i}")["index"]: f"w{i}" for i in range(5)}
        wait_all_committed(c, max(acked), [a, voter])
        c.kill(a)
        # keep A's cut: its kernel still retransmits queued pushes, which would let the
        # lagging node catch up; only the voter and the lagging node meet again
        c.heal_pair(lag, voter)
        leader = c.wait_for_leader(20)
        time.sleep(0.3)
        got = {e[0]: e[3] for e in committed_log(c)}
        kept = {i: got.get(i) for i in acked}
        if bug is None:
            assert leader == voter and kept == acked
        else:
            assert leader == lag
            assert kept != acked  # acked writes lost


# ---------------------------------------------------------------------- stale-read


@pytest.mark.integration
@needs_iptables
@pytest.mark.parametrize("bug", [None, "stale-read"])
def test_stale_read_from_cut_off_follower(tmp_path, bug) -> None:
    with running_cluster(tmp_path, 3, bug=bug, cls=IsolatableCluster) as c:
        wait_all_committed(c, _kv_write(c, "k", 1))
        f = _others(c, stable_leader(c))[0]
        c.isolate(f)
        _kv_write(c, "k", 2)
        with c.client(f, timeout=2) as cl:
            r = cl.kv_read("k")
        if bug is None:
            assert r["type"] == "redirect" or r["code"] != "SUCCESS"
        else:
            assert (r["code"], r["value"]) == ("SUCCESS", 1)  # misses a write acked before


# ---------------------------------------------------------------------- wallclock-lease

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


class SkewableCluster(IsolatableCluster):
    """Each node runs under libfaketime with its own offset file (monotonic left alone)."""

    def clock_file(self, node: str) -> Path:
        return self.base_dir / node / "faketime"

    def set_offset(self, node: str, offset: str) -> None:
        # atomic: libfaketime re-reads the file on every call and must never see it empty
        tmp = self.clock_file(node).with_suffix(".tmp")
        tmp.write_text(offset + "\n")
        os.replace(tmp, self.clock_file(node))

    def command(self, node: str) -> list[str]:
        if not self.clock_file(node).exists():
            # every wall clock stands still an hour back: once a leader, a node's
            # wall-clock lease never runs out (the skew of an old leader, made certain)
            self.set_offset(
                node, time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() - 3600))
            )
        env = [
            f"LD_PRELOAD={FAKETIME_LIB}",
            f"FAKETIME_TIMESTAMP_FILE={self.clock_file(node)}",
            "FAKETIME_NO_CACHE=1",
            "DONT_FAKE_MONOTONIC=1",
        ]
        return ["env", *env, *super().command(node)]


@pytest.mark.integration
@needs_iptables
@pytest.mark.skipif(not os.path.exists(FAKETIME_LIB), reason="libfaketime not installed")
@pytest.mark.parametrize("bug", [None, "wallclock-lease"])
def test_wallclock_lease_serves_stale_reads(tmp_path, bug) -> None:
    with running_cluster(tmp_path, 3, bug=bug, cls=SkewableCluster) as c:
        c.wait_for_leader(15)
        old = stable_leader(c)
        wait_all_committed(c, _kv_write(c, "k", 1), [old])
        c.isolate(old)
        wait_new_leader(c, old)
        _kv_write(c, "k", 2)
        with c.client(old, timeout=2) as cl:
            r = cl.kv_read("k")
            st = cl.status()
        if bug is None:
            assert r["type"] == "redirect" or r["code"] != "SUCCESS"
            assert st["role"] != "leader"
        else:
            why = (r, st, node_log(c, old)[-1500:])
            assert (r["code"], r.get("value")) == ("SUCCESS", 1), why
            assert st["role"] == "leader", why  # never stepped down


# ---------------------------------------------------------------------- no-fsync


@pytest.mark.integration
@pytest.mark.parametrize("bug", [None, "no-fsync", "skip-fsync"])
def test_kill_all_right_after_acks(tmp_path, bug) -> None:
    with running_cluster(tmp_path, 3, bug=bug) as c:
        leader = c.wait_for_leader(15)
        time.sleep(1.2)  # let the 1 s flusher write the election state first
        with c.client(leader, timeout=2) as cl:
            acked = {}
            for i in range(20):
                r = cl.append(f"d{i}")
                assert r["code"] == "SUCCESS"
                acked[r["index"]] = f"d{i}"
        for n in c.nodes:
            c.kill(n)
        c.start_all()
        c.wait_for_leader(15)
        got = {e[0]: e[3] for e in committed_log(c)}
        kept = {i: got.get(i) for i in acked}
        if bug == "no-fsync":
            assert kept != acked  # acked appends vanished with the process buffers
        else:
            # skip-fsync wrote everything to the OS: only a power cut loses it
            # (tests/harness/test_vm_faults.py), never a kill -9.
            assert kept == acked


# ---------------------------------------------------------------------- commit-regress


@pytest.mark.integration
@pytest.mark.parametrize("bug", [None, "commit-regress"])
def test_commit_regress_on_leader_change(tmp_path, bug) -> None:
    with running_cluster(tmp_path, 3, bug=bug) as c:
        old = c.wait_for_leader(15)
        with c.client(old, timeout=2) as cl:
            r = cl.append_batch([f"b{i}" for i in range(50)])
        wait_all_committed(c, r["index"])
        c.kill(old)
        c.wait_for_leader(10)
        append_ok(c, "after")
        logs = "".join(node_log(c, n) for n in _others(c, old))
        if bug is None:
            assert "SAFETY" not in logs
        else:
            assert "SAFETY check=commit-regress" in logs  # committed went down, same incarnation


# ---------------------------------------------------------------------- forget-vote


@pytest.mark.integration
@pytest.mark.parametrize("bug", [None, "forget-vote"])
def test_vote_survives_kill(tmp_path, bug) -> None:
    with running_cluster(tmp_path, 3, bug=bug) as c:
        leader = c.wait_for_leader(15)
        voter = next(
            n for n, s in c.status_all().items() if n != leader and s and s["votedFor"] == leader
        )
        term = c.status(voter)["term"]
        c.pause(leader)  # keep the voter in this term while it restarts
        try:
            c.kill(voter)
            c.start(voter)
            c.wait_until(lambda: c.status(voter) is not None, 10, "voter restarts")
            st = c.status(voter)
        finally:
            c.resume(leader)
        assert st["term"] == term
        if bug is None:
            assert st["votedFor"] == leader
        else:
            assert st["votedFor"] != leader  # the restarted voter voted again in the same term


# ---------------------------------------------------------------------- lax-push-term


def _peer_call(c: LocalCluster, node: str, msg: dict) -> dict:
    with socket.create_connection(c.peer_addr(node), timeout=3) as s:
        s.sendall(encode_frame(msg))
        return recv_frame(s)


@pytest.mark.integration
@pytest.mark.parametrize("bug", [None, "lax-push-term"])
def test_lax_push_term_takes_commit_from_a_stranger(tmp_path, bug) -> None:
    with running_cluster(tmp_path, 3, bug=bug) as c:
        leader = c.wait_for_leader(15)
        f, stranger = _others(c, leader)
        c.pause(leader)
        try:
            st = c.status(f)
            msg = {
                "type": "push",
                "rid": 1,
                "from": stranger,
                "kind": "COMMIT",
                "term": st["term"] + 5,
                "leader": stranger,
                "commitIndex": 10**6,
                "gen": 1,
                "entries": [],
            }
            r = _peer_call(c, f, msg)
            after = c.status(f)
        finally:
            c.resume(leader)
        if bug is None:
            assert r["code"] == "INCONSISTENT_TERM"
            assert after["committedIndex"] == st["committedIndex"]
        else:
            assert r["code"] == "SUCCESS"
            assert after["committedIndex"] == after["ledgerEndIndex"]


# ---------------------------------------------------------------------- ok-on-term-change


@pytest.mark.integration
@needs_iptables
@pytest.mark.parametrize("bug", [None, "ok-on-term-change"])
def test_ok_on_term_change(tmp_path, bug) -> None:
    with running_cluster(tmp_path, 3, bug=bug, cls=IsolatableCluster) as c:
        append_ok(c, "warm")
        leader = stable_leader(c)
        c.isolate(leader)
        r = try_append(c, leader, "orphan", 5.0)
        assert r is not None
        if bug is None:
            assert r["code"] in ("TERM_CHANGED", "WAIT_QUORUM_ACK_TIMEOUT")
            return
        assert r["code"] == "SUCCESS"
        c.kill(leader)
        wait_new_leader(c, leader)
        c.heal()
        assert "orphan" not in [e[3] for e in committed_log(c)]  # acked, then lost
