"""The watch workload's Kafka client (workloads/kafka_watch.py): the translation of the
gateway's records to the subscription history (pure), a Kafka-shaped history with gaps,
duplicates and reorderings planted and found alone, and one short real run on the lab."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checker.planted_subscription import Pub as PlantedPub
from checker.planted_subscription import Sub as PlantedSub
from checker.planted_subscription import World, history, plant
from checker.subscription import check_subscription
from harness.core.op import Op
from workloads.kafka_watch import (
    PROMISES,
    KafkaWatchClient,
    partition_of,
    publish_outcome,
    publish_request,
    snapshot_value,
    stream_of,
    subscribe_request,
    subscription_value,
)
from workloads.watch import workload

from .conftest import plant_each, spark_subscription

ROOT = Path(__file__).resolve().parents[2]


def test_streams_are_partitions() -> None:
    assert stream_of(3) == "s3" and partition_of("s3") == 3
    for bad in ("k1", "s", "s1a", "3"):
        with pytest.raises(ValueError):
            partition_of(bad)


def test_a_publish_is_flat_and_its_positions_are_offsets_plus_one() -> None:
    events = [{"stream": "s2", "value": "v7"}, {"stream": "s0", "value": "v8"}]
    req = publish_request(events, 4000)
    assert req == {"type": "wpublish", "n": 2, "timeout_ms": 4000,
                   "p0": 2, "v0": "v7", "p1": 0, "v1": "v8"}  # fmt: skip
    kind, value, _ = publish_outcome(events, {"code": "SUCCESS", "offsets": [0, 41]})
    assert kind == "ok" and value is not None
    assert [e["pos"] for e in value["events"]] == [1, 42]
    # written "no": nothing can be visible (aborted before the commit, refused unsent)
    assert publish_outcome(events, {"code": "X", "written": "no"})[0] == "fail"
    assert publish_outcome(events, {"code": "TIMEOUT", "written": "unknown"})[0] == "info"
    # acknowledged without an offset for each event: cannot be placed, so unknown
    assert publish_outcome(events, {"code": "SUCCESS", "offsets": [3]})[0] == "info"


def test_a_subscription_reads_from_the_offset_after_its_position() -> None:
    req = subscribe_request(["s1", "s3"], 5, 1.0, final=False)
    assert req["from"] == 5 and req["partitions"] == "1,3" and req["listen_ms"] == 1000
    assert "partitions" not in subscribe_request(None, 0, 0.5, final=True)
    reply = {
        "events": [[1, 5, "v3"], [3, 9, "v4"], [1, 7, "v9"]],  # offset 6: a commit marker
        "marks": [[1, 8, 3], [3, 10, 3], [3, 0, 0]],
        "ended": "OffsetOutOfRange: ...",
    }
    out = subscription_value(["s1", "s3"], 5, reply)
    assert out["events"] == [
        {"stream": "s1", "value": "v3", "pos": 6},
        {"stream": "s3", "value": "v4", "pos": 10},
        {"stream": "s1", "value": "v9", "pos": 8},
    ]
    # a position q: every committed record below offset q, i.e. up to position q, delivered
    assert out["progress"] == [{"stream": "s1", "pos": 8, "after": 3},
                               {"stream": "s3", "pos": 10, "after": 3}]  # fmt: skip
    assert out["ended"].startswith("OffsetOutOfRange")


def test_the_snapshot_is_each_partitions_last_record() -> None:
    got = snapshot_value({"partitions": {"2": [9, "v5"], "0": [0, "v1"]}})
    assert got == {"pos": None, "streams": {"s0": {"value": "v1", "pos": 1},
                                            "s2": {"value": "v5", "pos": 10}}}  # fmt: skip
    hung = snapshot_value({"partitions": {"0": [2, "v9"]}, "hanging": "t0-0: producer 2001"})
    assert hung["streams"] == {"s0": {"value": "v9", "pos": 3}} and "2001" in hung["hanging"]


def test_a_hanging_transaction_hiding_an_ack_is_a_final_mismatch() -> None:
    """Kafka 4.4.0, seed 1000042907: an abort marker never written to t0-0 (its leader was
    offline when the coordinator timed the transaction out) left the partition's stable
    offset at 3 for good, so the acknowledged v16 at offset 4 is never readable by a
    read_committed reader; the snapshot that says so is judged against the ack."""
    ops: list[Op] = []

    def done(process: int, f: str, inv: Any, typ: str, out: Any) -> None:
        invocation = Op("invoke", process, f, inv, index=len(ops))
        ops.append(invocation)
        ops.append(invocation.replace(type=typ, value=out, index=len(ops)))

    for i, v in enumerate(("v4", "v5", "v9")):
        ev = [{"stream": "s0", "value": v}]
        done(i, "publish", {"events": ev}, *publish_outcome(ev, {"code": "SUCCESS",
                                                                "offsets": [i]})[:2])  # fmt: skip
    ev = [{"stream": "s0", "value": "v16"}]
    done(5, "publish", {"events": ev}, "ok", publish_outcome(ev, {"code": "SUCCESS",
                                                                  "offsets": [4]})[1])  # fmt: skip
    got = {"events": [[0, 0, "v4"], [0, 1, "v5"], [0, 2, "v9"]], "marks": [[0, 3, 3]]}
    done(6, "subscribe", {"streams": None, "from": 0, "final": True}, "ok",
         subscription_value(None, 0, got))  # fmt: skip
    snap = {"partitions": {"0": [2, "v9"]}, "hanging": "t0-0: producer 2001 from offset 3"}
    done(7, "snapshot", {"final": True}, "ok", snapshot_value(snap))
    r = check_subscription(ops, dict(PROMISES))
    assert set(r["anomalies"]) == {"watch-final-mismatch"}, r["anomalies"]


def test_the_builtin_client_declares_kafkas_promises() -> None:
    wl = workload({"client": "kafka"})
    assert isinstance(wl.client, KafkaWatchClient)
    promises = wl.checker["options"]["subscription"]
    assert promises == dict(PROMISES) and promises["scope"] == "stream"
    assert all(promises[g] for g in ("ordered", "no_gap", "atomic", "monotonic"))


# a Kafka-shaped history, translated by the client's own functions ----------------------


class _Topic:
    """Partitions as Kafka lays them out: data records and the markers a transaction's
    commit or abort writes (an offset each, never delivered); an aborted transaction's
    records take offsets too and are skipped by a read_committed consumer."""

    def __init__(self, partitions: int) -> None:
        self.log: list[list[tuple[str | None, bool]]] = [[] for _ in range(partitions)]

    def append(self, p: int, value: str | None, visible: bool) -> int:
        self.log[p].append((value, visible))
        return len(self.log[p]) - 1

    def read(self, p: int, frm: int, upto: int) -> tuple[list[list[Any]], int]:
        """Committed records of ``p`` at offsets [frm, upto), and the position after."""
        out = [[p, off, v] for off, (v, vis) in enumerate(self.log[p]) if frm <= off < upto and vis]
        return out, max(frm, min(upto, len(self.log[p])))


def _kafka_history(seed: int) -> list[Op]:
    """Publishes (single records and two-partition transactions, some aborted, some
    unknown), subscriptions from acknowledged positions with their positions as marks, and
    a final snapshot and subscription, each completion made by the client's translation."""
    rng = random.Random(seed)
    topic = _Topic(4)
    ops: list[Op] = []
    acked: list[tuple[int, int]] = []  # (partition, position)

    def done(process: int, f: str, inv: Any, typ: str, out: Any) -> None:
        invocation = Op("invoke", process, f, inv, index=len(ops))
        ops.append(invocation)
        ops.append(invocation.replace(type=typ, value=out, index=len(ops)))

    for n in range(60):
        k = 2 if rng.random() < 0.3 else 1
        events = [{"stream": stream_of(p), "value": f"v{n}-{p}"} for p in rng.sample(range(4), k)]
        fate = rng.choices(["ok", "aborted", "lost", "landed"], [80, 8, 6, 6])[0]
        visible = fate in ("ok", "landed")
        offsets = [topic.append(partition_of(e["stream"]), e["value"], visible) for e in events]
        if k > 1:  # the transaction's marker on each of its partitions
            for e in events:
                topic.append(partition_of(e["stream"]), None, False)
        if fate == "ok":
            reply: dict[str, Any] = {"code": "SUCCESS", "offsets": offsets}
            pairs = zip(events, offsets, strict=True)
            acked += [(partition_of(e["stream"]), off + 1) for e, off in pairs]
        elif fate == "aborted":
            reply = {"code": "NotEnoughReplicas", "written": "no"}
        else:
            reply = {"code": "TIMEOUT", "written": "unknown"}
        typ, value, _ = publish_outcome(events, reply)
        done(n, "publish", {"events": events}, typ, value if typ == "ok" else {"events": events})
    for j in range(13):
        final = j == 12
        parts = None if final or rng.random() < 0.4 else sorted(rng.sample(range(4), 1))
        frm = 0
        if parts is not None and rng.random() < 0.8:
            known = [pos for p, pos in acked if p == parts[0]]
            frm = rng.choice(known) if known else 0
        records: list[list[Any]] = []
        marks: list[list[Any]] = []
        for p in parts if parts is not None else range(4):
            upto = len(topic.log[p]) if final else rng.randint(frm, len(topic.log[p]) + 1)
            got, position = topic.read(p, frm, upto)
            records += got
            if position != frm:
                marks.append([p, position, len(records)])
        streams = None if parts is None else [stream_of(p) for p in parts]
        value = subscription_value(streams, frm, {"events": records, "marks": marks})
        inv: dict[str, Any] = {"streams": streams, "from": frm}
        if final:
            inv["final"] = True
        done(100 + j, "subscribe", inv, "ok", value)
    last = {}
    for p in range(4):
        seen = [(off, v) for off, (v, vis) in enumerate(topic.log[p]) if vis]
        if seen:
            last[str(p)] = list(seen[-1])
    done(200, "snapshot", {"final": True}, "ok", snapshot_value({"partitions": last}))
    return ops


