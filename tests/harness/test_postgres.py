"""PostgreSQL as a database under test: what each level is held to, then a real server on
a lab host (Debian's binaries) running transactions through the workload's client: write
skew commits at REPEATABLE READ and is refused at SERIALIZABLE, a kill loses no commit,
and teardown leaves nothing behind."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from checker.txn import check_txn
from harness.core.db import FailsOver
from harness.core.op import Op
from harness.core.options import parse_options
from harness.core.spec import RunContext
from harness.core.spec import TestSpec as Spec
from harness.dbs.postgres import (
    CLAIMS,
    PostgresDB,
    PostgresOptions,
    _bin_dir,
    lsn_int,
    postgresql_conf,
    standby_conf,
)
from harness.run.roles import checker_options
from workloads.txn import TxnAborted, TxnClient


def test_each_level_is_held_to_what_the_manual_promises() -> None:
    assert CLAIMS == {
        "read-committed": "read-committed",
        "repeatable-read": "snapshot-isolation",
        "serializable": "serializable",
    }
    o = parse_options(PostgresOptions, {"isolation": "repeatable-read"}, role="db postgres")
    assert o.checker_options() == {"txn": {"isolation": "snapshot-isolation", "durable": True}}
    o = parse_options(PostgresOptions, {"claim": "strict-serializable"}, role="db postgres")
    assert o.checker_options() == {"txn": {"isolation": "strict-serializable", "durable": True}}
    spec = Spec(name="t", nodes=("n1",), db="postgres", workload="list-append")
    opts = checker_options(spec)
    assert opts["checks"][0] == "txn" and opts["options"]["txn"]["isolation"] == "serializable"


def test_the_config_keeps_commits_durable() -> None:
    conf = postgresql_conf(addr="127.0.0.1", port=5433, socket_dir="/d")
    assert "fsync = on" in conf and "synchronous_commit = on" in conf
    assert "port = 5433" in conf and "listen_addresses = '127.0.0.1'" in conf


def test_a_synchronous_standby_keeps_synchronous_replication_once_promoted() -> None:
    """The primary's ALTER SYSTEM is not replicated: each standby carries the setting."""
    conf = standby_conf(addr="127.0.0.2", port=5432, socket_dir="/d", sync=True)
    assert "synchronous_standby_names = 'ANY 1 (*)'" in conf
    assert "listen_addresses = '127.0.0.2'" in conf
    assert "synchronous" not in standby_conf(addr="a", port=1, socket_dir="/d", sync=False)


def test_wal_positions_compare_as_integers() -> None:
    assert lsn_int("0/3000148") == 0x3000148
    assert lsn_int("1/0") > lsn_int("0/FFFFFFFF")
    assert lsn_int(None) == 0


def test_failover_needs_standbys_and_asynchronous_ones_declare_a_loss_window() -> None:
    """The deck's fault check and the failover nemesis both read the DB's ``declines``: with
    no standby there is nothing to promote, and a by-hand failover then kills nothing.
    Asynchronous standbys may be failed over: the checker is told the loss window they
    allow; synchronous ones declare none."""
    from nemesis.failover import FAILOVER, FailoverNemesis

    def db(**o: Any) -> PostgresDB:
        return PostgresDB(parse_options(PostgresOptions, o, role="db postgres"))

    assert isinstance(db(), FailsOver)
    assert "no standby" in (FAILOVER.why_not(db(), []) or "")
    assert FAILOVER.why_not(db(replicas=2), []) is None
    assert FAILOVER.why_not(db(replicas=2, sync=True), []) is None
    assert "asynchronous" in db(replicas=2).checker_options()["txn"]["loss_window"]
    assert "loss_window" not in db(replicas=2, sync=True).checker_options()["txn"]
    assert "loss_window" not in db().checker_options()["txn"]

    class NoTouch(PostgresDB):
        def statuses(self, ctx: Any) -> dict:
            raise AssertionError("a refused failover must not look at the cluster")

        def kill(self, ctx: Any, node: str) -> None:
            raise AssertionError("a refused failover must not kill")

    ctx: Any = type("Ctx", (), {"db": NoTouch(PostgresOptions())})()
    op = Op(index=0, time=0, type="invoke", process="nemesis", f="start-failover", value={})
    done = FailoverNemesis().invoke(ctx, op)
    assert "no standby" in str(done.error) and done.value["nodes"] == []


# --- a real server on the lab --------------------------------------------------------


