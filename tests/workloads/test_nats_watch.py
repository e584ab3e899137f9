"""The watch workload's NATS JetStream client: its value and position mapping (pure), one
real nats-server with JetStream (publishes, an atomic batch, subscriptions from a stream
sequence, the final snapshot), and that history with a gap, a duplicate and a reordering
planted, found by the subscription checker on both engines."""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from checker.planted_subscription import Pub as PlantedPub
from checker.planted_subscription import Sub as PlantedSub
from checker.planted_subscription import World, history, plant
from checker.subscription import check_subscription
from harness.core.op import Op
from harness.core.workload import GenContext
from workloads.nats_watch import (
    PROMISES,
    NatsWatchClient,
    _ack_parts,
    atomic_supported,
    batch_positions,
    event_of,
    snapshot_value,
    start_sequence,
    stream_of,
    subject_of,
)
from workloads.watch import WatchGen, WatchOptions, workload

from .conftest import plant_each, spark_subscription

# pure ------------------------------------------------------------------------------------


def test_subjects_and_streams_map_both_ways() -> None:
    assert subject_of("sbwatch", "s2") == "sbwatch.s2"
    assert stream_of("sbwatch", "sbwatch.s2") == "s2"
    assert stream_of("sbwatch", "other.s2") == "other.s2"
    assert event_of("p", "p.s0", b"v7", 12) == {"stream": "s0", "value": "v7", "pos": 12}
    assert event_of("p", "p.s0", b"\xff", 3)["value"] == repr(b"\xff")


def test_a_subscription_starts_after_its_position() -> None:
    assert start_sequence(0) is None  # everything
    assert start_sequence(9) == 10


def test_an_atomic_batch_takes_the_sequences_before_its_commit() -> None:
    evs = [{"stream": "s0", "value": "v1"}, {"stream": "s2", "value": "v2"}]
    placed = batch_positions(evs, {"stream": "S", "seq": 11, "batch": "b", "count": 2})
    assert [e["pos"] for e in placed] == [10, 11]
    assert batch_positions(evs[:1], {"stream": "S", "seq": 4})[0]["pos"] == 4
    with pytest.raises(ValueError, match="counts 1"):
        batch_positions(evs, {"seq": 11, "count": 1})
    with pytest.raises(ValueError, match="sequence"):
        batch_positions(evs, {"count": 2})


def test_atomic_batches_come_with_2_12() -> None:
    assert atomic_supported("2.15.2") and atomic_supported("v2.12.0-RC.1")
    assert not atomic_supported("2.9.10") and not atomic_supported("2.11.10")
    assert not atomic_supported(None) and not atomic_supported("nonsense")


def test_reply_subjects_give_stream_and_consumer_sequences() -> None:
    assert _ack_parts("$JS.ACK.S.c.1.40.7.1700000000.3") == (40, 7, 3)
    assert _ack_parts("$JS.ACK.dom.ACCHASH.S.c.1.40.7.1700000000.3.tok") == (40, 7, 3)
    assert _ack_parts("_INBOX.x") is None


def test_the_snapshot_is_each_subjects_last_message() -> None:
    m = SimpleNamespace
    v = snapshot_value("p", 9, [("p.s0", m(seq=7, data=b"v5")), ("p.s1", m(seq=9, data=b"v9"))])
    assert v == {
        "pos": 9,
        "streams": {"s0": {"value": "v5", "pos": 7}, "s1": {"value": "v9", "pos": 9}},
    }


def test_the_builtin_nats_client_declares_jetstreams_promises() -> None:
    wl = workload({"client": "nats"})
    declared = wl.checker["options"]["subscription"]
    assert declared == dict(PROMISES)
    assert declared["scope"] == "stream" and declared["monotonic"] is False


