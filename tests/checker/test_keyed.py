"""The local engine's streamed path (checker.keyed): a Parquet history read in bounded
batches, split by key on disk and judged a key at a time, gives the verdict, failures,
counterexample and anomalies the whole path gives (the search ran to its end on every key,
so ``unchecked_keys`` is empty, as on Spark), raises the same error on a malformed history,
and never reads the file whole."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from checker.dispatch import check_history
from checker.keyed import check_local_keyed
from checker.local import check_local
from checker.synth import generate, write_history
from harness.core.errors import HistoryError
from harness.core.op import Op
from harness.core.parquet import write_parquet
from harness.core.source import read_paired

pq = pytest.importorskip("pyarrow.parquet")

_SAME = ("valid", "keys", "failures", "unknown_keys", "counterexample", "anomalies", "model")


def _whole(path: Path, opts: dict[str, Any] | None = None) -> dict[str, Any]:
    return check_local(read_paired(path), opts=opts)


def _assert_same(streamed: dict[str, Any] | None, whole: dict[str, Any]) -> None:
    assert streamed is not None, "the streamed path declined a register history"
    assert streamed["valid"] == whole["valid"]
    assert streamed["anomalies"] == whole["anomalies"]
    assert set(streamed["checkers"]) == set(whole["checkers"])
    for name, lo in whole["checkers"].items():
        st = streamed["checkers"][name]
        for field in _SAME:
            assert st.get(field) == lo.get(field), (name, field)
        assert st["unchecked_keys"] == []


@pytest.mark.parametrize("anomaly", [None, "nonlinearizable"])
def test_streamed_path_gives_the_whole_paths_result(anomaly: str | None, tmp_path: Path) -> None:
    path = tmp_path / "h.parquet"
    write_history(path, 6000, workload="register", keys=40, anomaly=anomaly, seed=3)
    whole = _whole(path)
    assert whole["valid"] is (anomaly is None)
    streamed = check_local_keyed(path, min_rows=0, bucket_rows=500, batch=700)
    _assert_same(streamed, whole)
    if anomaly:
        assert streamed is not None and "nonlinearizable" in streamed["anomalies"]


def test_it_reads_bounded_batches_into_several_buckets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every read of the file is a batch of at most ``batch`` records (nothing reads it
    whole), and the claimed records are spread over several key buckets."""
    path = tmp_path / "h.parquet"
    write_history(path, 5000, workload="register", keys=30, seed=1, batch=1000)
    asked: list[int] = []
    real = pq.ParquetFile.iter_batches

    def iter_batches(self: Any, batch_size: int = 65536, **kw: Any) -> Any:
        asked.append(batch_size)
        return real(self, batch_size=batch_size, **kw)

    def whole(*a: Any, **kw: Any) -> Any:
        raise AssertionError("the streamed path read the history whole")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", iter_batches)
    monkeypatch.setattr(pq.ParquetFile, "read", whole)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", whole)
    monkeypatch.setattr(pq, "read_table", whole)
    with caplog.at_level(logging.INFO, logger="checker.keyed"):
        res = check_local_keyed(path, min_rows=0, bucket_rows=400, batch=300)
    assert res is not None and res["valid"] is True
    assert asked and max(asked) == 300, asked
    made = [r.getMessage() for r in caplog.records if "key buckets" in r.getMessage()]
    assert made and int(made[0].split(", ")[-1].split()[0]) >= 5, caplog.text


def _ops(n: int) -> list[Op]:
    return list(generate(n, workload="register", keys=20, seed=4))


@pytest.mark.parametrize("fault", ["double-invoke", "orphan", "other-f", "after-info"])
def test_a_malformed_history_raises_the_whole_paths_error(fault: str, tmp_path: Path) -> None:
    """The fault sits after the first batch, with its process's open op carried over."""
    ops = _ops(3000)
    cut = 1500
    if fault == "double-invoke":
        inv = next(o for o in ops[cut:] if o.type == "invoke")
        pos = ops.index(inv)
        ops.insert(pos + 1, inv.replace(index=inv.index))
    elif fault == "orphan":
        pos = next(i for i in range(cut, len(ops)) if ops[i].type == "invoke")
        del ops[pos]
    elif fault == "other-f":
        pos = next(i for i in range(cut, len(ops)) if ops[i].type == "ok")
        ops[pos] = ops[pos].replace(f="cas" if ops[pos].f != "cas" else "write")
    else:
        info = next(o for o in ops[:cut] if o.type == "info")
        pos = next(i for i in range(cut, len(ops)) if ops[i].type == "invoke")
        ops[pos] = ops[pos].replace(process=info.process)
    ops = [o.replace(index=i, time=i * 1000) for i, o in enumerate(ops)]
    path = tmp_path / "h.parquet"
    write_parquet(ops, path)
    with pytest.raises(HistoryError) as whole:
        _whole(path)
    with pytest.raises(HistoryError) as streamed:
        check_local_keyed(path, min_rows=0, bucket_rows=500, batch=1024)
    assert str(streamed.value) == str(whole.value)


def test_it_declines_what_it_does_not_judge(tmp_path: Path) -> None:
    """A log history (log safety needs it whole), a small one, ``keys=false``: None, and
    the engine checks them as before."""
    log = tmp_path / "log.parquet"
    write_history(log, 2000, workload="append", seed=2)
    assert check_local_keyed(log, min_rows=0) is None
    reg = tmp_path / "reg.parquet"
    write_history(reg, 2000, workload="register", keys=10, seed=2)
    assert check_local_keyed(reg) is None  # below KEYED_ROWS
    assert check_local_keyed(reg, min_rows=0, opts={"keys": False}) is None
    assert check_history(reg, engine="local")["valid"] is True
