"""The one campaign loop of `run --test-count` and the zoo: order, seeds, callbacks, Ctrl-C, exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import harness.run.campaign as campaign
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.run.campaign import PlannedRun, campaign_exit_code, run_campaign, seeded
from harness.run.options import RunResult
from harness.zoo.campaign import run_zoo
from harness.zoo.targets import DEFAULT_CAMPAIGN, HA_CAMPAIGN

HOSTS = [Host(name=f"n{i}", address="127.0.0.1") for i in range(1, 4)]


class FakeRunner:
    """Stands in for run_test: answers each seed's verdict from a table, remembers what it ran."""

    def __init__(self, verdicts: dict[int, Any], interrupt_at: int | None = None) -> None:
        self.verdicts = verdicts
        self.interrupt_at = interrupt_at
        self.calls: list[tuple[TestSpec, Any]] = []

    def __call__(
        self, spec: TestSpec, hosts: Any, *, store_root: Any, options: Any, nemesis_package: Any
    ) -> RunResult:
        self.calls.append((spec, nemesis_package))
        stop = spec.seed == self.interrupt_at
        valid = "unknown" if stop else self.verdicts.get(spec.seed, True)
        return RunResult(
            store_dir=Path(store_root, spec.name, str(spec.seed)),
            results={"valid": valid, "anomalies": {}},
            interrupted=stop,
            reason="interrupted by SIGINT" if stop else None,
        )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    runner = FakeRunner({11: False, 12: "unknown"})
    monkeypatch.setattr(campaign, "run_test", runner)
    return runner


def test_runs_in_order_with_seeds_base_plus_i_and_reports_each(fake: FakeRunner) -> None:
    seen: list[tuple[int, int]] = []
    spec = TestSpec(name="t", nodes=("n1", "n2", "n3"), seed=0)
    runs = run_campaign(
        seeded(spec, 3, 10),
        HOSTS,
        store_root="s",
        on_result=lambda r: seen.append((r.number, r.spec.seed)),
    )
    assert seen == [(1, 10), (2, 11), (3, 12)]
    assert [s.seed for s, _ in fake.calls] == [10, 11, 12]
    assert campaign_exit_code(runs) == 1
    assert campaign_exit_code(runs[::2]) == 2
    assert campaign_exit_code(runs[::2], fail_on_unknown=True) == 1
    assert campaign_exit_code(runs[:1]) == 0


def test_a_user_interrupt_ends_the_campaign_but_a_failed_run_does_not(fake: FakeRunner) -> None:
    fake.interrupt_at = 11
    spec = TestSpec(name="t", nodes=("n1",))
    runs = run_campaign(seeded(spec, 5, 10), HOSTS)
    assert [r.spec.seed for r in runs] == [10, 11]
    fake.interrupt_at = None
    built: list[str] = []

    def package() -> Any:  # built just before its run, not when planned
        built.append(spec.name)
        return "pkg"

    plan = [PlannedRun(spec, package=package)]
    assert built == []
    run_campaign(plan, HOSTS)
    assert built == ["t"] and fake.calls[-1][1] == "pkg"


def test_the_zoo_runs_every_target_with_the_same_seeds_through_the_loop(fake: FakeRunner) -> None:
    fake.verdicts = {7: True, 8: False}
    got: list[int] = []
    records, aborted = run_zoo(
        [("dledger", None), ("dledger", "stale-read"), ("ha", "ha-x")],
        [7, 8],
        {"dledger": DEFAULT_CAMPAIGN, "ha": HA_CAMPAIGN},
        HOSTS,
        store_root="s",
        on_record=lambda rec, k: got.append(k),
    )
    assert aborted is None and got == [1, 2, 3, 4, 5, 6]
    assert [(r.label, r.run, r.seed, r.valid) for r in records] == [
        ("(correct)", 0, 7, True),
        ("(correct)", 1, 8, False),
        ("stale-read", 0, 7, True),
        ("stale-read", 1, 8, False),
        ("ha-x", 0, 7, True),
        ("ha-x", 1, 8, False),
    ]
    specs = [s for s, _ in fake.calls]
    deck = specs[2].options["deck"]  # what `splitbrain run` would play on these hosts
    assert specs[2].bug == "stale-read" and "figure8" in deck["scripts"]
    # HOSTS declare no FUSE: the disk script plays its corruptions, not its power cuts
    assert "disk" in deck["scripts"] and deck["passes"] == 1
    assert {"lose-unfsynced", "torn-write"} == set(deck["dropped"]["disk"])
    assert specs[4].options["db"]["mode"] == "ha" and specs[4].name == "zoo-ha-x"
    assert "deck" not in specs[4].options  # mode ha keeps its stock schedule
    fake.interrupt_at = 8
    records, aborted = run_zoo(
        [("dledger", None), ("dledger", "stale-read")],
        [7, 8],
        {"dledger": DEFAULT_CAMPAIGN},
        HOSTS,
        store_root="s",
    )
    assert len(records) == 2 and aborted == "interrupted by SIGINT"
