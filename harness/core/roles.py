"""Process roles a DB declares, so the fault deck can aim at each of them.

A system of several kinds of process (RocketMQ's name servers, controllers, masters and
slaves; a database's coordinators and shards) fails differently when a fault hits one
kind or another, or two kinds at once. ``HasPrimaries`` names only the leader; a DB
with more roles than that declares them here, and the deck's role scripts
(:mod:`nemesis.role_motifs`) aim each fault at each role and at pairs of roles.

The answer may change during a run (masters move, the controllers elect a new leader),
so it is asked again each time the deck draws a role script and when each of its faults
lands. It is an ordinary optional capability, tested with ``isinstance`` like those of
:mod:`harness.core.db`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["HasRoles", "roles_now"]

log = logging.getLogger(__name__)


@runtime_checkable
class HasRoles(Protocol):
    """A DB whose nodes play named roles.

    ``roles(ctx)`` maps each role to the nodes that hold it now, in the order the DB
    prefers (the deck's role scripts go through them in that order). A node may hold
    several roles (a name server with an embedded controller is both); a role may have no
    node at the moment (no master during an election). Role names are short words
    (``master``, ``controller-leader``). It may ask the cluster; it must not change it.
    """

    def roles(self, ctx: RunContext) -> Mapping[str, Sequence[str]]: ...


def roles_now(db: object, ctx: RunContext) -> dict[str, list[str]]:
    """``db``'s roles now, each keeping only the run's nodes, in the run's node order;
    ``{}`` for a DB without roles or one that could not answer (the failure is logged:
    a fault aimed at a role then falls back to what the script saw when it was drawn)."""
    if not isinstance(db, HasRoles):
        return {}
    try:
        got = db.roles(ctx)
    except Exception as e:  # noqa: BLE001 - a cluster that cannot answer has no roles now
        log.info("roles: %s could not say: %s", type(db).__name__, e)
        return {}
    order = {n: i for i, n in enumerate(ctx.nodes)}
    out: dict[str, list[str]] = {}
    for role, nodes in got.items():
        out[str(role)] = sorted({n for n in nodes if n in order}, key=order.__getitem__)
    return out
