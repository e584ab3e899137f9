"""Every history of the shared corpora gets the verdict its manifest records.

The corpora live beside the repo (``../shared/corpora``); verdicts come from
Porcupine's and Knossos' own test suites (see each corpus README).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from checker.linearizable import check_linearizable
from checker.local import check_local
from checker.models import Model, get_model
from harness.core.history import read_history

CORPORA = Path(__file__).parents[3] / "shared" / "corpora"

# Files the manifests list that have no history: etcd_095.log is empty (the etcd
# cluster never started), hazelcast.edn was not copied (too big for the snapshot).
ABSENT = {"jepsen/etcd_095.log", "mutex/bad/hazelcast.edn"}


def model_for(name: str) -> Model:
    return {
        "etcd-cas-register": lambda: get_model("cas-register"),
        "cas-register": lambda: get_model("knossos-cas-register"),
        "kv-put-get-append": lambda: get_model("kv"),
        "multi-register": lambda: get_model("multi-register", initial={"x": 0, "y": 0}),
        "mutex": lambda: get_model("mutex"),
    }[name]()


def rows(corpus: str) -> list[Any]:
    manifest = CORPORA / corpus / "manifest.csv"
    if not manifest.exists():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no corpus at {manifest}"))]
    with open(manifest, newline="") as fh:
        return [
            pytest.param(r, id=r["file"]) for r in csv.DictReader(fh) if r["file"] not in ABSENT
        ]


def check_row(corpus: str, row: dict[str, str]) -> dict[str, Any]:
    ops = read_history(CORPORA / corpus / row["file"])
    return check_linearizable(ops, model_for(row["model"]), timeout=30, counterexample=False)


@pytest.mark.parametrize("row", rows("porcupine"))
def test_porcupine_corpus(row: dict[str, str]) -> None:
    expected = row["expected_verdict"] == "linearizable"
    assert check_row("porcupine", row)["valid"] is expected


@pytest.mark.parametrize("row", rows("knossos"))
def test_knossos_corpus(row: dict[str, str]) -> None:
    expected = row["expected_verdict"] == "linearizable"
    assert check_row("knossos", row)["valid"] is expected


@pytest.mark.skipif(not (CORPORA / "porcupine").exists(), reason="no Porcupine corpus")
def test_etcd_fail_as_observation_gives_the_same_verdicts() -> None:
    """Porcupine reads ``:fail :cas`` as "the compare failed"; dropping fails must agree."""
    observe = get_model("cas-register", fails="observe")
    with open(CORPORA / "porcupine" / "manifest.csv", newline="") as fh:
        etcd = [
            r
            for r in csv.DictReader(fh)
            if r["file"].startswith("jepsen/") and r["file"] not in ABSENT
        ]
    assert len(etcd) == 102
    for r in etcd:
        ops = read_history(CORPORA / "porcupine" / r["file"])
        expected = r["expected_verdict"] == "linearizable"
        res = check_linearizable(ops, observe, timeout=30, counterexample=False)
        assert res["valid"] is expected, r["file"]


@pytest.mark.skipif(not (CORPORA / "porcupine").exists(), reason="no Porcupine corpus")
def test_kv_unpartitioned_agrees() -> None:
    for name, expected in (("c01-ok", True), ("c01-bad", False)):
        ops = read_history(CORPORA / "porcupine" / "kv" / f"{name}.txt")
        assert check_linearizable(ops, get_model("kv"), keys=False)["valid"] is expected


@pytest.mark.skipif(not (CORPORA / "porcupine").exists(), reason="no Porcupine corpus")
def test_models_inferred_without_model_option() -> None:
    """With no --model, etcd logs get the cas-register and kv files the kv model."""
    etcd = check_local(read_history(CORPORA / "porcupine" / "jepsen" / "etcd_001.log"))
    assert etcd["valid"] is False and etcd["checkers"]["linearizable"]["model"] == "cas-register"
    assert etcd["anomalies"]["nonlinearizable"][0]["indexes"]
    kv = check_local(read_history(CORPORA / "porcupine" / "kv" / "c10-ok.txt"))
    assert kv["valid"] is True and kv["checkers"]["linearizable"]["model"] == "kv"
