"""Hostile bytes against a real 3-node cluster: nodes must shrug them off.

Every node's client and peer ports get oversized, truncated, non-map, typeless,
unknown-type and ill-typed frames plus seeded random bytes. Afterwards every process
must still be alive and answering, the cluster must still commit, and every store
must reopen without cutting anything.
"""

from __future__ import annotations

import importlib.util
import os
import random
import socket
import struct
from pathlib import Path

import msgpack
import pytest

from node_impl.local_cluster import LocalCluster
from node_impl.store import LogStore
from node_impl.wire import MAX_FRAME, FrameError, encode_frame, recv_frame

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("node_impl.__main__") is None,
        reason="the node server (node_impl/__main__.py) is not there yet",
    ),
]


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _pk(obj: object) -> bytes:
    return _frame(msgpack.packb(obj, use_bin_type=True))


def hostile_blobs(seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    blobs = [
        struct.pack(">I", MAX_FRAME + 1) + b"\x00" * 64,  # oversized length
        struct.pack(">I", 0xFFFFFFFF),
        struct.pack(">I", 0),  # empty frame
        struct.pack(">I", MAX_FRAME) + b"\x81",  # truncated: promises 16 MiB, sends 1 byte
        encode_frame({"type": "status", "rid": 1})[:-2],  # truncated valid frame
        b"\x00\x00",  # truncated length
        _pk([1, 2, 3]),  # not a map
        _pk("status"),
        _pk({"rid": 5}),  # no type
        _pk({"type": 17, "rid": 5}),
        _pk({"type": b"status", "rid": 5}),
        _frame(b"\xc1" * 9),  # never-used msgpack byte
        _frame(b"\x81\xa4type\xc6\x7f\xff\xff\xffxx"),  # bin claiming 2 GiB
        _frame(b"\x91" * 20000 + b"\x01"),  # nesting bomb
        _frame(msgpack.packb({"type": "status"}) + b"trailing"),
        # well-framed but ill-typed requests and peer messages
        _pk({"type": "append", "rid": "x", "body": None}),
        _pk({"type": "append", "rid": 2, "bodies": "notalist"}),
        _pk({"type": "append", "rid": 2, "bodies": []}),
        _pk({"type": "get", "rid": 3, "from": "a", "to": None}),
        _pk({"type": "get", "rid": 3, "index": -5, "local": True}),
        _pk({"type": "get", "rid": 3, "from": 0, "to": 2**64 - 1}),
        _pk({"type": "kv-write", "rid": 4, "key": 5, "value": [1]}),
        _pk({"type": "kv-cas", "rid": 4, "key": None}),
        _pk({"type": "kv-read", "rid": 4, "key": {"a": 1}}),
        _pk({"type": "no-such-request", "rid": 9}),
        _pk({"type": "vote", "rid": 1, "from": "n2", "term": "x", "candidate": 5}),
        _pk(
            {
                "type": "vote",
                "rid": 1,
                "from": "zz",
                "term": 1,
                "candidate": "zz",
                "ledgerEndIndex": "a",
                "ledgerEndTerm": None,
            }
        ),
        _pk({"type": "vote", "rid": 1}),
        _pk({"type": "heartbeat", "rid": 1, "from": "zz", "term": 1, "leader": "zz"}),
        _pk({"type": "heartbeat", "rid": 1, "term": None, "leader": None}),
        _pk({"type": "heartbeat", "rid": 1, "term": -(2**63), "leader": ["n1"]}),
        _pk(
            {
                "type": "push",
                "rid": 1,
                "from": "zz",
                "kind": "APPEND",
                "term": 1,
                "leader": "zz",
                "commitIndex": 10**9,
                "gen": 1,
                "entries": "junk",
            }
        ),
        _pk(
            {
                "type": "push",
                "rid": 1,
                "kind": "TRUNCATE",
                "term": 0,
                "leader": "n1",
                "entries": [{"index": 0, "body": 5}],
            }
        ),
        _pk({"type": "push", "rid": 1, "kind": "WHAT", "entries": None}),
        _pk({"type": "push", "rid": 1}),
        _pk({"type": "vote-resp", "rid": 424242, "term": 99, "result": "ACCEPT"}),
        _pk({"type": "push-resp", "rid": 1, "code": "SUCCESS", "index": 10**6, "gen": 0}),
    ]
    for _ in range(25):
        n = rng.randrange(1, 300)
        blobs.append(_frame(rng.randbytes(n)))  # right length, random payload
        blobs.append(rng.randbytes(rng.randrange(1, 64)))  # anything at all
    return blobs


def _throw(addr: tuple[str, int], blob: bytes) -> dict | None:
    """Send one blob, read a reply if one comes quickly, then hang up."""
    with socket.create_connection(addr, timeout=2.0) as s:
        s.sendall(blob)
        s.settimeout(0.1)
        try:
            return recv_frame(s)
        except (TimeoutError, EOFError, OSError, FrameError):
            return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    c = LocalCluster(3, tmp_path_factory.mktemp("fuzz"), heartbeat_ms=100, election_timeout_ms=600)
    try:
        c.start_all()
        c.wait_for_leader(30)
        yield c
    finally:
        c.close()


def _assert_healthy(c: LocalCluster) -> str:
    for n in c.nodes:
        assert c.is_running(n), f"{n} died: rc={c.exit_code(n)}; log tail:\n" + _tail(c, n)
        st = c.status(n, timeout=2.0)
        assert st is not None and st["code"] == "SUCCESS", f"{n} does not answer status"
    leader = c.wait_for_leader(20)
    with c.client(leader, timeout=5.0) as cl:
        r = cl.append("after-fuzz")
        assert r["code"] == "SUCCESS", r
        got = cl.get(r["index"])
        assert got["code"] == "SUCCESS" and got["entries"][0][3] == "after-fuzz"
    return leader


def _tail(c: LocalCluster, n: str) -> str:
    p = c.log_path(n)
    return p.read_text(errors="replace")[-3000:] if p.exists() else "(no log)"


def test_hostile_frames_do_not_hurt_nodes(cluster: LocalCluster) -> None:
    blobs = hostile_blobs()
    replies: list[dict] = []
    for n in cluster.nodes:
        for addr in (cluster.client_addr(n), cluster.peer_addr(n)):
            for blob in blobs:
                r = _throw(addr, blob)
                if r is not None:
                    replies.append(r)
    # the client port answers an unknown request type instead of hanging up
    with cluster.client(cluster.nodes[0]) as cl:
        r = cl.call({"type": "no-such-request"})
        assert r["code"] == "UNSUPPORTED"
    # and a garbage frame is refused in words before the connection closes
    assert any(r.get("code") == "BAD_FRAME" for r in replies)
    _assert_healthy(cluster)


def test_many_garbage_connections_at_once(cluster: LocalCluster) -> None:
    rng = random.Random(3)
    socks = []
    try:
        for n in cluster.nodes:
            for addr in (cluster.client_addr(n), cluster.peer_addr(n)):
                for _ in range(10):
                    s = socket.create_connection(addr, timeout=2.0)
                    s.sendall(struct.pack(">I", rng.randrange(1, MAX_FRAME)) + rng.randbytes(100))
                    socks.append(s)
        _assert_healthy(cluster)  # half-sent frames on idle connections block nothing
    finally:
        for s in socks:
            s.close()


def test_stores_recover_cleanly_after_fuzz(cluster: LocalCluster) -> None:
    _assert_healthy(cluster)
    for n in cluster.nodes:
        rc = cluster.stop(n)
        assert rc == 0, f"{n} exited {rc} on SIGTERM:\n{_tail(cluster, n)}"
    for n in cluster.nodes:
        d: Path = cluster.data_dir(n)
        size = os.path.getsize(d / "data.log")
        s = LogStore(d)
        try:
            assert s.data_length == size, f"{n}: recovery cut {size - s.data_length} bytes"
            assert s.end_index >= 1
            s.entries(0, s.end_index)  # every entry readable and CRC-clean
        finally:
            s.close()
    cluster.start_all()
    cluster.wait_ready(timeout=20)
    _assert_healthy(cluster)
