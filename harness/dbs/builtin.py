"""Factories of the built-in DBs, named in ``pyproject.toml``'s ``splitbrain.dbs`` entry points.

They follow the same contract as a plugin's factory (see :mod:`harness.api`), which is the
point: the registry has no second path for what ships with splitbrain. Each declares its
options as a frozen dataclass (:func:`harness.core.options.declares_options`), so
``--db-option`` is checked against it before anything connects, and a misspelt key is one
line naming the key, the DB and the keys it knows.

What the checker must know of a DB (mode ``ha``'s loss window) is declared by its options
class too (:meth:`DLedgerOptions.checker_options`): ``splitbrain check`` rebuilds it from
``test.json`` without building the DB, whose construction may look for files (``node_src``)
that only existed on the machine of the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harness.core.db import DB
from harness.core.errors import ConfigError
from harness.core.options import as_options, declares_options, option

__all__ = [
    "DLedgerOptions",
    "EtcdOptions",
    "RedisOptions",
    "NullOptions",
    "dledger",
    "etcd",
    "redis",
    "null",
]

_LEAVE = "leave the nodes running after the test (set by --leave-db-running)"


@dataclass(frozen=True)
class DLedgerOptions:
    """The reference node (harness/dbs/dledger.py), its mode ``ha`` (ha.py) and the rolling
    upgrade (rolling.py). Defaults are those of the DB classes' constructors (a unit test
    holds them equal)."""

    mode: Literal["dledger", "ha", "broker"] = option(
        "dledger", "dledger (Raft log), ha (RocketMQ master/slave) or broker (RocketMQ on DLedger)"
    )
    root: str = option("/var/lib/splitbrain/run", "absolute directory of the node directories")
    peer_port: int = option(9000, "port of the node-to-node protocol", minimum=1, maximum=65535)
    client_port: int = option(9001, "port of the client API", minimum=1, maximum=65535)
    remote_python: str | None = option(None, "python on the hosts (default: found there)")
    heartbeat_ms: int | None = option(None, "leader heartbeat (default: the node's)", minimum=1)
    election_timeout_ms: int | None = option(
        None, "election timeout (default: the node's)", minimum=1
    )
    read_mode: Literal["index", "follower", "log"] | None = option(
        None,
        "the node's --read-mode: index (the leader answers), follower (any follower too, "
        "after a read index from the leader) or log (default: the node's, index)",
    )
    leader_timeout: float | None = option(
        None, "seconds to wait for a leader at setup (default 30, 300 on emulated CPUs)", minimum=0
    )
    leave_running: bool = option(False, _LEAVE)
    bug: str | None = option(None, "a seeded bug of every node (prefer run --bug)")
    extra_args: str = option("", "more arguments for every node's command line")
    primaries_wait: float = option(3.0, "seconds to wait for one leader in primaries()", minimum=0)
    node_src: str | None = option(None, "absolute path of a node package to ship instead")
    sync: bool | None = option(
        None, "mode ha: the master acks only once a slave stored (default: off; upgrade: on)"
    )
    master: str | None = option(None, "mode ha: the first master (default: the first node)")
    slave_timeout_ms: int | None = option(
        None, "mode ha: how long the master waits for a slave", minimum=1
    )
    upgrade_from: Literal["ha"] | None = option(
        None, "mode broker: start in this mode and switch by the upgrade fault"
    )
    switch_timeout: float = option(30.0, "upgrade: seconds one node's switch may take", minimum=0)

    def node_options(self) -> dict[str, Any]:
        """The DLedgerDB constructor's keywords (every mode takes these)."""
        return {
            "root": self.root,
            "peer_port": self.peer_port,
            "client_port": self.client_port,
            "remote_python": self.remote_python,
            "heartbeat_ms": self.heartbeat_ms,
            "election_timeout_ms": self.election_timeout_ms,
            "read_mode": self.read_mode,
            "leader_timeout": self.leader_timeout,
            "leave_running": self.leave_running,
            "bug": self.bug,
            "extra_args": self.extra_args,
            "primaries_wait": self.primaries_wait,
            "node_src": self.node_src,
        }

    def checker_options(self) -> dict[str, dict[str, Any]]:
        """Mode ``ha`` may lose the acks of its loss window: log-safety must know (spec §12).

        Only the classic mode ``ha`` of the whole test: a rolling upgrade ends in mode
        broker, whose log is DLedger's (nothing acked may be lost).
        """
        if self.mode == "ha":
            return {"log-safety": {"ha": {"sync": bool(self.sync)}}}
        return {}


