"""Databases the harness can install, fault and tear down (see :mod:`harness.core.db`).

A DB is chosen by name on the command line. Names are entry points of the group
``splitbrain.dbs`` (:mod:`harness.core.plugins`): the built-ins (dledger, etcd,
redis, null, yaml) are declared in ``pyproject.toml`` exactly like a plugin's,
so the runner and the CLI stay free of per-DB code and of built-in special cases.

Options: a factory that declares an options dataclass
(:func:`harness.core.options.declares_options`; every built-in does) gets an instance of it,
parsed from ``--db-option`` before anything connects, so an unknown key is one line naming
the key, the DB and the keys it knows. A factory that declares none gets the mapping as it
came (``yaml``: every other option is a variable of the system file).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core import plugins
from harness.core.db import DB
from harness.core.options import typed_options

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

    def call(factory: Any, argument: str | None) -> Any:
        return factory(typed_options(factory, plugins.with_argument(opts, argument), f"db {name}"))

    db: DB = plugins.build("db", name, call, DB)
    return db
