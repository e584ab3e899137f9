"""The watch workload's ZooKeeper client: its read-to-event translation (pure), one real
standalone ZooKeeper behind the harness's gateway (publishes, a multi at one zxid,
subscriptions by a persistent watch, the final snapshot), that history with a gap, a
duplicate and a reordering planted (the checker must find each alone: the gap only when
``no_gap`` is judged, which ZooKeeper does not promise), and on both engines."""

from __future__ import annotations

import json
import random
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
from workloads.watch import workload
from workloads.zk_watch import PROMISES, ZkWatchClient, events_of, publish_outcome

from .conftest import plant_each, spark_subscription

# pure ------------------------------------------------------------------------------------


def test_reads_become_events_after_the_start_each_state_once() -> None:
    reads: list[list[Any]] = [
        ["s0", "v1", 5, "initial"],  # at the start: the state resumed after
        ["s1", None, 3, "initial"],  # made by setup, never published
        ["s0", "v2", 9, "NodeDataChanged"],
        ["s0", "v2", 9, "NodeDataChanged"],  # a second notification read after both writes
        ["s1", "v3", 11, "NodeDataChanged"],
    ]
    events, collapsed = events_of(reads, 5)
    assert events == [
        {"stream": "s0", "value": "v2", "pos": 9},
        {"stream": "s1", "value": "v3", "pos": 11},
    ]
    assert collapsed == 2
    everything, _ = events_of(reads, 0)
    assert [e["pos"] for e in everything] == [5, 9, 11]


def test_a_read_that_goes_back_is_delivered_for_the_checker() -> None:
    """The client never hides a fall of one znode's mzxid: that is ZooKeeper's to answer
    for, and ``ordered`` judges it."""
    reads: list[list[Any]] = [["s0", "v4", 12, "initial"], ["s0", "v2", 9, "NodeDataChanged"]]
    events, _ = events_of(reads, 0)
    assert [e["pos"] for e in events] == [12, 9]
    ops = [
        Op("invoke", 0, "publish", {"events": [{"stream": "s0", "value": "v2"}]}, index=0),
        Op("ok", 0, "publish", {"events": [{"stream": "s0", "value": "v2", "pos": 9}]}, index=1),
        Op("invoke", 0, "publish", {"events": [{"stream": "s0", "value": "v4"}]}, index=2),
        Op("ok", 0, "publish", {"events": [{"stream": "s0", "value": "v4", "pos": 12}]}, index=3),
        Op("invoke", 1, "subscribe", {"streams": None, "from": 0}, index=4),
        Op("ok", 1, "subscribe", {"streams": None, "from": 0, "events": events}, index=5),
    ]
    r = check_subscription(ops, dict(PROMISES))
    assert set(r["anomalies"]) == {"watch-unordered"}


def test_publish_codes_fail_only_when_nothing_was_applied() -> None:
    assert publish_outcome("SUCCESS") == "ok"
    assert publish_outcome("LEADER_NOT_READY") == "fail"  # no session: nothing handed over
    assert publish_outcome("NONODE") == "fail"  # a multi refused whole
    assert publish_outcome("CONNECTIONLOSS") == "info"
    assert publish_outcome("OPERATIONTIMEOUT") == "info"
    assert publish_outcome("SESSIONEXPIRED") == "info"


def test_the_builtin_zookeeper_client_declares_only_what_zookeeper_promises() -> None:
    wl = workload({"client": "zookeeper"})
    declared = wl.checker["options"]["subscription"]
    assert declared == dict(PROMISES)
    assert declared["scope"] == "stream"
    assert declared["ordered"] is True and declared["final_state"] is True
    for never in ("no_gap", "resumable", "atomic", "monotonic", "no_duplicate"):
        assert declared[never] is False, never
    assert isinstance(wl.client, ZkWatchClient) and wl.client.multi_stream


