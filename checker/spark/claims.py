"""Which checker takes which op, on Spark: the checkers' own ``claims``, as lookup columns.

A checker says which ops it takes with one pure function of an op's
:class:`~harness.core.checker.OpShape` (:mod:`harness.core.checker`). An op's shape has
few possible values once the history's ``f`` names are known: the invocation's f,
whether it is keyed, its value's JSON kind, the completion's type and value kind, and
whether the history has adds. So the driver asks ``claims`` about every shape the
history can hold (a few hundred per ``f``), and each checker's answers become one
column expression: a small integer code per op, looked up by ``isin`` per part. No
UDF, no second table, and no way for the engines to disagree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.checker import COMPLETION_TYPES, JSON_KINDS, CheckConfig, CheckerSpec, OpShape

__all__ = ["TYPES", "KINDS", "Labels", "domain", "shape_code", "build_labels"]

TYPES = ("invoke", *COMPLETION_TYPES)
"""Record types by code (the first pass's ``t``): 0 invoke, 1 ok, 2 fail, 3 info."""
KINDS = JSON_KINDS
"""Value kinds by code (the first pass's ``k``)."""

_CT = len(TYPES)  # completion type: 0 none, 1.. as TYPES
_CK = len(KINDS) + 1  # completion kind: 0 none, 1.. as KINDS


def _encode(fi: int, keyed: int, k: int, ct: int, ck: int) -> int:
    return (((fi * 2 + keyed) * len(KINDS) + k) * _CT + ct) * _CK + ck


def domain(fs: Sequence[str], has_adds: bool) -> Iterator[tuple[int, OpShape]]:
    """Every op shape a history with these invocation ``fs`` can hold, with its code."""
    for fi, f in enumerate(fs):
        for keyed in (0, 1):
            for k, kind in enumerate(KINDS):
                for ct in range(_CT):
                    for ck in range(_CK) if ct else (0,):
                        shape = OpShape(
                            f,
                            bool(keyed),
                            kind,
                            TYPES[ct] if ct else None,
                            KINDS[ck - 1] if ck else None,
                            has_adds,
                        )
                        yield _encode(fi, keyed, k, ct, ck), shape


def shape_code(F: Any, fs: Sequence[str], f: Any, keyed: Any, k: Any, ct: Any, ck: Any) -> Any:
    """The code :func:`domain` gives an op, from columns: its invocation's ``f`` (string),
    ``keyed`` (boolean), value kind code ``k`` (as :data:`KINDS`, null: ``null``), and
    its completion's type code ``ct`` (as :data:`TYPES`; null or 0: none) and value kind
    code ``ck`` (as :data:`KINDS`)."""
    fi = F.array_position(F.array(*(F.lit(x) for x in fs)), f) - 1
    has = F.coalesce(ct, F.lit(0)) > 0
    ctc = F.when(has, ct).otherwise(0)
    ckc = F.when(has, F.coalesce(ck, F.lit(0)) + 1).otherwise(0)
    kc = F.coalesce(k, F.lit(0))
    return (((fi * 2 + keyed.cast("int")) * len(KINDS) + kc) * _CT + ctc) * _CK + ckc


@dataclass(frozen=True)
class Labels:
    """Each selected checker's parts and, per part, the shape codes it claims."""

    checkers: tuple[CheckerSpec, ...]
    parts: tuple[tuple[str, ...], ...]
    """Per checker, its part names (sorted)."""
    codes: tuple[tuple[tuple[int, ...], ...], ...]
    """Per checker, per part, the codes of the shapes claimed."""

    def column(self, F: Any, c: int, code: str) -> Any:
        """Checker ``c``'s part number of the op whose shape code is in the column named
        ``code`` (null: not claimed).

        Written as SQL text: built as columns, every code of every part was a call into
        the JVM, a second per checker on a log history; Spark turns the long ``IN`` lists
        into hash sets either way.
        """
        whens = [
            f"WHEN `{code}` IN ({','.join(map(str, codes))}) THEN {p}"
            for p, codes in enumerate(self.codes[c])
        ]
        return F.expr(f"CASE {' '.join(whens)} END") if whens else F.lit(None).cast("int")


def build_labels(
    specs: Sequence[CheckerSpec],
    configs: Mapping[str, CheckConfig],
    fs: Sequence[str],
    has_adds: bool,
) -> Labels:
    """Ask every checker's ``claims`` about every shape of :func:`domain`."""
    shapes = list(domain(fs, has_adds))
    parts, codes = [], []
    for s in specs:
        by_part: dict[str, list[int]] = {}
        for code, shape in shapes:
            part = s.claims(shape, configs[s.name])
            if part is not None:
                by_part.setdefault(part, []).append(code)
        names = tuple(sorted(by_part))
        parts.append(names)
        codes.append(tuple(tuple(by_part[n]) for n in names))
    return Labels(tuple(specs), tuple(parts), tuple(codes))
