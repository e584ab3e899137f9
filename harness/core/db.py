"""What a database under test offers the harness (Jepsen's DB protocols).

``DB`` is required; the others are optional capabilities that nemeses probe with
``isinstance`` (all are ``runtime_checkable``), so a DB that cannot be paused
simply never gets a pause fault. Implementations: :mod:`harness.dbs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["DB", "Killable", "Pausable", "HasPrimaries", "HasLogFiles"]


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