@declares_options(DLedgerOptions)
def dledger(options: DLedgerOptions | Mapping[str, Any]) -> DB:
    opts = as_options(DLedgerOptions, options, role="db dledger")
    node = opts.node_options()
    ha_only = {"sync": opts.sync, "master": opts.master, "slave_timeout_ms": opts.slave_timeout_ms}
    if opts.mode == "broker" and opts.upgrade_from is not None:
        # starts in mode ha; the upgrade fault switches it (harness/dbs/rolling.py)
        from harness.dbs.rolling import RollingUpgradeDB

        rolling = {k: v for k, v in ha_only.items() if v is not None}
        return RollingUpgradeDB(
            upgrade_from=opts.upgrade_from,
            switch_timeout=opts.switch_timeout,
            **rolling,
            **node,
        )
    if opts.mode == "ha":  # harness/dbs/ha.py
        from harness.dbs.ha import HADB

        return HADB(
            sync=bool(opts.sync),
            master=opts.master,
            slave_timeout_ms=opts.slave_timeout_ms,
            **node,
        )
    from harness.dbs.dledger import DLedgerDB

    stray = [k for k, v in ha_only.items() if v is not None]
    if stray:
        raise ConfigError(
            f"db dledger option {stray[0]!r} applies to mode ha (and the upgrade) only, "
            f"not to mode {opts.mode}",
            field=stray[0],
        )
    if opts.mode == "broker":  # the DLedger node plus its broker layer
        node["extra_args"] = ("--mode broker " + opts.extra_args).strip()
    return DLedgerDB(**node)


@dataclass(frozen=True)
class EtcdOptions:
    root: str = option("/var/lib/splitbrain/etcd", "absolute directory of the member directories")
    peer_port: int = option(2380, "peer port", minimum=1, maximum=65535)
    client_port: int = option(2379, "client port", minimum=1, maximum=65535)
    binary: str = option("etcd", "the etcd binary on the hosts")
    heartbeat_ms: int | None = option(None, "--heartbeat-interval (default: etcd's)", minimum=1)
    election_timeout_ms: int | None = option(
        None, "--election-timeout (default: etcd's)", minimum=1
    )
    ready_timeout: float = option(30.0, "seconds for the cluster to become ready", minimum=0)
    leave_running: bool = option(False, _LEAVE)
    extra_args: str = option("", "more arguments for every member's command line")
    version: str | None = option(
        None,
        "an etcd release of 3.5 or newer, built from the Go module proxy and cached, or "
        "'debian' (also '3.4') for the hosts' installed etcd, Debian's 3.4 "
        "(default: the newest, harness.dbs.etcd.NEWEST)",
    )


@declares_options(EtcdOptions)
def etcd(options: EtcdOptions | Mapping[str, Any]) -> DB:
    from dataclasses import asdict

    from harness.dbs.etcd import EtcdDB

    return EtcdDB(**asdict(as_options(EtcdOptions, options, role="db etcd")))


@dataclass(frozen=True)
class RedisOptions:
    root: str = option("/var/lib/splitbrain/redis", "absolute directory of the node directories")
    port: int = option(6379, "redis port", minimum=1, maximum=65535)
    sentinel_port: int = option(26379, "Sentinel port", minimum=1, maximum=65535)
    binary: str = option("redis-server", "the redis-server binary on the hosts")
    down_after_ms: int = option(2000, "Sentinel's down-after-milliseconds", minimum=1)
    failover_timeout_ms: int = option(6000, "Sentinel's failover-timeout", minimum=1)
    min_replicas: int = option(0, "min-replicas-to-write", minimum=0)
    ready_timeout: float = option(30.0, "seconds for the cluster to become ready", minimum=0)
    leave_running: bool = option(False, _LEAVE)


@declares_options(RedisOptions)
def redis(options: RedisOptions | Mapping[str, Any]) -> DB:
    from dataclasses import asdict

    from harness.dbs.redis import RedisDB

    return RedisDB(**asdict(as_options(RedisOptions, options, role="db redis")))


@dataclass(frozen=True)
class NullOptions:
    leave_running: bool = option(False, "accepted for --leave-db-running; nothing runs")


@declares_options(NullOptions)
def null(options: NullOptions | Mapping[str, Any]) -> DB:
    from harness.dbs.null import NullDB

    as_options(NullOptions, options, role="db null")
    return NullDB()
