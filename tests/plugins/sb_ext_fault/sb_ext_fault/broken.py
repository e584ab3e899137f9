"""Faults that must be refused at registration (tests/harness/test_fault_registry.py)."""

from __future__ import annotations

from harness.core.fault import Fault
from sb_ext_fault import _nemesis

NO_HEAL = Fault(name="no-heal", nemesis=_nemesis)
"""No heal_rank: nothing says where, or whether, its cure runs."""

BAD_RANK = Fault(name="bad-rank", nemesis=_nemesis, heal_rank=-3)

TAKEN = Fault(name="kill", nemesis=_nemesis, heal_rank=501)
"""A name a built-in has."""

ALIAS_TAKEN = Fault(
    name="alias-taken",
    nemesis=_nemesis,
    heal_rank=502,
    variants=("ring",),
    aliases={"partition-ring": ("ring",)},
)
"""An alias a built-in fault has."""
