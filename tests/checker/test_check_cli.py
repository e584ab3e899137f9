"""``splitbrain check``: exit codes 0/1/2/3, results.json, one-line user errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checker.base import FnChecker, check_safe
from checker.dispatch import check_history, choose_engine
from harness.cli import main
from harness.core.errors import CheckerError
from harness.core.history import Op, write_jsonl, write_parquet
from harness.core.verdict import merge as merge_valid


def ops(*rows: tuple[Any, ...]) -> list[Op]:
    return [
        Op(type=r[1], process=r[0], f=r[2], value=r[3], key=r[4] if len(r) > 4 else None, index=i)
        for i, r in enumerate(rows)
    ]


VALID = ops(
    (0, "invoke", "write", 1, "k"),
    (0, "ok", "write", 1, "k"),
    (1, "invoke", "read", None, "k"),
    (1, "ok", "read", 1, "k"),
)
INVALID = ops(
    (0, "invoke", "write", 1, "k"),
    (0, "ok", "write", 1, "k"),
    (1, "invoke", "read", None, "k"),
    (1, "ok", "read", 7, "k"),
)
# an acknowledged append and no final read: lost-ack cannot be judged
UNKNOWN = ops(
    (0, "invoke", "append", {"payload": "p"}),
    (0, "ok", "append", {"payload": "p", "index": 0, "term": 1}),
)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


@pytest.mark.parametrize("history,code", [(VALID, 0), (INVALID, 1), (UNKNOWN, 2)])
def test_exit_codes_by_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], history: list[Op], code: int
) -> None:
    store = tmp_path / "run"
    store.mkdir()
    write_jsonl(history, store / "history.jsonl")
    rc, out, _ = run(["check", str(store)], capsys)
    assert rc == code
    res = json.loads((store / "results.json").read_text())
    assert res["valid"] == {0: True, 1: False, 2: "unknown"}[code]
    assert set(res) >= {"valid", "checkers", "anomalies"}
    if code == 1:
        assert "cannot linearize op 2" in out and "INVALID" in out
        assert res["anomalies"]["nonlinearizable"][0]["indexes"] == [2]
    if code == 2:
        assert "could not judge: lost-ack" in out


def test_parquet_and_output_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "h.parquet"
    write_parquet(INVALID, p)
    out = tmp_path / "elsewhere.json"
    rc, _, _ = run(["check", str(p), "--output", str(out), "--model", "register"], capsys)
    assert (
        rc == 1 and json.loads(out.read_text())["checkers"]["linearizable"]["model"] == "register"
    )


def test_user_errors_exit_3_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = run(["check", str(tmp_path / "missing.jsonl")], capsys)
    assert rc == 3 and "no such file" in err and "Traceback" not in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"index":0,"type":"invoke","process":0,"f":"read"}\n{"index":1,"type":"yes"}\n')
    rc, _, err = run(["check", str(bad)], capsys)
    assert rc == 3 and "bad.jsonl:2" in err and len(err.strip().splitlines()) == 1
    good = tmp_path / "h.jsonl"
    write_jsonl(VALID, good)
    rc, _, err = run(["check", str(good), "--model", "nope"], capsys)
    assert rc == 3 and "unknown model 'nope'" in err and "cas-register" in err
    rc, _, _ = run(["check", str(good), "--engine", "warp"], capsys)
    assert rc == 3


def test_timeout_option_gives_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = 18
    rows = [(p, "invoke", "write", p) for p in range(n)] + [(p, "ok", "write", p) for p in range(n)]
    rows += [(n, "invoke", "read", None), (n, "ok", "read", 999)]
    h = tmp_path / "hard.jsonl"
    write_jsonl(ops(*rows), h)
    rc, out, _ = run(["check", str(h), "--timeout", "0.2"], capsys)
    assert rc == 2 and "1 timed out" in out


def test_check_safe() -> None:
    def boom(_: Any) -> dict[str, Any]:
        raise RuntimeError("kaput")

    res = check_safe(FnChecker(boom), {}, [])
    assert res == {"valid": "unknown", "error": "checker boom crashed: RuntimeError: kaput"}
    assert check_safe(FnChecker(lambda h: {"valid": True}), {}, [])["valid"] is True
    assert merge_valid([True, "unknown", False]) is False and merge_valid([]) is True


def test_dispatch_engines() -> None:
    assert choose_engine("auto", VALID) == "local"
    with pytest.raises(CheckerError, match="unknown engine"):
        choose_engine("gpu", VALID)
    res = check_history(VALID, engine="auto")
    assert res["valid"] is True and res["engine"] == "local"


def test_set_workload_via_local_engine() -> None:
    h = ops(
        (0, "invoke", "add", 1),
        (0, "ok", "add", 1),
        (1, "invoke", "add", 2),
        (1, "ok", "add", 2),
        (2, "invoke", "read", None),
        (2, "ok", "read", [1, 3]),
    )
    res = check_history(h)
    assert res["valid"] is False
    assert res["anomalies"]["set-lost"] == [{"element": 2, "indexes": [3, 5]}]
    assert res["anomalies"]["set-unexpected"] == [{"element": 3, "indexes": [5]}]
    fine = h[:5] + [h[5].replace(value=[2, 1])]
    assert check_history(fine)["valid"] is True
    assert check_history(h[:4])["valid"] == "unknown"  # acked adds, no read