# a real nats-server -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary() -> str | None:
    """The harness's cached build of the newest release if there is one, else Debian's."""
    from harness.dbs.gobuild import GO_ROOT

    built = sorted((GO_ROOT / "builds").glob("nats-server-*/lib/nats-server"))
    for b in built:
        manifest = b.parent.parent / "manifest.json"
        if not manifest.exists() or "v2.15" in manifest.read_text():
            return str(b)
    if built:
        return str(built[0])
    return shutil.which("nats-server") or (
        "/usr/sbin/nats-server" if Path("/usr/sbin/nats-server").exists() else None
    )


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    pytest.importorskip("nats")
    binary = _binary()
    if binary is None:
        pytest.skip("no nats-server: neither a harness build nor Debian's package")
    tmp = tmp_path_factory.mktemp("nats")
    port = _free_port()
    log = (tmp / "nats.log").open("wb")
    proc = subprocess.Popen(
        [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp / "store")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"nats-server did not start: {(tmp / 'nats.log').read_text()}")
                time.sleep(0.1)
        yield "127.0.0.1", port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _ctx(addr: tuple[str, int]) -> Any:
    return SimpleNamespace(
        addresses={"client": {"n1": addr}}, spec=SimpleNamespace(client_timeout=5.0), nodes=["n1"]
    )


def _gen_ctx(worker: int, rng: random.Random) -> GenContext:
    return GenContext(time_ns=0, process=worker, worker=worker, node="n1", rng=rng)


def _real_history(addr: tuple[str, int], stream: str) -> tuple[list[Op], NatsWatchClient]:
    """Three workers publishing and subscribing through the watch generator, then the
    final snapshot and subscription from 0."""
    ctx = _ctx(addr)
    proto = NatsWatchClient(stream=stream, prefix=stream.lower(), watch_s=0.3, timeout=5.0)
    ops: list[Op] = []
    lock = threading.Lock()
    gen = WatchGen(WatchOptions(streams=3), scope="stream")

    def record(op: Op) -> Op:
        with lock:
            op = op.replace(index=len(ops))
            ops.append(op)
            return op

    clients = [proto.open(ctx, "n1") for _ in range(3)]
    for c in clients:
        c.setup(ctx)

    def worker(w: int) -> None:
        rng = random.Random(w)
        for _ in range(10):
            with lock:
                inv = gen.op(_gen_ctx(w, rng))
            comp = record(clients[w].invoke(ctx, record(inv)))
            with lock:
                gen.update(_gen_ctx(w, rng), comp)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for f, value in (("snapshot", {}), ("subscribe", {"streams": None, "from": 0})):
        record(clients[0].invoke(ctx, record(Op("invoke", 99, f, {**value, "final": True}))))
    for c in clients:
        c.close(ctx)
    return ops, clients[0]


@pytest.fixture(scope="module")
def real_ops(nats_server: tuple[str, int]) -> tuple[list[Op], NatsWatchClient]:
    return _real_history(nats_server, "SBWT")


@pytest.mark.integration
def test_a_real_server_delivers_what_follows_the_position(
    nats_server: tuple[str, int], real_ops: tuple[list[Op], NatsWatchClient]
) -> None:
    """Publishes are acked at stream sequences; a subscription from R delivers exactly the
    acked events after R in order; the final subscription delivers every acked event and
    the snapshot names each subject's last one; the checker finds it valid."""
    ops, client = real_ops
    pubs = [o for o in ops if o.f == "publish" and o.type == "ok"]
    assert pubs, "no publish was acked"
    acked = {e["pos"]: e for o in pubs for e in o.value["events"]}
    if client.atomic:  # 2.12+: transactions went out as atomic batches
        txns = [o for o in pubs if len(o.value["events"]) > 1]
        for o in txns:
            ps = [e["pos"] for e in o.value["events"]]
            assert ps == list(range(ps[0], ps[0] + len(ps)))
    final = ops[-1]
    assert final.type == "ok" and final.value["events"], final
    delivered = {e["pos"]: e for e in final.value["events"]}
    for pos, e in acked.items():
        assert delivered[pos]["value"] == e["value"] and delivered[pos]["stream"] == e["stream"]
    assert [e["pos"] for e in final.value["events"]] == sorted(delivered)
    for o in ops:
        if o.f == "subscribe" and o.type == "ok" and not o.value.get("final"):
            start = o.value["from"]
            assert all(e["pos"] > start for e in o.value["events"]), o.value
    snap = next(o for o in ops if o.f == "snapshot" and o.type == "ok")
    for st, last in snap.value["streams"].items():
        top = max(p for p, e in delivered.items() if e["stream"] == st)
        assert last == {"value": delivered[top]["value"], "pos": top}
    r = check_subscription(ops, dict(PROMISES))
    assert r["valid"] is True, r["anomalies"]


