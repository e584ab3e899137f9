"""The Vagrantfile parses, defines the 3-node lab and keeps to loopback-range addresses
(no VM is booted here; tests/harness/test_vm_lab.py boots the same image with qemu)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _validate(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["vagrant", "validate", "--ignore-provider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.mark.integration
def test_vagrantfile_validates():
    if not shutil.which("vagrant"):
        pytest.skip("vagrant is not installed (scripts/setup.sh --with-test-tools installs it)")
    out = _validate()
    assert out.returncode == 0, out.stderr or out.stdout
    assert "validated successfully" in out.stdout
    for n in range(1, 4):
        assert f"n{n}:" in out.stdout
    text = (ROOT / "Vagrantfile").read_text()
    assert "192.168." not in text.replace("192.168.121.0/24", "")  # only named as what we avoid
    # A private-range network is refused before any VM is made.
    bad = _validate(SPLITBRAIN_NET="192.168.56")
    assert bad.returncode != 0 and "loopback-range" in (bad.stderr + bad.stdout)
