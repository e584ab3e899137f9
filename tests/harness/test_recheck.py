"""``splitbrain check RUN_DIR`` judges a stored run as the run judged it, and never rewrites it.

The run and the re-check build the checker options through one function
(harness/run/roles.py ``checker_options``); a run that did not finish stays unknown; the
run's results.json is left as the run wrote it (the re-check goes to recheck.json).
In-memory runs (MemoryRemote, null DB) test the plumbing; real short runs on the lab, one
per built-in workload on the DB it needs, test that the verdict survives a second look.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import checker.dispatch as dispatch
from harness.control.memory import MemoryRemote
from harness.core.history import Op
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.core.verdict import exit_code_for, normalize
from harness.core.workload import Workload
from harness.dbs.null import NullDB
from harness.run.roles import RECHECK, checker_options, recheck
from harness.run.runner import RunOptions, run_test
from workloads import get_workload
from workloads.null import CountingGenerator, NullClient

HOSTS = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in range(1, 4)]
FAST = dict(progress=False, recovery_s=0.0, join_timeout_s=3.0)


def _spec(**kw: Any) -> TestSpec:
    base: dict[str, Any] = dict(
        name="recheck",
        nodes=tuple(h.name for h in HOSTS),
        db="null",
        workload="null",
        time_limit=0.6,
        concurrency=2,
        rate=100.0,
        seed=3,
    )
    base.update(kw)
    return TestSpec(**base)


SPLITBRAIN = str(Path(sys.executable).with_name("splitbrain"))


def _check_cli(path: Path) -> subprocess.CompletedProcess[str]:
    """The real command line, so its exit code is what a shell sees."""
    return subprocess.run(
        [SPLITBRAIN, "check", str(path)], capture_output=True, text=True, timeout=120
    )


def test_interrupted_run_stays_unknown_and_its_results_json_is_not_rewritten(tmp_path: Path):
    class Interrupts(NullClient):
        """Ctrl-C arrives while the load runs (the SignalGuard makes it a KeyboardInterrupt)."""

        n = 0

        def invoke(self, ctx: Any, op: Op) -> Op:
            Interrupts.n += 1
            if Interrupts.n == 15:
                os.kill(os.getpid(), signal.SIGINT)
            return op.complete("ok", op.value)

    spec = _spec(time_limit=30.0)
    wl = get_workload("null", {})
    wl.client = Interrupts()
    res = run_test(
        spec,
        HOSTS,
        store_root=tmp_path,
        db=NullDB(),
        workload=wl,
        options=RunOptions(**FAST),
        connect_fn=MemoryRemote,
    )
    assert res.interrupted and res.valid == "unknown" and res.exit_code == 2
    before = (res.store_dir / "results.json").read_bytes()

    again = recheck(res.store_dir)
    assert again["valid"] == "unknown"
    assert again["run"]["interrupted"] is True and "SIGINT" in again["run"]["reason"]
    assert "checked_valid" in again  # the checker's own word on the prefix is kept apart

    out = _check_cli(res.store_dir)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "did not finish" in out.stdout + out.stderr and "SIGINT" in out.stdout + out.stderr
    assert (res.store_dir / "results.json").read_bytes() == before
    written = json.loads((res.store_dir / RECHECK).read_text())
    assert written["valid"] == "unknown" and written["run"]["interrupted"] is True
    # Checking the run's own history file is checking the run: same file, same verdict.
    out = _check_cli(res.store_dir / "history.jsonl")
    assert out.returncode == 2 and (res.store_dir / "results.json").read_bytes() == before


def test_run_and_recheck_hand_the_checker_the_same_options(tmp_path: Path, monkeypatch):
    """Mode ha's loss window reaches the checker both times, from test.json the second."""
    seen: list[dict[str, Any]] = []

    def fake_check(source: Any, *, model: Any = None, opts: Any = None, **kw: Any) -> dict:
        seen.append({"model": model, "opts": json.loads(json.dumps(opts))})
        return {"valid": True, "checkers": {}, "anomalies": {}}

    monkeypatch.setattr(dispatch, "check_history", fake_check)
    # The DB the spec names (dledger, mode ha, async) declares what the checker must know;
    # the run itself drives an in-memory stand-in, which declares nothing of its own.
    spec = _spec(
        db="dledger",
        workload="append",
        options={"db": {"mode": "ha", "sync": "false"}, "sampler": False},
    )
    stand_in = Workload(
        name="append",
        client=NullClient(),
        generator=CountingGenerator(),
        checker=get_workload("append", {"sampler": False}).checker,
    )
    res = run_test(
        spec,
        HOSTS,
        store_root=tmp_path,
        db=NullDB(),
        workload=stand_in,
        options=RunOptions(**FAST),
        connect_fn=MemoryRemote,
    )
    assert not res.interrupted, res.reason
    assert recheck(res.store_dir)["valid"] is True
    run_opts, re_opts = seen[0], seen[1]
    assert run_opts == re_opts
    assert run_opts["opts"]["options"]["log-safety"]["ha"] == {"sync": False}
    # the workload's selection, and the checkers of fault records (they run only on
    # histories holding their records)
    assert run_opts["opts"]["checks"] == ["log-safety", "transfer", "upgrade-phases"]
    assert run_opts["model"] is None


