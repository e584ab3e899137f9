"""A small AST mutator: one Python source in, its mutants out, each a one-span edit.

Pure. A mutant replaces one byte span of the file (found from the AST's positions)
with new text, so the rest of the file stays byte-identical and the diff shows
only the change. The operators are the classic ones that model real consensus
bugs: a comparison off at its boundary or negated, an integer off by one, a
condition forced, a clause of an ``and``/``or`` dropped, a ``not`` dropped,
two arguments swapped, ``min`` for ``max``, a side-effecting statement removed
(a persist, a flush, a mark raised, a state assignment), a check's result
replaced by a constant.

Ids are ``<module>.<function>.<operator>.<k>`` (k counts that operator in that
function in source order), so an id stays valid while the function is
unchanged, whatever happens elsewhere in the file.

What is never mutated, by design:
- seeded-bug switches (any span mentioning ``bugs.``): turning one on is a
  seeded bug the zoo already measures;
- logging calls (``*.log.<level>(...)`` and their arguments): no safety effect
  by construction.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Mutant", "OPERATORS", "mutate_source", "apply_mutant", "mutant_diff", "MutatorError"]

OPERATORS = (
    "cmp",
    "arith",
    "const+1",
    "const-1",
    "if-true",
    "if-false",
    "bool-drop",
    "not-drop",
    "swap-args",
    "minmax",
    "stmt-drop",
    "return-true",
    "return-false",
)
"""Every operator, in the order a function's mutants are listed."""


class MutatorError(ValueError):
    """The source cannot be mutated (does not parse, or a named function is missing)."""


@dataclass(frozen=True)
class Mutant:
    """One edit of one file: bytes ``[start, end)`` of ``file`` become ``replacement``."""

    id: str
    file: str
    """Path of the file inside the node package, e.g. ``quorum.py``."""
    function: str
    """Qualified name inside the module, e.g. ``Elector.handle_vote``."""
    operator: str
    line: int
    col: int
    start: int
    end: int
    original: str
    replacement: str

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    def describe(self) -> str:
        """One line: where, and what became what."""
        return f"{self.location} {self.function}: {_one_line(self.original)} -> {_one_line(self.replacement)}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _one_line(s: str, width: int = 60) -> str:
    s = " ".join(s.split())
    return s if len(s) <= width else s[: width - 3] + "..."


# ------------------------------------------------------------------ source positions


class _Source:
    """Byte offsets of AST positions (``col_offset`` counts UTF-8 bytes)."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.starts = [0]
        for i, b in enumerate(self.data):
            if b == 0x0A:
                self.starts.append(i + 1)

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    def seg(self, node: ast.AST) -> str:
        return self.text(*self.span(node))


_LOW_PRECEDENCE = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr)


def _operand(src: _Source, node: ast.expr) -> str:
    """The node's text, parenthesised when it could bind differently in a new place."""
    s = src.seg(node)
    return f"({s})" if isinstance(node, _LOW_PRECEDENCE) else s


_CMP_FLIP: dict[type, tuple[str, str]] = {
    # op: (regex finding it in the gap between operands, replacement text)
    ast.Lt: (r"<(?!=)", "<="),
    ast.LtE: (r"<=", "<"),
    ast.Gt: (r">(?!=)", ">="),
    ast.GtE: (r">=", ">"),
    ast.Eq: (r"==", "!="),
    ast.NotEq: (r"!=", "=="),
    ast.IsNot: (r"\bis\s+not\b", "is"),
    ast.Is: (r"\bis\b", "is not"),
    ast.NotIn: (r"\bnot\s+in\b", "in"),
    ast.In: (r"\bin\b", "not in"),
}

_SEEDED_BUG = re.compile(r"bugs\.")


_LOG_METHOD = re.compile(r"^_?log(_|$)")

_NO_SWAP = frozenset({"isinstance", "issubclass", "getattr", "setattr", "hasattr", "min", "max"})
"""Builtins whose arguments swapped are a TypeError at once, or the same call (min, max)."""


