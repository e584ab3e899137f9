"""Databases the harness can install, fault and tear down (see :mod:`harness.core.db`).

A DB is chosen by name on the command line; ``get_db`` is the only place that
knows the names, so the runner and the CLI stay free of per-DB code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness.core.db import DB
from harness.core.errors import ConfigError

__all__ = ["get_db", "DB_NAMES"]


def _dledger(options: Mapping[str, Any]) -> DB:
    if options.get("mode") == "broker":  # the DLedger node plus its broker layer
        from harness.dbs.dledger import DLedgerDB

        rest = {k: v for k, v in options.items() if k != "mode"}
        rest["extra_args"] = ("--mode broker " + str(rest.get("extra_args", ""))).strip()
        return DLedgerDB(**rest)
    if options.get("mode", "dledger") != "dledger":  # mode=ha: harness/dbs/ha.py
        from harness.dbs.ha import HADB

        return HADB(**dict(options))
    from harness.dbs.dledger import DLedgerDB

    options = {k: v for k, v in options.items() if k != "mode"}
    return DLedgerDB(**dict(options))


def _etcd(options: Mapping[str, Any]) -> DB:
    from harness.dbs.etcd import EtcdDB

    return EtcdDB(**dict(options))


def _redis(options: Mapping[str, Any]) -> DB:
    from harness.dbs.redis import RedisDB

    return RedisDB(**dict(options))


def _null(options: Mapping[str, Any]) -> DB:
    from harness.dbs.null import NullDB

    return NullDB(**dict(options))


_FACTORIES: dict[str, Callable[[Mapping[str, Any]], DB]] = {
    "dledger": _dledger, "etcd": _etcd, "redis": _redis, "null": _null}
DB_NAMES = tuple(sorted(_FACTORIES))


def get_db(name: str, options: Mapping[str, Any] | None = None) -> DB:
    """Build the DB called ``name``; unknown names and options are ConfigErrors."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ConfigError(f"unknown db {name!r} (known: {', '.join(DB_NAMES)})",
                          field="db") from None
    try:
        return factory(options or {})
    except TypeError as e:
        raise ConfigError(f"bad option for db {name!r}: {e}", field="db") from None
