"""PostgreSQL (Debian's ``postgresql`` package) as one server, for the transactional
workloads (``-w list-append``, ``-w rw-register``; docs/transactions.md).

One server runs on the test's first node; every node's client address names it, so
workers bound to any node talk to the one database. The faults that reach it are the
process ones (``kill``: SIGKILL to the postmaster and every backend, then a restart that
replays the WAL; ``pause``), which test that a committed transaction survives a crash and
that a client cut off mid-transaction leaves nothing half-done.

With ``replicas=N`` the nodes after the first run streaming standbys of it
(``pg_basebackup -R``), asynchronous by default, synchronous with ``sync=true`` (a commit
waits until one standby has flushed it: ``synchronous_standby_names = 'ANY 1 (*)'``, set
once the standbys run).
The DB then declares ``FailsOver``: the ``failover`` fault kills the primary, promotes
(``pg_promote``) the standby that received the most WAL, points the others at it
(``primary_conninfo``, reloaded), and brings the old primary back as a fresh standby. Clients
always connect to the current primary. A failover of asynchronous replication loses the
commits the promoted standby had not received, which PostgreSQL's manual says it may
("Log-Shipping Standby Servers": asynchronous replication can lose the transactions not yet
shipped when the primary crashes). The DB declares that to the txn checker as its loss
window (:func:`loss_window`, the concept the queue checkers take from Kafka and
RocketMQ): commits a failover lost are measured there (how many, acknowledged how long
before the promotion), not judged; with ``sync`` there is no window and a lost commit is
INVALID. Every run declares ``durable``: with fsync and ``synchronous_commit`` on, an
acknowledged commit survives a crash.

Each transaction runs in one ``BEGIN ISOLATION LEVEL ...`` / ``COMMIT`` over psycopg
(libpq from Debian). The isolation level is the DB option ``isolation``, and the checker
is told what PostgreSQL's documentation promises for it, not the SQL name: ``read
committed`` is read committed; ``repeatable read`` is implemented as snapshot isolation
(PostgreSQL's manual, "Transaction Isolation"), so it is held to snapshot isolation, not
to Adya's PL-2.99 which it does not claim; ``serializable`` (SSI) is serializable. The
option ``claim`` overrides that (e.g. ``strict-serializable`` to ask for real-time order
too).

Outcomes: an error the server reported (a serialization failure, a deadlock, a statement
timeout) before or at ``COMMIT`` aborted the transaction: ``fail``. A lost connection
before ``COMMIT`` was sent also aborts it (the server rolls back a transaction whose
client is gone): ``fail``. A connection lost while ``COMMIT`` was in flight is ``info``.

Per node directory (``<root>/[<lab>/]<test>/<node>/``): ``data/`` (the cluster, owned by
the ``postgres`` user), ``postgres.pid``, ``postgres.log``, and the Unix socket.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from harness.core.db import WorkloadChoice
from harness.core.errors import ConfigError, RemoteError
from harness.core.fanout import map_values
from harness.core.options import as_options, declares_options, option
from harness.dbs.daemon import (
    PidfileDaemonDB,
    absolute_root,
    ensure_package,
    raise_if_exited,
)
from workloads.txn import TxnAborted

if TYPE_CHECKING:
    from harness.core.db import DB
    from harness.core.spec import RunContext

__all__ = [
    "PostgresOptions",
    "PostgresDB",
    "PgSession",
    "CLAIMS",
    "factory",
    "loss_window",
    "postgresql_conf",
    "standby_conf",
]

log = logging.getLogger(__name__)

SQL_LEVEL = {
    "read-committed": "READ COMMITTED",
    "repeatable-read": "REPEATABLE READ",
    "serializable": "SERIALIZABLE",
}
CLAIMS = {
    "read-committed": "read-committed",
    "repeatable-read": "snapshot-isolation",
    "serializable": "serializable",
}
"""What PostgreSQL's manual promises for each level, as the txn checker's isolation names."""
USER = "postgres"
DBNAME = "postgres"


@dataclass(frozen=True)
class PostgresOptions:
    isolation: Literal["read-committed", "repeatable-read", "serializable"] = option(
        "serializable", "the isolation level every transaction runs at"
    )
    claim: (
        Literal[
            "read-uncommitted",
            "read-committed",
            "snapshot-isolation",
            "repeatable-read",
            "serializable",
            "strict-serializable",
        ]
        | None
    ) = option(None, "the level the checker holds it to (default: what the manual promises)")
    replicas: int = option(
        0, "streaming standbys, on the nodes after the first (0: one server)", minimum=0
    )
    sync: bool = option(
        False, "synchronous replication: a commit waits for one standby to flush it"
    )
    root: str = option("/var/lib/splitbrain/postgres", "absolute directory of the node dirs")
    port: int = option(5432, "the server's port", minimum=1, maximum=65535)
    bin_dir: str | None = option(None, "PostgreSQL's bin directory (default: Debian's newest)")
    ready_timeout: float = option(60.0, "seconds the server may take to start", minimum=1)
    leave_running: bool = option(False, "leave the server running after the test")

    def checker_options(self) -> dict[str, dict[str, Any]]:
        txn: dict[str, Any] = {"isolation": self.claim or CLAIMS[self.isolation], "durable": True}
        window = loss_window(self.replicas, self.sync)
        if window:
            txn["loss_window"] = window
        return {"txn": txn}


def loss_window(replicas: int, sync: bool) -> str | None:
    """What a failover may lose of the acknowledged commits, in words, or None.

    With asynchronous standbys the primary acknowledges a commit once its own WAL is
    flushed; a standby promoted after the primary's crash holds only the WAL it had
    received. With ``sync`` (``synchronous_standby_names = 'ANY 1 (*)'``) the commit waits
    until one standby has flushed it, and the failover promotes the standby that received
    the most WAL, so it holds every acknowledged commit: no window. One server has no
    failover."""
    if replicas == 0 or sync:
        return None
    return (
        "asynchronous streaming replication: a failover loses the commits the promoted "
        "standby had not received"
    )


def node_conf(*, addr: str, port: int, socket_dir: str) -> list[str]:
    """The settings that differ per node (a standby's copy of the primary's files has the
    primary's): where it listens."""
    return [
        f"listen_addresses = '{addr}'",
        f"port = {port}",
        f"unix_socket_directories = '{socket_dir}'",
    ]


SYNC_STANDBYS = "ANY 1 (*)"
"""``synchronous_standby_names`` with ``sync``: a commit waits until one standby flushed it."""


def standby_conf(*, addr: str, port: int, socket_dir: str, sync: bool) -> str:
    """What a standby adds to the configuration it copied: its own listen settings and,
    with ``sync``, the synchronous standbys it will wait for once promoted. ALTER SYSTEM
    on the primary writes the primary's own ``postgresql.auto.conf``, which no WAL
    carries, so a standby copied before it (every first standby) would otherwise be
    promoted without synchronous replication; a standby ignores the setting until then."""
    lines = node_conf(addr=addr, port=port, socket_dir=socket_dir)
    if sync:
        lines.append(f"synchronous_standby_names = '{SYNC_STANDBYS}'")
    return "\n".join(lines) + "\n"


def postgresql_conf(*, addr: str, port: int, socket_dir: str) -> str:
    """The server's settings: durable commits (fsync on, synchronous_commit on), as a
    user who trusts acknowledged commits runs it."""
    return (
        "\n".join(
            [
                *node_conf(addr=addr, port=port, socket_dir=socket_dir),
                "max_wal_senders = 16",
                "wal_keep_size = 256MB",
                "max_connections = 200",
                "fsync = on",
                "synchronous_commit = on",
                "shared_buffers = 32MB",
                "logging_collector = off",
                "log_min_messages = warning",
                "log_line_prefix = '%m [%p] '",
                "deadlock_timeout = 200ms",
            ]
        )
        + "\n"
    )


def _bin_dir(given: str | None) -> str:
    if given:
        return given.rstrip("/")
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0,
    )
    return found[-1].rsplit("/", 1)[0] if found else "/usr/lib/postgresql/15/bin"