@pytest.mark.integration
def test_a_subscription_from_a_sequence_sees_only_later_messages(
    nats_server: tuple[str, int],
) -> None:
    ctx = _ctx(nats_server)
    c = NatsWatchClient(stream="SBWT2", prefix="sbwt2", watch_s=0.3, timeout=5.0).open(ctx, "n1")
    c.setup(ctx)
    try:
        seqs = []
        for i in range(5):
            inv = Op(
                "invoke", 0, "publish", {"events": [{"stream": f"s{i % 2}", "value": f"x{i}"}]}
            )
            done = c.invoke(ctx, inv)
            assert done.type == "ok", done
            seqs.append(done.value["events"][0]["pos"])
        assert seqs == sorted(seqs) and len(set(seqs)) == 5
        sub = c.invoke(ctx, Op("invoke", 0, "subscribe", {"streams": ["s0"], "from": seqs[1]}))
        assert sub.type == "ok"
        assert [(e["value"], e["pos"]) for e in sub.value["events"]] == [
            ("x2", seqs[2]),
            ("x4", seqs[4]),
        ]
        two = Op(
            "invoke",
            0,
            "publish",
            {"events": [{"stream": "s0", "value": "t1"}, {"stream": "s1", "value": "t2"}]},
        )
        done = c.invoke(ctx, two)
        if c.atomic:
            assert done.type == "ok", done
            assert [e["pos"] for e in done.value["events"]] == [seqs[4] + 1, seqs[4] + 2]
        else:
            assert done.type == "fail" and "atomic batch" in (done.error or "")
    finally:
        c.close(ctx)


# planted anomalies on the real history ----------------------------------------------------


def _world(ops: list[Op]) -> World:
    """The real history as a planted-subscription world (publishes, subscriptions with
    their deliveries, the snapshot), so its helpers can plant into it."""
    inv: dict[Any, Op] = {}
    pubs: list[PlantedPub] = []
    subs: list[PlantedSub] = []
    snap: dict[str, Any] | None = None
    of_pub: dict[str, int] = {}
    for o in ops:
        if o.type == "invoke":
            inv[o.process] = o
            continue
        start = inv.pop(o.process)
        if o.f == "publish":
            evs = o.value["events"] if o.type == "ok" else start.value["events"]
            pubs.append(PlantedPub([dict(e) for e in evs], o.type, o.type == "ok"))
            of_pub.update({e["value"]: len(pubs) for e in evs})
        elif o.f == "subscribe" and o.type == "ok":
            # one batch per publish, so that the helpers know a transaction's events
            evs = [{**e, "batch": of_pub.get(e["value"], -5)} for e in o.value["events"]]
            subs.append(
                PlantedSub(
                    start.value["streams"],
                    start.value["from"],
                    evs,
                    final=bool(start.value.get("final")),
                )
            )
        elif o.f == "snapshot" and o.type == "ok":
            snap = json.loads(json.dumps(o.value))
    return World("stream", pubs, subs, snap)


KINDS = ("watch-gap", "watch-duplicate", "watch-unordered")


def _planted(ops: list[Op]) -> list[tuple[str, list[Op]]]:
    out = []
    for kind in KINDS:
        w = _world(ops)
        assert plant(w, kind, random.Random(1)), f"no place to plant {kind} in the real history"
        out.append((kind, history(w)))
    return out


@pytest.mark.integration
def test_planted_gap_duplicate_and_reordering_are_found(
    real_ops: tuple[list[Op], NatsWatchClient],
) -> None:
    ops, _ = real_ops
    assert check_subscription(history(_world(ops)), dict(PROMISES))["valid"] is True
    for kind, planted in _planted(ops):
        r = check_subscription(planted, dict(PROMISES))
        assert r["valid"] is False and set(r["anomalies"]) == {kind}, (kind, r["anomalies"])


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_spark_agrees_on_the_planted_real_history(
    real_ops: tuple[list[Op], NatsWatchClient],
) -> None:
    """Result for result, on the real history with each kind planted (local[1], the
    DataFrame jobs forced with ``driver_records=0``: about forty stages, 10 minutes under
    a load average of 30, hence slow)."""
    pytest.importorskip("pyspark")
    ops, _ = real_ops
    planted = plant_each(_world(ops), KINDS)
    local = check_subscription(planted, dict(PROMISES), cap=3)
    assert set(local["anomalies"]) == set(KINDS), local["anomalies"]
    assert spark_subscription(planted, PROMISES) == local
