"""Plumbing for workload tests: a RunContext whose client addresses are given, and one
real single-member etcd (``etcd``) for the clients that speak its gateway."""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.core.history import HistoryWriter
from harness.core.op import Op
from harness.core.remote import Host
from harness.core.spec import RunContext, TestSpec


class DummyDB:
    """Pure plumbing: workload clients never touch the DB."""

    def setup(self, ctx, node):  # pragma: no cover - never called
        raise AssertionError("workload clients must not set up the DB")

    def teardown(self, ctx, node):  # pragma: no cover
        raise AssertionError("workload clients must not tear down the DB")


def make_ctx(tmp_path: Path, addrs: dict[str, tuple[str, int]], **options) -> RunContext:
    nodes = tuple(addrs)
    return RunContext(
        spec=TestSpec(name="workloads-test", nodes=nodes, options=dict(options)),
        hosts={n: Host(name=n, address=a[0]) for n, a in addrs.items()},
        remotes={},
        db=DummyDB(),
        history=HistoryWriter(tmp_path / "history.jsonl"),
        rng=random.Random(0),
        store_dir=str(tmp_path),
        addresses={"client": dict(addrs)},
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[tuple[str, int]]:
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("etcd is not installed (Debian's etcd-server)")
    client, peer = _free_port(), _free_port()
    log = (tmp_path / "etcd.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            "--data-dir",
            str(tmp_path / "data"),
            "--listen-client-urls",
            f"http://127.0.0.1:{client}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{client}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"default=http://127.0.0.1:{peer}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", client), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"etcd did not start: {(tmp_path / 'etcd.log').read_text()[-500:]}")
                time.sleep(0.2)
        yield "127.0.0.1", client
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def plant_each(world: Any, kinds: Sequence[str], seed: int = 1) -> list[Op]:
    """The history of ``world`` with one of each of ``kinds`` planted (each must take)."""
    from checker.planted_subscription import history, plant

    rng = random.Random(seed)
    for kind in kinds:
        assert plant(world, kind, rng), kind
    return history(world)


def spark_subscription(ops: Sequence[Op], opts: Mapping[str, Any], cap: int = 3) -> dict:
    """The subscription checker's result on Spark (local[1]) for ``ops``, with its
    DataFrame jobs forced (``driver_records=0``): what the watch clients' agreement tests
    compare with the local engine's."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from checker.spark.session import get_session
    from checker.spark.subscription import check_subscription_spark

    spark = get_session("local[1]")
    cols = [("index", LongType()), ("type", StringType()), ("process", StringType())]
    cols += [(n, StringType()) for n in ("f", "key", "value", "node")]
    schema = StructType([StructField(n, t) for n, t in cols])
    rows = [(o.index, o.type, str(o.process), o.f, o.key, json.dumps(o.value), o.node) for o in ops]
    frame = spark.createDataFrame(rows, schema)
    return check_subscription_spark(spark, frame, dict(opts), cap=cap, driver_records=0)
