"""A short crash soak: SIGKILL nodes under append load, then prove no ack was lost.

The long version is ``splitbrain bench crash --cycles 1000``; this one runs ten
cycles so CI notices a durability regression.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from node_impl.bench import run_crash, verify_logs

needs_server = pytest.mark.skipif(
    importlib.util.find_spec("node_impl.__main__") is None,
    reason="the node server (node_impl/__main__.py) is not there yet",
)


def test_verify_logs_finds_loss_and_divergence() -> None:
    logs = {
        "n1": [[0, 1, "noop", None], [1, 1, "append", "a"], [2, 2, "append", "b"]],
        "n2": [[0, 1, "noop", None], [1, 1, "append", "a"], [2, 2, "append", "c"]],
        "n3": [[0, 1, "noop", None], [1, 1, "append", "a"]],
    }
    v = verify_logs(logs, {"n1": 2, "n2": 2, "n3": 1}, [(1, 1, "a"), (2, 2, "b")])
    assert [x["index"] for x in v["lost"]] == [2]
    assert sorted(v["lost"][0]["nodes"]) == ["n2", "n3"]
    assert v["divergent"] == [] and v["min_committed"] == 1  # index 2 is not committed on n3
    v = verify_logs(logs, {"n1": 2, "n2": 2}, [])
    assert [x["index"] for x in v["divergent"]] == [2]
    dup = {"n1": [[0, 1, "append", "x"], [1, 1, "append", "x"]]}
    assert verify_logs(dup, {"n1": 1}, [])["duplicates"] == ["x"]


@needs_server
@pytest.mark.integration
@pytest.mark.slow
def test_crash_soak_loses_nothing(tmp_path: Path) -> None:
    out = run_crash(
        cycles=10,
        nodes=3,
        workers=3,
        down=0.3,
        interval=0.4,
        seed=11,
        base_dir=tmp_path,
        keep=False,
    )
    assert out["acked"] > 50, out
    assert out["lost"] == 0, out["examples"]
    assert out["divergent"] == 0, out["examples"]
    assert out["duplicates"] == 0
    assert out["unexpected_exits"] == []
    assert sum(out["kills"].values()) == 10
