"""The asking side of ``Reconfigurable`` for servers that speak the reference node's admin
frames (``members``, ``add-member``, ``remove-member``): the reference node in modes
dledger and broker (:mod:`harness.dbs.dledger`) and the jraft server (:mod:`harness.dbs.jraft`).

Both find the leader by polling ``status``, read a member's view by ``members``, and make a
change by asking the leader until ``members`` shows it done: a lost answer may hide a
commit, so the view decides, never the reply. What differs (how a reply's member ids map
to the run's nodes, which answers mean "ask again") stays with each DB.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.db import Members
from harness.core.errors import NemesisError

if TYPE_CHECKING:
    from harness.core.db import RunContext

__all__ = ["AskedMembers", "Change", "admin", "gone"]

log = logging.getLogger(__name__)


def admin(host: str, port: int, timeout: float, call: Callable[[Any], dict]) -> dict:
    """``call`` on a fresh admin client of ``host:port``, closed afterwards."""
    from node_impl.client import NodeClient

    client = NodeClient(host, port, timeout=timeout)
    try:
        return call(client)
    finally:
        client.close()


def gone(ident: str) -> Callable[[Members], bool]:
    """Whether a view no longer has member ``ident`` (voter or learner) and nothing pending."""

    def check(m: Members) -> bool:
        return ident not in {*m.voters.values(), *m.learners.values()} and not m.pending

    return check


@dataclass(frozen=True)
class Change:
    """One membership change under way: what it is called, when it is done, whom to ask
    (None: the leader), and when a refusal only means it is still under way."""

    what: str
    done: Callable[[Members], bool]
    via: str | None
    under_way: Callable[[Members], bool] | None


class AskedMembers:
    """``members`` and the change loop over the admin frames; mixed into a DB class.

    The DB provides ``client_addrs``, ``primaries`` and ``_view`` (a reply as ``Members``),
    and keeps ``_removed`` (nodes stopped as removed members: never asked).
    """

    _removed: set[str]
    members_of: str = ""
    """Named in the error when no member answers (``"jraft "``: "no jraft member ...")."""

    # what the DB provides
    def client_addrs(self, ctx: RunContext) -> dict[str, tuple[str, int]]:
        raise NotImplementedError

    def primaries(self, ctx: RunContext) -> list[str]:
        raise NotImplementedError

    def _view(self, ctx: RunContext, reply: Mapping[str, Any], asked: str) -> Members:
        raise NotImplementedError

    # shared ---------------------------------------------------------------------
    def _ask(self, ctx: RunContext, node: str, timeout: float = 2.0) -> Members:
        """``node``'s own view of the membership."""
        host, port = self.client_addrs(ctx)[node]
        reply = admin(host, port, timeout, lambda c: c.members())
        if reply.get("code") != "SUCCESS":
            raise NemesisError(f"{node}: members answered {reply.get('code')}")
        return self._view(ctx, reply, node)

    def _leader(self, ctx: RunContext, within: float) -> str | None:
        """A node that says it leads (removed nodes left out), polled for ``within`` s."""
        deadline = time.monotonic() + within
        while True:
            leaders = [n for n in self.primaries(ctx) if n not in self._removed]
            if leaders:
                return leaders[0]
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)

    def members(self, ctx: RunContext, via: str | None = None) -> Members:
        """``via``'s own view, else the leader's (else any member's, marked by ``asked``)."""
        if via is not None:
            return self._ask(ctx, via)
        lead = self._leader(ctx, 5.0)
        order = ([lead] if lead else []) + [
            n for n in ctx.nodes if n != lead and n not in self._removed
        ]
        errors = []
        for n in order:
            try:
                return self._ask(ctx, n)
            except Exception as e:  # noqa: BLE001 - the next member may answer
                errors.append(f"{n}: {e}")
        raise NemesisError(f"no {self.members_of}member answered `members`: " + "; ".join(errors))

    def _change(
        self,
        ctx: RunContext,
        what: str,
        send: Callable[[Any], dict],
        done: Callable[[Members], bool],
        *,
        via: str | None,
        within: float,
        timeout: float,
        under_way: Callable[[Members], bool] | None = None,
    ) -> Members:
        """Ask the leader (or only ``via``) with ``send`` until ``done(members)``, or fail
        after ``within`` s; ``timeout`` is one request's. Each answer goes to
        :meth:`_answered`, which may end the change early."""
        change = Change(what, done, via, under_way)
        deadline = time.monotonic() + within
        last = "no attempt"
        while True:
            try:
                view = self.members(ctx, via)
                if done(view):
                    return view
            except Exception as e:  # noqa: BLE001 - a view is only a check here
                last = f"members: {e}"
            if time.monotonic() >= deadline:
                raise NemesisError(f"{what}: not done within {within:g} s (last: {last})")
            target = via or self._leader(ctx, min(3.0, max(0.0, deadline - time.monotonic())))
            if target is None:
                last = "no leader"
                continue
            host, port = self.client_addrs(ctx)[target]
            try:
                reply = admin(host, port, timeout, send)
            except Exception as e:  # noqa: BLE001 - a timeout may hide a commit: re-check
                last = f"{target}: {e}"
                continue
            err = reply.get("error")
            last = f"{target}: {reply.get('code')}" + (f" ({err})" if err else "")
            finished = self._answered(ctx, change, reply, last)
            if finished is not None:
                return finished

    def _answered(
        self, ctx: RunContext, change: Change, reply: Mapping[str, Any], last: str
    ) -> Members | None:
        """After one answer (``last`` says it): the view if the change is done, None to ask
        again (having waited), or a NemesisError. Here: any answer but SUCCESS waits 0.3 s."""
        if reply.get("code") != "SUCCESS":
            time.sleep(0.3)
        return None

    def _send_once(
        self, ctx: RunContext, what: str, send: Callable[[Any], dict], *, via: str | None
    ) -> tuple[str, dict | None]:
        """``send`` once to ``via`` (or the leader) with a short timeout, the answer not
        awaited: a staged fault asks a leader that may never commit it. The node asked, and
        its answer (None: it did not answer in time, the request may still be applied)."""
        target = via or self._leader(ctx, 3.0)
        if target is None:
            raise NemesisError(f"{what}: no leader to ask")
        host, port = self.client_addrs(ctx)[target]
        try:
            reply = admin(host, port, 1.0, send)
        except Exception as e:  # noqa: BLE001 - sent, unanswered: it may be appended
            log.info("%s via %s: %s", what, target, e)
            return target, None
        log.info("%s via %s: %s", what, target, reply.get("code"))
        return target, reply
