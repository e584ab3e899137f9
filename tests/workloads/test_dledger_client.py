"""Outcome mapping and redirect logic of the shared client, against an in-memory fake node.

These are pure unit tests of the mapping rules; tests/workloads/test_cluster.py runs
the same clients against real node processes.
"""

from __future__ import annotations

import pytest

from harness.core.errors import ConfigError
from harness.core.history import Op
from workloads.addr import client_addr, node_for_addr, parse_addr
from workloads.append import AppendClient
from workloads.dledger_client import exception_outcome, outcome
from workloads.register import RegisterClient
from workloads.sampler import SAMPLE_KEYS, SamplerClient
from workloads.sets import SetClient

from .conftest import make_ctx

ADDRS = {"n1": ("127.0.0.1", 7001), "n2": ("127.0.0.1", 7002), "n3": ("127.0.0.1", 7003)}


class FakeConn:
    """NodeClient's method surface over a handler(addr, msg) -> reply (or raise)."""

    def __init__(self, cluster, host, port):
        self.cluster, self.addr = cluster, (host, port)
        self.closed = False

    def _call(self, msg):
        self.cluster.calls.append((self.addr, msg))
        return self.cluster.handler(self.addr, msg)

    def append(self, body):
        return self._call({"type": "append", "body": body})

    def get(self, index=None, *, frm=None, to=None, local=False):
        return self._call({"type": "get", "index": index, "from": frm, "to": to, "local": local})

    def kv_write(self, key, value):
        return self._call({"type": "kv-write", "key": key, "value": value})

    def kv_read(self, key, timeout=None):
        self.cluster.read_timeouts.append(timeout)
        return self._call({"type": "kv-read", "key": key})

    def kv_cas(self, key, old, new):
        return self._call({"type": "kv-cas", "key": key, "old": old, "new": new})

    def status(self):
        return self._call({"type": "status"})

    def close(self):
        self.closed = True


class FakeCluster:
    def __init__(self, handler):
        self.handler = handler
        self.calls = []
        self.read_timeouts = []

    def connector(self, host, port, timeout):
        return FakeConn(self, host, port)


def redirect(leader, addr=None):
    return {"type": "redirect", "code": "NOT_LEADER", "leader": leader, "leader_addr": addr}


def leader_is(leader_port, reply):
    def handler(addr, msg):
        if msg["type"] == "status" or addr[1] == leader_port:
            return reply(msg) if callable(reply) else reply
        return redirect("n2", f"127.0.0.1:{leader_port}")

    return handler


def inv(f, value=None, key=None, node="n1", process=0):
    return Op(type="invoke", process=process, f=f, value=value, key=key, node=node)


@pytest.fixture
def ctx(tmp_path):
    c = make_ctx(tmp_path, ADDRS)
    yield c
    c.history.close()


def test_outcome_table():
    assert outcome("SUCCESS", read=False) == "ok"
    for code in (
        "NOT_LEADER",
        "LEADER_PENDING_FULL",
        "LEADER_NOT_READY",
        "UNSUPPORTED",
        "INDEX_OUT_OF_RANGE",
        "NOT_COMMITTED",
    ):
        assert outcome(code, read=False) == "fail"
    for code in (
        "WAIT_QUORUM_ACK_TIMEOUT",
        "TERM_CHANGED",
        "SLAVE_NOT_AVAILABLE",
        "FLUSH_SLAVE_TIMEOUT",
        "SOMETHING_NEW",
    ):
        assert outcome(code, read=False) == "info"
        assert outcome(code, read=True) == "fail"
    assert exception_outcome(TimeoutError("x"), read=False) == "info"
    assert exception_outcome(TimeoutError("x"), read=True) == "fail"
    assert exception_outcome(ConnectionResetError(), read=False) == "info"
    assert exception_outcome(ConnectionRefusedError(), read=False) == "fail"
    wrapped = ConnectionError("127.0.0.1:1: connect failed: refused")
    wrapped.__cause__ = ConnectionRefusedError()
    assert exception_outcome(wrapped, read=False) == "fail"


