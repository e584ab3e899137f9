"""Databases the harness can install, fault and tear down (see :mod:`harness.core.db`).

A DB is chosen by name on the command line. Names are entry points of the group
``splitbrain.dbs`` (:mod:`harness.core.plugins`): the built-ins (dledger, etcd,
redis, null, yaml) are declared in ``pyproject.toml`` exactly like a plugin's,
so the runner and the CLI stay free of per-DB code and of built-in special cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core import plugins
from harness.core.db import DB

__all__ = ["get_db", "db_names"]


def db_names() -> list[str]:
    """Every DB name available now (built-ins and installed plugins)."""
    return plugins.names("db")


def get_db(name: str, options: Mapping[str, Any] | None = None) -> DB:
    """Build the DB called ``name`` (or ``NAME:ARGUMENT``, or ``module:factory``).

    An unknown name, a plugin that does not import, a factory that raises or
    rejects an option, or one that returns something without ``setup`` and
    ``teardown`` is a one-line ConfigError naming the plugin.
    """
    opts = dict(options or {})
    db: DB = plugins.build("db", name, lambda f, arg: f(plugins.with_argument(opts, arg)), DB)
    return db
