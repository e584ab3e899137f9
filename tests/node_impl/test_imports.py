"""node_impl ships alone to the hosts, and its modules import each other one way.

A cycle that only works in one import order (node imports server imports node)
breaks the day someone imports the other module first, so each module is imported
first in a fresh interpreter state; and a function-level import between
node_impl modules is how such a cycle hides, so none is allowed outside the
entry points.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import node_impl

PKG = Path(node_impl.__file__).resolve().parent
MODULES = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")
HARNESS_SIDE = {"harness", "nemesis", "workloads", "checker"}
# entry points may defer an import to keep `--help` and the click CLI light
LAZY_OK = {"cli.py"}


def _imports(path: Path) -> list[tuple[str, bool, bool]]:
    """(module, inside a function, under TYPE_CHECKING) for every import in ``path``."""
    tree = ast.parse(path.read_text())
    out: list[tuple[str, bool, bool]] = []

    def walk(node: ast.AST, in_func: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            f = in_func or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            t = typing_only or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            )
            if isinstance(child, ast.Import):
                out.extend((a.name, f, t) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                out.append((child.module, f, t))
            walk(child, f, t)

    walk(tree, False, False)
    return out


def test_node_impl_imports_nothing_from_the_harness_side() -> None:
    bad = [
        (p.name, m)
        for p in PKG.glob("*.py")
        for m, _, _ in _imports(p)
        if m.split(".")[0] in HARNESS_SIDE
    ]
    assert bad == []


def test_no_function_level_imports_between_node_impl_modules() -> None:
    bad = [
        (p.name, m)
        for p in PKG.glob("*.py")
        if p.name not in LAZY_OK
        for m, in_func, typing_only in _imports(p)
        if in_func and not typing_only and m.startswith("node_impl")
    ]
    assert bad == []


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {MODULES!r}:\n"
        "    for k in [k for k in sys.modules if k == 'node_impl' or k.startswith('node_impl.')]:\n"
        "        del sys.modules[k]\n"
        "    importlib.import_module('node_impl.' + m)\n"
        f"    side = {sorted(HARNESS_SIDE)!r}\n"
        "    assert not [k for k in sys.modules if k.split('.')[0] in side], m\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PKG.parent, timeout=120
    )
    assert r.returncode == 0, r.stderr