def test_append_follows_one_redirect_and_names_the_answering_node(ctx):
    fc = FakeCluster(
        leader_is(
            7002, {"type": "append-resp", "code": "SUCCESS", "index": 7, "term": 3, "leader": "n2"}
        )
    )
    c = AppendClient(connector=fc.connector).open(ctx, "n1")
    done = c.invoke(ctx, inv("append", {"payload": "0-0"}))
    assert (done.type, done.node) == ("ok", "n2")
    assert done.value == {"payload": "0-0", "index": 7, "term": 3}
    assert [a[1] for a, _ in fc.calls] == [7001, 7002]
    assert fc.calls[-1][1]["body"] == "0-0"


def test_writes_go_straight_to_the_leader_a_redirect_named_reads_do_not(ctx):
    state = {"leader": 7002, "answer": "SUCCESS"}

    def h(addr, msg):
        if addr[1] != state["leader"]:
            return redirect(None, f"127.0.0.1:{state['leader']}")
        if msg["type"] == "append":
            return {"code": state["answer"], "index": 1, "term": 1}
        return {"code": "SUCCESS", "entries": [], "committed": -1}

    fc = FakeCluster(h)
    c = AppendClient(connector=fc.connector).open(ctx, "n1")

    def ports(f, value):
        fc.calls.clear()
        done = c.invoke(ctx, inv(f, value))
        return done, [a[1] for a, _ in fc.calls]

    assert ports("append", {"payload": "a"})[1] == [7001, 7002]
    done, asked = ports("append", {"payload": "b"})
    assert asked == [7002] and (done.type, done.node) == ("ok", "n2")
    assert ports("read", {"from": 0, "to": 1})[1] == [7001, 7002]  # reads ask their node
    state["leader"] = 7003  # the hinted leader redirects: followed once, hint moves
    done, asked = ports("append", {"payload": "c"})
    assert asked == [7002, 7003] and done.node == "n3"
    assert ports("append", {"payload": "d"})[1] == [7003]
    state["answer"] = "WAIT_QUORUM_ACK_TIMEOUT"  # anything but SUCCESS forgets the hint
    done, asked = ports("append", {"payload": "e"})
    assert asked == [7003] and done.type == "info"
    state["answer"] = "SUCCESS"
    assert ports("append", {"payload": "f"})[1] == [7001, 7003]


def test_redirect_without_leader_or_twice_is_fail(ctx):
    fc = FakeCluster(lambda addr, msg: redirect(None))
    c = AppendClient(connector=fc.connector).open(ctx, "n1")
    done = c.invoke(ctx, inv("append", {"payload": "p"}))
    assert done.type == "fail" and "NOT_LEADER" in done.error
    fc = FakeCluster(lambda addr, msg: redirect("n3" if addr[1] == 7001 else "n1"))
    c = AppendClient(connector=fc.connector).open(ctx, "n1")
    done = c.invoke(ctx, inv("append", {"payload": "p"}))
    assert done.type == "fail" and done.node == "n3"
    assert len(fc.calls) == 2  # followed once, not in circles


def test_codes_and_exceptions_map_per_spec(ctx):
    def raiser(exc):
        def h(addr, msg):
            raise exc

        return h

    cases = [
        ({"code": "WAIT_QUORUM_ACK_TIMEOUT"}, "info", "fail"),
        ({"code": "LEADER_PENDING_FULL"}, "fail", "fail"),
        (TimeoutError("no reply"), "info", "fail"),
        (ConnectionResetError("reset"), "info", "fail"),
        (ConnectionRefusedError("refused"), "fail", "fail"),
    ]
    for behaviour, append_type, read_type in cases:
        h = raiser(behaviour) if isinstance(behaviour, Exception) else (lambda a, m, b=behaviour: b)
        fc = FakeCluster(h)
        c = AppendClient(connector=fc.connector).open(ctx, "n1")
        a = c.invoke(ctx, inv("append", {"payload": "p"}))
        r = c.invoke(ctx, inv("read", {"from": 0, "to": 5}))
        assert (a.type, r.type) == (append_type, read_type), behaviour
        assert a.error and a.value == {"payload": "p"}
        assert r.value == {"from": 0, "to": 5}


