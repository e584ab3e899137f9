"""nemesis/steering.py: the deck's spare time goes to the situations not reached yet."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checker.situations import SITUATIONS
from harness.core.op import Op
from nemesis.profiles import ALL_SCRIPTS, SCRIPTS, ProfileSchedule
from nemesis.steering import REACHES, Steering, earlier_unreached, why_unreached

NODES = ("n1", "n2", "n3")


@dataclass
class _History:
    path: Path

    def now(self) -> int:
        return 42 * 10**9


@dataclass
class _Ctx:
    history: _History
    store_dir: str
    nodes: tuple[str, ...] = NODES
    db: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def _write(path: Path, ops: list[Op]) -> None:
    path.write_text("".join(json.dumps(o.to_dict()) + "\n" for o in ops))


def _ctx(tmp_path: Path, ops: list[Op]) -> _Ctx:
    run = tmp_path / "store" / "t" / "20260101T000002.000Z"
    run.mkdir(parents=True)
    _write(run / "history.jsonl", ops)
    return _Ctx(_History(run / "history.jsonl"), str(run))


def test_every_situation_and_script_named_exists() -> None:
    assert set(REACHES) <= {s.name for s in SITUATIONS}
    assert {s for scripts in REACHES.values() for s in scripts} <= set(ALL_SCRIPTS)


def test_an_unreached_history_situation_gets_its_script_then_is_given_up(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, [Op(type="invoke", process=0, f="read", key="k", time=1, node="n1")])
    st = Steering(SCRIPTS)
    picked = [st.next_script(ctx) for _ in range(40)]
    assert "lease" in picked and "restart-all" in picked  # clock jump, whole-cluster restart
    clock = [s for s in st.steered if "clock-jump-on-leader" in s["for"]]
    assert 1 <= len(clock) <= 2 and all(s["at_s"] == 42.0 for s in st.steered)
    assert picked[-1] is None  # every target tried its share: the load may end


def test_a_script_not_in_the_deck_is_never_steered_to(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, [])
    st = Steering(("crash",))
    got = {st.next_script(ctx) for _ in range(10)}
    assert got == {"crash", None}


def test_earlier_runs_that_missed_a_situation_count(tmp_path: Path) -> None:
    base = tmp_path / "store" / "t"
    for i, count in enumerate((0, 0, 3)):
        d = base / f"20250101T00000{i}.000Z"
        d.mkdir(parents=True)
        cov = {"split-vote": {"count": count}, "read-from-non-leader": {"count": 0},
               "by_design": {"read-from-non-leader": "x"}}  # fmt: skip
        (d / "results.json").write_text(json.dumps({"coverage": cov}))
    here = base / "20260101T000000.000Z"
    here.mkdir()
    missed, read = earlier_unreached(here)
    assert read == 3 and missed == {"split-vote": 2}
    ctx = _Ctx(_History(here / "history.jsonl"), str(here))
    assert "split-vote" in Steering(SCRIPTS).targets(ctx)  # only the node logs show it


def test_a_deck_that_ends_its_load_steers_after_its_pass(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, [])
    sch = ProfileSchedule(("crash",), hold=2.5, rng=random.Random(1), shuffle=True, passes=1)
    assert sch.steering is not None
    ops = []
    for _ in range(200):
        nxt = sch.next(ctx)
        if nxt is None:
            break
        ops.append(nxt)
    assert sch.played[0] == "crash" and len(sch.played) > 1 and sch.steering.steered
    cycling = ProfileSchedule(("crash",), hold=2.5, rng=random.Random(1), shuffle=True)
    assert cycling.steering is None


def test_why_a_situation_was_not_reached() -> None:
    deck = {"scripts": ["crash", "lease"], "left_out": {"clock-split": "no clock"}}
    assert "time ran out" in why_unreached("clock-jump-on-leader", deck, ["crash"])
    assert "did not happen" in why_unreached("clock-jump-on-leader", deck, ["lease"])
    gone = why_unreached("clock-jump-on-leader", {"scripts": ["crash"], "left_out": {
        "lease": "no clock", "clock-split": "no clock"}}, ["crash"])  # fmt: skip
    assert gone.startswith("its scripts were left out") and "no clock" in gone