def _is_log_call(node: ast.AST) -> bool:
    """``x.log.info(...)``, ``log.debug(...)``, ``self._log_role()``: a logging call."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    owner = node.func.value
    return (
        (isinstance(owner, ast.Attribute) and owner.attr == "log")
        or (isinstance(owner, ast.Name) and owner.id in ("log", "logger", "logging"))
        or bool(_LOG_METHOD.match(node.func.attr))
    )


def _call_of(stmt: ast.stmt) -> ast.Call | None:
    if isinstance(stmt, ast.Expr):
        v = stmt.value
        if isinstance(v, ast.Await):
            v = v.value
        if isinstance(v, ast.Call):
            return v
    return None


def _drops_effect(stmt: ast.stmt, *, in_init: bool) -> bool:
    """Statements whose removal is a candidate bug: calls, state assignments, deletes.

    Not an assignment in ``__init__``: an attribute never set is an AttributeError
    at the first use, a crash rather than a subtle bug.
    """
    call = _call_of(stmt)
    if call is not None:
        return not _is_log_call(call)
    if in_init:
        return False
    if isinstance(stmt, ast.Assign):
        return all(isinstance(t, (ast.Attribute, ast.Subscript)) for t in stmt.targets)
    if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        return isinstance(stmt.target, (ast.Attribute, ast.Subscript))
    return isinstance(stmt, ast.Delete)


_CHECK = (ast.Compare, ast.BoolOp)


def _is_check(node: ast.expr | None) -> bool:
    return isinstance(node, _CHECK) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
    )


# ------------------------------------------------------------------ the walk


def _edits(src: _Source, fn: ast.AST) -> Iterator[tuple[str, ast.AST, int, int, str]]:
    """(operator, node, start, end, replacement) for every mutation inside one function body.

    Log calls are skipped whole; spans mentioning ``bugs.`` are dropped by the caller.
    """
    body = getattr(fn, "body", [])
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if _is_log_call(node) or (
            isinstance(node, ast.Expr) and node.value is not None and _is_log_call(node.value)
        ):
            continue
        if isinstance(node, ast.If) and _SEEDED_BUG.search(src.seg(node.test)):
            # A seeded-bug branch: only its bug-off side runs in the campaign.
            off = node.body if isinstance(node.test, ast.UnaryOp) else node.orelse
            stack.extend(reversed(off))
            continue
        yield from _node_edits(src, node, in_init=getattr(fn, "name", "") == "__init__")
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _node_edits(
    src: _Source, node: ast.AST, *, in_init: bool
) -> Iterator[tuple[str, ast.AST, int, int, str]]:
    if isinstance(node, ast.Compare):
        prev: ast.expr = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            flip = _CMP_FLIP.get(type(op))
            g0, g1 = src.span(prev)[1], src.span(right)[0]
            gap = src.text(g0, g1)
            m = re.search(flip[0], gap) if flip else None
            if flip and m:
                # offsets in the gap are characters; the gap is ASCII between operands
                a = g0 + len(gap[: m.start()].encode())
                b = g0 + len(gap[: m.end()].encode())
                yield ("cmp", node, a, b, flip[1])
            prev = right
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        if any(
            isinstance(s, ast.Constant) and type(s.value) is int for s in (node.left, node.right)
        ):
            g0, g1 = src.span(node.left)[1], src.span(node.right)[0]
            gap = src.text(g0, g1)
            sym, new = ("+", "-") if isinstance(node.op, ast.Add) else ("-", "+")
            i = gap.find(sym)
            if i >= 0:
                a = g0 + len(gap[:i].encode())
                yield ("arith", node, a, a + 1, new)
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        s, e = src.span(node)
        if src.text(s, e).startswith(("0o", "0x")):
            return  # file modes and masks: not counts or indexes
        yield ("const+1", node, s, e, str(node.value + 1))
        yield ("const-1", node, s, e, str(node.value - 1))
    elif isinstance(node, ast.BoolOp):
        word = " and " if isinstance(node.op, ast.And) else " or "
        s, e = src.span(node)
        for i in range(len(node.values)):
            rest = [_operand(src, v) for j, v in enumerate(node.values) if j != i]
            yield ("bool-drop", node, s, e, word.join(rest))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        s, e = src.span(node)
        yield ("not-drop", node, s, e, _operand(src, node.operand))
    elif isinstance(node, ast.Call):
        args = node.args
        fixed = isinstance(node.func, ast.Name) and node.func.id in _NO_SWAP
        for i in range(0 if fixed else len(args) - 1):
            x, y = args[i], args[i + 1]
            if isinstance(x, (ast.Starred, ast.Constant)) or isinstance(
                y, (ast.Starred, ast.Constant)
            ):
                continue  # a literal in a variable's place is a type error, not a logic bug
            (a0, a1), (b0, b1) = src.span(x), src.span(y)
            ta, tb = src.text(a0, a1), src.text(b0, b1)
            if ta != tb:
                yield ("swap-args", node, a0, b1, tb + src.text(a1, b0) + ta)
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            s, e = src.span(node.func)
            yield ("minmax", node, s, e, "max" if node.func.id == "min" else "min")
    if isinstance(node, ast.If):
        s, e = src.span(node.test)
        yield ("if-true", node.test, s, e, "True")
        yield ("if-false", node.test, s, e, "False")
    if isinstance(node, ast.stmt) and _drops_effect(node, in_init=in_init):
        s, e = src.span(node)
        yield ("stmt-drop", node, s, e, "pass")
    if isinstance(node, ast.Return) and _is_check(node.value):
        assert node.value is not None
        s, e = src.span(node.value)
        yield ("return-true", node, s, e, "True")
        yield ("return-false", node, s, e, "False")


def _functions(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level functions and methods of module-level classes, by qualified name."""
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{sub.name}"] = sub
    return out


