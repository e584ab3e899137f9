"""What happened to one mutant: the result of each filter in order, and its outcome.

Pure data. A mutant meets three stages, each recorded even when it ends the
mutant's journey:

1. ``unit``: the node's own unit tests against the mutant tree; a failure (or a
   hang past the timeout) means the mutant is ``killed-by-unit``: the node's
   authors already guard that line, the campaign need not.
2. ``smoke``: a short fault-free run on the lab; if the cluster does not work
   without faults (run not VALID, or too few ok ops) the mutant is ``broken``:
   any test at all would notice, so it says nothing about the campaign.
3. ``campaign``: the default DLedger campaign; INVALID means ``killed``, VALID
   ``survived``, UNKNOWN ``unknown`` (neither, and shown as such).

Only ``killed`` and ``survived`` enter the mutation score.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "StageResult",
    "MutantRecord",
    "KILLED_BY_UNIT",
    "BROKEN",
    "KILLED",
    "SURVIVED",
    "UNKNOWN",
    "OUTCOMES",
    "outcome_of",
]

KILLED_BY_UNIT = "killed-by-unit"
BROKEN = "broken"
KILLED = "killed"
SURVIVED = "survived"
UNKNOWN = "unknown"
OUTCOMES = (KILLED_BY_UNIT, BROKEN, KILLED, SURVIVED, UNKNOWN)


@dataclass(frozen=True)
class StageResult:
    """One filter's verdict on one mutant.

    ``passed`` means the mutant got through this filter (unit tests green, cluster
    works fault-free, campaign VALID); ``verdict`` is the run's verdict (lab stages).
    """

    passed: bool
    detail: str = ""
    seconds: float = 0.0
    verdict: bool | str | None = None
    store: str | None = None
    ok_ops: int | None = None
    kinds: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["kinds"] = list(self.kinds)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StageResult:
        return cls(**{**d, "kinds": tuple(d.get("kinds") or ())})


@dataclass(frozen=True)
class MutantRecord:
    """A mutant (by id, with where and what) and the stages it went through."""

    id: str
    description: str
    operator: str
    area: str
    diff: str
    unit: StageResult | None = None
    smoke: StageResult | None = None
    campaign: StageResult | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        return outcome_of(self.unit, self.smoke, self.campaign)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "description": self.description,
            "operator": self.operator,
            "area": self.area,
            "outcome": self.outcome,
            "unit": self.unit.to_json() if self.unit else None,
            "smoke": self.smoke.to_json() if self.smoke else None,
            "campaign": self.campaign.to_json() if self.campaign else None,
            "settings": self.settings,
            "diff": self.diff,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MutantRecord:
        def stage(k: str) -> StageResult | None:
            v = d.get(k)
            return StageResult.from_json(v) if isinstance(v, dict) else None

        return cls(
            id=d["id"],
            description=d.get("description", ""),
            operator=d.get("operator", ""),
            area=d.get("area", ""),
            diff=d.get("diff", ""),
            unit=stage("unit"),
            smoke=stage("smoke"),
            campaign=stage("campaign"),
            settings=dict(d.get("settings") or {}),
        )


def outcome_of(
    unit: StageResult | None, smoke: StageResult | None, campaign: StageResult | None
) -> str:
    """The first filter that stopped the mutant decides; a missing stage is ``unknown``."""
    if unit is None:
        return UNKNOWN
    if not unit.passed:
        return KILLED_BY_UNIT
    if smoke is None:
        return UNKNOWN
    if not smoke.passed:
        return BROKEN
    if campaign is None:
        return UNKNOWN
    if campaign.verdict is False:
        return KILLED
    if campaign.verdict is True:
        return SURVIVED
    return UNKNOWN
