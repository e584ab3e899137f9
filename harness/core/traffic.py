"""The workload's write gate: a lull holds every write while reads go on.

Real traffic has quiet spells, and some failures only show in them: a new
leader that writes nothing of its own term on election (Raft's Figure 8) is
harmless under steady writes, because the first client write of the new term
settles the log, but during a lull it can commit an old entry by counting,
let readers see it, and lose it to the next leader. A lull is a fault like any
other (``start-lull`` / ``stop-lull``, nemesis/lull.py, recorded in the
history and always healed); the runner and the generators only read the gate.
"""

from __future__ import annotations

import threading

__all__ = ["WriteGate"]


class WriteGate:
    """Open unless a lull is on. Thread-safe; the nemesis closes and opens it."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    @property
    def lull(self) -> bool:
        return not self._open.is_set()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def wait_open(self, timeout: float) -> bool:
        """True once writes may go (at once when no lull is on); False after ``timeout``."""
        return self._open.wait(timeout)