def _world(ops: list[Op]) -> World:
    """The history as a planted-subscription world (one batch per publish, so that its
    helpers know a transaction's events; the marks left out: an edit that moves an event
    past one would be a second anomaly)."""
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
            evs = o.value["events"]
            pubs.append(PlantedPub([dict(e) for e in evs], o.type, o.type == "ok"))
            of_pub.update({e["value"]: len(pubs) for e in evs})
        elif o.f == "subscribe":
            evs = [{**e, "batch": of_pub.get(e["value"], -5)} for e in o.value["events"]]
            subs.append(PlantedSub(start.value["streams"], start.value["from"], evs,
                                   final=bool(start.value.get("final"))))  # fmt: skip
        elif o.f == "snapshot":
            snap = json.loads(json.dumps(o.value))
    return World("stream", pubs, subs, snap)


KINDS = ("watch-gap", "watch-duplicate", "watch-unordered")


def test_a_kafka_shaped_history_is_valid_and_every_planted_kind_is_found_alone() -> None:
    ops = _kafka_history(5)
    clean = check_subscription(ops, dict(PROMISES))
    assert clean["valid"] is True, clean["anomalies"]
    stats = clean["stats"]
    assert stats["deliveries"] > 50 and stats["progress_marks"] > 5, stats
    assert check_subscription(history(_world(ops)), dict(PROMISES))["valid"] is True
    for kind in KINDS:
        w = _world(ops)
        assert plant(w, kind, random.Random(1)), f"no place to plant {kind}"
        r = check_subscription(history(w), dict(PROMISES))
        assert r["valid"] is False and set(r["anomalies"]) == {kind}, (kind, r["anomalies"])