@pytest.fixture(scope="module")
def server(lab: Any) -> Iterator[RunContext]:
    """One server for the module's tests (initdb is the slow part), torn down and checked."""
    if not os.path.exists(_bin_dir(None) + "/postgres") or shutil.which("setpriv") is None:
        pytest.skip("postgresql is not installed (scripts/setup.sh installs it)")
    from harness.control.ssh import SSHRemote

    hosts = {h.name: h for h in lab.hosts()[:2]}
    remotes = {n: SSHRemote(h) for n, h in hosts.items()}
    for r in remotes.values():
        r.connect()
    spec = Spec(name=f"pg-{os.getpid()}", nodes=tuple(hosts), db="postgres")
    db = PostgresDB(PostgresOptions(isolation="repeatable-read", ready_timeout=120))
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
    first = ctx.nodes[0]
    d = db.node_dir(ctx, first)
    try:
        for n in ctx.nodes:
            db.setup(ctx, n)
        db.wait_ready(ctx)
        yield ctx
    finally:
        for n in ctx.nodes:
            db.teardown(ctx, n)
        r = ctx.remotes[first]
        assert not r.run(f"test -e {d}", check=False).ok, f"{d} left behind"
        left = r.run("pgrep -ax postgres", check=False).stdout
        for rr in remotes.values():
            rr.close()
        assert not left.strip(), f"postgres left running: {left}"


def _session(ctx: RunContext, level: str) -> Any:
    from harness.dbs.postgres import PgSession

    addr = ctx.addresses["client"][ctx.nodes[1]]
    return PgSession(lambda: addr, "list-append", level, 5.0)


def test_write_skew_commits_at_repeatable_read_and_not_at_serializable(
    server: RunContext,
) -> None:
    ctx = server
    for level, keys in (("repeatable-read", (10, 11)), ("serializable", (20, 21))):
        a, b = _session(ctx, level), _session(ctx, level)
        try:
            # interleaved by hand: both read the other's key, then both append
            outcomes = []
            for s in (a, b):
                s.conn.execute(f"BEGIN ISOLATION LEVEL {s.level}")
            reads = [
                [list(r[0]) for r in s.conn.execute("SELECT v FROM lists WHERE k = %s", (k,))]
                for s, k in ((a, keys[1]), (b, keys[0]))
            ]
            assert reads == [[], []]
            for s, k in ((a, keys[0]), (b, keys[1])):
                s.conn.execute(
                    "INSERT INTO lists (k, v) VALUES (%s, ARRAY[1]::bigint[]) "
                    "ON CONFLICT (k) DO UPDATE SET v = lists.v || excluded.v",
                    (k,),
                )
            for s in (a, b):
                try:
                    s.conn.execute("COMMIT")
                    outcomes.append("ok")
                except Exception as e:  # noqa: BLE001
                    assert getattr(e, "sqlstate", None) == "40001", e
                    outcomes.append("fail")
        finally:
            a.close()
            b.close()
        if level == "repeatable-read":
            assert outcomes == ["ok", "ok"]
            # the same history, judged: a G2-item snapshot isolation allows
            ops = _history(keys, outcomes)
            r = check_txn(ops, {"isolation": "snapshot-isolation"})
            assert r["valid"] is True
            assert [n["kind"] for n in r["notes"]["allowed-anomaly"]] == ["G2-item"]
            assert check_txn(ops, {"isolation": "serializable"})["valid"] is False
        else:
            assert sorted(outcomes) == ["fail", "ok"], outcomes


def _history(keys: tuple[int, int], outcomes: list[str]) -> list[Op]:
    k0, k1 = keys
    t1 = [["r", k1, None], ["append", k0, 1]]
    t2 = [["r", k0, None], ["append", k1, 1]]
    t3 = [["r", k0, None], ["r", k1, None]]
    return [
        Op("invoke", 0, "txn", t1, index=0),
        Op("invoke", 1, "txn", t2, index=1),
        Op(outcomes[0], 0, "txn", [["r", k1, []], ["append", k0, 1]], index=2),
        Op(outcomes[1], 1, "txn", [["r", k0, []], ["append", k1, 1]], index=3),
        Op("invoke", 2, "txn", t3, index=4),
        Op("ok", 2, "txn", [["r", k0, [1]], ["r", k1, [1]]], index=5),
    ]


def test_transactions_through_the_client_survive_a_kill(server: RunContext) -> None:
    ctx, db = server, server.db
    assert isinstance(db, PostgresDB)
    c = TxnClient("list-append").open(ctx, ctx.nodes[1])
    try:
        for v in (1, 2, 3):
            done = c.invoke(ctx, Op("invoke", 0, "txn", [["append", 5, v], ["r", 5, None]]))
            assert done.type == "ok", done
            assert done.value[1] == ["r", 5, list(range(1, v + 1))]
        db.kill(ctx, ctx.nodes[0])
        down = c.invoke(ctx, Op("invoke", 0, "txn", [["append", 5, 4]]))
        assert down.type in ("fail", "info") and down.error
        db.start(ctx, ctx.nodes[0])
        db.wait_ready(ctx)
        again = c.invoke(ctx, Op("invoke", 1, "txn", [["r", 5, None]]))
        if again.type != "ok":  # the first try may meet the dead connection's replacement
            again = c.invoke(ctx, Op("invoke", 1, "txn", [["r", 5, None]]))
        assert again.type == "ok", again
        assert again.value[0][2][:3] == [1, 2, 3]  # nothing committed was lost
    finally:
        c.close(ctx)
    with pytest.raises(TxnAborted):
        s = _session(ctx, "serializable")
        try:
            s.transact([["r", 5, None], ["append", 5, "not a number"]])
        finally:
            s.close()
