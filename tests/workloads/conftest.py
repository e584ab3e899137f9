"""Plumbing for workload tests: a RunContext whose client addresses are given."""

from __future__ import annotations

import random
from pathlib import Path

from harness.core.history import HistoryWriter
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