class PgSession:
    """One client connection; each transaction is BEGIN ... COMMIT (module docstring)."""

    def __init__(
        self, server: Callable[[], tuple[str, int]], kind: str, level: str, timeout: float
    ) -> None:
        self.server, self.timeout = server, timeout
        self.kind = kind
        self.level = SQL_LEVEL[level]
        self.conn = self._open()

    def _open(self) -> Any:
        """A connection to the server that is primary now (it moves on a failover)."""
        import psycopg

        host, port = self.server()
        return psycopg.connect(
            host=host,
            port=port,
            user=USER,
            dbname=DBNAME,
            autocommit=True,
            connect_timeout=max(1, int(self.timeout)),
            options=f"-c statement_timeout={int(self.timeout * 1000)}",
        )

    def transact(self, mops: list[list[Any]]) -> list[list[Any]]:
        import psycopg

        if self.conn.closed or self.conn.broken:  # the server went: connect again first
            try:
                self.conn = self._open()
            except psycopg.Error as e:
                raise TxnAborted(f"connect: {_pg_error(e)}") from e  # nothing was sent
        cur = self.conn.cursor()
        out: list[list[Any]] = []
        try:
            cur.execute(f"BEGIN ISOLATION LEVEL {self.level}")
            for f, k, v in mops:
                if f == "r":
                    cur.execute(
                        "SELECT v FROM lists WHERE k = %s"
                        if self.kind == "list-append"
                        else "SELECT v FROM registers WHERE k = %s",
                        (k,),
                    )
                    row = cur.fetchone()
                    if self.kind == "list-append":
                        out.append(["r", k, [] if row is None else list(row[0])])
                    else:
                        out.append(["r", k, None if row is None else row[0]])
                elif f == "append":
                    cur.execute(
                        "INSERT INTO lists (k, v) VALUES (%s, ARRAY[%s]::bigint[]) "
                        "ON CONFLICT (k) DO UPDATE SET v = lists.v || excluded.v",
                        (k, v),
                    )
                    out.append([f, k, v])
                else:
                    cur.execute(
                        "INSERT INTO registers (k, v) VALUES (%s, %s) "
                        "ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                        (k, v),
                    )
                    out.append([f, k, v])
        except psycopg.Error as e:
            # nothing was committed: a server error aborted it, a lost connection too
            self._rollback()
            raise TxnAborted(_pg_error(e)) from e
        try:
            cur.execute("COMMIT")
        except psycopg.Error as e:
            if getattr(e, "sqlstate", None):
                raise TxnAborted(_pg_error(e)) from e
            raise  # the connection went while COMMIT was in flight: unknown
        return out

    def _rollback(self) -> None:
        try:
            if not self.conn.closed:
                self.conn.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the connection is gone; the server rolls back
            self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def lsn_int(lsn: Any) -> int:
    """A WAL position ``X/Y`` (hex halves) as one comparable integer; 0 when unknown."""
    if not lsn:
        return 0
    hi, _, lo = str(lsn).partition("/")
    return (int(hi, 16) << 32) | int(lo or "0", 16)