def test_connection_dropped_after_error_and_reopened(ctx):
    state = {"n": 0}

    def h(addr, msg):
        state["n"] += 1
        if state["n"] == 1:
            raise ConnectionResetError("reset")
        return {"code": "SUCCESS", "index": 1, "term": 1}

    fc = FakeCluster(h)
    c = AppendClient(connector=fc.connector).open(ctx, "n1")
    assert c.invoke(ctx, inv("append", {"payload": "a"})).type == "info"
    assert c.invoke(ctx, inv("append", {"payload": "b"})).type == "ok"
    conns = {id(x) for x in [c._session._conns[ADDRS["n1"]]]}
    assert len(conns) == 1
    c.close(ctx)
    assert c._session is None


def test_log_read_converts_entries(ctx):
    reply = {
        "code": "SUCCESS",
        "committedIndex": 2,
        "ledgerEndIndex": 2,
        "entries": [[0, 1, "noop", None], [1, 1, "append", "0-0"], [2, 1, "append", b"raw"]],
    }
    fc = FakeCluster(leader_is(7001, reply))
    c = AppendClient(connector=fc.connector).open(ctx, "n1")
    done = c.invoke(ctx, inv("read", {"from": 0, "to": 2}))
    assert done.type == "ok"
    assert done.value == {"entries": [[0, 1, None], [1, 1, "0-0"], [2, 1, "raw"]], "committed": 2}
    assert fc.calls[0][1]["local"] is False


def test_final_read_is_local_on_the_named_node_and_clipped(ctx):
    def h(addr, msg):
        if msg["type"] == "status":
            return {"code": "SUCCESS", "ledgerEndIndex": 1, "committedIndex": 0}
        return {
            "code": "SUCCESS",
            "committedIndex": 0,
            "ledgerEndIndex": 1,
            "entries": [[i, 1, "append", str(i)] for i in range(msg["from"], msg["to"] + 1)],
        }

    fc = FakeCluster(h)
    c = AppendClient(connector=fc.connector).open(ctx, "n1")
    done = c.invoke(
        ctx, inv("read", {"from": 0, "to": 999, "final": True, "local": True}, node="n3")
    )
    assert done.type == "ok" and done.node == "n3"
    assert done.value == {"entries": [[0, 1, "0"], [1, 1, "1"]], "committed": 0, "end": 1}
    assert all(a == ADDRS["n3"] for a, _ in fc.calls)
    assert fc.calls[-1][1] == {"type": "get", "index": None, "from": 0, "to": 1, "local": True}
    done = c.invoke(
        ctx, inv("read", {"from": 1000, "to": 1999, "final": True, "local": True}, node="n3")
    )
    assert done.type == "ok" and done.value["entries"] == [] and done.value["end"] == 1


def test_register_ops(ctx):
    kv = {}

    def h(addr, msg):
        t = msg["type"]
        if t == "kv-write":
            kv[msg["key"]] = msg["value"]
            return {"code": "SUCCESS", "index": 1, "term": 1}
        if t == "kv-read":
            return {
                "code": "SUCCESS",
                "found": msg["key"] in kv,
                "value": kv.get(msg["key"]),
                "readIndex": 1,
            }
        if t == "kv-cas":
            ok = kv.get(msg["key"]) == msg["old"] and msg["key"] in kv
            if ok:
                kv[msg["key"]] = msg["new"]
            return {"code": "SUCCESS", "ok": ok, "value": kv.get(msg["key"]), "index": 2, "term": 1}
        raise AssertionError(t)

    fc = FakeCluster(h)
    c = RegisterClient(connector=fc.connector).open(ctx, "n1")
    r = c.invoke(ctx, inv("read", key="k0"))
    assert (r.type, r.value, r.key) == ("ok", None, "k0")
    assert c.invoke(ctx, inv("write", 3, key="k0")).value == 3
    assert c.invoke(ctx, inv("read", key="k0")).value == 3
    bad = c.invoke(ctx, inv("cas", [1, 2], key="k0"))
    assert (bad.type, bad.error, bad.value) == ("fail", "CAS_MISMATCH", [1, 2])
    good = c.invoke(ctx, inv("cas", [3, 4], key="k0"))
    assert (good.type, good.value) == ("ok", [3, 4])
    # reads wait the connection's own timeout unless the client has a read timeout
    assert fc.read_timeouts == [None, None]
    quick = RegisterClient(timeout=2.0, read_timeout=0.5, connector=fc.connector).open(ctx, "n1")
    assert quick.invoke(ctx, inv("read", key="k0")).value == 4
    assert fc.read_timeouts == [None, None, 0.5]


