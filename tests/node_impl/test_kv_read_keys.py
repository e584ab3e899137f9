"""``kv-read`` with ``keys``: one linearizable read of many keys, in every read mode.

It exists because a kv set's final read asked a key at a time: in read mode ``log`` each
key was a commit, and five such reads of ~600 elements side by side outlasted the final
read's 30 s (docs/zoo.md, seeds 7301 and 7304). These tests hold the node to one read
(one log entry in mode ``log``) for all the keys, answered in order from one state.
"""

from __future__ import annotations

import pytest

from node_impl.server import MAX_READ_KEYS
from tests.node_impl.cluster_helpers import call_leader, running_cluster

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["index", "follower", "log"])
def test_many_keys_are_read_at_once_in_order_in_every_read_mode(tmp_path, mode) -> None:
    with running_cluster(tmp_path, 3, extra_args=("--read-mode", mode)) as c:
        leader = c.wait_for_leader(15)
        for i in range(5):
            w = call_leader(c, {"type": "kv-write", "key": f"s{i}", "value": i})
            assert w["code"] == "SUCCESS", w
        keys = ["s3", "missing", "s0", "s4"]
        with c.client(leader) as cl:
            end_before = cl.status()["ledgerEndIndex"]
            r = cl.kv_read_keys(keys)
            end_after = cl.status()["ledgerEndIndex"]
        assert r["code"] == "SUCCESS", r
        assert r["values"] == [
            {"found": True, "value": 3},
            {"found": False, "value": None},
            {"found": True, "value": 0},
            {"found": True, "value": 4},
        ]
        assert isinstance(r["readIndex"], int) and r["readIndex"] >= w["index"]
        # Mode log: one entry for the four keys (a key at a time would be four);
        # the other modes append nothing for a read.
        assert end_after - end_before == (1 if mode == "log" else 0)
        if mode == "log":
            with c.client(leader) as cl:
                g = cl.get(r["readIndex"])
            assert g["entries"][0][2] == "read"
            assert g["entries"][0][3]["ks"] == keys


def test_a_follower_redirects_a_many_key_read_in_mode_log_and_bad_keys_are_refused(
    tmp_path,
) -> None:
    with running_cluster(tmp_path, 3, extra_args=("--read-mode", "log")) as c:
        leader = c.wait_for_leader(15)
        follower = next(n for n in c.nodes if n != leader)
        with c.client(follower) as cl:
            r = cl.kv_read_keys(["a"])
            assert (r["type"], r["leader"]) == ("redirect", leader)
            for bad in ([], [1], "a", ["k"] * (MAX_READ_KEYS + 1)):
                got = cl.call({"type": "kv-read", "keys": bad})
                assert got["code"] == "UNSUPPORTED", (bad, got)
            assert cl.call({"type": "kv-read"})["code"] == "UNSUPPORTED"
