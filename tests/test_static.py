"""Checks as code: the type checker and the linter run with the tests.

A contract that only a reader enforces drifts; these fail the suite instead.
Both tools are configured in pyproject.toml.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: `pip install -e '.[dev]'` installs it")
    return found


def test_mypy_finds_no_error_in_the_five_packages() -> None:
    r = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


def test_ruff_finds_nothing() -> None:
    r = subprocess.run(
        [_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
