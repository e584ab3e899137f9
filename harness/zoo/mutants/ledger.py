"""The mutation run's results file: one JSON line per finished mutant, appended as it finishes.

A long run killed half-way keeps every mutant it finished; started again on the
same file it skips them (same id and same settings) and goes on with the rest.
A torn last line (the process killed mid-write) is ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.zoo.mutants.record import UNKNOWN, MutantRecord

__all__ = ["Ledger"]


class Ledger:
    """``mutants.jsonl`` in the run's output directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, MutantRecord]:
        """The last record of each mutant id in the file (later lines win)."""
        out: dict[str, MutantRecord] = {}
        if not self.path.exists():
            return out
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                rec = MutantRecord.from_json(d)
            except (ValueError, KeyError, TypeError):
                continue  # a torn line from a killed run
            out[rec.id] = rec
        return out

    def done(self, settings: dict[str, Any]) -> dict[str, MutantRecord]:
        """Records that need not run again: finished (not unknown) with these settings."""
        return {
            k: r for k, r in self.load().items() if r.outcome != UNKNOWN and r.settings == settings
        }

    def append(self, rec: MutantRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec.to_json()) + "\n")
            f.flush()
            os.fsync(f.fileno())
