"""The transactional workloads: Elle's generator properties, and a transaction through the
stdio protocol (a real program over pipes) checked by the txn checker."""

from __future__ import annotations

import random
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from checker.txn import check_txn
from harness.core.errors import ConfigError
from harness.core.workload import GenContext
from workloads import get_workload
from workloads.txn import TxnClient, TxnGen, TxnGenOptions, writes_of


def _ctx(seed: int = 1, lull: bool = False) -> GenContext:
    return GenContext(time_ns=0, process=0, worker=0, node="n1", rng=random.Random(seed), lull=lull)


@pytest.mark.parametrize("kind,wf", [("list-append", "append"), ("rw-register", "w")])
def test_generator_has_elles_properties(kind: str, wf: str) -> None:
    o = TxnGenOptions(key_count=5, max_writes_per_key=8, min_txn_length=2, max_txn_length=5)
    g = TxnGen(kind, o)
    ctx = _ctx()
    seen: dict[Any, list[Any]] = {}
    reads = writes = 0
    live_max = 0
    for _ in range(3000):
        txn = g.op(ctx).value
        assert 2 <= len(txn) <= 5
        for f, k, v in txn:
            assert f in ("r", wf)
            if f == "r":
                assert v is None
                reads += 1
            else:
                seen.setdefault(k, []).append(v)
                writes += 1
        live_max = max(live_max, len(set(g.live)))
    assert live_max == 5
    for vs in seen.values():
        assert vs == list(range(1, len(vs) + 1)) and len(vs) <= 8  # unique, rotated
    assert len(seen) > 100  # keys were retired and replaced
    assert 0.4 < reads / (reads + writes) < 0.6
    lull = [g.op(_ctx(2, lull=True)).value for _ in range(50)]
    assert not any(writes_of(t) for t in lull)


def test_bad_generator_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="min_txn_length"):
        TxnGen("list-append", TxnGenOptions(min_txn_length=5, max_txn_length=2))
    with pytest.raises(ConfigError, match="key_dist"):
        TxnGen("list-append", TxnGenOptions(key_dist="zipf"))


def test_the_builtin_client_refuses_a_db_without_transactions() -> None:
    ctx: Any = SimpleNamespace(db=object())
    with pytest.raises(ConfigError, match="transactions"):
        TxnClient("list-append").open(ctx, "n1")


_PROGRAM = """
    import json, sys
    lists = {}
    for line in sys.stdin:
        op = json.loads(line)
        assert op["f"] == "txn", op
        out = []
        for f, k, v in op["value"]:
            if f == "append":
                lists.setdefault(k, []).append(v)
                out.append([f, k, v])
            else:
                out.append(["r", k, list(lists.get(k, []))])
        print(json.dumps({"type": "ok", "value": out}), flush=True)
"""


def test_list_append_through_the_stdio_protocol(tmp_path: Path) -> None:
    prog = tmp_path / "client.py"
    prog.write_text(f"#!{sys.executable}\n" + textwrap.dedent(_PROGRAM))
    prog.chmod(0o755)
    wl = get_workload(f"list-append:{prog}", {"key_count": 3})
    assert wl.checker["checks"] == ["txn"]
    ctx: Any = SimpleNamespace(addresses={}, store_dir=str(tmp_path))
    client = wl.client.open(ctx, "n1")
    gctx = _ctx(3)
    history = []
    try:
        for _ in range(200):
            inv = wl.generator.op(gctx).replace(index=len(history))
            history.append(inv)
            history.append(client.invoke(ctx, inv).replace(index=len(history)))
    finally:
        client.close(ctx)
    assert all(op.type in ("invoke", "ok") for op in history)
    r = check_txn(history, {"isolation": "strict-serializable"})
    assert r["valid"] is True and r["stats"]["txns"]["ok"] == 200
    assert r["stats"]["edges"]["ww"] > 0 and r["stats"]["edges"]["wr"] > 0
