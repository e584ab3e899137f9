"""Histories whose log reads return long prefixes of the log (``gen-history --reads
long-prefix``): the shape issue 43 timed from a foreign generator. Each entry is read
back hundreds of times, so the local engine reduces agreeing repeats without hashing
them (``checker.log_safety._Agreed``); the two engines must still say the same.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from checker.dispatch import check_history
from checker.log_safety import _Agreed, _distinct, _obs_schema
from checker.synth import generate, write_history
from harness.core.paired import PairedHistory

PLANTED = ["divergent-committed", "duplicate-payload", "lost-ack", "unproposed-committed"]


def _sorted_rows(t: Any) -> list[tuple[Any, ...]]:
    d = t.to_pydict()
    return sorted(zip(*(d[c] for c in t.column_names), strict=True), key=repr)


@pytest.mark.parametrize("seed", range(6))
def test_agreed_reduction_is_the_group_by(seed: int) -> None:
    """Batches of observations with repeats, disagreements, nulls, gaps, negative and
    huge log indexes, in any order: the same distinct rows, first readers and final
    flags as one group-by over all of them."""
    rng = random.Random(seed)
    batches = []
    for _ in range(rng.randrange(1, 12)):
        rows = []
        for _ in range(rng.randrange(0, 400)):
            pick = rng.random()
            if pick < 0.85:
                li = rng.randrange(0, 300)
            elif pick < 0.9:
                li = rng.choice([-3, -(2**63), 2**63 - 1, 10**12])
            else:
                li = rng.randrange(300, 1000)
            term = rng.choice(["1", "1", "1", "2", None]) if rng.random() < 0.1 else "1"
            pay = f'"p{li}"' if rng.random() < 0.95 else rng.choice(["null", '"x"', None])
            rows.append((li, term, pay, rng.randrange(0, 10_000), rng.randrange(2)))
        li, term, pay, r, fin = zip(*rows, strict=True) if rows else ([], [], [], [], [])
        batches.append(
            pa.table(
                [
                    pa.array(li, pa.int64()),
                    pa.array(term, pa.string()),
                    pa.array(pay, pa.string()),
                    pa.array(r, pa.int64()),
                    pa.array(fin, pa.int8()),
                ],
                schema=_obs_schema(),
            )
        )
    acc = _Agreed()
    for b in batches:
        acc.add(b)
    got = acc.distinct()
    want = _distinct(batches)
    assert got.schema == want.schema
    assert _sorted_rows(got) == _sorted_rows(want)


def test_long_prefix_reads_start_at_zero_and_reach_the_commit(tmp_path: Path) -> None:
    """The shape: client reads ask from index 0 to the commit point and get every entry
    up to it; the history is valid, and its JSONL several times the bytes per record."""
    ops = list(generate(20_000, reads="long-prefix", seed=3))
    pairs = [
        (inv, comp)
        for inv, comp in PairedHistory.of(ops).pairs("read")
        if comp is not None and comp.type == "ok" and not inv.value.get("final")
    ]
    assert len(pairs) > 20
    assert max(len(comp.value["entries"]) for _, comp in pairs) > 2000
    for inv, comp in pairs:
        idx = [e[0] for e in comp.value["entries"]]
        assert inv.value["from"] == 0
        assert idx == list(range(inv.value["to"] + 1))
        assert idx[-1] <= comp.value["committed"]
    res = check_history(ops, engine="local")
    assert res["valid"] is True
    short, long_ = tmp_path / "s.jsonl", tmp_path / "l.jsonl"
    n_s = write_history(short, 20_000, seed=3)
    n_l = write_history(long_, 20_000, seed=3, reads="long-prefix")
    assert long_.stat().st_size / n_l > 1.4 * short.stat().st_size / n_s


@pytest.mark.spark
@pytest.mark.parametrize("anomaly", [None, PLANTED])
def test_engines_agree_on_long_prefix_jsonl(tmp_path: Path, anomaly: Any) -> None:
    """From JSONL, as a user's tool hands it over: the local engine (columns from Parquet
    parts) and Spark give the same verdict, anomalies, examples and stats, valid or with
    planted anomalies, one of them a disagreeing entry inside a long prefix read."""
    path = tmp_path / "h.jsonl"
    write_history(path, 12_000, reads="long-prefix", anomaly=anomaly, seed=4)
    local = check_history(str(path), engine="local")
    spark = check_history(str(path), engine="spark", master="local[1]")
    assert local["valid"] is (anomaly is None)
    if anomaly:
        assert set(PLANTED) <= set(local["anomalies"])
    assert spark["valid"] == local["valid"]
    assert json.dumps(spark["anomalies"], sort_keys=True) == json.dumps(
        local["anomalies"], sort_keys=True
    )
    lo, sp = local["checkers"]["log-safety"], spark["checkers"]["log-safety"]
    for key in ("anomalies", "notes", "stats", "unknown"):
        assert sp.get(key) == lo.get(key), key