def _pg_error(e: Exception) -> str:
    state = getattr(e, "sqlstate", None)
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return f"postgres {state}: {text}" if state else f"postgres: {text}"


class PostgresDB(PidfileDaemonDB):
    """Installs, starts, kills, pauses and removes one PostgreSQL server."""

    runs_under_faketime = False
    """The server runs on the real clock (its timeouts and WAL stamps); clock faults are
    refused for it."""

    def __init__(self, options: PostgresOptions) -> None:
        self.root = absolute_root(options.root)
        self.o = options
        self.bin = _bin_dir(options.bin_dir)
        self._primary: str | None = None
        """The server that is primary now (None: the first node); moved by ``promote``."""
        self._epoch = 1

    @property
    def declines(self) -> dict[str, str]:
        """A failover needs standbys (asynchronous ones declare a loss window): one server
        declines the capability it otherwise has (``harness.core.fault.declines``)."""
        if self.o.replicas == 0:
            return {"FailsOver": "one server and no standby to promote (--db-option replicas=2)"}
        return {}

    # what the harness asks --------------------------------------------------
    def default_workload(self) -> WorkloadChoice:
        return WorkloadChoice(name="list-append")

    def checker_options(self) -> dict[str, dict[str, Any]]:
        return self.o.checker_options()

    def server(self, ctx: RunContext) -> str:
        """The primary now."""
        return self._primary or ctx.nodes[0]

    def servers(self, ctx: RunContext) -> list[str]:
        """Every node that runs a server: the first and its ``replicas`` standbys."""
        return list(ctx.nodes[: 1 + self.o.replicas])

    def primaries(self, ctx: RunContext) -> list[str]:
        return [self.server(ctx)]

    def _addr(self, ctx: RunContext, node: str | None = None) -> tuple[str, int]:
        return ctx.hosts[node or self.server(ctx)].address, self.o.port

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        a = self._addr(ctx)
        return {"client": {n: a for n in ctx.nodes}}

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        return [self.o.port] if node in self.servers(ctx) else []

    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        d = self.node_dir(ctx, node)
        return {
            "dir": d,
            "data": f"{d}/data",
            "pid": f"{d}/postgres.pid",
            "log": f"{d}/postgres.log",
        }

    def txn_session(self, ctx: RunContext, node: str, kind: str) -> PgSession:
        from harness.core.workload import client_timeout

        return PgSession(lambda: self._addr(ctx), kind, self.o.isolation, client_timeout(ctx))

    # lifecycle ----------------------------------------------------------------
    def _as_pg(self, cmd: str) -> str:
        """``cmd`` as the postgres user (initdb and the server refuse root), on the real
        clock (libfaketime's shared memory is root's), exec'd so the pid stays the server's."""
        return f"env -u LD_PRELOAD setpriv --reuid={USER} --regid={USER} --init-groups -- {cmd}"

    def setup(self, ctx: RunContext, node: str) -> None:
        if self.o.replicas >= len(ctx.nodes):
            raise ConfigError(
                f"replicas={self.o.replicas} needs {self.o.replicas + 1} nodes; the test has "
                f"{len(ctx.nodes)}",
                field="replicas",
            )
        if node not in self.servers(ctx):
            return
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        ensure_package(remote, f"{self.bin}/postgres", "postgresql")
        self.stop_leftover(ctx, node, "a postgres", "postgres")
        if node != ctx.nodes[0]:
            self._await_primary(ctx, node)  # the primary first: a standby copies it
            self.reset_as_slave(ctx, node, ctx.nodes[0], 1)
            self.start(ctx, node)
            self._await_up(ctx, node)
            return
        self._primary, self._epoch = None, 1
        q = shlex.quote
        remote.run(
            f"rm -rf {q(p['dir'])} && mkdir -p {q(p['data'])} && chown -R {USER}: {q(p['dir'])}"
            f" && chmod 700 {q(p['data'])}"
        )
        remote.run(
            self._as_pg(
                f"{q(self.bin + '/initdb')} -D {q(p['data'])} -U {USER} --auth=trust "
                "--no-sync -E UTF8 --locale=C"
            ),
            timeout=300,
        )
        addr, port = self._addr(ctx, node)
        # Synchronous replication is switched on in wait_ready, once the standbys run: the
        # schema's commit must not wait for a standby that copies it afterwards.
        conf = postgresql_conf(addr=addr, port=port, socket_dir=p["dir"])
        remote.run(f"cat >> {q(p['data'] + '/postgresql.conf')}", stdin=conf)
        remote.run(
            f"cat > {q(p['data'] + '/pg_hba.conf')}",
            stdin="local all all trust\nhost all all 0.0.0.0/0 trust\n"
            "host replication all 0.0.0.0/0 trust\n",
        )
        self.start(ctx, node)
        self._await_up(ctx, node)
        self._schema(ctx)

    def start(self, ctx: RunContext, node: str) -> None:
        if node not in self.servers(ctx):
            return
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        if remote.daemon_running(p["pid"]):
            return
        # a killed postmaster's backends exit on their own; the next start waits for them
        remote.run(
            f"rm -f {shlex.quote(p['data'] + '/postmaster.pid')}; chown {USER}: "
            f"{shlex.quote(p['dir'])}",
            check=False,
        )
        remote.start_daemon(
            self._as_pg(f"{shlex.quote(self.bin + '/postgres')} -D {shlex.quote(p['data'])}"),
            pidfile=p["pid"],
            logfile=p["log"],
            chdir=p["dir"],
        )

    def kill(self, ctx: RunContext, node: str) -> None:
        if node in self.servers(ctx):
            super().kill(ctx, node)

    def pause(self, ctx: RunContext, node: str) -> None:
        if node in self.servers(ctx):
            super().pause(ctx, node)

    def resume(self, ctx: RunContext, node: str) -> None:
        if node in self.servers(ctx):
            super().resume(ctx, node)

    # FailsOver (replicas > 0): the operator's hands for the failover fault ------------
    def statuses(self, ctx: RunContext) -> dict[str, dict | None]:
        """Each server's role (in recovery: ``slave``), the WAL position it holds (the
        primary's written end, a standby's received end) and the epoch; None when it does
        not answer."""
        return map_values(
            {n: n for n in self.servers(ctx)}, lambda n: self._status(ctx, n), what="status"
        )

    def _status(self, ctx: RunContext, node: str) -> dict | None:
        try:
            with self._connect(ctx, node=node, timeout=2.0) as c:
                row = c.execute(
                    "SELECT pg_is_in_recovery(), CASE WHEN pg_is_in_recovery() THEN "
                    "COALESCE(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) "
                    "ELSE pg_current_wal_lsn() END"
                ).fetchone()
        except Exception:  # noqa: BLE001 - a server that does not answer has no status
            return None
        if row is None:
            return None
        standby, lsn = row
        return {
            "role": "slave" if standby else "master",
            "offset": lsn_int(lsn),
            "term": self._epoch,
        }

    def promote(self, ctx: RunContext, node: str, epoch: int) -> None:
        """``pg_promote``: ``node`` leaves recovery and takes writes; clients move to it."""
        with self._connect(ctx, node=node, timeout=5.0) as c:
            row = c.execute("SELECT pg_promote(true, 60)").fetchone()
        if not row or not row[0]:
            raise RemoteError(f"pg_promote on {node} did not finish in 60 s", host=node)
        self._primary, self._epoch = node, epoch

    def follow(self, ctx: RunContext, node: str, master: str, epoch: int) -> bool:
        """Point a standby at ``master`` (``primary_conninfo``, reloaded; it follows the new
        timeline, ``recovery_target_timeline`` being ``latest``)."""
        with self._connect(ctx, node=node, timeout=5.0) as c:
            c.execute(f"ALTER SYSTEM SET primary_conninfo = '{self._conninfo(ctx, master, node)}'")
            c.execute("SELECT pg_reload_conf()")
        return True

    def _conninfo(self, ctx: RunContext, master: str, node: str) -> str:
        host, port = self._addr(ctx, master)
        return f"host={host} port={port} user={USER} application_name={node}"

    def reset_as_slave(self, ctx: RunContext, node: str, master: str, epoch: int) -> None:
        """An empty data directory filled by ``pg_basebackup`` from ``master``, made a
        standby of it (``-R``), with this node's own listen settings; started next."""
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        q = shlex.quote
        host, port = self._addr(ctx, master)
        remote.run(
            f"rm -rf {q(p['data'])} && mkdir -p {q(p['data'])} && chown -R {USER}: {q(p['dir'])}"
            f" && chmod 700 {q(p['data'])}"
        )
        remote.run(
            self._as_pg(
                f"{q(self.bin + '/pg_basebackup')} -h {q(host)} -p {port} -U {USER} "
                f"-D {q(p['data'])} -R -X stream -d {q(self._conninfo(ctx, master, node))}"
            ),
            timeout=300,
        )
        addr, own_port = self._addr(ctx, node)
        own = standby_conf(addr=addr, port=own_port, socket_dir=p["dir"], sync=self.o.sync)
        remote.run(f"cat >> {q(p['data'] + '/postgresql.auto.conf')}", stdin=own)

    def _connect(self, ctx: RunContext, timeout: float = 2.0, node: str | None = None) -> Any:
        import psycopg

        host, port = self._addr(ctx, node)
        return psycopg.connect(
            host=host,
            port=port,
            user=USER,
            dbname=DBNAME,
            autocommit=True,
            connect_timeout=max(1, int(timeout)),
        )

    def _await_up(self, ctx: RunContext, node: str) -> None:
        remote = ctx.remotes[node]
        p = self._paths(ctx, node)
        deadline = time.monotonic() + self.o.ready_timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                with self._connect(ctx, node=node) as c:
                    c.execute("SELECT 1")
                return
            except Exception as e:  # noqa: BLE001 - not up yet
                last = str(e).strip()
            raise_if_exited(remote, p["pid"], p["log"], "postgres", lines=5)
            time.sleep(0.3)
        raise RemoteError(
            f"postgres on {node} did not accept connections in {self.o.ready_timeout:g} s: {last}",
            host=remote.host.name,
        )

    def _await_primary(self, ctx: RunContext, standby: str) -> None:
        """Until the first node's server takes connections and holds the schema (set up in
        parallel with its standbys: initdb and the first start come first)."""
        first = ctx.nodes[0]
        deadline = time.monotonic() + self.o.ready_timeout + 300  # initdb's own timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                with self._connect(ctx, node=first) as c:
                    row = c.execute("SELECT to_regclass('registers')").fetchone()
                if row and row[0]:
                    return
                last = "no schema yet"
            except Exception as e:  # noqa: BLE001 - not up yet
                last = str(e).strip()
            time.sleep(0.5)
        raise RemoteError(
            f"standby {standby}: the primary {first} was not ready to copy: {last}", host=standby
        )

    def _schema(self, ctx: RunContext) -> None:
        with self._connect(ctx) as c:
            c.execute(
                "CREATE TABLE IF NOT EXISTS lists (k bigint PRIMARY KEY, v bigint[] NOT NULL)"
            )
            c.execute("CREATE TABLE IF NOT EXISTS registers (k bigint PRIMARY KEY, v bigint)")

    def wait_ready(self, ctx: RunContext) -> None:
        """Until the primary answers (after setup, and after a kill healed); with ``sync``,
        then makes its commits wait for a standby (ALTER SYSTEM; every standby has the
        setting in its own configuration from :meth:`reset_as_slave`, so the one promoted
        keeps it)."""
        self._await_up(ctx, self.server(ctx))
        if self.o.sync and self.o.replicas:
            with self._connect(ctx, timeout=5.0) as c:
                c.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{SYNC_STANDBYS}'")
                c.execute("SELECT pg_reload_conf()")

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        return [self._paths(ctx, node)["log"]] if node in self.servers(ctx) else []

    def teardown(self, ctx: RunContext, node: str) -> None:
        if node not in self.servers(ctx):
            return
        self.stop_and_remove(ctx, node, "postgres", {"pid": "postgres"}, leave=self.o.leave_running)


@declares_options(PostgresOptions)
def factory(options: PostgresOptions | Mapping[str, Any]) -> DB:
    """``--db postgres``."""
    o = as_options(PostgresOptions, options, role="db postgres")
    asdict(o)  # every field is plain data (recorded in test.json)
    return PostgresDB(o)
