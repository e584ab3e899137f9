"""Faults only a real machine has, on qemu guests: power loss, real clocks, tc netem.

The proof of issue 19 part 4: ``--bug skip-fsync`` (every write reaches the
guest's OS, nothing is fsynced) is INVALID under a power-loss campaign, because a
cut of every guest at once loses their page caches, and VALID under the same
campaign with kill -9 only, which loses nothing the OS holds. The correct node is
VALID under power loss. A campaign with real-clock strobes and netem duplicate,
reorder, delay and loss runs to a verdict.

Few and slow: each campaign boots guests under TCG (about a minute per boot on a
loaded two-core machine). Skipped with the reason only where qemu cannot run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# A lab of its own, named and addressed per process like tests/harness/test_vm_lab.py's.
LAB = f"vf{os.getpid() % 10000}"
SUBNET = f"127.95.{zlib.crc32(str(os.getpid()).encode()) % 200 + 40}"


def _cli(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def vm_lab():
    if os.geteuid() != 0:
        pytest.skip("the VM lab needs root (bridge, taps)")
    for tool, pkg in (
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("qemu-img", "qemu-utils"),
        ("debootstrap", "debootstrap"),
    ):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {pkg})")
    if not Path("/dev/net/tun").exists():
        pytest.skip("no /dev/net/tun: qemu cannot make tap interfaces here")
    from harness.control import connect
    from harness.inventory.vm import VmLab

    lab = VmLab(name=LAB, nodes=3, subnet=SUBNET)
    try:
        for h in lab.up(timeout=600):
            r = connect(h)
            try:
                # The guests keep time on the HPET (a TSC calibrated under TCG can run
                # 6x fast, and the clock faults would measure that instead of theirs).
                src = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
                assert r.run(f"cat {src}").stdout.strip() == "hpet"
            finally:
                r.close()
        yield lab
    finally:
        lab.down()


def _campaign(tmp_path: Path, name: str, *extra: str) -> tuple[int, dict, list[dict]]:
    started = time.monotonic()
    p = _cli(
        "run",
        "--vm",
        "--lab",
        LAB,
        "-w",
        "append",
        "--rate",
        "20",
        "--concurrency",
        "3",
        "--no-progress",
        "--store",
        str(tmp_path),
        "--name",
        name,
        *extra,
    )
    print(f"{name}: exit {p.returncode} in {time.monotonic() - started:.0f} s\n{p.stdout}")
    run_dir = tmp_path / name / "latest"
    results = json.loads((run_dir / "results.json").read_text())
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    return p.returncode, results, [o for o in ops if o["process"] == "nemesis"]


POWER = ["--nemesis", "power", "--nemesis-option", "power_targets=all"]
TIMING = ["--nemesis-interval", "15", "--time-limit", "120"]


def test_power_loss_finds_skip_fsync_which_kill_misses(vm_lab, tmp_path) -> None:
    rc, res, nem = _campaign(tmp_path, "skip-fsync-power", "--bug", "skip-fsync", *POWER, *TIMING)
    assert rc == 1 and res["valid"] is False, res
    assert any(o["f"] == "start-power" and o["type"] == "info" and o["value"]["cut"] for o in nem)
    rc, res, nem = _campaign(
        tmp_path,
        "skip-fsync-kill",
        "--bug",
        "skip-fsync",
        "--nemesis",
        "kill",
        "--nemesis-option",
        "kill_targets=all",
        *TIMING,
    )
    assert rc == 0 and res["valid"] is True, res
    assert any(o["f"] == "start-kill" and o["type"] == "info" and o["value"]["killed"] for o in nem)


def test_correct_node_is_valid_under_power_loss(vm_lab, tmp_path) -> None:
    rc, res, nem = _campaign(tmp_path, "correct-power", *POWER, *TIMING)
    assert rc == 0 and res["valid"] is True, res
    booted = [o for o in nem if o["f"] == "stop-power" and o["type"] == "info"]
    assert booted and any(o["value"]["restarted"] for o in booted)


def test_real_clock_and_netem_campaign_runs(vm_lab, tmp_path) -> None:
    rc, res, nem = _campaign(
        tmp_path, "clock-netem", "--nemesis", "clock,duplicate,reorder,delay,loss", *TIMING
    )
    assert rc in (0, 1), res  # a verdict, not an environment error
    applied = {o["f"] for o in nem if o["type"] == "info" and not o.get("error")}
    assert applied & {"start-duplicate", "start-reorder", "start-delay", "start-loss"}
    for o in nem:
        if o["type"] == "info" and o["f"] in ("start-duplicate", "start-reorder"):
            assert set(o["value"]["backend"].values()) == {"netem"}