def test_checker_options_come_from_the_declarations_not_from_a_shared_dict():
    ha = checker_options(
        TestSpec(name="t", nodes=("n1",), workload="append", options={"db": {"mode": "ha"}})
    )
    assert ha["options"] == {"log-safety": {"ha": {"sync": False}}}
    # the samples feed log-safety (no "samples" check); transfer judges fault records
    assert ha["checks"] == ["log-safety", "transfer", "upgrade-phases"]
    plain = checker_options(TestSpec(name="t", nodes=("n1",), workload="append"))
    assert plain["options"] == {} and "ha" not in plain
    upgrade = checker_options(
        TestSpec(
            name="t",
            nodes=("n1",),
            workload="queue",
            options={"db": {"mode": "broker", "upgrade_from": "ha"}},
        )
    )
    assert upgrade["options"] == {}
    assert upgrade["checks"] == ["queue", "transfer", "upgrade-phases"]
    reg = checker_options(TestSpec(name="t", nodes=("n1",), workload="register"))
    assert reg["model"] == "cas-register" and reg["keys"] is True and "independent" not in reg


# --- real runs on the lab: one per built-in workload ------------------------------

STDIO_PROGRAM = textwrap.dedent(
    """\
    import json, sys
    value = {}
    for line in sys.stdin:
        op = json.loads(line)
        if op["f"] == "read":
            out = {"type": "ok", "value": value.get(op["key"])}
        else:
            out = {"type": "fail", "error": "refused"}
        print(json.dumps(out), flush=True)
    """
)

_SLOW = pytest.mark.slow  # another system's cluster: 15-20 s each

LAB_CASES = [
    pytest.param("append", "dledger", {}, ("kill",), id="append"),
    pytest.param("append-ha", "dledger", {"mode": "ha"}, ("kill",), id="append-ha"),
    pytest.param("register", "dledger", {}, (), id="register"),
    pytest.param("set", "dledger", {}, (), id="set"),
    pytest.param("mixed", "dledger", {}, (), id="mixed"),
    pytest.param("sampler-only", "dledger", {}, (), id="sampler-only"),
    pytest.param("queue", "dledger", {"mode": "broker"}, (), id="queue"),
    pytest.param("null", "null", {}, (), id="null"),
    pytest.param("etcd-register", "etcd", {}, (), id="etcd-register", marks=_SLOW),
    pytest.param("etcd-register-serializable", "etcd", {}, (), id="etcd-serializable", marks=_SLOW),
    pytest.param("redis-register", "redis", {}, (), id="redis-register", marks=_SLOW),
    pytest.param("redis-set", "redis", {}, (), id="redis-set", marks=_SLOW),
]


@pytest.mark.parametrize(("workload", "db", "db_opts", "nemesis"), LAB_CASES)
def test_recheck_of_a_real_run_gives_the_run_verdict(
    lab: Any, tmp_path: Path, workload: str, db: str, db_opts: dict, nemesis: tuple
) -> None:
    binary = {"etcd": "etcd", "redis": "redis-server"}.get(db)
    if binary and shutil.which(binary) is None:
        pytest.skip(f"{binary} is not installed (scripts/setup.sh installs it)")
    hosts = lab.hosts()[:3]
    spec = TestSpec(
        name=f"t{os.getpid()}-recheck-{workload}",
        nodes=tuple(h.name for h in hosts),
        db=db,
        workload=workload.removesuffix("-ha"),
        nemesis=nemesis,
        time_limit=4.0,
        concurrency=3,
        rate=40.0,
        seed=5,
        nemesis_interval=1.5,
        options={"db": db_opts},
    )
    res = run_test(
        spec,
        hosts,
        store_root=tmp_path,
        options=RunOptions(progress=False, recovery_s=1.0, final_timeout_s=20.0),
    )
    assert not res.interrupted, res.reason
    _assert_recheck_agrees(res.store_dir, res.results)


def test_recheck_of_a_stdio_run_gives_the_run_verdict(tmp_path: Path) -> None:
    program = tmp_path / "client.py"
    program.write_text(STDIO_PROGRAM)
    spec = _spec(workload=f"stdio:{sys.executable} {program}", time_limit=1.0)
    res = run_test(
        spec,
        HOSTS,
        store_root=tmp_path / "store",
        db=NullDB(),
        options=RunOptions(**FAST),
        connect_fn=MemoryRemote,
    )
    assert not res.interrupted, res.reason
    _assert_recheck_agrees(res.store_dir, res.results)


def _assert_recheck_agrees(run_dir: Path, results: dict[str, Any]) -> None:
    before = (run_dir / "results.json").read_bytes()
    again = recheck(run_dir)
    assert normalize(again["valid"]) == normalize(results["valid"]), (again, results)
    assert sorted(again["anomalies"]) == sorted(results["anomalies"])
    assert sorted(again["checkers"]) == sorted(results["checkers"])
    out = _check_cli(run_dir)
    assert out.returncode == exit_code_for(normalize(results["valid"])), out.stdout + out.stderr
    assert (run_dir / "results.json").read_bytes() == before
    assert json.loads((run_dir / RECHECK).read_text())["run"] == results["run"]