# a real standalone ZooKeeper behind the gateway ---------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, within: float) -> None:
    deadline = time.monotonic() + within
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode}: {log.read_text()[-1500:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"port {port} not open: {log.read_text()[-1500:]}") from None
            time.sleep(0.3)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """One standalone ZooKeeper (the harness's build of the newest release: the first run
    fetches it from Maven Central) and the gateway in front of it; the gateway's address."""
    import shutil

    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("no java or mvn on this machine")
    from harness.dbs.zookeeper import factory

    lib = factory({}).program().lib
    d = tmp_path_factory.mktemp("zk")
    zk_port, gw_port = _free_port(), _free_port()
    (d / "data").mkdir()
    (d / "zoo.cfg").write_text(
        f"tickTime=500\ndataDir={d / 'data'}\nclientPort={zk_port}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\npreAllocSize=4096\n"
        "maxClientCnxns=0\n"
    )
    jvm = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    procs = []
    logs = []
    try:
        zlog = (d / "zk.log").open("wb")
        logs.append(zlog)
        zk = subprocess.Popen(  # noqa: S603 - the harness's own build
            [*jvm, "-cp", f"{lib}/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
             str(d / "zoo.cfg")],
            stdout=zlog, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(zk)
        _wait_port(zk_port, zk, d / "zk.log", 60)
        glog = (d / "gw.log").open("wb")
        logs.append(glog)
        gw = subprocess.Popen(  # noqa: S603
            [*jvm, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", f"{lib}/*",
             "splitbrain.zookeeper.Gateway", "--session-ms", "6000",
             "--endpoint", f"n1={gw_port}=127.0.0.1:{zk_port}"],
            stdin=subprocess.PIPE, stdout=glog, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(gw)
        _wait_port(gw_port, gw, d / "gw.log", 60)
        yield ("127.0.0.1", gw_port)
    finally:
        for p in reversed(procs):
            if p.stdin is not None:
                p.stdin.close()
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def _ctx(addr: tuple[str, int]) -> Any:
    return SimpleNamespace(
        addresses={"client": {"n1": f"{addr[0]}:{addr[1]}"}},
        hosts={},
        nodes=["n1"],
        spec=SimpleNamespace(client_timeout=5.0, options={}),
    )


class _Hist:
    """A history in the order ops were invoked and completed, with indexes."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.lock = threading.Lock()
        self.n = 0

    def run(self, c: ZkWatchClient, ctx: Any, process: int, f: str, value: Any) -> Op:
        with self.lock:
            inv = Op("invoke", process, f, value, node="n1", index=len(self.ops))
            self.ops.append(inv)
        done = c.invoke(ctx, inv)
        with self.lock:
            done = done.replace(index=len(self.ops))
            self.ops.append(done)
        return done


def _pub(h: _Hist, c: ZkWatchClient, ctx: Any, *evs: tuple[str, str]) -> Op:
    events = [{"stream": s, "value": v} for s, v in evs]
    return h.run(c, ctx, 0, "publish", {"events": events})


@pytest.fixture(scope="module")
def real_ops(gateway: tuple[str, int]) -> tuple[list[Op], list[Op]]:
    """A real history: publishes (one a multi) while two subscriptions listen, one from a
    position; then the final snapshot and subscription. Also the ok publishes."""
    ctx = _ctx(gateway)
    proto = ZkWatchClient(watch_s=2.5)
    pub, sub1, sub2, fin = (proto.open(ctx, "n1") for _ in range(4))
    pub.setup(ctx)
    h = _Hist()
    first = _pub(h, pub, ctx, ("s0", "v1"))
    assert first.type == "ok", first
    start = first.value["events"][0]["pos"]
    results: dict[str, Op] = {}

    def listen(name: str, c: ZkWatchClient, value: dict[str, Any]) -> None:
        results[name] = h.run(c, ctx, 1 if name == "all" else 2, "subscribe", value)

    threads = [
        threading.Thread(target=listen, args=("all", sub1, {"streams": None, "from": 0})),
        threading.Thread(target=listen, args=("s0", sub2, {"streams": ["s0"], "from": start})),
    ]
    for t in threads:
        t.start()
    time.sleep(0.8)  # both watches set
    acked = [first]
    acked.append(_pub(h, pub, ctx, ("s0", "v2")))
    acked.append(_pub(h, pub, ctx, ("s1", "v3"), ("s2", "v4")))
    time.sleep(0.3)
    acked.append(_pub(h, pub, ctx, ("s0", "v5")))
    time.sleep(0.3)
    acked.append(_pub(h, pub, ctx, ("s3", "v6")))
    for t in threads:
        t.join(30)
    h.run(fin, ctx, 3, "snapshot", {"final": True})
    h.run(fin, ctx, 3, "subscribe", {"streams": None, "from": 0, "final": True})
    for c in (pub, sub1, sub2, fin):
        c.close(ctx)
    assert all(o.type == "ok" for o in acked), acked
    return h.ops, acked


@pytest.mark.integration
@pytest.mark.slow
def test_a_real_zookeeper_delivers_states_in_zxid_order(
    real_ops: tuple[list[Op], list[Op]],
) -> None:
    ops, acked = real_ops
    pos = {e["value"]: e["pos"] for o in acked for e in o.value["events"]}
    assert pos["v3"] == pos["v4"], "a multi's events share its zxid"
    assert pos["v1"] < pos["v2"] < pos["v3"] < pos["v5"] < pos["v6"]
    subs = [o for o in ops if o.f == "subscribe" and o.type == "ok"]
    assert len(subs) == 3, subs
    by = {o.process: o for o in subs}  # 1: every stream, 2: s0 from a position, 3: final
    every, one, final = by[1], by[2], by[3]
    seen = {(e["stream"], e["value"]) for e in every.value["events"]}
    # the writes came seconds apart: each was read before the next (not promised, measured)
    assert {("s0", "v2"), ("s1", "v3"), ("s2", "v4"), ("s0", "v5"), ("s3", "v6")} <= seen
    assert all(e["pos"] > one.value["from"] for e in one.value["events"])
    assert [e["value"] for e in one.value["events"]] == ["v2", "v5"]
    snap = next(o for o in ops if o.f == "snapshot" and o.type == "ok")
    assert snap.value["streams"]["s0"] == {"value": "v5", "pos": pos["v5"]}
    assert {e["value"] for e in final.value["events"]} == {"v5", "v3", "v4", "v6"}
    r = check_subscription(ops, dict(PROMISES))
    assert r["valid"] is True, r["anomalies"]


# planted anomalies on the real history ----------------------------------------------------


def _world(ops: list[Op]) -> World:
    """The real history as a planted-subscription world (publishes, subscriptions with
    their deliveries, the snapshot), so its helpers can plant into it. The final
    subscription is left out: it reads each stream's present state once (no replay from a
    zxid), so under ``no_gap`` it would miss every earlier event by design."""
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
        elif o.f == "subscribe" and o.type == "ok" and not start.value.get("final"):
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
JUDGED = {**PROMISES, "no_gap": True, "no_duplicate": True}
"""ZooKeeper's promises with the two it does not give judged too, so that planting a gap
and a duplicate in a ZooKeeper-shaped history can be found at all."""


def _planted(ops: list[Op]) -> list[tuple[str, list[Op]]]:
    out = []
    for kind in KINDS:
        w = _world(ops)
        assert plant(w, kind, random.Random(1)), f"no place to plant {kind} in the real history"
        out.append((kind, history(w)))
    return out


@pytest.mark.integration
@pytest.mark.slow
def test_planted_gap_duplicate_and_reordering_are_found(
    real_ops: tuple[list[Op], list[Op]],
) -> None:
    ops, _ = real_ops
    assert check_subscription(history(_world(ops)), JUDGED)["valid"] is True
    for kind, planted in _planted(ops):
        r = check_subscription(planted, JUDGED)
        assert r["valid"] is False and set(r["anomalies"]) == {kind}, (kind, r["anomalies"])
        declared = check_subscription(planted, dict(PROMISES))
        # under what ZooKeeper declares only the reordering is an anomaly
        want = {"watch-unordered"} if kind == "watch-unordered" else set()
        assert set(declared["anomalies"]) == want, (kind, declared["anomalies"])


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_spark_agrees_on_the_planted_real_history(
    real_ops: tuple[list[Op], list[Op]],
) -> None:
    """Result for result, on the real history with each kind planted (local[1], the
    DataFrame jobs forced with ``driver_records=0``)."""
    pytest.importorskip("pyspark")
    ops, _ = real_ops
    planted = plant_each(_world(ops), KINDS)
    for opts in (JUDGED, dict(PROMISES)):
        assert spark_subscription(planted, opts) == check_subscription(planted, opts, cap=3), opts
    assert set(check_subscription(planted, JUDGED)["anomalies"]) == set(KINDS)
