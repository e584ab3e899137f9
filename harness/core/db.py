"""What a database under test offers the harness (Jepsen's DB protocols).

``DB`` is required; the others are optional capabilities that nemeses probe with
``isinstance`` (all are ``runtime_checkable``), so a DB that cannot be paused
simply never gets a pause fault. Implementations: :mod:`harness.dbs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

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
    "InformsChecker",
    "Members",
    "Reconfigurable",
    "TransfersLeadership",
    "runs_under_faketime",
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


@runtime_checkable
class InformsChecker(Protocol):
    """A DB whose guarantees change what the checker may call an anomaly.

    ``checker_options()`` returns ``{checker name: {option: value}}`` (checker names as
    registered: ``linearizable``, ``log-safety``, ``queue``, ``total-queue``, ``set``), which
    the run layer merges into the checker options of the workload (harness/run/roles.py).
    Mode ``ha`` declares its loss window this way: ``{"log-safety": {"ha": {"sync": bool}}}``.
    It must depend only on the DB's options (no connection): ``splitbrain check`` rebuilds
    it from ``test.json`` on a machine that cannot reach the cluster.
    """

    def checker_options(self) -> Mapping[str, Mapping[str, Any]]: ...


@dataclass(frozen=True)
class Members:
    """A cluster's configuration as the cluster itself reports it, in the harness's node names.

    ``voters`` and ``learners`` map a node (a host of the run) to the DB's own identity
    for it, which changes when a node is added back with a fresh identity (a re-added
    reference node ``n3`` is ``n3.1``): the history must say which incarnation was asked
    for. ``pending`` is true while a change is uncommitted, ``leader`` names the node the
    answering member follows (None when it knows none), ``asked`` the node that answered
    and ``unknown`` identities the cluster lists that map to no node of the run.
    """

    voters: Mapping[str, str] = field(default_factory=dict)
    learners: Mapping[str, str] = field(default_factory=dict)
    pending: bool = False
    leader: str | None = None
    asked: str | None = None
    unknown: tuple[str, ...] = ()

    @property
    def nodes(self) -> frozenset[str]:
        """Every node the configuration names, voter or learner."""
        return frozenset(self.voters) | frozenset(self.learners)

    def to_json(self) -> dict[str, Any]:
        return {
            "voters": dict(sorted(self.voters.items())),
            "learners": dict(sorted(self.learners.items())),
            "pending": self.pending,
            "leader": self.leader,
            "asked": self.asked,
            **({"unknown": list(self.unknown)} if self.unknown else {}),
        }


@runtime_checkable
class Reconfigurable(Protocol):
    """A DB whose membership the harness can change while it serves (issue 29).

    The ``membership`` fault (nemesis/membership.py) is the only caller; these are the
    operator's hands, each synchronous and bounded (a RemoteError or NemesisError when
    the cluster does not do it in time, so the fault can record what happened):

    * ``members``: the configuration the cluster reports now, asked of ``via`` (that
      node's own view, possibly stale) or of whoever leads;
    * ``remove_member``: ``node`` out of the configuration through the leader (or only
      through ``via``: a staged fault must reach exactly one leader, and ``wait`` False
      sends the request and returns without waiting for the commit), then, once the
      cluster reports it gone, its process stopped (a removed node must not linger);
    * ``add_member``: ``node``'s host wiped (an empty disk), the DB started there with a
      fresh identity joining the cluster, added, and waited for until it votes.
    """

    def members(self, ctx: RunContext, via: str | None = None) -> Members: ...

    def remove_member(
        self, ctx: RunContext, node: str, *, via: str | None = None, wait: bool = True
    ) -> Members: ...

    def add_member(self, ctx: RunContext, node: str) -> Members: ...


@runtime_checkable
class TransfersLeadership(Protocol):
    """A :class:`Reconfigurable` DB that can also hand leadership to a chosen member."""

    def transfer_leader(self, ctx: RunContext, node: str) -> dict[str, Any]:
        """Ask the leader to hand over to ``node``; the DB's answer (code, new leader...)."""
        ...


def runs_under_faketime(db: object) -> bool:
    """Whether ``db``'s processes may run with the lab's libfaketime preloaded.

    A DB declares ``runs_under_faketime = False`` (a class attribute) when its processes
    must not get the preload (a JVM, which libfaketime can hang); the default is True. On a
    DB that opts out the runner strips ``LD_PRELOAD`` from every command it runs on the hosts
    (harness/run/phases.py), and clock faults through libfaketime then cannot move its clock.
    """
    return bool(getattr(db, "runs_under_faketime", True))
