"""The dependency picture of docs/architecture.md, enforced.

Layers, lowest first: the contracts (``harness.core``) and the reference node
(``node_impl``, which ships alone to hosts); the roles (control, inventories,
DBs, workloads, nemeses, checkers); the orchestration (run, zoo); the edges
(CLI, report, bench). A module may import its own layer or lower ones, never higher,
and no two modules may import each other, even through function-level imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "nemesis", "workloads", "checker", "node_impl")

LAYERS: dict[str, int] = {
    "harness.core": 0,
    "node_impl": 0,
    "harness.control": 1,
    "harness.inventory": 1,
    "harness.dbs": 1,
    "workloads": 1,
    "nemesis": 1,
    "checker": 1,
    "harness.api": 1,
    "harness.run": 2,
    "harness.zoo": 2,
    "harness.cli": 3,
    "harness.report": 3,
    # The benchmarks drive the runner and read the report: an edge, apart from both.
    "harness.bench": 3,
}
# node_impl is installed on hosts without the rest: it may import only itself.
ISOLATED = {"node_impl"}


def group_of(module: str) -> str | None:
    best = None
    for g in LAYERS:
        if (module == g or module.startswith(g + ".")) and (best is None or len(g) > len(best)):
            best = g
    return best


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(path: Path, module: str, *, typing_too: bool) -> set[str]:
    """Every splitbrain module that ``module`` imports, at any depth of its code."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    is_pkg = path.name == "__init__.py"

    def visit(node: ast.AST) -> None:
        if not typing_too and _type_checking_block(node):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m.split(".")[0] in PACKAGES}


MODULES = modules()


def _resolve(name: str) -> str | None:
    """The module an imported name lives in (``harness.core.history.Op`` -> its module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module: str) -> None:
    own = group_of(module)
    if own is None:
        return  # the top-level package files (harness/__init__.py): version only
    bad = []
    for imp in imports(MODULES[module], module, typing_too=True):
        target = _resolve(imp)
        tgroup = group_of(target) if target else None
        if tgroup is None or target is None:
            continue
        if own in ISOLATED and tgroup != own:
            bad.append(f"{target} (node_impl imports only itself)")
        elif LAYERS[tgroup] > LAYERS[own]:
            bad.append(f"{target} (layer {LAYERS[tgroup]} > {LAYERS[own]})")
    assert not bad, f"{module} (layer {LAYERS[own]}) imports upwards: {sorted(set(bad))}"


def test_no_import_cycles() -> None:
    graph = {
        m: {
            t
            for i in imports(p, m, typing_too=False)
            if (t := _resolve(i)) and t != m and not m.startswith(t + ".")
        }
        for m, p in MODULES.items()
    }
    # A package's __init__ importing its own submodules is no cycle worth forbidding,
    # but everything else is: find strongly connected components (Tarjan).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    import sys

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_layer_map_covers_every_package() -> None:
    unmapped = sorted(m for m in MODULES if group_of(m) is None and m not in PACKAGES)
    assert not unmapped, f"modules in no layer: {unmapped}"
