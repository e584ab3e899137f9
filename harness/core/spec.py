"""The test: one plain, frozen description of a campaign, and the live context.

``TestSpec`` is what ``test.json`` records (no connections, no secrets);
``RunContext`` is what clients, nemeses and the DB get while the test runs.
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError
from harness.core.traffic import WriteGate

if TYPE_CHECKING:
    from harness.core.db import DB
    from harness.core.history import HistoryWriter
    from harness.core.nemesis import FaultJournal
    from harness.core.remote import Host, Remote

__all__ = [
    "TestSpec",
    "RunContext",
    "DEFAULT_CLIENT_TIMEOUT",
    "RUN_KEYS",
    "RECORD_KEYS",
]

DEFAULT_CLIENT_TIMEOUT = 5.0
"""Seconds a client op may take (``--client-timeout``): every built-in client uses it as its
network deadline, and the runner's watchdog completes ``info`` an op still open after twice
that (an op may make two calls: a redirect). 5 s is above the reference node's 2.5 s
quorum-ack timeout, so a slow commit still answers with its own code."""

RUN_KEYS = frozenset({"db", "nemesis", "client_timeout", "client_port", "checks", "deck"})
"""Keys of ``TestSpec.options`` that belong to the run, not to the workload: the DB's and the
nemesis' option maps, the client timeout, the fallback client port (workloads/addr.py), the
checks the user added to the workload's (``run --check NAME``), and the fault deck the
nemesis draws from (``nemesis.deck.Deck.to_json``; absent: the stock schedule)."""

RECORD_KEYS = frozenset({"zoo_profiles", "zoo_shuffle", "mutant"})
"""Keys the zoo records (or recorded, before the deck) in ``test.json`` for the reader; no
role reads them."""


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

    @property
    def client_timeout(self) -> float:
        """The one client timeout (``options["client_timeout"]``, else the default)."""
        v = self.options.get("client_timeout")
        if v is None:
            return DEFAULT_CLIENT_TIMEOUT
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ConfigError(
                f"must be a positive number of seconds, got {v!r}", field="client_timeout"
            )
        return float(v)

    @property
    def workload_options(self) -> dict[str, Any]:
        """The workload's own options: the flat keys of ``options`` (test.json keeps that
        layout), without the run's (:data:`RUN_KEYS`) and the zoo's records."""
        return {k: v for k, v in self.options.items() if k not in RUN_KEYS | RECORD_KEYS}

    @property
    def db_options(self) -> dict[str, Any]:
        """The DB's options (``options["db"]``, from ``--db-option``)."""
        return dict(self.options.get("db") or {})

    @property
    def nemesis_options(self) -> dict[str, Any]:
        """The nemesis package's options (``options["nemesis"]``, from ``--nemesis-option``)."""
        return dict(self.options.get("nemesis") or {})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestSpec:
        """The spec a ``test.json`` recorded (its extra keys, engine and hosts, ignored)."""
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or "name" not in data or "nodes" not in data:
            raise ConfigError("not a test.json: no name or nodes", field="test.json")
        kw = {k: v for k, v in data.items() if k in names}
        kw["nodes"] = tuple(kw["nodes"])
        kw["nemesis"] = tuple(kw.get("nemesis") or ())
        kw["options"] = dict(kw.get("options") or {})
        return cls(**kw)

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
    """Faults are written here before they land. Owned by the runner, which sets it once the
    clean start has emptied the old journal (``harness.run.cleanup.run_journal``); None when
    nothing is journaled (unit tests, remotes that reach no host)."""
    """Set when the load stops: a fault sequence waiting inside the run gives up at once."""

    @property
    def nodes(self) -> list[str]:
        return list(self.spec.nodes)
