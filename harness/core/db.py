"""What a database under test offers the harness (Jepsen's DB protocols).

``DB`` is required; the others are optional capabilities that nemeses probe with
``isinstance`` (all are ``runtime_checkable``), so a DB that cannot be paused
simply never gets a pause fault. A capability a DB has but cannot honour in some
configuration, or a way of faulting it was never meant to survive, it declines by what a
fault does or needs (its ``declines`` mapping, read by :func:`harness.core.fault.declines`),
never by a fault's name. Implementations: :mod:`harness.dbs`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from harness.core.errors import ConfigError

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
    "FailsOver",
    "InformsChecker",
    "ResolvesArtifacts",
    "WorkloadChoice",
    "HasDefaultWorkload",
    "HasWorkloadDefaults",
    "Members",
    "Reconfigurable",
    "TransfersLeadership",
    "Convergence",
    "ConvergenceReport",
    "DataFiles",
    "data_files",
    "Converges",
    "poll_converged",
    "runs_under_faketime",
    "unreachable_situations",
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
class FailsOver(Protocol):
    """A master/slave DB an operator fails over by hand: the ``failover`` fault
    (nemesis/failover.py) kills the master, promotes the slave holding the most data and
    points the others at it; these are the operator's hands.

    ``statuses`` maps each node to its status (None: not answering), each with ``role``
    (``master`` or ``slave``), ``offset`` (an int: how much of the log it holds, comparable
    across nodes) and ``term`` (the epoch it serves in). ``promote`` makes ``node`` the
    master of ``epoch`` (raises when refused); ``follow`` points a slave at ``master``
    (False when the slave refused); ``reset_as_slave`` empties ``node``'s data and makes it
    a slave of ``master``, to be started next: classic replication cannot cut a divergent
    tail, so an old master rejoins empty.
    """

    def statuses(self, ctx: RunContext) -> dict[str, dict | None]: ...

    def promote(self, ctx: RunContext, node: str, epoch: int) -> None: ...

    def follow(self, ctx: RunContext, node: str, master: str, epoch: int) -> bool: ...

    def reset_as_slave(self, ctx: RunContext, node: str, master: str, epoch: int) -> None: ...

    def kill(self, ctx: RunContext, node: str) -> None: ...

    def start(self, ctx: RunContext, node: str) -> None: ...


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


@runtime_checkable
class DeclaresConfigurations(Protocol):
    """A DB whose safety logic changes with some of its options (the reference node's read
    mode: the leader's read index, a follower's, or reads through the log).

    ``configuration_dimensions()`` maps a DB option (a ``--db-option`` key) to the values
    that take different code paths, the DB's default first; ``configuration()`` is what
    this instance runs as, on those dimensions. The default campaign cycles through them
    over the seeds of ``--test-count`` runs where the user set none
    (harness/run/configurations.py), and each verdict says which configuration it tested.
    Depends on the options only (no connection).
    """

    def configuration_dimensions(self) -> Mapping[str, tuple[str, ...]]: ...

    def configuration(self) -> Mapping[str, str]: ...


@runtime_checkable
class ResolvesArtifacts(Protocol):
    """A DB whose programs are built or fetched by the harness (the Java DBs, from Maven).

    ``resolve_artifacts()`` is called once per run, before ``test.json`` is written and
    before any host is reached: the first run of a version fetches and builds, later runs
    find the cache. Its answer (JSON: the versions and checksums of what will run) is
    recorded as ``test.json``'s ``artifacts``, so a finding names exactly what ran. A
    failure is a ConfigError naming the option (a version that is not served) and ends
    the run before anything starts.
    """

    def resolve_artifacts(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class WorkloadChoice:
    """The workload a DB is best tested with, and the clients it wants.

    ``splitbrain run`` and the zoo start from it when no ``--workload`` is given, so a user
    gets the strongest check the DB offers without knowing its workloads. ``options`` are
    the workload's own (``--workload-option`` keys override them); ``client_timeout``,
    ``concurrency`` and ``rate`` replace the run's defaults unless the user gave them.
    """

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    concurrency: int | None = None
    rate: float | None = None
    client_timeout: float | None = None


@runtime_checkable
class HasDefaultWorkload(Protocol):
    """A DB that names its strongest workload (depends on its options only, no connection)."""

    def default_workload(self) -> WorkloadChoice: ...


@runtime_checkable
class HasWorkloadDefaults(Protocol):
    """A DB that gives a workload the user named the options it needs to speak to it.

    ``-w watch`` on Kafka needs the Kafka subscription client, as ``-w watch`` on etcd
    needs etcd's: a workload is built from its own options only (it never sees the DB),
    so the DB declares them here, by workload name, and the run puts them under the
    user's ``--workload-option`` (which win) and records them in ``test.json``. Declared
    from the DB's options alone, without a connection, like :class:`HasDefaultWorkload`.
    """

    def workload_defaults(self, workload: str) -> Mapping[str, Any]: ...


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

    A DB whose class has these methods but whose configured mode cannot change its
    membership declares the class attribute ``reconfigurable = False`` (the reference
    node's mode ha): the membership fault then refuses it before the run.
    """

    def members(self, ctx: RunContext, via: str | None = None) -> Members: ...

    def remove_member(
        self, ctx: RunContext, node: str, *, via: str | None = None, wait: bool = True
    ) -> Members: ...

    def add_member(self, ctx: RunContext, node: str) -> Members: ...


