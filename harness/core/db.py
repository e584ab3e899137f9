"""What a database under test offers the harness (Jepsen's DB protocols).

``DB`` is required; the others are optional capabilities that nemeses probe with
``isinstance`` (all are ``runtime_checkable``), so a DB that cannot be paused
simply never gets a pause fault. Implementations: :mod:`harness.dbs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = [
    "DB",
    "Killable",
    "Pausable",
    "HasPrimaries",
    "HasLogFiles",
    "WaitsReady",
    "Addressable",
    "Address",
    "HasFootprint",
    "Upgradable",
]


@runtime_checkable
class DB(Protocol):
    def setup(self, ctx: RunContext, node: str) -> None:
        """Install and start the DB on ``node``; leaves it serving."""
        ...

    def teardown(self, ctx: RunContext, node: str) -> None:
        """Stop the DB on ``node`` and wipe its data."""
        ...


@runtime_checkable
class Killable(Protocol):
    def kill(self, ctx: RunContext, node: str) -> None:
        """SIGKILL the DB process on ``node``."""
        ...

    def start(self, ctx: RunContext, node: str) -> None:
        """Start the DB on ``node`` again with its existing data."""
        ...


@runtime_checkable
class Pausable(Protocol):
    def pause(self, ctx: RunContext, node: str) -> None: ...

    def resume(self, ctx: RunContext, node: str) -> None: ...


@runtime_checkable
class HasPrimaries(Protocol):
    def primaries(self, ctx: RunContext) -> list[str]:
        """Nodes that currently believe they lead (may be several, or none)."""
        ...


@runtime_checkable
class HasLogFiles(Protocol):
    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        """Remote paths to fetch into ``store/.../nodes/<node>/``."""
        ...


@runtime_checkable
class WaitsReady(Protocol):
    def wait_ready(self, ctx: RunContext) -> None:
        """Block until the cluster serves clients (a leader elected, replicas in sync).

        Called once, after every node's ``setup``, before the first op; raise to
        stop the run with a clear error instead of recording a warm-up as faults.
        On hosts with an emulated CPU it is called again after the heal, before
        the final reads (an error there is only logged).
        """
        ...


Address: TypeAlias = "tuple[str, int]"
"""(host, port) as the harness reaches it."""


@runtime_checkable
class Addressable(Protocol):
    def addresses(self, ctx: RunContext) -> dict[str, dict[str, Address]]:
        """Where each service listens: ``{service: {node: (host, port)}}``.

        The DB chose the ports, so it knows the truth; clients read it from
        ``ctx.addresses``, filled by the runner before the DB is set up. The
        service every client uses is ``"client"``; others (e.g. Redis's
        ``"sentinel"``) are the DB's own.
        """
        ...


@runtime_checkable
class HasFootprint(Protocol):
    """What a node of this DB leaves on its host: a directory, processes, ports.

    A run starts only on a clean cluster (harness/run/cleanup.py): a node left by
    a killed harness is found by these, stopped and wiped before setup, and the
    ports must be free before the first op.
    """

    root: str
    """The absolute directory under which every node directory of this DB lives."""

    def node_dir(self, ctx: RunContext, node: str) -> str: ...

    def pidfiles(self, ctx: RunContext, node: str) -> list[str]: ...

    def ports(self, ctx: RunContext, node: str) -> list[int]: ...


@runtime_checkable
class Upgradable(Protocol):
    """A DB whose nodes can be switched, in place and with their data, to a new mode.

    The rolling ``upgrade`` fault (nemesis/upgrade.py) decides which node goes
    next from ``statuses``; these are the operator's hands. ``seal`` makes the old
    mode's writer read-only, so every node can reach one final old log;
    ``switch`` stops a node cleanly and starts it in the new mode, from then on
    for good (a kill's restart included), and answers the node's divided offset.
    """

    def statuses(self, ctx: RunContext) -> dict[str, dict | None]: ...

    def upgraded(self, ctx: RunContext) -> frozenset[str]: ...

    def seal(self, ctx: RunContext, node: str) -> None: ...

    def switch(self, ctx: RunContext, node: str) -> int: ...
