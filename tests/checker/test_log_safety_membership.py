"""The log-safety checks that know the configuration (docs/membership.md M14): samples name
their member and its configuration, per-member invariants are keyed by member, a removed
member's stale view is not judged, and what it does after its removal is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checker.log_safety import check_log_safety, check_log_safety_columns
from checker.planted import log_safety
from harness.core.history import write_parquet
from harness.core.op import Op
from harness.core.parquet import ColumnarHistory
from tests.checker.test_log_safety import found
from workloads.sampler import SAMPLE_KEYS, sample_value

C0: dict[str, Any] = {"voters": ["n1", "n2", "n3", "n4", "n5"], "learners": [], "index": -1}


class H:
    """Ops in history order; samples by host, with member and configuration."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _pair(self, process: int, f: str, inv: Any, out: Any, node: str | None) -> int:
        op = Op("invoke", process, f, inv, node=node, index=len(self.ops))
        self.ops.append(op)
        self.ops.append(op.replace(type="ok", value=out, index=len(self.ops)))
        return len(self.ops) - 1

    def sample(
        self,
        host: str,
        term: int,
        role: str = "follower",
        *,
        end: int = 10,
        committed: int = 10,
        member: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> int:
        value = {"role": role, "term": term, "leader": None, "begin": 0, "end": end}
        value |= {"committed": committed, "incarnation": 1}
        value |= {"member": member or host, "config": config or C0}
        return self._pair(1000 + int(host[1]), "sample", None, value, host)

    def ack(self, host: str, term: int, index: int) -> int:
        out = {"payload": f"p{index}", "index": index, "term": term}
        return self._pair(1, "append", {"payload": f"p{index}"}, out, host)


def without(n: str, index: int, *extra: str) -> dict[str, Any]:
    voters = sorted({*C0["voters"], *extra} - {n})
    return {"voters": voters, "learners": [], "index": index}


def test_planted_examples_from_ops_and_from_a_stored_history_agree(tmp_path: Path) -> None:
    """Ops go through the Parquet a run writes: a stored history gives the same result."""
    for label, (ops, _, kinds) in log_safety().items():
        path = tmp_path / f"{label}.parquet"
        write_parquet(ops, path)
        cols = ColumnarHistory.read(path)
        assert cols is not None
        a, b = check_log_safety(ops), check_log_safety_columns(cols)
        assert a == b, label
        assert set(kinds) <= set(a["anomalies"]), label


def test_a_member_re_added_wiped_is_a_new_member_not_a_term_regression() -> None:
    h = H()
    h.sample("n3", 7)
    h.sample("n3", 0, "candidate", end=-1, committed=-1, member="n3.1")
    h.sample("n3", 7, member="n3.1")
    assert found(h.ops, "term-regress") == []
    # the same samples without their member: judged per host, as before issue 29
    for op in h.ops:
        if op.f == "sample" and op.type == "ok":
            op.value.pop("member")
    assert [e["node"] for e in found(h.ops, "term-regress")] == ["n3"]


def test_a_removed_leader_of_an_old_term_is_stale_and_of_a_later_term_is_judged() -> None:
    h = H()
    h.sample("n1", 3, "leader")
    removed = h.sample("n2", 4, config=without("n1", 11), committed=12, end=12)
    h.sample("n1", 3, "leader")  # stale: still thinks it leads term 3
    assert found(h.ops, "leader-after-removal") == []
    later = h.sample("n1", 5, "leader")
    got = found(h.ops, "leader-after-removal")
    assert got == [
        {
            "node": "n1",
            "term": 5,
            "removed_term": 4,
            "config_index": 11,
            "indexes": [removed, later],
        }
    ]


def test_a_leader_that_removes_itself_leads_on_in_its_term() -> None:
    """M8: until the removing entry commits (and a little after, until it is applied) the
    leader goes on leading, in the same term."""
    h = H()
    h.sample("n1", 3, "leader", config=without("n1", 11), committed=12, end=12)
    h.sample("n2", 3, config=without("n1", 11), committed=12, end=12)
    assert found(h.ops, "leader-after-removal") == []


def test_what_a_joiner_lists_at_startup_and_a_member_listed_again_are_no_removal() -> None:
    h = H()
    # n5.1 joins: its startup list has it as a learner; a lagging n4 reports C1, committed
    # before n5.1 was added, which does not list it
    joined = {"voters": ["n1", "n2", "n3", "n4"], "learners": ["n5.1"], "index": -1}
    h.sample("n5", 0, "candidate", member="n5.1", config=joined)
    h.sample("n4", 2, config=without("n5", 6), committed=8, end=8)
    h.sample("n1", 3, config=without("n5", 9, "n5.1"), committed=9)
    # n2 removed at 12, then listed again at 14 (a DB that reuses ids)
    h.sample("n1", 3, config=without("n2", 12), committed=13)
    h.sample("n1", 3, config=without("n5", 14, "n5.1"), committed=15)
    h.sample("n5", 4, "leader", member="n5.1", config=without("n5", 14, "n5.1"))
    h.sample("n2", 4, "leader")
    assert found(h.ops, "leader-after-removal") == []


def test_an_ack_is_judged_by_the_member_its_host_ran_throughout() -> None:
    h = H()
    removed = h.sample("n2", 4, config=without("n5", 6), committed=8, end=8)
    h.sample("n5", 3)
    first = h.ack("n5", 5, 9)  # n5 on both sides: judged
    h.sample("n5", 5)
    h.sample("n5", 5)
    h.ack("n5", 5, 10)  # the host changed member meanwhile: not judged
    h.sample("n5", 0, member="n5.1")
    got = found(h.ops, "ack-after-removal")
    assert [(e["node"], e["index"], e["indexes"]) for e in got] == [("n5", 9, [removed, first])]


def test_the_sampler_records_the_member_and_its_configuration() -> None:
    status = {
        "id": "n3.1",
        "role": "follower",
        "term": 4,
        "config": {
            "voters": {"n2": "h:1", "n1": "h:2"},
            "learners": {"n3.1": "h:3"},
            "configIndex": 17,
            "pending": True,
        },
    }
    v = sample_value(status)
    assert tuple(v) == SAMPLE_KEYS
    assert v["member"] == "n3.1"
    assert v["config"] == {"voters": ["n1", "n2"], "learners": ["n3.1"], "index": 17}
    assert sample_value({"role": "master"})["config"] is None  # mode ha: no configuration


@pytest.mark.spark
@pytest.mark.slow
def test_spark_gives_the_same_membership_examples() -> None:
    from checker.dispatch import check_history

    for label in ("membership-stale", "membership-violations"):
        ops, _, _ = log_safety()[label]
        opts = {"checks": ["log-safety"]}
        lo = check_history(ops, engine="local", opts=opts)["checkers"]["log-safety"]
        sp = check_history(ops, engine="spark", opts=opts, master="local[1]")
        sp = sp["checkers"]["log-safety"]
        assert sp["valid"] == lo["valid"], label
        assert sp["anomalies"] == lo["anomalies"], label