@runtime_checkable
class TransfersLeadership(Protocol):
    """A DB that can hand leadership to a chosen member, :class:`Reconfigurable` or not.

    The ``membership`` fault plays its ``transfer`` variant on any such DB (a DB that is
    not ``Reconfigurable``, as DLedger 0.x, plays that variant alone, and the deck keeps
    only its ``reconfig-transfer`` motif); such a DB also gives ``leader_seen_by(ctx,
    node) -> node | None``, the leader ``node`` follows, so a restarted target is
    asked once it follows again.

    ``transfer_leader`` returns the DB's answer (JSON; the ``membership`` fault records it)
    with at least ``from`` (the node that led when asked), ``leader`` (the node leading
    when the DB answered, None if none was known) and ``outcome``, the answer read in the
    DB's own terms: ``"handed-over"`` (the target leads), ``"kept"`` (the old leader
    still leads in its term: the DB gave up, e.g. a timeout), ``"lost"`` (leadership
    left the old leader and did not reach the target), ``"refused"`` (nothing was done),
    or None when the answer does not say.

    A DB whose transfer promises to hand over or keep, never lose (the leader brings the
    target up to date before it tells it to campaign, as DLedger's preferred leader and
    Raft's TimeoutNow do) declares the class attribute ``transfer_hands_over = True``.
    The fault records the promise with each transfer, and the ``transfer`` checker
    (checker/transfer.py) judges the quiet ones by it; without the declaration the
    answers are recorded and never judged.
    """

    def transfer_leader(self, ctx: RunContext, node: str) -> dict[str, Any]:
        """Ask the leader to hand over to ``node``; the DB's answer (see the class)."""
        ...


@dataclass(frozen=True)
class Convergence:
    """One look at the replicas: whether they agreed at that moment, and what was seen.

    ``seen`` is JSON (it goes into the history as it is). ``token`` is what must not change
    between the consecutive looks that count as converged (the leader, the last sequence):
    two agreeing looks at two different states prove nothing about either.
    """

    converged: bool
    seen: Mapping[str, Any] = field(default_factory=dict)
    token: Any = None
    why: str | None = None
    """What was still off, in a few words (shown when the wait ends without converging)."""


@dataclass(frozen=True)
class ConvergenceReport:
    """How the wait after the heal ended: converged after ``elapsed_s``, or not within it.

    ``last`` is what the last look saw (JSON), ``why`` says what was still off when the
    replicas had not converged (or what failed). The runner records it as the ``converge``
    op's completion, so the history keeps what the final reads were read against.
    """

    converged: bool
    elapsed_s: float
    polls: int = 0
    last: Mapping[str, Any] = field(default_factory=dict)
    why: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "converged": self.converged,
            "elapsed_s": round(self.elapsed_s, 3),
            "polls": self.polls,
            "last": dict(self.last),
            **({"why": self.why} if self.why else {}),
        }


@runtime_checkable
class Converges(Protocol):
    """A DB that can tell when its replicas have caught up with each other after the heal.

    The runner calls ``wait_converged`` once, after the heal and before the final reads
    (in place of the fixed recovery sleep), and records the report: final reads taken
    while replicas still catch up judge a moment, not the outcome. A run whose replicas
    did not converge in time is at best ``unknown`` (harness/run/converge.py).
    """

    def wait_converged(self, ctx: RunContext, deadline: float) -> ConvergenceReport:
        """Block until the replicas agree or ``time.monotonic()`` passes ``deadline``; never
        raise for a cluster that is merely not there yet (say so in the report)."""
        ...