def test_a_record_skipped_below_a_position_is_a_gap() -> None:
    """With the marks kept: a consumer whose position passed a committed record it never
    returned left a gap, even when nothing after it on that partition was delivered."""
    ops = _kafka_history(5)
    for i, o in enumerate(ops):
        if o.f == "subscribe" and o.type == "ok" and o.value.get("progress") and o.value["events"]:
            last = o.value["events"][-1]
            mark = next(m for m in o.value["progress"] if m["stream"] == last["stream"])
            if mark["pos"] >= last["pos"] and mark["after"] == len(o.value["events"]):
                v = dict(o.value, events=o.value["events"][:-1])
                v["progress"] = [dict(m, after=min(m["after"], len(v["events"])))
                                 for m in o.value["progress"]]  # fmt: skip
                ops[i] = o.replace(value=v)
                break
    else:
        pytest.fail("no subscription ends with a marked event")
    r = check_subscription(ops, dict(PROMISES))
    assert set(r["anomalies"]) == {"watch-gap"}, r["anomalies"]


@pytest.mark.spark
@pytest.mark.slow
def test_spark_agrees_on_the_planted_kafka_history() -> None:
    """Result for result on the Kafka-shaped history with a gap, a duplicate and a
    reordering planted (local[1], the DataFrame jobs forced with ``driver_records=0``:
    minutes under load, hence slow)."""
    pytest.importorskip("pyspark")
    planted = plant_each(_world(_kafka_history(5)), KINDS)
    local = check_subscription(planted, dict(PROMISES), cap=3)
    assert set(local["anomalies"]) == set(KINDS), local["anomalies"]
    assert spark_subscription(planted, PROMISES) == local


# the real system on the lab ----------------------------------------------------------


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_kafka_watch_with_kills_on_the_lab(lab: Any, tmp_path: Path) -> None:
    """A short real run: Kafka's own jars on five KRaft nodes, kills, the watch workload
    through the gateway (transactions, consumers seeked to offsets). A real verdict:
    subscriptions delivered, transactions acknowledged, every guarantee declared judged."""
    for tool in ("mvn", "java"):
        if shutil.which(tool) is None:
            pytest.skip(f"no {tool} on this machine")
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--db", "kafka",
         "-w", "watch", "--workload-option", "client=kafka", "--nemesis", "kill",
         "--nemesis-interval", "5", "--time-limit", "20", "--no-progress",
         "--store", str(store), "--seed", "3"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    runs = sorted(p for p in store.glob("*/*") if p.is_dir() and not p.is_symlink())
    assert runs, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads((runs[-1] / "results.json").read_text())
    assert proc.returncode == 0, (proc.returncode, results.get("run"), proc.stderr[-1500:])
    sub = results["checkers"]["subscription"]
    assert sub["valid"] is True, sub["anomalies"]
    stats = sub["stats"]
    assert stats["declared"] == [g for g in PROMISES if g != "scope"], stats
    assert stats["ops"]["publish"]["ok"] > 5 and stats["deliveries"] > 20, stats
    assert stats["final_subscriptions"] >= 3 and stats["snapshots"] >= 3, stats
    history = [json.loads(line) for line in (runs[-1] / "history.jsonl").open()]
    txns = [o for o in history if o["f"] == "publish" and o["type"] == "ok"
            and len(o["value"]["events"]) > 1]  # fmt: skip
    assert txns, "no transaction was acknowledged"
