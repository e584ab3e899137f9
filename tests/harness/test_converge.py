"""The wait after the heal for a DB that declares ``Converges`` (harness/run/converge.py).

Pure logic with fake clocks and fake DBs; the real one (NATS) is in test_nats_plugin.py.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from harness.core.db import Convergence, ConvergenceReport, Converges, poll_converged
from harness.core.history import read_jsonl, validate_history
from harness.run import analysis as analysis_mod
from harness.run.converge import apply_convergence, convergence_text, wait_for_convergence
from harness.run.roles import recheck
from harness.run.schedule_file import extract_schedule
from harness.run.summary import verdict_line
from tests.harness.test_runner import RecordingDB, go


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def looks(*answers: Convergence):
    it = iter(answers)
    last = answers[-1]
    return lambda: next(it, last)


def test_two_agreeing_looks_with_one_token_converge():
    clock = FakeClock()
    no = Convergence(False, {"lag": 3}, why="n2 lag 3")
    yes = Convergence(True, {"lag": 0}, token=("n1", 40))
    rep = poll_converged(looks(no, yes, yes), 110.0, clock=clock, sleep=clock.sleep)
    assert rep.converged and rep.polls == 3 and rep.last == {"lag": 0}
    assert abs(rep.elapsed_s - 1.0) < 1e-9  # two sleeps of 0.5 s


def test_a_changed_token_starts_the_count_again():
    clock = FakeClock()
    a = Convergence(True, {}, token=("n1", 40))
    b = Convergence(True, {}, token=("n2", 40))
    rep = poll_converged(looks(a, b, b), 110.0, clock=clock, sleep=clock.sleep)
    assert rep.converged and rep.polls == 3


def test_never_agreeing_ends_at_the_deadline_with_what_was_last_seen():
    clock = FakeClock()
    no = Convergence(False, {"replicas": {"n2": {"lag": 7}}}, why="n2 lag 7")
    rep = poll_converged(looks(no), 103.0, clock=clock, sleep=clock.sleep)
    assert not rep.converged
    assert rep.why == "n2 lag 7" and rep.last == {"replicas": {"n2": {"lag": 7}}}
    assert rep.polls == 7 and rep.elapsed_s == 3.0  # looks at 0, .5, ..., 3.0 s


def test_one_agreeing_look_at_the_deadline_is_not_enough():
    clock = FakeClock()
    yes = Convergence(True, {}, token=1)
    rep = poll_converged(looks(yes), 100.0, clock=clock, sleep=clock.sleep)
    assert not rep.converged and rep.polls == 1 and rep.why == "1 of 2 agreeing looks"


def test_a_look_that_raises_is_not_converged_and_says_why():
    clock = FakeClock()

    def boom() -> Convergence:
        raise OSError("connection refused")

    rep = poll_converged(boom, 101.0, clock=clock, sleep=clock.sleep)
    assert not rep.converged and "connection refused" in (rep.why or "")


class ConvergingDB(RecordingDB):
    def __init__(self, report=None, *, raises=None, hang=None):
        super().__init__()
        self.report, self.raises, self.hang = report, raises, hang
        self.deadlines: list[float] = []

    def wait_converged(self, ctx, deadline):
        self.deadlines.append(deadline)
        if self.hang is not None:
            self.hang.wait(30)
        if self.raises is not None:
            raise self.raises
        return self.report


def test_the_runner_bounds_the_dbs_wait():
    assert isinstance(ConvergingDB(), Converges) and not isinstance(RecordingDB(), Converges)
    ok = ConvergenceReport(True, 1.5, 3, {"leader": "n1"})
    assert wait_for_convergence(ConvergingDB(ok), None, 1.0) is ok  # type: ignore[arg-type]
    rep = wait_for_convergence(ConvergingDB(raises=RuntimeError("x")), None, 1.0)  # type: ignore[arg-type]
    assert not rep.converged and rep.why == "the DB's wait failed: RuntimeError: x"
    rep = wait_for_convergence(ConvergingDB("yes"), None, 1.0)  # type: ignore[arg-type]
    assert not rep.converged and "not a report" in (rep.why or "")
    release = threading.Event()
    try:
        rep = wait_for_convergence(ConvergingDB(ok, hang=release), None, 0.2, grace=0.1)  # type: ignore[arg-type]
    finally:
        release.set()
    assert not rep.converged and "did not return within 0.3 s" in (rep.why or "")


def test_not_converged_caps_valid_at_unknown_and_keeps_invalid():
    block = {
        "converged": False,
        "elapsed_s": 60.0,
        "polls": 120,
        "timeout_s": 60,
        "why": "n2 lag 4",
    }
    res: dict[str, Any] = {"valid": True, "run": {"converge": block}}
    apply_convergence(res)
    assert res["valid"] == "unknown" and res["checked_valid"] is True
    assert res["reason"].startswith("replicas NOT converged within 60.0 s, 120 looks: n2 lag 4")
    bad = {"valid": False, "run": {"converge": block}}
    apply_convergence(bad)
    assert bad["valid"] is False and "reason" not in bad
    fine = {"valid": True, "run": {"converge": {**block, "converged": True}}}
    apply_convergence(fine)
    assert fine["valid"] is True
    none = {"valid": True, "run": {}}
    apply_convergence(none)
    assert none == {"valid": True, "run": {}}
    assert convergence_text({"converged": True, "elapsed_s": 4.14, "polls": 9}) == (
        "replicas converged 4.1 s after the heal, 9 looks"
    )
    assert convergence_text(None) is None


def _valid(monkeypatch):
    monkeypatch.setattr(
        analysis_mod,
        "check_stored",
        lambda store, wl, engine, timeout=None: {"valid": True, "checkers": {}, "anomalies": {}},
    )


def test_a_run_records_the_wait_and_a_stuck_cluster_is_unknown(tmp_path, monkeypatch):
    _valid(monkeypatch)
    stuck = ConvergenceReport(False, 0.4, 2, {"n2": {"lag": 5}}, why="n2 lag 5")
    db = ConvergingDB(stuck)
    res = go(tmp_path, db=db, opts={"check": True, "converge_timeout_s": 0.5}, time_limit=0.3)
    assert res.valid == "unknown" and res.exit_code == 2
    assert len(db.deadlines) == 1
    ops = read_jsonl(res.store_dir / "history.jsonl")
    validate_history(ops)
    conv = [o for o in ops if o.f == "converge"]
    assert [(o.type, o.process) for o in conv] == [("invoke", "nemesis"), ("info", "nemesis")]
    assert conv[0].value == {"timeout_s": 0.5}
    assert conv[1].value["converged"] is False and conv[1].value["last"] == {"n2": {"lag": 5}}
    assert conv[1].error == "not converged: n2 lag 5"
    reads = [o for o in ops if o.f == "read" and o.type == "invoke"]
    assert reads and all(o.index > conv[1].index for o in reads)  # the reads wait for it
    results = json.loads((res.store_dir / "results.json").read_text())
    assert results["checked_valid"] is True and results["run"]["converge"]["why"] == "n2 lag 5"
    assert "replicas NOT converged within 0.5 s" in verdict_line(results)
    # A re-check judges as the run did, and the schedule holds no "converge" fault.
    assert recheck(res.store_dir)["run"]["converge"]["converged"] is False
    sched = extract_schedule(ops, {"nodes": ["n1", "n2", "n3"], "time_limit": 0.3})
    assert all("converge" not in json.dumps(f) for f in sched["faults"])


def test_a_converged_run_keeps_its_verdict_and_says_so(tmp_path, monkeypatch):
    _valid(monkeypatch)
    db = ConvergingDB(ConvergenceReport(True, 0.1, 2, {"leader": "n1"}))
    res = go(tmp_path, db=db, opts={"check": True, "converge_timeout_s": 5.0}, time_limit=0.3)
    assert res.valid is True
    assert "replicas converged 0.1 s after the heal" in verdict_line(res.results)
    # Turned off: no wait, no op, today's fixed sleep.
    db2 = ConvergingDB(ConvergenceReport(False, 0.1))
    res2 = go(tmp_path, db=db2, opts={"check": True, "converge_timeout_s": 0}, time_limit=0.3)
    assert res2.valid is True and not db2.deadlines and "converge" not in res2.results["run"]
