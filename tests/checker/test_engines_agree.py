"""The local and Spark engines give the same verdicts and the same evidence.

Seeded random histories (valid, and with random sets of planted anomalies) go
through both engines; verdicts, anomaly kinds and, since every example list here
is under the cap, the examples themselves must be identical.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from checker.local import check_local
from checker.synth import ANOMALIES, generate
from harness.errors import HistoryError
from harness.history import Op

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark() -> Any:
    from checker.spark_session import get_session

    return get_session()


def _spark(ops: list[Op]) -> dict[str, Any]:
    from checker.spark_engine import check_spark

    return check_spark(ops)


def assert_same(local: dict[str, Any], spark: dict[str, Any]) -> None:
    assert spark["valid"] == local["valid"]
    assert set(spark["checkers"]) == set(local["checkers"])
    assert spark["anomalies"] == local["anomalies"]
    for name, lo in local["checkers"].items():
        sp = spark["checkers"][name]
        assert sp["valid"] == lo["valid"], name
        assert sp.get("anomalies", {}) == lo.get("anomalies", {}), name
        assert sp.get("notes", {}) == lo.get("notes", {}), name
        if name == "log-safety":
            assert sp["stats"] == lo["stats"]
            assert sp["unknown"] == lo["unknown"]
        else:
            assert sp["failures"] == lo["failures"]
            assert sp["keys"] == lo["keys"]


def test_every_anomaly_at_once(spark: Any) -> None:
    ops = list(generate(1500, workload="mixed", anomaly=ANOMALIES, seed=11))
    local = check_local(ops)
    assert set(local["anomalies"]) == set(ANOMALIES)
    assert_same(local, _spark(ops))


@pytest.mark.parametrize("seed", [1, 2])
def test_random_histories(spark: Any, seed: int) -> None:
    rng = random.Random(seed)
    kinds = rng.sample(ANOMALIES, rng.randrange(0, 4))
    ops = list(generate(rng.randrange(600, 1200), workload="mixed", anomaly=kinds, seed=seed,
                        nodes=rng.choice([3, 5]), concurrency=rng.choice([3, 10])))
    local = check_local(ops)
    assert set(local["anomalies"]) == set(kinds)
    assert_same(local, _spark(ops))


def test_no_final_read_is_unknown(spark: Any) -> None:
    ops = list(generate(800, workload="append", seed=4))
    first_final = next(i for i, op in enumerate(ops)
                       if isinstance(op.value, dict) and op.value.get("final"))
    ops = ops[:first_final]
    local = check_local(ops)
    assert local["valid"] == "unknown"
    assert_same(local, _spark(ops))


def test_malformed_history_is_rejected_alike(spark: Any) -> None:
    ops = list(generate(400, workload="append", seed=3))
    inv = next(i for i, op in enumerate(ops) if op.type == "invoke" and op.f == "append")
    bad = ops[:inv + 1] + [ops[inv].replace(index=ops[inv].index)] + ops[inv + 1:]
    bad = [op.replace(index=i) for i, op in enumerate(bad)]
    with pytest.raises(HistoryError) as lo:
        check_local(bad)
    with pytest.raises(HistoryError) as sp:
        _spark(bad)
    assert str(sp.value) == str(lo.value)