def test_set_read_pages_through_committed_log(ctx):
    log = [[0, 1, "noop", None]] + [[i, 1, "append", {"set": i * 10}] for i in range(1, 26)]
    log.append([26, 1, "append", "not-a-set-entry"])

    def h(addr, msg):
        if msg["type"] != "get":
            raise AssertionError(msg)
        if msg["index"] is not None:
            return {"code": "SUCCESS", "committedIndex": 24, "entries": [log[msg["index"]]]}
        assert msg["to"] <= 24
        return {
            "code": "SUCCESS",
            "committedIndex": 24,
            "entries": log[msg["from"] : msg["to"] + 1],
        }

    fc = FakeCluster(h)
    c = SetClient(connector=fc.connector, chunk=10).open(ctx, "n1")
    done = c.invoke(ctx, inv("read"))
    assert done.type == "ok" and done.value == [i * 10 for i in range(1, 25)]
    assert len(fc.calls) == 1 + 3


def test_sampler_values_and_down_node(ctx):
    status = {
        "code": "SUCCESS",
        "role": "leader",
        "term": 4,
        "leader": "n2",
        "ledgerBeginIndex": 0,
        "ledgerEndIndex": 9,
        "committedIndex": 8,
        "appliedIndex": 8,
        "votedFor": "n2",
        "incarnation": 12345,
        "mode": "dledger",
        "bug": None,
    }

    def h(addr, msg):
        if addr == ADDRS["n3"]:
            raise ConnectionRefusedError("refused")
        return status

    fc = FakeCluster(h)
    c = SamplerClient(connector=fc.connector).open(ctx, "n2")
    ok = c.invoke(ctx, inv("sample", node="n2", process=1_000_001))
    assert ok.type == "ok" and tuple(ok.value) == SAMPLE_KEYS
    assert ok.value == {
        "role": "leader",
        "term": 4,
        "leader": "n2",
        "begin": 0,
        "end": 9,
        "committed": 8,
        "incarnation": 12345,
        "member": None,  # a status without id and config (an older node)
        "config": None,
    }
    down = c.invoke(ctx, inv("sample", node="n3", process=1_000_002))
    assert (down.type, down.node) == ("info", "n3")


def test_client_bug_is_contained(ctx):
    fc = FakeCluster(lambda a, m: {"code": "SUCCESS"})
    c = RegisterClient(connector=fc.connector).open(ctx, "n1")
    done = c.invoke(ctx, inv("write", 1, key=None))  # a register op without a key
    assert done.type == "info" and "client error" in done.error


def test_addresses(ctx, tmp_path):
    assert client_addr(ctx, "n2") == ("127.0.0.1", 7002)
    assert node_for_addr(ctx, ("127.0.0.1", 7003)) == "n3"
    assert node_for_addr(ctx, ("127.0.0.1", 1)) is None
    assert parse_addr("10.0.0.1:80") == ("10.0.0.1", 80)
    with pytest.raises(ConfigError, match="host:port"):
        parse_addr("nohost")
    (tmp_path / "bare").mkdir()
    bare = make_ctx(tmp_path / "bare", ADDRS, client_port=9100)
    bare.addresses.clear()
    assert client_addr(bare, "n1") == ("127.0.0.1", 9100)
    with pytest.raises(ConfigError, match="n9"):
        client_addr(bare, "n9")
    bare.history.close()


def test_the_reply_codes_are_the_nodes_own() -> None:
    """Issue 45: the client's FAIL/INFO codes were a copy of node_impl.client's; one place."""
    import node_impl.client as node
    import workloads.dledger_client as client

    assert client.FAIL_CODES is node.FAIL_CODES and client.INFO_CODES is node.INFO_CODES
    assert client.outcome("SUCCESS", read=False) == "ok"
    assert all(client.outcome(c, read=False) == "fail" for c in node.FAIL_CODES)
    assert all(client.outcome(c, read=False) == "info" for c in node.INFO_CODES)