def poll_converged(
    look: Callable[[], Convergence],
    deadline: float,
    *,
    stable: int = 2,
    interval: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ConvergenceReport:
    """``look`` until ``stable`` looks in a row say converged with one ``token``, or ``deadline``.

    One agreeing look can be a replica that reports itself current a moment before it
    learns of the next entry; the same state seen twice an ``interval`` apart cannot. A
    look that raises counts as not converged (its error is what was seen). ``look`` runs
    at least once, and again at the deadline if the last look was before it.
    """
    started = clock()
    polls, run = 0, 0
    token: Any = None
    last: Mapping[str, Any] = {}
    why: str | None = None
    while True:
        try:
            c = look()
        except Exception as e:  # noqa: BLE001 - an unreachable node is "not yet", said so
            c = Convergence(False, {}, why=f"the look failed: {type(e).__name__}: {e}")
        polls += 1
        last = c.seen
        if c.converged:
            run = run + 1 if run and c.token == token else 1
            token = c.token
            if run >= stable:
                return ConvergenceReport(True, clock() - started, polls, last)
            why = f"{run} of {stable} agreeing looks"
        else:
            run, why = 0, c.why
        now = clock()
        if now >= deadline:
            return ConvergenceReport(
                False, now - started, polls, last, why or "the last look did not agree"
            )
        sleep(max(0.0, min(interval, deadline - now)))


@dataclass(frozen=True)
class DataFiles:
    """Which of a node's files hold its durable state, as globs a disk fault aims at.

    A DB declares it as ``data_files`` (a class attribute or a property). The ``corrupt``
    fault damages the DB's own files, not the reference node's ``data.log``: ``under`` is
    the data directory relative to the node's directory (``HasFootprint.node_dir``);
    ``log`` are globs, relative to it, of the files holding the log's entries (a bit
    flip, a cut tail or a copied chunk hits the last match in name order: the newest
    segment); ``state`` globs of the file holding the term and vote (what ``rollback``
    copies and restores), empty when the DB keeps them nowhere apart. A glob holds
    letters, digits and ``. _ - / * ? [ ]`` only (a host's shell expands it).
    """

    under: str = "data"
    log: tuple[str, ...] = ()
    state: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        import re

        for name, globs in (("under", (self.under,)), ("log", self.log), ("state", self.state)):
            for g in globs:
                if (
                    not isinstance(g, str)
                    or not re.fullmatch(r"[A-Za-z0-9._*?\[\]/-]+", g)
                    or g.startswith("/")
                    or ".." in g.split("/")
                ):
                    raise ConfigError(
                        f"data_files {name} {g!r}: a relative path or glob of letters, digits "
                        "and . _ - / * ? [ ] only",
                        field=f"data_files.{name}",
                    )
        if not self.log:
            raise ConfigError("data_files must name at least one log glob", field="data_files.log")


def data_files(db: object) -> DataFiles | None:
    """``db``'s :class:`DataFiles`, or None when it declares none (a malformed declaration
    is a ConfigError naming the DB)."""
    got = getattr(db, "data_files", None)
    if got is None or isinstance(got, DataFiles):
        return got
    raise ConfigError(
        f"{type(db).__name__}.data_files must be a harness.core.db.DataFiles, got {got!r}",
        field="data_files",
    )


def unreachable_situations(db: object) -> dict[str, str]:
    """The coverage situations (checker/situations.py) a correct run of ``db`` cannot reach,
    each with why, as the DB declares them.

    A DB declares ``unreachable_situations`` (a mapping, or a property) when its design
    rules a situation out: the reference node answers a read only as a leader that has
    confirmed its leadership, so a read answered by a non-leader is, on it, the symptom of
    a stale read and not a situation a campaign can produce. Such a situation never counts
    as "never reached" (the coverage block keeps it under ``by_design``); it still counts
    when it happens. A malformed declaration is a ConfigError naming the DB.
    """
    got = getattr(db, "unreachable_situations", None)
    if got is None:
        return {}
    if not isinstance(got, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in got.items()
    ):
        raise ConfigError(
            f"{type(db).__name__}.unreachable_situations must map situation names to "
            f"reasons (str to str), got {got!r}",
            field="unreachable_situations",
        )
    return dict(got)


def runs_under_faketime(db: object) -> bool:
    """Whether ``db``'s processes may run with the lab's libfaketime preloaded.

    A DB declares ``runs_under_faketime = False`` (a class attribute) when its processes
    must not get the preload (a JVM, which libfaketime can hang); the default is True. On a
    DB that opts out the runner strips ``LD_PRELOAD`` from every command it runs on the hosts
    (harness/run/phases.py), and clock faults through libfaketime then cannot move its clock.
    """
    return bool(getattr(db, "runs_under_faketime", True))
