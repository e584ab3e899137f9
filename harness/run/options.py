"""What a run returns, and the knobs of the runner that are not part of the test's meaning."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.verdict import Verdict, exit_code_for, normalize

__all__ = ["RunResult", "RunOptions"]


@dataclass
class RunResult:
    store_dir: Path
    results: dict[str, Any]
    interrupted: bool = False
    reason: str | None = None
    ops: int = 0

    @property
    def valid(self) -> Verdict:
        return normalize(self.results.get("valid"))

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.valid)


@dataclass
class RunOptions:
    """Knobs of the runner that are not part of the test's meaning."""

    client_timeout: float | None = None
    """Override of the watchdog's limit (benchmarks; 0 turns it off). None: twice the test's
    own client timeout (``TestSpec.client_timeout``, ``run --client-timeout``), the one
    every client uses for its calls."""
    recovery_s: float = 3.0
    """The sleep between the heal and the final reads, for a DB that does not declare
    ``Converges``."""
    converge_timeout_s: float = 60.0
    """How long a ``Converges`` DB's replicas may take to agree after the heal (0: no wait,
    the fixed ``recovery_s`` sleep instead); not converged makes a valid verdict unknown."""
    final_op_timeout_s: float = 30.0
    """The watchdog's limit for one final read (at least the load's): a final read is the
    run's evidence and may make many calls (a set read key by key, hundreds of them), so
    only a stalled one is cut. Cut at the load's limit on a loaded machine, every set read
    ended ``info`` and the set check could judge nothing."""
    final_timeout_s: float = 60.0
    """Final reads stop once this long passes with no op completed (and at the latest
    this plus the test's time limit after they began)."""
    join_timeout_s: float = 15.0
    nemesis_join_timeout_s: float = 60.0
    leave_db_running: bool = False
    engine: str = "local"
    check: bool = True
    check_timeout: float | None = 300.0
    reporter: Callable[[Path], object] | None = None
    """Writes the HTML report of a finished run's store directory (the CLI passes one)."""
    progress: bool = True
