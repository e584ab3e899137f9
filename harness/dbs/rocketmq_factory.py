"""``--db rocketmq``: the options choose the broker group a run gets.

A module of its own because the choice spans two: ``upgrade_to`` asks for the
group that the ``upgrade`` fault can switch (:mod:`harness.dbs.rocketmq_upgrade`,
built on :class:`~harness.dbs.rocketmq.RocketMQDB`), anything else for the plain
group; keeping it in either would make the two import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core.db import DB
from harness.core.options import as_options, declares_options
from harness.dbs.rocketmq import RocketMQDB, RocketMQOptions
from harness.dbs.rocketmq_upgrade import RocketMQUpgradeDB

__all__ = ["factory"]


@declares_options(RocketMQOptions)
def factory(options: RocketMQOptions | Mapping[str, Any]) -> DB:
    """``--db rocketmq``: the upgradable group when ``upgrade_to`` is set."""
    opts = as_options(RocketMQOptions, options, role="db rocketmq")
    if opts.upgrade_to is not None:
        return RocketMQUpgradeDB(opts)
    return RocketMQDB(opts)
