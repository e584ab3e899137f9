"""The nemesis contract, and the plumbing every fault shares.

A nemesis turns a nemesis invocation (``process="nemesis"``, ``f`` like
``start-partition``) into real damage and answers with an ``info`` completion
whose value says what was actually done. Every fault has a cure: ``stop-<kind>``
ops heal one kind, ``teardown`` heals everything and must reach every host even
when some are unreachable, because a fault left behind poisons the next run.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from harness.core.errors import NemesisError
from harness.core.fanout import each
from harness.core.nemesis import Nemesis
from nemesis.targets import NODE_TARGETS, TARGETS, resolve, resolve_leader

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.remote import Remote
    from harness.core.spec import RunContext

__all__ = [
    "Nemesis",
    "Compose",
    "on_nodes",
    "host_errors",
    "remote_of",
    "completion",
    "op_nodes",
    "leader_now",
    "no_targets",
    "log_errors",
    "sudo_kw",
    "stop_by_pidfile",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


def sudo_kw(remote: Remote) -> dict[str, Any]:
    """``sudo=True`` for daemon calls when the SSH user is not root (an SSHRemote extension)."""
    return {"sudo": True} if remote.host.user != "root" else {}


def stop_by_pidfile(remote: Remote, pidfile: str) -> None:
    """CONT (a stopped process never handles TERM), then TERM, then KILL, by pid file.

    The undo of every journal entry that names a process: a fault daemon, a node caught
    mid-upgrade, a DB node of a killed run.
    """
    kw = sudo_kw(remote)
    remote.signal_daemon(pidfile, "CONT", **kw)
    remote.stop_daemon(pidfile, timeout=5.0, **kw)


def remote_of(ctx: RunContext, node: str) -> Remote:
    try:
        return ctx.remotes[node]
    except KeyError:
        raise NemesisError(f"no control connection to node {node!r}") from None


on_nodes = each
"""Run a fault step on every node at once (:func:`harness.core.fanout.each`)."""


def host_errors(results: dict[str, Any]) -> dict[str, str]:
    """The failed nodes of an :func:`on_nodes` result, each with a one-line reason."""
    out = {}
    for n, r in results.items():
        if isinstance(r, BaseException):
            text = str(r).strip().splitlines()
            out[n] = f"{type(r).__name__}: {text[0] if text else ''}".rstrip(": ")
    return out


def completion(op: Op, value: Any, errors: dict[str, str] | None = None) -> Op:
    """The ``info`` completion of ``op``; per-host failures go into ``error``, sorted by node."""
    err = None
    if errors:
        err = "; ".join(f"{n}: {errors[n]}" for n in sorted(errors))
    return op.complete("info", value=value, error=err)


def op_nodes(ctx: RunContext, value: Any) -> list[str]:
    """The nodes an invocation names: ``{"nodes": [...]}``, else its ``target`` resolved now.

    The schedule resolves every target but ``leader`` itself (so the history
    shows the nodes); a hand-written op may leave any target to this function.
    """
    v = dict(value or {})
    if v.get("nodes") is not None:
        nodes = [str(n) for n in v["nodes"]]
        unknown = [n for n in nodes if n not in ctx.nodes]
        if unknown:
            raise NemesisError(f"fault names unknown nodes {unknown}; nodes: {ctx.nodes}")
        return nodes
    if v.get("target") == "leader":
        return leader_now(ctx, ctx.rng)
    if v.get("target") in NODE_TARGETS:
        return resolve(v["target"], ctx.nodes, ctx.rng)
    raise NemesisError(f"fault needs 'nodes' or a 'target' ({', '.join(TARGETS)}), got {value!r}")


def leader_now(
    ctx: RunContext, rng: random.Random, among: Sequence[str] | None = None
) -> list[str]:
    """One node that says it leads now, by the DB's own account, or [] when none does.

    Several nodes may believe they lead (an isolated one has not noticed yet);
    ``among`` keeps only those candidates. A DB without ``HasPrimaries`` cannot
    say, which is a :class:`NemesisError`.
    """
    from harness.core.db import HasPrimaries

    if not isinstance(ctx.db, HasPrimaries):
        raise NemesisError("target 'leader' needs a DB that reports primaries")
    nodes = ctx.nodes if among is None else [n for n in ctx.nodes if n in among]
    return resolve_leader(ctx.db.primaries(ctx), nodes, rng)


def no_targets(op: Op, value: Any) -> Op:
    """The completion of a fault aimed at the leader when no node claims to lead: nothing done."""
    return completion(op, {**value, "nodes": []}, {"cluster": "no leader known; nothing done"})


def log_errors(what: str, errors: dict[str, str]) -> None:
    for n in sorted(errors):
        log.error("%s failed on %s: %s", what, n, errors[n])


class Compose:
    """Several nemeses behind one, each op routed to the one whose ``fs`` claims it."""

    def __init__(self, nemeses: Sequence[Nemesis]) -> None:
        self.nemeses = list(nemeses)
        self._route: dict[str, Nemesis] = {}
        for nem in self.nemeses:
            for f in nem.fs():
                if f in self._route and self._route[f] is not nem:
                    raise ValueError(f"two nemeses both handle {f!r}")
                self._route[f] = nem

    def fs(self) -> set[str]:
        return set(self._route)

    def setup(self, ctx: RunContext) -> None:
        for nem in self.nemeses:
            nem.setup(ctx)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        nem = self._route.get(op.f)
        if nem is None:
            raise NemesisError(
                f"no nemesis handles {op.f!r}; handled: {', '.join(sorted(self._route))}"
            )
        return nem.invoke(ctx, op)

    def teardown(self, ctx: RunContext) -> None:
        for nem in self.nemeses:
            try:
                nem.teardown(ctx)
            except Exception:
                log.exception("teardown of %s failed", type(nem).__name__)
