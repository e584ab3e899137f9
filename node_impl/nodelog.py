"""``node.log``: the lines the checker and humans read after a run.

``ROLE term=T role=R leader=L`` on every change of (term, role, leader) and lines
starting ``SAFETY`` when an internal check of an invariant fails (spec §2): the harness
counts every one as an anomaly, so a disk's failure the node survives (a failed fsync or
checkpoint) is an ``INFO`` line instead. Each line goes to the
OS with one ``write`` so a SIGKILL never leaves a half line or loses a ROLE line
that was already acted on.

Every line ends ``time=<wall> mono=<monotonic>``: the wall stamp is what an
operator reads, but a clock fault moves it; ``CLOCK_MONOTONIC`` is the kernel's,
which libfaketime leaves alone, so a harness sharing the kernel can place lines
exactly. The file lives where the node is told (``--log-file``): a harness that
rolls the data directory back to its last fsync must not roll back its evidence.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

__all__ = ["NodeLog", "boot_id"]


def boot_id() -> str | None:
    """The kernel's boot id: whoever shares it shares ``CLOCK_MONOTONIC`` with this node."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    s = str(v)
    return s.replace(" ", "_").replace("\n", "_")


class NodeLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(self, kind: str, **fields: object) -> None:
        parts = [kind] + [f"{k}={_fmt(v)}" for k, v in fields.items()]
        parts.append(f"time={time.time():.6f} mono={time.monotonic():.6f}")
        data = (" ".join(parts) + "\n").encode()
        with contextlib.suppress(OSError):
            os.write(self._fd, data)

    def role(self, term: int, role: str, leader: str | None) -> None:
        self.line("ROLE", term=term, role=role, leader=leader)

    def safety(self, what: str, **fields: object) -> None:
        self.line("SAFETY", check=what, **fields)

    def info(self, what: str, **fields: object) -> None:
        self.line("INFO", event=what, **fields)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
