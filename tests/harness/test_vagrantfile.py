"""The Vagrantfile parses and defines the 5-node lab (no VM is booted here)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_vagrantfile_validates():
    if not shutil.which("vagrant"):
        pytest.skip("vagrant is not installed (scripts/setup.sh --with-test-tools installs it)")
    out = subprocess.run(
        ["vagrant", "validate", "--ignore-provider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr or out.stdout
    assert "validated successfully" in out.stdout
    for n in range(1, 6):
        assert f"n{n}:" in out.stdout
