"""The op families of splitbrain's workloads, as predicates on an op's shape.

Several checkers must agree on where one family ends and the next begins (a keyless
``read`` of an object is a log read, of a list in a history with adds a set read,
otherwise a register read), so the rules live here once and each built-in checker's
``claims`` (:class:`harness.core.checker.CheckerSpec`) is built from them. Both
engines call ``claims``; neither has a table of its own (docs/architecture.md §3 lists
the workloads' ops).
"""

from __future__ import annotations

from harness.core.checker import OpShape

__all__ = [
    "QUEUE_FS",
    "LIN_FAMILIES",
    "is_queue",
    "is_log",
    "is_set",
    "lin_family",
]

QUEUE_FS = frozenset({"send", "pull", "commit-offset"})
"""The broker queue workload's ops (docs/broker-mode.md B6)."""

LIN_FAMILIES = {
    "register": ("read", "write", "cas"),
    "kv": ("get", "put", "append"),
    "txn": ("txn",),
    "mutex": ("acquire", "release"),
}
"""Op families checked for linearizability when no model is named, by their fs."""


def is_queue(s: OpShape) -> bool:
    return s.f in QUEUE_FS


def is_log(s: OpShape) -> bool:
    """Samples, keyless appends, and keyless reads of a log range (an object argument,
    or an object result)."""
    if s.f == "sample" or (s.f == "append" and not s.keyed):
        return True
    return s.f == "read" and not s.keyed and (s.inv_kind == "object" or s.ok_kind == "object")


def is_set(s: OpShape) -> bool:
    """Adds, and in a history with adds the keyless reads that are not log reads and did
    not return something other than a list."""
    if s.f == "add":
        return True
    return (
        s.f == "read"
        and not s.keyed
        and s.has_adds
        and not is_log(s)
        and (s.comp_type != "ok" or s.comp_kind == "array")
    )


def lin_family(s: OpShape) -> str | None:
    """The :data:`LIN_FAMILIES` family of an op that no other family claims, or None."""
    if is_queue(s) or is_log(s) or is_set(s):
        return None
    for family, fs in LIN_FAMILIES.items():
        if s.f in fs:
            return family
    return None
