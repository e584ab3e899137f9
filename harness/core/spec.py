"""The test: one plain, frozen description of a campaign, and the live context.

``TestSpec`` is what ``test.json`` records (no connections, no secrets);
``RunContext`` is what clients, nemeses and the DB get while the test runs.
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core.traffic import WriteGate

if TYPE_CHECKING:
    from harness.core.db import DB
    from harness.core.history import HistoryWriter
    from harness.core.nemesis import FaultJournal
    from harness.core.remote import Host, Remote

__all__ = ["TestSpec", "RunContext"]


@dataclass(frozen=True)
class TestSpec:
    __test__ = False  # a test of the cluster, not a pytest test class
    name: str
    nodes: tuple[str, ...]
    db: str = "dledger"
    workload: str = "append"
    nemesis: tuple[str, ...] = ()
    time_limit: float = 60.0
    concurrency: int = 5
    rate: float = 100.0
    seed: int = 0
    bug: str | None = None
    nemesis_interval: float = 5.0
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["nodes"] = list(self.nodes)
        d["nemesis"] = list(self.nemesis)
        return d


@dataclass
class RunContext:
    """Everything live during a run. Owned by the runner; others only read it."""

    spec: TestSpec
    hosts: dict[str, Host]
    remotes: dict[str, Remote]
    db: DB
    history: HistoryWriter
    rng: random.Random
    store_dir: str
    addresses: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    """``{service: {node: (host, port)}}`` from an Addressable DB (harness.core.db)."""
    writes: WriteGate = field(default_factory=WriteGate)
    """Closed during a lull (nemesis/lull.py): pool workers then send only reads."""
    stop: threading.Event = field(default_factory=threading.Event)
    journal: FaultJournal | None = None
    """Faults are written here before they land (None: not journaled, e.g. in unit tests)."""
    """Set when the load stops: a fault sequence waiting inside the run gives up at once."""

    @property
    def nodes(self) -> list[str]:
        return list(self.spec.nodes)
