"""Where a checker's history comes from: ops in memory or a path, sorted out once.

Every entry point that checks a history (``checker.dispatch.check_history``, the CLI,
the run's analysis) accepts either a sequence of ops or a path (a history file in any
format :func:`harness.core.history.read_history` reads, or a run's store directory);
this module is the one place that tells the two apart and reads the path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

from harness.core.history import read_history
from harness.core.layout import history_file
from harness.core.op import Op
from harness.core.paired import PairedHistory

__all__ = ["HistorySource", "history_path", "read_ops", "read_paired"]

HistorySource: TypeAlias = "Sequence[Op] | str | os.PathLike[str]"


def history_path(source: HistorySource) -> Path | None:
    """The history file a source names (a store directory resolved to its history), or
    None for ops in memory."""
    if isinstance(source, (str, os.PathLike)):
        return history_file(Path(source))
    return None


def read_ops(source: HistorySource) -> Sequence[Op]:
    """The ops of a source: as given, or read from its file (HistoryError if unreadable)."""
    path = history_path(source)
    if path is None:
        assert not isinstance(source, (str, os.PathLike))
        return source
    return read_history(path)


def read_paired(source: HistorySource, *, strict: bool = True) -> PairedHistory:
    """The client ops of a source, paired once (:class:`PairedHistory`); HistoryError on
    a malformed history, including (``strict``) a process reused after ``info``."""
    return PairedHistory.of(read_ops(source), strict=strict)
