"""etcd and Redis as databases under test: pure helpers, then real clusters on the lab.

The lab tests start Debian's real binaries on three lab hosts, run operations
through the workload clients, kill the leader/primary and watch the cluster
recover, then tear down and check that no process and no directory remains.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from harness.core.history import Op
from harness.core.spec import RunContext
from harness.core.spec import TestSpec as Spec
from harness.dbs.etcd import EtcdDB, _is_leader, member_urls
from harness.dbs.redis import RedisDB, redis_conf, sentinel_conf
from workloads.etcd import EtcdError, EtcdRegisterClient
from workloads.etcd import classify as etcd_classify
from workloads.redis import RedisClient, RespError, encode_command, parse_reply
from workloads.redis import classify as redis_classify

# --- pure helpers -----------------------------------------------------------------


def _reader(data: bytes) -> tuple[Callable[[], bytes], Callable[[int], bytes]]:
    import io

    buf = io.BytesIO(data)
    return buf.readline, buf.read


def test_resp_encodes_commands_as_bulk_arrays() -> None:
    assert encode_command("SET", "k", 3) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n3\r\n"


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"+OK\r\n", "OK"),
        (b":42\r\n", 42),
        (b"$-1\r\n", None),
        (b"$5\r\nhe\r\nl\r\n", "he\r\nl"),
        (b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", ["a", [1]]),
        (b"*-1\r\n", None),
    ],
)
def test_resp_parses_every_reply_kind(raw: bytes, expected: Any) -> None:
    assert parse_reply(*_reader(raw)) == expected


def test_resp_error_reply_is_a_value_and_truncation_is_a_connection_error() -> None:
    err = parse_reply(*_reader(b"-READONLY You can't write\r\n"))
    assert isinstance(err, RespError) and "READONLY" in str(err)
    with pytest.raises(ConnectionError):
        parse_reply(*_reader(b"$5\r\nab"))


def test_outcomes_fail_only_when_nothing_can_have_happened() -> None:
    assert redis_classify("write", RespError("READONLY")) == "fail"
    assert redis_classify("write", ConnectionRefusedError()) == "fail"
    assert redis_classify("cas", TimeoutError()) == "info"
    assert redis_classify("read", TimeoutError()) == "fail"
    assert etcd_classify("write", EtcdError("etcdserver: request timed out", 14, 503)) == "info"
    assert etcd_classify("write", EtcdError("key is not provided", 3, 400)) == "fail"
    assert etcd_classify("cas", ConnectionRefusedError()) == "fail"
    assert etcd_classify("read", TimeoutError()) == "fail"


def test_member_urls_spread_ports_only_when_addresses_repeat() -> None:
    assert member_urls({"a": "h1", "b": "h2"}, 2380, 2379) == {
        "a": ("http://h1:2380", "http://h1:2379"),
        "b": ("http://h2:2380", "http://h2:2379"),
    }
    assert member_urls({"a": "h", "b": "h"}, 2380, 2379)["b"] == ("http://h:2390", "http://h:2389")


def test_leader_is_the_member_whose_id_is_the_leader_id() -> None:
    assert _is_leader({"header": {"member_id": "7"}, "leader": "7"})
    assert not _is_leader({"header": {"member_id": "7"}, "leader": "8"})
    assert not _is_leader(None)


def test_redis_configs_name_the_primary_and_a_majority_quorum() -> None:
    assert "replicaof" not in redis_conf(addr="a", port=1, data_dir="/d", primary=None)
    assert "replicaof p 6379\n" in redis_conf(addr="a", port=1, data_dir="/d", primary=("p", 6379))
    s = sentinel_conf(
        addr="a",
        port=2,
        work_dir="/w",
        primary=("p", 6379),
        quorum=2,
        down_after_ms=2000,
        failover_timeout_ms=6000,
    )
    assert "sentinel monitor splitbrain p 6379 2\n" in s
    assert "down-after-milliseconds splitbrain 2000" in s


# --- real clusters on the lab -----------------------------------------------------


def _ctx(lab: Any, remotes: dict, db: Any, name: str) -> RunContext:
    hosts = {h.name: h for h in lab.hosts()[:3]}
    spec = Spec(name=f"{name}-{os.getpid()}", nodes=tuple(hosts), db=name)
    ctx = RunContext(
        spec=spec,
        hosts=hosts,
        remotes={n: remotes[n] for n in hosts},
        db=db,
        history=None,
        rng=random.Random(0),
        store_dir="/nonexistent",
    )  # type: ignore[arg-type]
    ctx.addresses.update(db.addresses(ctx))
    return ctx


@pytest.fixture
def running(request: pytest.FixtureRequest, lab: Any, remotes: dict) -> Iterator[RunContext]:
    """The DB named by the test's parameter, set up on 3 hosts, torn down whatever happens."""
    name = request.param
    binary = {"etcd": "etcd", "redis": "redis-server"}[name]
    if shutil.which(binary) is None:
        pytest.skip(
            f"{binary} is not installed (apt-get install "
            f"{'etcd-server etcd-client' if name == 'etcd' else 'redis-server'}; "
            f"scripts/setup.sh installs it)"
        )
    db = EtcdDB(ready_timeout=20) if name == "etcd" else RedisDB(ready_timeout=20)
    ctx = _ctx(lab, remotes, db, name)
    try:
        with ThreadPoolExecutor(3) as ex:
            list(ex.map(lambda n: db.setup(ctx, n), ctx.nodes))
        db.wait_ready(ctx)
        yield ctx
    finally:
        dirs = {n: db.node_dir(ctx, n) for n in ctx.nodes}
        for n in ctx.nodes:
            db.teardown(ctx, n)
        for n, d in dirs.items():
            r = ctx.remotes[n]
            assert not r.run(f"test -e {d}", check=False).ok, f"{d} left behind"
            # Each lab host has its own PID namespace: any such process is ours.
            left = r.run(f"pgrep -ax {binary}", check=False).stdout
            assert not left.strip(), f"{binary} left running on {n}: {left}"


