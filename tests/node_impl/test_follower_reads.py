"""Read mode ``follower`` (spec §8.3a): a follower answers a linearizable read after
asking its leader for a read index, and never answers one it cannot confirm."""

from __future__ import annotations

import time

from tests.node_impl.cluster_helpers import (
    IsolatableCluster,
    append_ok,
    call_leader,
    needs_iptables,
    running_cluster,
    stable_leader,
)

FOLLOWER = ("--read-mode", "follower")


def _write(c, key: str, value: int) -> None:
    r = call_leader(c, {"type": "kv-write", "key": key, "value": value}, timeout=10)
    assert r["code"] == "SUCCESS", r


def test_a_follower_answers_and_sees_every_write_acked_before_the_read(tmp_path) -> None:
    """Each write is acked by the leader, then read at once from every follower: a
    follower answering from its state before the write had applied would be caught.

    On a loaded machine a follower may miss its leader's heartbeats for an election
    timeout and redirect (or a new leader may be elected): such a read is asked again,
    until the node itself answers (in mode index a follower never would). Every answer
    must be the newest value."""
    with running_cluster(tmp_path, 3, extra_args=FOLLOWER) as c:
        leader = stable_leader(c)
        followers = [n for n in c.nodes if n != leader]
        for i in range(40):
            _write(c, "k", i)
            for f in followers:
                deadline = time.monotonic() + 20
                while True:
                    with c.client(f, timeout=5) as cl:
                        r = cl.kv_read("k")
                    if r.get("type") != "redirect" and r.get("code") == "SUCCESS":
                        assert r["value"] == i, ("stale read from a follower", i, f, r)
                        break
                    assert time.monotonic() < deadline, (i, f, r)
                    time.sleep(0.05)
        # a log read from a follower sees the append acked just before it
        a = append_ok(c, "last")
        deadline = time.monotonic() + 20
        while True:
            with c.client(followers[0], timeout=5) as cl:
                g = cl.get(frm=0, to=a["index"])
            if g.get("code") == "SUCCESS" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert g["code"] == "SUCCESS", g
        assert [e[3] for e in g["entries"] if e[0] == a["index"]] == ["last"], g


def test_mode_index_followers_still_redirect(tmp_path) -> None:
    with running_cluster(tmp_path, 3) as c:
        leader = stable_leader(c)
        follower = next(n for n in c.nodes if n != leader)
        with c.client(follower, timeout=5) as cl:
            r = cl.kv_read("k")
        assert r.get("type") == "redirect" and r.get("leader") == leader, r


@needs_iptables
def test_a_follower_cut_off_from_the_leader_never_answers_stale(tmp_path) -> None:
    """The follower is cut off; the other two commit new values. Asked at once and
    until the end, the cut-off follower either redirects or gives the newest value."""
    with running_cluster(tmp_path, 3, extra_args=FOLLOWER, cls=IsolatableCluster) as c:
        leader = stable_leader(c)
        cut = next(n for n in c.nodes if n != leader)
        _write(c, "k", 0)
        with c.client(cut, timeout=5) as cl:
            assert cl.kv_read("k")["value"] == 0
        c.isolate(cut)
        answered = redirected = 0
        for i in range(1, 11):
            _write(c, "k", i)
            started = time.monotonic()
            try:
                with c.client(cut, timeout=5) as cl:
                    r = cl.kv_read("k")
            except (ConnectionError, TimeoutError, OSError):
                continue
            # refused at once while its leader is silent, not held for a timeout
            assert time.monotonic() - started < 4.0, r
            if r.get("type") == "redirect" or r.get("code") != "SUCCESS":
                redirected += 1
            else:
                answered += 1
                assert r["value"] == i, ("stale read on a cut-off follower", i, r)
        assert redirected >= 1, (answered, redirected)  # it does refuse, and never answers stale
        c.heal()
