"""The harness's own wall clock stepped mid-run (issue 43 item 4).

The harness process runs under libfaketime reading an offset file on every call
(``FAKETIME_NO_CACHE=1``) with the monotonic clock left real
(``FAKETIME_DONT_FAKE_MONOTONIC=1``): exactly an NTP step of the host's wall clock.
Mid-run the wall clock steps back an hour, then forward two (to an hour ahead). Op times come from the
monotonic clock, so the history keeps its order and its real spacing, the checkers
judge it as they judge a run without the step, and the wall-clock origin the history's
clock is placed with (node log stamps use it) is the one taken at the start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.core.history import read_jsonl, validate_history

REPO = Path(__file__).resolve().parents[2]
SPLITBRAIN = str(Path(sys.executable).with_name("splitbrain"))

_CHILD = textwrap.dedent("""
    import json, sys, threading, time
    from pathlib import Path
    from harness.control.memory import MemoryRemote
    from harness.core.jsonl import HistoryWriter
    from harness.core.remote import Host
    from harness.core.spec import TestSpec
    from harness.core.workload import Workload
    from harness.dbs.null import NullDB
    from harness.run.runner import RunOptions, run_test
    from workloads.null import CountingGenerator, NullClient

    # libfaketime 0.9.10 fails clock_nanosleep(TIMER_ABSTIME) on the monotonic clock with
    # EINVAL under any non-zero offset, even with the monotonic clock left real: a bug of
    # the tool (an NTP step never breaks sleep), so sleep through select() here.
    import select
    time.sleep = lambda s: select.select([], [], [], max(0.0, s)) and None

    clock, store = Path(sys.argv[1]), sys.argv[2]
    steps = []

    def step(offset):
        before = time.time()
        clock.write_text(offset + "\\n")
        steps.append(time.time() - before)

    Path(store).mkdir(parents=True, exist_ok=True)
    probe = HistoryWriter(Path(store) / "probe.jsonl")
    origin = probe.origin_wall_ns
    hosts = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in (1, 2, 3)]
    spec = TestSpec(name="clock-step", nodes=tuple(h.name for h in hosts), db="null",
                    workload="null", time_limit=4.0, concurrency=3, rate=300.0, seed=7)
    timers = [threading.Timer(1.5, step, ("-3600",)), threading.Timer(3.0, step, ("+3600",))]
    for t in timers:
        t.start()
    res = run_test(spec, hosts, store_root=store, db=NullDB(),
                   workload=Workload(name="null", client=NullClient(),
                                     generator=CountingGenerator()),
                   options=RunOptions(progress=False, recovery_s=0.0),
                   connect_fn=MemoryRemote)
    for t in timers:
        t.join()
    print(json.dumps({
        "store_dir": str(res.store_dir), "valid": res.results["valid"], "steps": steps,
        "origin_moved_ns": probe.origin_wall_ns - origin,
        "naive_origin_moved_s": (time.time_ns() - probe.now() - origin) / 1e9,
    }))
""")


def _libfaketime() -> str:
    from harness.inventory.lab.hosts import find_libfaketime

    lib = find_libfaketime()
    if lib is None:
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    return lib


@pytest.mark.slow
def test_a_wall_clock_step_on_the_harness_moves_no_op_time(tmp_path):
    clock = tmp_path / "faketime"
    clock.write_text("+0\n")
    env = {
        **os.environ,
        "LD_PRELOAD": _libfaketime(),
        "FAKETIME_TIMESTAMP_FILE": str(clock),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(clock), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    # The step happened: the faked wall clock jumped back an hour, then forward.
    assert out["steps"][0] < -3500 and out["steps"][1] > 3500, out
    # The origin taken at the start stays; the one the analysis used to compute at the end
    # (wall clock now minus the history's clock) carries the step: an hour ahead.
    assert out["origin_moved_ns"] == 0
    assert out["naive_origin_moved_s"] == pytest.approx(3600, abs=5)
    ops = read_jsonl(Path(out["store_dir"]) / "history.jsonl")
    validate_history(ops)
    times = [o.time for o in ops]
    assert times == sorted(times)  # index order is time order
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) < 2e9  # no jump
    assert (times[-1] - times[0]) / 1e9 < 4.0 + 30  # its real length, not an hour
    assert len([o for o in ops if o.type == "ok"]) > 500  # the load ran through both steps
    # The checkers judge it as any run: the re-check (no faketime) says what the run said.
    check = subprocess.run(
        [SPLITBRAIN, "check", out["store_dir"]], capture_output=True, text=True, timeout=300
    )
    rechecked = json.loads((Path(out["store_dir"]) / "recheck.json").read_text())
    # (The null workload has no final reads, so lost acks are unjudgeable: unknown, never
    # invalid; what matters is that the step made no anomaly and no difference.)
    assert out["valid"] in (True, "unknown") and rechecked["valid"] == out["valid"], out
    assert rechecked["anomalies"] == {}, check.stdout + check.stderr
    assert rechecked["checkers"]["log-safety"]["stats"]["appends"]["ok"] > 100
