"""One record of a history, Jepsen's operation.

Kept apart from the readers and writers in :mod:`harness.core.history` so that
every format module (JSONL, Parquet, EDN, Porcupine logs) can build ops without
importing the module that dispatches between formats.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["OP_TYPES", "NEMESIS", "FIELDS", "Op"]

OP_TYPES = ("invoke", "ok", "fail", "info")
NEMESIS = "nemesis"
FIELDS = ("index", "time", "type", "process", "f", "key", "value", "node", "error")


@dataclass(frozen=True, slots=True)
class Op:
    """One record of a history.

    ``process`` is an int for a client, ``"nemesis"`` for faults. ``value`` is
    any JSON value; its shape per workload is fixed in docs/architecture.md §3.
    """

    type: str
    process: int | str
    f: str
    value: Any = None
    key: str | None = None
    time: int = 0
    index: int = -1
    node: str | None = None
    error: str | None = None

    @property
    def is_client(self) -> bool:
        return self.process != NEMESIS

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}

    def replace(self, **changes: Any) -> Op:
        return dataclasses.replace(self, **changes)

    def complete(
        self, type: str, value: Any = None, *, error: str | None = None, time: int = 0
    ) -> Op:
        """The completion of this invocation: same process, f, key and node."""
        return Op(
            type=type,
            process=self.process,
            f=self.f,
            value=value,
            key=self.key,
            node=self.node,
            error=error,
            time=time,
        )
