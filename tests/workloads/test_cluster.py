"""Workload clients against a real 3-node reference cluster on loopback.

One cluster for the module; the tests that kill a node come last.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from harness.core.history import Op
from harness.core.workload import PENDING, GenContext
from workloads import get_workload
from workloads.append import AppendClient, final_log_reads
from workloads.register import RegisterClient
from workloads.sampler import SAMPLE_KEYS, SamplerClient

from .conftest import make_ctx

NODE_MAIN = Path(__file__).resolve().parents[2] / "node_impl" / "__main__.py"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not NODE_MAIN.exists(),
        reason="the reference node (node_impl/__main__.py) is not written yet",
    ),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from node_impl.local_cluster import LocalCluster

    c = LocalCluster(3, tmp_path_factory.mktemp("cluster"))
    try:
        c.start_all()
        c.wait_for_leader(20)
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def ctx(cluster, tmp_path_factory):
    c = make_ctx(tmp_path_factory.mktemp("ctx"), {n: cluster.client_addr(n) for n in cluster.nodes})
    yield c
    c.history.close()


def inv(f, value=None, *, key=None, node, process=0):
    return Op(type="invoke", process=process, f=f, value=value, key=key, node=node)


def leader_and_follower(cluster):
    leader = cluster.wait_for_leader(20)
    return leader, next(n for n in cluster.nodes if n != leader)


def run_final(gen, clients, ctx, nodes, process_base=100):
    """A minimal sequential runner: ask, invoke, update until every worker is done."""
    history = []
    procs = list(range(process_base, process_base + len(clients)))
    done = set()
    rng = random.Random(0)
    for _ in range(1000):
        if len(done) == len(clients):
            return history
        for w, client in enumerate(clients):
            if w in done:
                continue
            g = GenContext(
                time_ns=time.monotonic_ns(),
                process=procs[w],
                worker=w,
                node=nodes[w % len(nodes)],
                rng=rng,
                nodes=list(nodes),
            )
            op = gen.op(g)
            if op is None:
                done.add(w)
                continue
            if op is PENDING:
                continue
            comp = client.invoke(ctx, op)
            history += [op, comp]
            gen.update(g, comp)
            if comp.type == "info":
                procs[w] += len(clients)
    raise AssertionError("final generator did not finish")


def test_appends_ok_and_redirect_followed(cluster, ctx):
    leader, follower = leader_and_follower(cluster)
    via_leader = AppendClient().open(ctx, leader)
    via_follower = AppendClient().open(ctx, follower)
    try:
        a = via_leader.invoke(ctx, inv("append", {"payload": "t-0"}, node=leader))
        b = via_follower.invoke(ctx, inv("append", {"payload": "t-1"}, node=follower))
        for done, payload in ((a, "t-0"), (b, "t-1")):
            assert done.type == "ok", done
            assert done.node == leader
            assert done.value["payload"] == payload
            assert isinstance(done.value["index"], int) and done.value["index"] >= 1
            assert isinstance(done.value["term"], int) and done.value["term"] >= 1
        assert b.value["index"] > a.value["index"]
        r = via_follower.invoke(
            ctx, inv("read", {"from": a.value["index"], "to": b.value["index"]}, node=follower)
        )
        assert r.type == "ok" and r.node == leader
        got = {e[0]: e[2] for e in r.value["entries"]}
        assert got[a.value["index"]] == "t-0" and got[b.value["index"]] == "t-1"
        assert r.value["committed"] >= b.value["index"]
    finally:
        via_leader.close(ctx)
        via_follower.close(ctx)


def test_register_ops_on_real_kv(cluster, ctx):
    _, follower = leader_and_follower(cluster)
    c = RegisterClient().open(ctx, follower)
    try:
        assert c.invoke(ctx, inv("read", key="rk", node=follower)).value is None
        assert c.invoke(ctx, inv("write", 2, key="rk", node=follower)).type == "ok"
        assert c.invoke(ctx, inv("read", key="rk", node=follower)).value == 2
        bad = c.invoke(ctx, inv("cas", [1, 3], key="rk", node=follower))
        assert (bad.type, bad.error) == ("fail", "CAS_MISMATCH")
        good = c.invoke(ctx, inv("cas", [2, 3], key="rk", node=follower))
        assert (good.type, good.value) == ("ok", [2, 3])
        assert c.invoke(ctx, inv("read", key="rk", node=follower)).value == 3
    finally:
        c.close(ctx)


def test_sampler_reports_every_node(cluster, ctx):
    w = get_workload("append", {})
    extras = w.extra_workers(cluster.nodes)
    assert [e.process_base for e in extras] == [1_000_000, 1_000_001, 1_000_002]
    leaders = set()
    for e in extras:
        client = e.client.open(ctx, e.node)
        try:
            g = GenContext(
                time_ns=0,
                process=e.process_base,
                worker=0,
                node=e.node,
                rng=random.Random(0),
                nodes=list(cluster.nodes),
            )
            op = e.generator.op(g)
            assert op.node == e.node and op.f == "sample" and op.process == e.process_base
            done = client.invoke(ctx, op)
        finally:
            client.close(ctx)
        assert done.type == "ok" and tuple(done.value) == SAMPLE_KEYS
        assert done.node == e.node
        assert done.value["role"] in ("leader", "follower", "candidate")
        assert done.value["end"] >= done.value["committed"] >= -1
        assert done.value["begin"] in (-1, 0) and isinstance(done.value["incarnation"], int)
        if done.value["role"] == "leader":
            assert done.value["committed"] >= 0
        leaders.add(done.value["leader"])
    # Under load an election may be in flight while we sample: some node may not know a
    # leader yet, but the one the cluster settles on must have been reported.
    assert cluster.wait_for_leader(20) in leaders


def wait_replicated(cluster, nodes, index, timeout=10.0):
    cluster.wait_until(
        lambda: all((cluster.status(n) or {}).get("ledgerEndIndex", -1) >= index for n in nodes),
        timeout,
        f"ledgerEnd >= {index} on {nodes}",
    )


def test_final_reads_cover_every_node(cluster, ctx):
    leader, _ = leader_and_follower(cluster)
    c = AppendClient().open(ctx, leader)
    acked = []
    try:
        for i in range(30):
            done = c.invoke(ctx, inv("append", {"payload": f"f-{i}"}, node=leader))
            assert done.type == "ok"
            acked.append(done.value)
    finally:
        c.close(ctx)
    wait_replicated(cluster, cluster.nodes, acked[-1]["index"])
    clients = [AppendClient().open(ctx, n) for n in cluster.nodes]
    try:
        h = run_final(final_log_reads(chunk=16), clients, ctx, cluster.nodes)
    finally:
        for cl in clients:
            cl.close(ctx)
    for node in cluster.nodes:
        oks = [o for o in h if o.type == "ok" and o.node == node]
        assert oks, f"no final read from {node}"
        entries = {e[0]: (e[1], e[2]) for o in oks for e in o.value["entries"]}
        assert sorted(entries) == list(range(max(entries) + 1))  # gap-free from 0
        for a in acked:
            assert entries[a["index"]] == (a["term"], a["payload"])
        assert all(o.value["final"] and o.value["local"] for o in h if o.type == "invoke")


def drive(ctx, gen, client, node, worker, processes, lock, deadline, history):
    """One worker as the runner drives it: ask, record, invoke, record, update."""
    process = next(processes)
    c = client.open(ctx, node)
    try:
        while time.monotonic() < deadline:
            g = GenContext(
                time_ns=history.now(),
                process=process,
                worker=worker,
                node=node,
                rng=ctx.rng,
                nodes=list(ctx.nodes),
            )
            with lock:
                op = gen.op(g)
            if op is None:
                return
            if op is PENDING:
                time.sleep(0.005)
                continue
            op = history.append(op)
            comp = history.append(c.invoke(ctx, op))
            with lock:
                gen.update(g, comp)
            if comp.type == "info":
                process = next(processes)
    finally:
        c.close(ctx)


def test_mini_campaign_mixed(cluster, tmp_path):
    """The mixed workload through a runner-like driver: pool + samplers, then final reads."""
    import itertools
    import threading

    from harness.core.history import read_jsonl, validate_history

    ctx = make_ctx(tmp_path, {n: cluster.client_addr(n) for n in cluster.nodes}, sample_rate=20.0)
    cluster.wait_for_leader(20)
    w = get_workload("mixed", ctx.spec.options)
    lock = threading.Lock()
    conc = 3
    deadline = time.monotonic() + 2.0
    threads = [
        threading.Thread(
            target=drive,
            args=(
                ctx,
                w.generator,
                w.client,
                cluster.nodes[i % 3],
                i,
                itertools.count(i, conc),
                lock,
                deadline,
                ctx.history,
            ),
        )
        for i in range(conc)
    ]
    for i, ew in enumerate(w.extra_workers(cluster.nodes)):
        threads.append(
            threading.Thread(
                target=drive,
                args=(
                    ctx,
                    ew.generator,
                    ew.client,
                    ew.node,
                    100 + i,
                    itertools.count(ew.process_base, ew.process_stride),
                    threading.Lock(),
                    deadline,
                    ctx.history,
                ),
            )
        )
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    final = [
        threading.Thread(
            target=drive,
            args=(
                ctx,
                w.final_generator,
                w.client,
                cluster.nodes[i % 3],
                i,
                itertools.count(50 + i, conc),
                lock,
                time.monotonic() + 20,
                ctx.history,
            ),
        )
        for i in range(conc)
    ]
    for t in final:
        t.start()
    for t in final:
        t.join(30)
    ctx.history.close()
    h = read_jsonl(tmp_path / "history.jsonl")
    validate_history(h)
    oks = [o for o in h if o.type == "ok"]
    appends = [o for o in oks if o.f == "append"]
    assert len(appends) > 10
    assert any(o.key is not None for o in oks)  # register ops ran too
    samples = [o for o in oks if o.f == "sample"]
    assert {o.node for o in samples} == set(cluster.nodes)
    assert all(o.process >= 1_000_000 for o in h if o.f == "sample")
    finals = [o for o in oks if o.f == "read" and o.key is None and o.value.get("end") is not None]
    assert {o.node for o in finals} == set(cluster.nodes)
    leader = cluster.wait_for_leader(20)
    log = {e[0]: e for o in finals if o.node == leader for e in o.value["entries"]}
    for a in appends:
        assert log[a.value["index"]][1:] == [a.value["term"], a.value["payload"]]
    payloads = [e[2] for e in log.values() if isinstance(e[2], str)]
    assert len(payloads) == len(set(payloads))


def test_killed_node_append_info_read_fail(cluster, ctx):
    leader, victim = leader_and_follower(cluster)
    appends = AppendClient().open(ctx, victim)
    sampler = SamplerClient().open(ctx, victim)
    try:
        # open connections to the victim first, as a running worker would have (a read:
        # a followed redirect of a write would send the next writes straight to the leader)
        assert appends.invoke(ctx, inv("read", {"from": 0, "to": 0}, node=victim)).type == "ok"
        assert sampler.invoke(ctx, inv("sample", node=victim, process=1_000_001)).type == "ok"
        cluster.kill(victim)
        a = appends.invoke(ctx, inv("append", {"payload": "k-1"}, node=victim))
        assert a.type == "info" and a.error and a.node == victim
        r = appends.invoke(ctx, inv("read", {"from": 0, "to": 0}, node=victim))
        assert r.type == "fail" and r.error
        s = sampler.invoke(ctx, inv("sample", node=victim, process=1_000_001))
        assert s.type == "info" and s.node == victim
        # nothing listens any more: the request never left, so even an append is a fail
        fresh = AppendClient().open(ctx, victim)
        try:
            f = fresh.invoke(ctx, inv("append", {"payload": "k-2"}, node=victim))
            assert f.type == "fail" and "connect failed" in f.error
        finally:
            fresh.close(ctx)
    finally:
        appends.close(ctx)
        sampler.close(ctx)
    clients = [AppendClient().open(ctx, n) for n in cluster.nodes]
    try:
        h = run_final(final_log_reads(chunk=1000), clients, ctx, cluster.nodes)
    finally:
        for cl in clients:
            cl.close(ctx)
    assert [o.type for o in h if o.node == victim and o.type != "invoke"] == ["fail"] * 3
    assert {o.node for o in h if o.type == "ok"} == set(cluster.nodes) - {victim}


def test_writes_follow_the_leader_hint_reads_ask_their_node(cluster, ctx):
    for n in cluster.nodes:  # an earlier test may have killed one: two must stay up here
        if not cluster.is_running(n):
            cluster.start(n)
    cluster.wait_ready()
    leader, follower = leader_and_follower(cluster)
    # a follower just restarted may not know the leader yet (then it redirects nowhere)
    cluster.wait_until(
        lambda: (cluster.status(follower) or {}).get("leader") == leader,
        20,
        "follower knows leader",
    )
    c = AppendClient().open(ctx, follower)
    try:
        first = c.invoke(ctx, inv("append", {"payload": "h-0"}, node=follower))
        assert (first.type, first.node) == ("ok", leader)  # redirected once
        cluster.kill(follower)
        # the hint: the next write goes straight to the leader, the dead follower unasked
        second = c.invoke(ctx, inv("append", {"payload": "h-1"}, node=follower))
        assert (second.type, second.node) == ("ok", leader)
        # a read still asks the node it names, which is down
        r = c.invoke(ctx, inv("read", {"from": 0, "to": 0}, node=follower))
        assert r.type == "fail" and r.node == follower
    finally:
        c.close(ctx)
        cluster.start(follower)
