"""A mutant as a node package on disk: a copy of ``node_impl`` with one file changed.

The DLedger DB ships that tree instead of the real node (its ``node_src`` option),
and the unit tests import it through ``PYTHONPATH``; the real ``node_impl`` is
never touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.zoo.mutants.mutator import Mutant, apply_mutant

__all__ = ["write_tree"]


def write_tree(node_dir: Path, m: Mutant, dest: Path) -> Path:
    """``dest/node_impl`` holding the mutant; returns that package directory.

    An earlier copy at ``dest`` is replaced, so a re-run starts from the current node.
    """
    pkg = dest / "node_impl"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(node_dir, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    target = pkg / m.file
    target.write_text(apply_mutant((node_dir / m.file).read_text(encoding="utf-8"), m), "utf-8")
    return pkg
