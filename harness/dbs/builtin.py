"""Factories of the built-in DBs, named in ``pyproject.toml``'s ``splitbrain.dbs`` entry points.

They follow the same contract as a plugin's factory (one mapping of options in,
a DB out; see :mod:`harness.api`), which is the point: the registry has no
second path for what ships with splitbrain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core.db import DB

__all__ = ["dledger", "etcd", "redis", "null"]


def dledger(options: Mapping[str, Any]) -> DB:
    if options.get("mode") == "broker" and "upgrade_from" in options:
        # starts in mode ha; the upgrade fault switches it (harness/dbs/rolling.py)
        from harness.dbs.rolling import RollingUpgradeDB

        return RollingUpgradeDB(**{k: v for k, v in options.items() if k != "mode"})
    if options.get("mode") == "broker":  # the DLedger node plus its broker layer
        from harness.dbs.dledger import DLedgerDB

        rest = {k: v for k, v in options.items() if k != "mode"}
        rest["extra_args"] = ("--mode broker " + str(rest.get("extra_args", ""))).strip()
        return DLedgerDB(**rest)
    if options.get("mode", "dledger") != "dledger":  # mode=ha: harness/dbs/ha.py
        from harness.dbs.ha import HADB

        return HADB(**dict(options))
    from harness.dbs.dledger import DLedgerDB

    return DLedgerDB(**{k: v for k, v in options.items() if k != "mode"})


def etcd(options: Mapping[str, Any]) -> DB:
    from harness.dbs.etcd import EtcdDB

    return EtcdDB(**dict(options))


def redis(options: Mapping[str, Any]) -> DB:
    from harness.dbs.redis import RedisDB

    return RedisDB(**dict(options))


def null(options: Mapping[str, Any]) -> DB:
    from harness.dbs.null import NullDB

    return NullDB(**dict(options))
