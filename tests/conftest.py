"""Shared fixtures: one real lab per pytest process, torn down even when tests fail.

Several developers' test runs share this machine at once, so each pytest process
builds its own lab with a name and subnet derived from its pid, and sweeps labs
left behind by test processes that no longer exist (killed runs skip teardown).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import settings

from harness.core.errors import LabError
from harness.inventory.lab import DEFAULT_STATE_ROOT, Lab

# Property tests judge results, not speed: a per-example deadline fails them at random on
# a loaded 2-core machine (one example took 375 ms beside two other suites), and the
# suite's own time budget is what bounds them.
settings.register_profile("splitbrain", deadline=None)
settings.load_profile("splitbrain")

_OWNER_FILE = "pytest-owner"


def _lab_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    try:
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"`ip netns` is unavailable: {e}"
    if r.returncode != 0:
        return f"`ip netns` is unavailable: {r.stderr.decode(errors='replace').strip()}"
    if not os.path.exists("/usr/sbin/sshd"):
        return "sshd (openssh-server) is not installed"
    return None


def _subnets_in_use(root: Path) -> set[str]:
    used: set[str] = set()
    if root.exists():
        for d in root.iterdir():
            with contextlib.suppress(OSError, ValueError, KeyError):
                used.add(json.loads((d / "lab.json").read_text())["subnet"])
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) > 3 and f[2] == "inet":
            used.add(f[3].split("/")[0].rsplit(".", 1)[0])
    return used


def _sweep_orphans(root: Path) -> None:
    """Remove labs whose owning pytest process is gone."""
    if not root.exists():
        return
    for d in root.iterdir():
        owner = d / _OWNER_FILE
        if not owner.exists():
            continue
        with contextlib.suppress(OSError, ValueError):
            pid, start = owner.read_text().split()
            try:
                alive = abs(psutil.Process(int(pid)).create_time() - float(start)) < 1.0
            except psutil.Error:
                alive = False
            if not alive:
                try:
                    stale = Lab.load(d.name, state_root=root)
                except Exception:  # died before lab.json: the name alone finds the rest
                    stale = Lab(d.name, state_root=root)
                with contextlib.suppress(Exception):
                    stale.down()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "lab" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.lab)
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """A 5-host lab private to this pytest process; ``lab.hosts()`` lists its hosts."""
    why = _lab_unavailable()
    if why:
        pytest.skip(f"no lab: {why}")
    root = Path(DEFAULT_STATE_ROOT)
    _sweep_orphans(root)
    pid = os.getpid()
    used = _subnets_in_use(root)
    third = pid % 250 + 1
    for _ in range(250):
        if f"127.78.{third}" not in used:
            break
        third = third % 250 + 1
    else:
        pytest.skip("no free 127.78.x subnet for a test lab")
    # Claim a name atomically: pids 4880 and 14880 would both pick "t4880".
    for suffix in ("", *"bcdefghijk"):
        name = f"t{pid % 10000}{suffix}"
        try:
            (root / name).mkdir(parents=True)
            break
        except FileExistsError:
            continue
    else:
        pytest.skip("no free lab name for this test process")
    the_lab = Lab(name=name, nodes=5, subnet=f"127.78.{third}", state_root=root)
    # A SIGTERM (a CI timeout, say) would skip teardown and leave the lab behind;
    # as a KeyboardInterrupt it lets pytest run the finalizers first.
    old_term = signal.getsignal(signal.SIGTERM)
    if old_term == signal.SIG_DFL and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _term_to_interrupt)
    try:
        (the_lab.dir / _OWNER_FILE).write_text(f"{pid} {psutil.Process(pid).create_time()}\n")
        for attempt in range(5):
            try:
                the_lab.up()
                break
            except LabError as e:
                # another test process took the same subnet a moment ago: move on
                if "subnet" not in str(e) or attempt == 4:
                    raise
                third = third % 250 + 1
                the_lab = Lab(name=name, nodes=5, subnet=f"127.78.{third}", state_root=root)
        yield the_lab
    finally:
        try:
            the_lab.down()
        finally:
            if signal.getsignal(signal.SIGTERM) is _term_to_interrupt:
                signal.signal(signal.SIGTERM, old_term)


def _term_to_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture
def remotes(lab: Lab) -> Iterator[dict]:
    """Connected SSH remotes to every lab host, by host name; closed after the test."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.control.ssh import SSHRemote

    rs = {h.name: SSHRemote(h) for h in lab.hosts()}
    try:
        with ThreadPoolExecutor(len(rs)) as ex:
            list(ex.map(SSHRemote.connect, rs.values()))
        yield rs
    finally:
        for r in rs.values():
            r.close()