def mutate_source(source: str, file: str, functions: Collection[str]) -> list[Mutant]:
    """Every mutant of the named functions of one module, in (function, source) order.

    ``file`` names the module in ids (``quorum.py`` gives ``quorum.``). A named
    function that the module does not define is a :class:`MutatorError`: the
    selection is out of date and must say so rather than mutate less.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise MutatorError(f"{file}: does not parse: {e}") from None
    defined = _functions(tree)
    missing = [f for f in functions if f not in defined]
    if missing:
        raise MutatorError(f"{file}: no function {', '.join(missing)} (selection out of date?)")
    src = _Source(source)
    stem = file.rsplit("/", 1)[-1].removesuffix(".py")
    out: list[Mutant] = []
    for name in functions:
        seen: set[tuple[int, int, str]] = set()
        counts: dict[str, int] = {}
        edits = sorted(
            _edits(src, defined[name]),
            key=lambda t: (OPERATORS.index(t[0]), t[2], t[3]),  # stable: walk order breaks ties
        )
        for op, node, s, end, new in edits:
            original = src.text(s, end)
            if (s, end, new) in seen or original == new:
                continue
            seen.add((s, end, new))
            # A seeded-bug switch anywhere in the mutated node, or in the edited span.
            if _SEEDED_BUG.search(src.seg(node)) or _SEEDED_BUG.search(original):
                continue
            counts[op] = counts.get(op, 0) + 1
            line = src.data.count(b"\n", 0, s) + 1
            col = s - src.starts[line - 1]
            out.append(
                Mutant(
                    id=f"{stem}.{name}.{op}.{counts[op]}",
                    file=file,
                    function=name,
                    operator=op,
                    line=line,
                    col=col,
                    start=s,
                    end=end,
                    original=original,
                    replacement=new,
                )
            )
    return out


def apply_mutant(source: str, m: Mutant) -> str:
    """The mutated source; the span must still hold the original text."""
    data = source.encode("utf-8")
    if data[m.start : m.end].decode("utf-8", errors="replace") != m.original:
        raise MutatorError(f"{m.id}: {m.location} no longer holds {m.original!r}")
    return (data[: m.start] + m.replacement.encode("utf-8") + data[m.end :]).decode("utf-8")


def mutant_diff(source: str, m: Mutant, *, context: int = 2) -> str:
    """A unified diff of the file, ``a/`` the node as shipped, ``b/`` the mutant."""
    new = apply_mutant(source, m)
    lines = difflib.unified_diff(
        source.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/node_impl/{m.file}",
        tofile=f"b/node_impl/{m.file}",
        n=context,
    )
    return "".join(lines)
