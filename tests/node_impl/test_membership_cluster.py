"""Membership changes and leadership transfer on real node processes (docs/membership.md).

Each test starts real ``python -m node_impl`` processes on loopback and drives them
through the client protocol (``members``, ``add-member``, ``remove-member``,
``transfer-leader``), checking that every acknowledged append survives.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from node_impl.cli import _admin_request
from node_impl.cli import node as node_cli
from node_impl.local_cluster import LocalCluster
from tests.node_impl.cluster_helpers import (
    append_ok,
    call_leader,
    committed_log,
    running_cluster,
    stable_leader,
    wait_all_committed,
    wait_new_leader,
)

pytestmark = pytest.mark.integration


def _members(c: LocalCluster, node: str) -> dict:
    with c.client(node, timeout=3.0) as cl:
        r = cl.members()
    assert r["code"] == "SUCCESS", r
    return r


@contextlib.contextmanager
def long_lease_cluster(tmp_path, bug: str | None = None) -> Iterator[LocalCluster]:
    """Three nodes whose leader keeps leading for 3 s without a quorum, so a test can
    kill both followers and still have the leader log a change that cannot commit."""
    c = LocalCluster(3, tmp_path, bug=bug, heartbeat_ms=50, election_timeout_ms=3000)
    try:
        c.start_all()
        yield c
    finally:
        c.close()


def test_add_a_fourth_node_it_replicates_then_votes(tmp_path) -> None:
    with running_cluster(tmp_path, 3) as c:
        acked = [f"a{i}" for i in range(5)]
        for p in acked:
            append_ok(c, p)
        leader = stable_leader(c)
        assert set(_members(c, leader)["voters"]) == {"n1", "n2", "n3"}
        c.add_node("n4")
        c.start("n4")
        c.wait_ready(["n4"])
        st = c.status("n4")
        assert st is not None and st["config"]["learners"] == {"n4": c.peer_addr_str("n4")}
        r = call_leader(
            c,
            {"type": "add-member", "id": "n4", "addr": c.peer_addr_str("n4")},
            timeout=20,
            call_timeout=5,
        )
        assert r["code"] == "SUCCESS", r
        assert "n4" in r["learners"] or "n4" in r["voters"]

        # promoted once caught up: a config entry making n4 a voter commits everywhere
        def promoted() -> bool:
            m = _members(c, c.wait_for_leader(10))
            return "n4" in m["voters"] and not m["pending"]

        c.wait_until(promoted, 20, "n4 promoted to voter")
        more = append_ok(c, "after-promotion")
        acked.append("after-promotion")
        wait_all_committed(c, more["index"])
        m4 = _members(c, "n4")
        assert set(m4["voters"]) == {"n1", "n2", "n3", "n4"} and m4["learners"] == {}
        entries = committed_log(c)
        assert [e[2] for e in entries].count("config") == 2  # learner, then voter
        assert acked == [e[3] for e in entries if e[2] == "append"]

        # n4 votes: with the leader down, 3 of the 4 voters are left and a quorum is 3
        old = c.wait_for_leader(10)
        c.kill(old)
        new = wait_new_leader(c, old, timeout=20)
        assert new != old
        append_ok(c, "after-kill", timeout=20)
        acked.append("after-kill")
        votes = (c.data_dir("n4") / "node.log").read_text()
        assert "vote" in votes or new == "n4"  # n4 granted a vote, or won itself

        # the configuration survives a restart: rebuilt from the log, not from --peers
        c.start(old)
        c.wait_ready([old])
        c.wait_until(
            lambda: (
                set((c.status(old) or {}).get("config", {}).get("voters", {}))
                == {"n1", "n2", "n3", "n4"}
            ),
            15,
            f"{old} recovered the 4-voter config",
        )
        assert acked == [e[3] for e in committed_log(c) if e[2] == "append"]


def test_remove_the_leader_it_steps_down_and_the_rest_elect(tmp_path) -> None:
    with running_cluster(tmp_path, 3) as c:
        for i in range(5):
            append_ok(c, f"r{i}")
        old = stable_leader(c)
        rest = {"n1", "n2", "n3"} - {old}
        with c.client(old, timeout=10) as cl:
            r = cl.remove_member(old)
        assert r["code"] == "SUCCESS", r
        assert set(r["voters"]) == rest
        c.wait_until(lambda: (c.status(old) or {}).get("role") != "leader", 10, f"{old} steps down")
        new = wait_new_leader(c, old, timeout=20)
        assert new in rest
        k = append_ok(c, "after-removal", timeout=20)
        wait_all_committed(c, k["index"], sorted(rest))
        assert set(_members(c, new)["voters"]) == rest
        # the same view through the CLI, asked of a follower (members needs no leader)
        host, port = c.client_addr(sorted(rest - {new})[0])
        out = CliRunner().invoke(node_cli, ["--admin", f"{host}:{port}", "members"])
        assert out.exit_code == 0, out.output
        view = json.loads(out.output)
        assert set(view["voters"]) == rest and view["leader"] == new and not view["pending"]
        # the removed node goes quiet: it neither leads again nor moves the others' term
        before = c.status(new)
        assert before is not None
        time.sleep(1.5)
        st = c.status_all()
        s_old, s_new = st[old], st[new]
        assert s_old is not None and s_old["role"] != "leader"
        assert c.leader() == new and s_new is not None and s_new["term"] == before["term"]
        got = committed_log(c)
        assert [e[3] for e in got if e[2] == "append"] == [
            *(f"r{i}" for i in range(5)),
            "after-removal",
        ]


def test_transfer_leadership_to_a_named_follower(tmp_path) -> None:
    with running_cluster(tmp_path, 3) as c:
        for i in range(5):
            append_ok(c, f"t{i}")
        old = stable_leader(c)
        target = sorted({"n1", "n2", "n3"} - {old})[0]
        t0 = time.monotonic()
        with c.client(old, timeout=10) as cl:
            r = cl.transfer_leader(target, timeout_ms=5000)
        took = time.monotonic() - t0
        assert r["code"] == "SUCCESS" and r["leader"] == target, r
        assert took < 6.0
        c.wait_until(lambda: c.leader() == target, 10, f"{target} leads")
        append_ok(c, "after-transfer")
        assert [e[3] for e in committed_log(c) if e[2] == "append"] == [
            *(f"t{i}" for i in range(5)),
            "after-transfer",
        ]
        # the target refused: not a voter
        with c.client(target, timeout=5) as cl:
            assert cl.transfer_leader("nobody")["code"] == "UNSUPPORTED"


@pytest.mark.parametrize("bug", [None, "removed-node-votes"])
def test_bug_removed_node_votes_lets_a_removed_node_lead(tmp_path, bug) -> None:
    """Remove a follower F from {L, F, G}: the config in force is {L, G}. Kill L. G
    alone is no quorum of {L, G}, so the correct cluster has no leader; F knows it was
    removed and stays quiet. With the bug F campaigns and G grants it a vote (F is a
    node G once knew): F, outside the configuration, becomes leader."""
    with running_cluster(tmp_path, 3, bug=bug) as c:
        append_ok(c, "x")
        leader = stable_leader(c)
        f = sorted(set(c.nodes) - {leader})[0]
        with c.client(leader, timeout=10) as cl:
            r = cl.remove_member(f)
        assert r["code"] == "SUCCESS", r
        c.wait_until(
            lambda: f not in (c.status(f) or {}).get("config", {}).get("voters", {f: 1}),
            10,
            f"{f} learns it was removed",
        )
        c.kill(leader)
        # correct: six election timeouts without F leading; bug: F wins well within 10 s
        deadline = time.monotonic() + (3.0 if bug is None else 10.0)
        led = False
        while time.monotonic() < deadline and not led:
            led = (c.status(f) or {}).get("role") == "leader"
            time.sleep(0.05)
        assert led is (bug is not None)


def test_admin_cli_arguments() -> None:
    assert _admin_request(["members"]) == {"type": "members"}
    assert _admin_request(["add-member", "n4", "h:1"]) == {
        "type": "add-member",
        "id": "n4",
        "addr": "h:1",
    }
    assert _admin_request(["transfer-leader", "n2", "900"]) == {
        "type": "transfer-leader",
        "id": "n2",
        "timeout_ms": 900,
    }
    assert _admin_request(["transfer-leader", "n2", "soon"]) is None
    assert _admin_request(["remove-member"]) is None
    r = CliRunner().invoke(node_cli, ["--admin", "127.0.0.1:1", "frobnicate"])
    assert r.exit_code == 2


def test_uncommitted_config_survives_restart_and_reverts_when_truncated(tmp_path) -> None:
    """A leader whose followers are down logs add-member n4 (never committed), dies,
    and restarts: recovery puts the logged config in force again (M2.3); the new
    leader's TRUNCATE then cuts it away and the previous config is back (M2.2)."""
    with long_lease_cluster(tmp_path) as c:
        wait_all_committed(c, append_ok(c, "x")["index"])
        old = stable_leader(c)
        others = sorted(set(c.nodes) - {old})
        for n in others:
            c.kill(n)  # (a pause would leave the push in their socket buffers)
        with c.client(old, timeout=0.5) as cl:
            r = None
            with contextlib.suppress(TimeoutError):
                r = cl.add_member("n4", "127.0.0.1:9")
            assert r is None or r["code"] != "SUCCESS", r
        view = _members(c, old)
        assert view["learners"] == {"n4": "127.0.0.1:9"} and view["pending"]
        c.kill(old)
        for n in others:
            c.start(n)
        new = wait_new_leader(c, old, timeout=20)
        assert _members(c, new)["learners"] == {}
        c.start(old)
        c.wait_ready([old])
        c.wait_until(lambda: (c.status(old) or {}).get("leader") == new, 15, f"{old} follows {new}")
        k = append_ok(c, "y")
        wait_all_committed(c, k["index"])
        view = _members(c, old)
        assert view["learners"] == {} and set(view["voters"]) == {"n1", "n2", "n3"}
        assert view["configIndex"] == -1 and not view["pending"]
        lines = (c.data_dir(old) / "node.log").read_text().splitlines()
        last_start = max(i for i, ln in enumerate(lines) if "event=start" in ln)
        # recovery put the logged config in force (logged while the node is built)...
        assert "event=config index=" in lines[last_start - 1] and "n4" in lines[last_start - 1]
        after = "\n".join(lines[last_start:])
        # ...until the new leader's TRUNCATE cut it and the startup config came back
        assert "event=config index=-1" in after and "event=truncated" in after
        assert [e[3] for e in committed_log(c) if e[2] == "append"] == ["x", "y"]


