"""docs/your-own-system.md, built exactly as shown and run on a lab.

Every block preceded by ``<!-- file: PATH -->`` must be PATH verbatim; the lab
tests then write those blocks (not the repository's files) to a fresh directory
and run both tutorial paths against the lab under partitions and kills:
the YAML system with the shell stdio client, and the Python plugin after a real
``pip install --target`` (entry points read from the installed metadata).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "your-own-system.md"
_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)^```$", re.S | re.M)


def tutorial_files() -> dict[str, str]:
    return {path: body for path, body in _BLOCK.findall(DOC.read_text())}


def test_the_tutorial_shows_the_example_files_verbatim():
    files = tutorial_files()
    assert set(files) == {
        "examples/tinykv/tinykv_plugin/server.py",
        "examples/tinykv/system.yaml",
        "examples/tinykv/client.sh",
        "examples/tinykv/client.pl",
        "examples/tinykv/tinykv_plugin/__init__.py",
        "examples/tinykv/pyproject.toml",
    }
    for path, body in files.items():
        assert body == (ROOT / path).read_text(), f"{path} differs from the tutorial"
    assert len(files["examples/tinykv/tinykv_plugin/__init__.py"].splitlines()) < 160


def _build(tmp_path: Path) -> Path:
    """The tutorial's files, from the page, in a fresh tree."""
    for path, body in tutorial_files().items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
        if body.startswith("#!"):
            target.chmod(0o755)
    return tmp_path / "examples" / "tinykv"


def _run(lab, tmp_path: Path, args: list[str], pythonpath: list[str]) -> tuple[int, dict, list]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*pythonpath, str(ROOT)])}
    store = tmp_path / "store"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            "--lab",
            lab.name,
            "--nodes",
            "3",
            "--nemesis",
            "partition,kill",
            "--nemesis-interval",
            "2",
            "--time-limit",
            "12",
            "--concurrency",
            "3",
            "--rate",
            "30",
            "--no-progress",
            "--store",
            str(store),
            "--name",
            "tutorial",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1, 2), proc.stderr[-2000:]
    run_dir = store / "tutorial" / "latest"
    results = json.loads((run_dir / "results.json").read_text())
    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    return proc.returncode, results, ops


def _check_campaign(rc: int, results: dict, ops: list) -> None:
    assert results["valid"] in (True, False, "unknown") and "checkers" in results
    assert "linearizable" in results["checkers"], results
    faults = {o["f"] for o in ops if o["process"] == "nemesis"}
    assert {"start-partition", "start-kill"} & faults, faults
    assert sum(1 for o in ops if o["process"] != "nemesis" and o["type"] == "ok") > 10
    # tinykv serialises everything through its first node and fsyncs: it is linearizable.
    assert results["valid"] is True and rc == 0, results


@pytest.mark.slow
def test_yaml_system_and_stdio_client_campaign_on_the_lab(lab, tmp_path):
    src = _build(tmp_path)
    rc, results, ops = _run(
        lab, tmp_path, ["--db", f"yaml:{src}/system.yaml", "-w", f"stdio:{src}/client.sh"], []
    )
    _check_campaign(rc, results, ops)


@pytest.mark.slow
def test_python_plugin_installed_with_pip_campaign_on_the_lab(lab, tmp_path):
    src = _build(tmp_path / "src")
    target = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    listing = subprocess.run(
        [sys.executable, "-m", "harness.cli", "plugins"],
        env={**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert re.search(r"tinykv\s+tinykv_plugin:db\s+splitbrain-tinykv", listing), listing
    rc, results, ops = _run(
        lab, tmp_path, ["--db", "tinykv", "-w", "tinykv-register"], [str(target)]
    )
    _check_campaign(rc, results, ops)
