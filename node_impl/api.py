"""What the servers need from a node, as typed protocols.

``server.py`` serves both node modes (the DLedger :class:`node_impl.node.Node` and
the master/slave :class:`node_impl.ha.HANode`), and ``node.py`` starts the servers.
Typing the server against these protocols, rather than against the node class,
keeps the import graph one-way (node -> server -> api) and says exactly which
parts of a node its wire API may touch.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from node_impl.bugs import Bugs
    from node_impl.config import NodeConfig
    from node_impl.election import Elector
    from node_impl.follower import EntryHandler
    from node_impl.kv import KV
    from node_impl.nodelog import NodeLog
    from node_impl.store import LogStore

__all__ = ["DLedgerNode", "KVNode", "LogNode", "Proposal", "ReadView"]


@dataclass(frozen=True, slots=True)
class ReadView:
    """How far a ``get`` may read, decided by the node's mode and the request.

    ``committed_only``: the reader may see committed entries only, so asking past
    ``limit`` is NOT_COMMITTED (the entry may yet commit) rather than an empty
    answer; a local read, and an HA master's read, see everything written.
    """

    limit: int
    committed_only: bool


class Proposal(Protocol):
    """A write in flight; ``fut`` resolves to (code, result) once it may be acked."""

    @property
    def fut(self) -> asyncio.Future[Any]: ...


class LogNode(Protocol):
    """Any node's log API: status, append and get (both modes)."""

    @property
    def id(self) -> str: ...
    @property
    def store(self) -> LogStore: ...
    @property
    def committed(self) -> int: ...
    @property
    def leader_id(self) -> str | None: ...
    @property
    def leader_addr(self) -> str | None: ...

    def status(self) -> dict: ...

    def propose(self, bodies: list[bytes], kind: str) -> Proposal | str:
        """Append ``bodies``; a code string (NOT_LEADER, ...) when it cannot."""
        ...

    async def read_view(self, local: bool) -> ReadView | str:
        """The read limit for one get, or a code string (NOT_LEADER, ...)."""
        ...


class KVNode(LogNode, Protocol):
    """A node with the replicated kv map (mode ``dledger``)."""

    @property
    def cfg(self) -> NodeConfig: ...
    @property
    def bugs(self) -> Bugs: ...
    @property
    def kv(self) -> KV: ...
    @property
    def applied(self) -> int: ...

    @property
    def term(self) -> int: ...

    async def read_barrier(self) -> tuple[str | None, int]: ...
    def lease_valid_wallclock(self) -> bool: ...

    # membership (docs/membership.md)
    def members_view(self) -> dict: ...
    def add_member(self, node: str, addr: str) -> Proposal | str: ...
    def remove_member(self, node: str) -> Proposal | str: ...
    async def transfer_leader(self, target: str, timeout: float) -> tuple[str, dict]: ...


class DLedgerNode(KVNode, Protocol):
    """What the DLedger peer server dispatches to."""

    @property
    def stopping(self) -> bool: ...
    @property
    def log(self) -> NodeLog: ...
    @property
    def elector(self) -> Elector: ...
    @property
    def handler(self) -> EntryHandler: ...

    def handle_timeout_now(self, msg: dict) -> dict: ...
    async def answer_read_index(self, msg: dict) -> dict: ...