def test_acked_appends_survive_membership_churn_under_load(tmp_path) -> None:
    """A writer appends without pause while n4 joins, leadership moves to it, the
    original leader is removed and n5 joins: every acked append is in the final
    committed log exactly once, at the index and term it was acked with."""

    acked: dict[str, tuple[int, int]] = {}
    stop = threading.Event()

    def writer(c: LocalCluster) -> None:
        """Its own clients (LocalCluster.status shares one per node, not thread-safe)."""
        i = 0
        while not stop.is_set():
            body = f"w{i}"
            i += 1
            for node in list(c.nodes):
                try:
                    with c.client(node, timeout=1.0) as cl:
                        r = cl.append(body)
                except (ConnectionError, TimeoutError, OSError):
                    continue
                if r.get("type") == "redirect":
                    continue
                if r.get("code") == "SUCCESS":
                    acked[body] = (r["index"], r["term"])
                break  # any other answer: the attempt is over, the next body is new
            else:
                time.sleep(0.05)

    # A promotion shows in the voters once logged (M2.1), before it commits: the next
    # change or transfer may meet it still pending, which is a refusal to retry.
    pending = ("CONFIG_CHANGE_PENDING", "LEADER_TRANSFERRING")

    def change(c: LocalCluster, msg: dict) -> dict:
        r = call_leader(c, msg, timeout=30, call_timeout=5, retry=pending)
        assert r["code"] == "SUCCESS", r
        return r

    with running_cluster(tmp_path, 3) as c:
        t = threading.Thread(target=writer, args=(c,), daemon=True)
        t.start()
        try:
            first = stable_leader(c)
            for new in ("n4", "n5"):
                c.add_node(new, members=[n for n in c.nodes if n != first or new == "n4"])
                c.start(new)
                c.wait_ready([new])
                change(c, {"type": "add-member", "id": new, "addr": c.peer_addr_str(new)})
                c.wait_until(
                    lambda new=new: new in _members(c, c.wait_for_leader(10))["voters"],
                    30,
                    f"{new} promoted",
                )
                if new == "n4":
                    r = call_leader(
                        c,
                        {"type": "transfer-leader", "id": "n4", "timeout_ms": 5000},
                        timeout=30,
                        call_timeout=10,
                        retry=pending,
                    )
                    assert r["code"] in ("SUCCESS", "TRANSFER_TIMEOUT", "TRANSFER_FAILED"), r
                    change(c, {"type": "remove-member", "id": first})
            time.sleep(1.0)
        finally:
            stop.set()
            t.join(10)
        assert len(acked) > 20
        entries = committed_log(c)
        at = {e[0]: (e[1], e[3]) for e in entries}
        for body, (index, term) in acked.items():
            assert at.get(index) == (term, body), (body, index, term, at.get(index))
        payloads = [e[3] for e in entries if e[2] == "append"]
        assert len(payloads) == len(set(payloads))
        assert set(_members(c, c.wait_for_leader(10))["voters"]) == set(c.nodes) - {first}


@pytest.mark.parametrize("bug", [None, "config-on-commit"])
def test_config_is_in_force_once_logged_not_once_committed(tmp_path, bug) -> None:
    """With both followers down, add-member n4 is logged by the leader but cannot
    commit. Correct: the leader's configuration in force already has learner n4
    (M2.1). Bug config-on-commit: it still has the old one, with the change pending."""
    with long_lease_cluster(tmp_path, bug) as c:
        wait_all_committed(c, append_ok(c, "x")["index"])
        leader = stable_leader(c)
        for n in sorted(set(c.nodes) - {leader}):
            c.kill(n)
        with c.client(leader, timeout=0.5) as cl, contextlib.suppress(TimeoutError):
            cl.add_member("n4", "127.0.0.1:9")
        view = _members(c, leader)
        assert view["pending"]
        assert view["learners"] == ({} if bug else {"n4": "127.0.0.1:9"})
