"""The hand-made mutants in benchmarks/mutants/ still apply to node_impl and still break it.

A patch that no longer applies (node_impl moved on) would leave the zoo measuring the
correct node under a mutant's name; one that applies but compiles to nothing different
would do the same. mA is also checked for the very rule it breaks.
"""

from __future__ import annotations

import importlib.util
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ROOT / "benchmarks" / "mutants"
PATCHES = sorted(p.name for p in MUTANTS.glob("*.patch"))


def _patched(tmp_path: Path, name: str) -> Path:
    shutil.copytree(ROOT / "node_impl", tmp_path / "node_impl",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    patch = (MUTANTS / name).read_text()
    r = subprocess.run(["patch", "-p1", "-s", "--no-backup-if-mismatch", "-d", str(tmp_path)],
                       input=patch, text=True, capture_output=True)  # fmt: skip
    assert r.returncode == 0, f"{name} no longer applies to node_impl: {r.stdout}{r.stderr}"
    return tmp_path / "node_impl"


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
@pytest.mark.parametrize("name", PATCHES)
def test_each_mutant_applies_compiles_and_is_listed(tmp_path: Path, name: str) -> None:
    pkg = _patched(tmp_path, name)
    changed = [
        p.relative_to(pkg)
        for p in pkg.rglob("*.py")
        if p.read_bytes() != (ROOT / "node_impl" / p.relative_to(pkg)).read_bytes()
    ]
    assert changed, f"{name} changes nothing"
    for rel in changed:
        py_compile.compile(str(pkg / rel), doraise=True)
    assert f"`{name}`" in (MUTANTS / "README.md").read_text(), f"{name} has no README row"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[name]
    return mod


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
def test_ma_grants_a_second_candidate_of_the_same_term(tmp_path: Path) -> None:
    from node_impl import voting

    mutant = _load(_patched(tmp_path, "mA.patch") / "voting.py", "mutant_voting")
    peers = frozenset({"n1", "n2", "n3"})
    req = voting.VoteRequest(4, "n3", -1, -1)
    for v in (voting, mutant):
        # n1 voted for n2 in term 4 and knows no leader yet; n3 asks in term 4
        state = v.VoterState("n1", peers, 4, "n2", None, -1, -1)
        got = v.decide_vote(state, v.VoteRequest(*vars(req).values()), from_self=False)
        assert got.grant == (v is mutant), (v.__name__, got)
