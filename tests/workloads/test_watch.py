"""The watch workload: its generator's schedule, its options, and etcd's client against a
real etcd (the hosts' own, started here on free ports), judged by the subscription checker."""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from checker.subscription import check_subscription
from harness.core.errors import ConfigError
from harness.core.op import Op
from harness.core.workload import GenContext
from workloads.etcd_watch import PREFIX, EtcdWatchClient, prefix_end
from workloads.watch import FinalWatch, WatchGen, WatchOptions, workload


def _ctx(worker: int, rng: random.Random) -> GenContext:
    return GenContext(time_ns=0, process=worker, worker=worker, node="n1", rng=rng)


def test_subscriptions_resume_from_what_the_worker_was_delivered() -> None:
    gen = WatchGen(WatchOptions(publish_percent=0, resume_percent=100))
    rng = random.Random(1)
    first = gen.op(_ctx(0, rng))
    assert first.f == "subscribe"
    events = [{"stream": "s1", "value": "v1", "pos": 7}, {"stream": "s2", "value": "v2", "pos": 9}]
    done = first.complete("ok", {**first.value, "events": events})
    gen.update(_ctx(0, rng), done)
    again = gen.op(_ctx(0, rng))
    assert again.value == {"streams": first.value["streams"], "from": 9}
    other = gen.op(_ctx(1, rng))  # another worker has nothing to resume from
    assert other.value["from"] in (0, 6, 7, 8, 9)


def test_publishes_carry_unique_values_and_transactions() -> None:
    gen = WatchGen(WatchOptions(publish_percent=100, txn_percent=50, streams=3))
    rng = random.Random(2)
    ops = [gen.op(_ctx(0, rng)) for _ in range(200)]
    values = [e["value"] for o in ops for e in o.value["events"]]
    assert len(values) == len(set(values))
    sizes = {len(o.value["events"]) for o in ops}
    assert 1 in sizes and max(sizes) >= 2
    for o in ops:  # one transaction touches a stream once
        streams = [e["stream"] for e in o.value["events"]]
        assert len(streams) == len(set(streams))


def test_final_reads_are_a_snapshot_then_a_subscription_from_the_start() -> None:
    fin = FinalWatch("n2", attempts=2)
    rng = random.Random(3)
    snap = fin.op(_ctx(5, rng))
    assert (snap.f, snap.node) == ("snapshot", "n2")
    fin.update(_ctx(5, rng), snap.complete("fail", snap.value))
    retry = fin.op(_ctx(5, rng))
    assert retry.f == "snapshot"
    fin.update(_ctx(5, rng), retry.complete("fail", retry.value))  # gave up after 2
    sub = fin.op(_ctx(5, rng))
    assert sub.f == "subscribe" and sub.value == {"streams": None, "from": 0, "final": True}
    fin.update(_ctx(5, rng), sub.complete("ok", {**sub.value, "events": []}))
    assert fin.op(_ctx(5, rng)) is None


def test_the_workload_declares_its_clients_promises_to_the_checker() -> None:
    wl = workload({"streams": "3"})
    assert wl.checker["checks"] == ["subscription"]
    assert wl.checker["options"]["subscription"]["scope"] == "subscription"
    with pytest.raises(ConfigError, match="client"):
        workload({"client": "no_such_module:Factory"})
    with pytest.raises(ConfigError, match="client"):
        workload({"client": "nonsense"})
    with pytest.raises(ConfigError, match="stream"):
        workload({"strams": 3})


def test_prefix_end_covers_the_prefix() -> None:
    assert prefix_end("/a/") == "/a0"
    assert PREFIX.endswith("/")


# a real etcd ------------------------------------------------------------------------------


@pytest.mark.integration
def test_etcd_watches_judged_valid_and_a_dropped_event_is_a_gap(etcd: tuple[str, int]) -> None:
    """Four workers publish and subscribe against a real etcd; the history is valid, every
    subscription started where it was asked, and the same history with one delivery
    removed is a gap (the checker sees what the client recorded, not a model of etcd)."""
    ctx: Any = SimpleNamespace(
        addresses={"client": {"n1": etcd}}, spec=SimpleNamespace(client_timeout=5.0)
    )
    client = EtcdWatchClient(timeout=5.0, watch_s=0.3).open(ctx, "n1")
    gen = WatchGen(WatchOptions(streams=3))
    ops: list[Op] = []
    lock = threading.Lock()

    def record(op: Op) -> Op:
        with lock:
            op = op.replace(index=len(ops))
            ops.append(op)
            return op

    def worker(w: int) -> None:
        rng = random.Random(w)
        for _ in range(12):
            with lock:
                inv = gen.op(_ctx(w, rng))
            comp = record(client.invoke(ctx, record(inv)))
            with lock:
                gen.update(_ctx(w, rng), comp)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for f, value in (("snapshot", {"final": True}), ("subscribe", {"streams": None, "from": 0})):
        record(client.invoke(ctx, record(Op("invoke", 99, f, {**value, "final": True}))))
    final = ops[-1]
    assert final.type == "ok" and final.value["events"], final
    pubs = [o for o in ops if o.f == "publish" and o.type == "ok"]
    assert pubs and all(o.value["events"][0]["pos"] >= 2 for o in pubs)
    r = check_subscription(ops)
    assert r["valid"] is True, r["anomalies"]
    assert r["stats"]["deliveries"] >= len(pubs)
    # drop one delivery that is not the final subscription's last
    evs = final.value["events"]
    cut = final.replace(value={**final.value, "events": evs[:0] + evs[1:]})
    if len(evs) >= 2 and evs[0]["pos"] != evs[1]["pos"]:
        r = check_subscription([*ops[:-1], cut])
        assert "watch-gap" in r["anomalies"], r["anomalies"]