def _op(f: str, value: Any, node: str, key: str = "k") -> Op:
    return Op(type="invoke", process=0, f=f, value=value, key=key, node=node)


def _until(
    pred: Callable[[], Any], timeout: float, what: str, explain: Callable[[], str] = str
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{explain()}")


def _log_tails(ctx: RunContext, db: Any, index: int, lines: int = 40) -> str:
    """The ends of one log file per node, so a timed-out wait says what the DB was doing."""
    out = []
    for n in ctx.nodes:
        path = db.log_files(ctx, n)[index]
        got = ctx.remotes[n].run(f"tail -n {lines} {path}", check=False).stdout
        out.append(f"--- {n}: {path}\n{got}")
    return "\n".join(out)


@pytest.mark.slow
@pytest.mark.parametrize("running", ["etcd"], indirect=True)
def test_etcd_serves_registers_and_survives_a_leader_kill(running: RunContext) -> None:
    ctx, db = running, running.db
    assert isinstance(db, EtcdDB)
    c = EtcdRegisterClient(timeout=3).open(ctx, "n1")
    a, b, lead_check = ctx.nodes
    assert c.invoke(ctx, _op("read", None, a)).value is None
    assert c.invoke(ctx, _op("write", 3, b)).type == "ok"
    assert c.invoke(ctx, _op("cas", [3, 4], lead_check)).type == "ok"
    mismatch = c.invoke(ctx, _op("cas", [3, 1], a))
    assert (mismatch.type, mismatch.error) == ("fail", "CAS_MISMATCH")
    assert {c.invoke(ctx, _op("read", None, n)).value for n in ctx.nodes} == {4}

    [leader] = db.primaries(ctx)
    db.kill(ctx, leader)
    others = [n for n in ctx.nodes if n != leader]
    _until(lambda: db.primaries(ctx), 15, "a new etcd leader")
    assert db.primaries(ctx)[0] in others
    down = c.invoke(ctx, _op("read", None, leader))
    assert down.type == "fail"
    assert c.invoke(ctx, _op("write", 5, others[0])).type == "ok"

    db.start(ctx, leader)
    # The restarted member catches up from its data directory and the leader's log.
    _until(
        lambda: c.invoke(ctx, _op("read", None, leader)).value == 5,
        15,
        "the restarted member to read 5",
    )
    assert len(db.primaries(ctx)) == 1
    assert db.log_files(ctx, leader)[0].endswith("etcd.log")


@pytest.mark.slow
@pytest.mark.parametrize("running", ["redis"], indirect=True)
def test_redis_fails_over_to_a_replica_and_rejoins_the_old_primary(running: RunContext) -> None:
    ctx, db = running, running.db
    assert isinstance(db, RedisDB)
    c = RedisClient(timeout=2).open(ctx, "n1")
    first = ctx.nodes[0]
    assert db.primaries(ctx) == [first]
    # Any node's client reaches the primary through its own Sentinel.
    w = c.invoke(ctx, _op("write", 3, ctx.nodes[2]))
    assert (w.type, w.node) == ("ok", first)
    assert c.invoke(ctx, _op("cas", [3, 4], ctx.nodes[1])).type == "ok"
    assert c.invoke(ctx, _op("read", None, ctx.nodes[1])).value == 4

    # Sentinels find each other through hello messages every 2 s; a kill before they
    # have, and failover needs more time to reach its quorum. Wait for the mesh first.
    from harness.dbs.redis import _call

    def mesh() -> bool:
        for n in ctx.nodes:
            peers = _call(
                (ctx.hosts[n].address, db.sentinel_port), "SENTINEL", "sentinels", "splitbrain"
            )
            if not isinstance(peers, list) or len(peers) < len(ctx.nodes) - 1:
                return False
        return True

    _until(mesh, 30, "every Sentinel to know the others")
    # A failover attempt that fails (split Sentinel votes on a loaded machine) is
    # retried after twice failover-timeout (12 s): 90 s allows several.
    db.kill(ctx, first)
    new = _until(
        lambda: [p for p in db.primaries(ctx) if p != first],
        90,
        "Sentinel to promote a replica",
        explain=lambda: _log_tails(ctx, db, 1),
    )[0]
    ok = _until(
        lambda: (lambda o: o if o.type == "ok" else None)(c.invoke(ctx, _op("write", 5, first))),
        15,
        "a write through the new primary",
    )
    assert ok.node == new

    db.start(ctx, first)
    _until(
        lambda: (db.view(ctx)["roles"][first] or [""])[0] == "slave",
        25,
        "the old primary to come back as a replica",
    )
    assert db.primaries(ctx) == [new]
    assert c.invoke(ctx, _op("read", None, first)).value == 5
    s = RedisClient(kind="set").open(ctx, first)
    assert s.invoke(ctx, Op(type="invoke", process=1, f="add", value=7, node=first)).type == "ok"
    assert s.invoke(ctx, Op(type="invoke", process=1, f="read", value=None, node=first)).value == [
        7
    ]
