"""Where a run's files live in the results store: one contract, read by many.

``store/<test-name>/<UTC timestamp>/`` holds the files named here; the runner
writes them (harness.run.store), and the checker, the report, the browser and
the zoo read them back. Naming them once means a reader never guesses which
history file a run directory has.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.core.errors import ConfigError, HistoryError

__all__ = [
    "TEST",
    "HISTORY_JSONL",
    "HISTORY_PARQUET",
    "RESULTS",
    "REPORT",
    "LOG",
    "NODES",
    "LATEST",
    "safe_name",
    "history_file",
    "is_run_dir",
]

TEST = "test.json"
HISTORY_JSONL = "history.jsonl"
HISTORY_PARQUET = "history.parquet"
RESULTS = "results.json"
REPORT = "report.html"
LOG = "splitbrain.log"
NODES = "nodes"
LATEST = "latest"

_NAME_OK = re.compile(r"[^A-Za-z0-9._+-]+")


def safe_name(name: str) -> str:
    """A test or node name usable as one path component (no slashes, no dot-dirs)."""
    cleaned = _NAME_OK.sub("-", name).strip("-.")
    if not cleaned:
        raise ConfigError(f"test name {name!r} has no usable characters", field="name")
    return cleaned


def is_run_dir(path: Path) -> bool:
    return (path / HISTORY_JSONL).exists() or (path / HISTORY_PARQUET).exists()


def history_file(path: str | os.PathLike[str]) -> Path:
    """The history of a run directory (Parquet when written, else the live JSONL).

    A path that is not a directory is returned as it is: it names a history file.
    """
    p = Path(path)
    if not p.is_dir():
        return p
    for name in (HISTORY_PARQUET, HISTORY_JSONL):
        if (p / name).exists():
            return p / name
    raise HistoryError(f"no {HISTORY_JSONL} or {HISTORY_PARQUET} in this directory", path=p)
