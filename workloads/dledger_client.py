"""What every workload client for the reference node shares: calls, redirects, outcomes.

A :class:`Session` holds one worker's connections (one per node address, opened
lazily, dropped on any error so the next call reconnects) and follows a
``NOT_LEADER`` redirect once, to the leader it names. Writes (``to_leader``) then
go straight to that leader while it answers them: a redirect costs a round trip
through a follower, two more process wake-ups on every write's path. Reads always
ask the node they name, so a follower that serves reads it should not
(``stale-read``) is still asked; the hint is dropped on the first answer that is
not ``SUCCESS``.

:func:`finish` turns the result into the history's completion following
dledger-protocol §1:

- ``SUCCESS`` -> ok;
- the fail codes (and a redirect we could not follow) -> fail: nothing happened;
- the info codes, unknown codes, timeouts, lost connections and bad frames ->
  info for writes (the entry may still commit), fail for reads (a read has no
  effect, so "it did not happen" is always a safe claim);
- a connection that could not even be opened -> fail: no request left us.

``error`` carries the code, or the exception's text. ``node`` on a completion is
the node that actually answered (the leader after a redirect).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.spec import DEFAULT_CLIENT_TIMEOUT
from harness.core.workload import client_timeout
from node_impl.client import FAIL_CODES, INFO_CODES, OK_CODES
from workloads.addr import client_addr, node_for_addr, parse_addr

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = [
    "FAIL_CODES",
    "INFO_CODES",
    "Connector",
    "Result",
    "Session",
    "DLedgerClient",
    "outcome",
    "exception_outcome",
    "finish",
    "jsonable",
]

log = logging.getLogger(__name__)


Connector = Callable[[str, int, float], Any]
"""(host, port, timeout) -> an object with NodeClient's methods; tests may pass their own."""


def _node_client(host: str, port: int, timeout: float) -> Any:
    from node_impl.client import NodeClient

    return NodeClient(host, port, timeout=timeout)


def outcome(code: Any, *, read: bool) -> str:
    """ok / fail / info for a reply code (spec §1); unknown codes count as info codes."""
    if code in OK_CODES:
        return "ok"
    if code in FAIL_CODES:
        return "fail"
    return "fail" if read else "info"


def _never_sent(exc: BaseException) -> bool:
    """True when the connection could not be opened, so the request never left us."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    cause = exc.__cause__
    return (
        isinstance(exc, ConnectionError)
        and isinstance(cause, OSError)
        and not isinstance(cause, TimeoutError)
        and "connect failed" in str(exc)
    )


def exception_outcome(exc: BaseException, *, read: bool) -> str:
    if read or _never_sent(exc):
        return "fail"
    return "info"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def jsonable(x: Any) -> Any:
    """History values are JSON: bytes from msgpack ``bin`` become text."""
    if isinstance(x, bytes):
        return x.decode("utf-8", "backslashreplace")
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


@dataclass
class Result:
    """One request's fate: the reply, or the exception, and the node that was talking."""

    node: str
    reply: dict | None = None
    exc: BaseException | None = None

    @property
    def code(self) -> Any:
        return None if self.reply is None else self.reply.get("code")


class Session:
    """One worker's connections to the cluster. Not thread-safe: one per worker."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        timeout: float = DEFAULT_CLIENT_TIMEOUT,
        connector: Connector | None = None,
    ) -> None:
        self.ctx = ctx
        self.timeout = timeout
        self.connector = connector or _node_client
        self._conns: dict[tuple[str, int], Any] = {}
        # (asked node, leader it redirected to, the leader's address): set when a
        # followed redirect succeeded, cleared by any other outcome of a hinted call.
        self._hint: tuple[str, str, tuple[str, int]] | None = None

    def _conn(self, addr: tuple[str, int]) -> Any:
        c = self._conns.get(addr)
        if c is None:
            c = self._conns[addr] = self.connector(addr[0], addr[1], self.timeout)
        return c

    def _drop(self, addr: tuple[str, int]) -> None:
        c = self._conns.pop(addr, None)
        if c is not None:
            try:
                c.close()
            except Exception:  # closing a broken socket must not hide the real error
                log.debug("closing %s:%s failed", *addr, exc_info=True)

    def _once(self, node: str, addr: tuple[str, int], fn: Callable[[Any], dict]) -> Result:
        try:
            reply = fn(self._conn(addr))
        except Exception as e:  # every failure of a request is recorded, none kills the worker
            self._drop(addr)
            if not isinstance(e, (OSError, EOFError)) and type(e).__name__ != "FrameError":
                log.warning("request to %s failed unexpectedly", node, exc_info=True)
            return Result(node, exc=e)
        if not isinstance(reply, dict):
            return Result(node, exc=TypeError(f"reply is not a map: {reply!r}"))
        return Result(node, reply=reply)

    def call(
        self,
        node: str,
        fn: Callable[[Any], dict],
        *,
        follow: bool = True,
        to_leader: bool = False,
    ) -> Result:
        """``fn(connection)`` on ``node``; on a redirect, once more on the leader it names.

        With ``to_leader`` (writes), a call to a node that redirected the last one
        goes to that leader at once; its outcome is recorded exactly as if the
        redirect had been followed, and anything but ``SUCCESS`` forgets the hint.
        """
        hint = self._hint if to_leader and follow else None
        if hint is not None and hint[0] == node:
            res = self._once(hint[1], hint[2], fn)
            if res.code != "SUCCESS":
                self._hint = None
            if res.reply is None or res.reply.get("type") != "redirect":
                return res
            asked = hint[1]
        else:
            res = self._once(node, client_addr(self.ctx, node), fn)
            if not follow or res.reply is None or res.reply.get("type") != "redirect":
                return res
            asked = node
        target = self._redirect_target(res.reply, asked)
        if target is None:
            return res
        name, addr = target
        final = self._once(name, addr, fn)
        if to_leader and final.code == "SUCCESS":
            self._hint = (node, name, addr)
        return final

    def _redirect_target(self, reply: dict, asked: str) -> tuple[str, tuple[str, int]] | None:
        leader = reply.get("leader")
        leader_addr = reply.get("leader_addr")
        if isinstance(leader, str) and leader in self.ctx.nodes and leader != asked:
            return leader, client_addr(self.ctx, leader)
        if leader_addr:
            try:
                addr = parse_addr(leader_addr, what="redirect leader_addr")
            except Exception:
                return None
            name = node_for_addr(self.ctx, addr) or (leader if isinstance(leader, str) else None)
            if name == asked:
                return None
            return (name or f"{addr[0]}:{addr[1]}"), addr
        return None

    def close(self) -> None:
        for addr in list(self._conns):
            self._drop(addr)


def finish(op: Op, res: Result, *, read: bool, ok_value: Callable[[dict], Any] | None = None) -> Op:
    """The completion of ``op`` from ``res`` per spec §1; fail/info keep the invoke value."""
    if res.exc is not None:
        return op.complete(
            exception_outcome(res.exc, read=read), op.value, error=_describe(res.exc)
        ).replace(node=res.node)
    reply = res.reply or {}
    if reply.get("type") == "redirect":
        leader = reply.get("leader")
        return op.complete("fail", op.value, error=f"NOT_LEADER (leader {leader})").replace(
            node=res.node
        )
    code = reply.get("code")
    typ = outcome(code, read=read)
    if typ != "ok":
        return op.complete(typ, op.value, error=str(code)).replace(node=res.node)
    value = ok_value(reply) if ok_value is not None else op.value
    return op.complete("ok", jsonable(value)).replace(node=res.node)


class DLedgerClient:
    """Base of the workload clients: lifecycle and error containment; subclasses ``handle``.

    ``open`` only copies the client and binds the node: connections open lazily
    on the first op, so opening never touches data and never fails on a down node.
    """

    read_fs: frozenset[str] = frozenset({"read"})

    def __init__(
        self,
        *,
        timeout: float | None = None,
        read_timeout: float | None = None,
        connector: Connector | None = None,
    ) -> None:
        self.timeout = timeout
        """Seconds a call may take (None: the run's ``client_timeout``, read at ``open``)."""
        self.read_timeout = read_timeout
        """Seconds a kv read waits (None: ``timeout``); a read gives up without harm."""
        self.connector = connector
        self.node: str | None = None
        self._session: Session | None = None

    def open(self, ctx: RunContext, node: str) -> DLedgerClient:
        c = copy.copy(self)
        c.node = node
        c._session = None
        if c.timeout is None:
            c.timeout = client_timeout(ctx)
        return c

    def setup(self, ctx: RunContext) -> None:
        pass

    def session(self, ctx: RunContext) -> Session:
        if self._session is None:
            timeout = self.timeout if self.timeout is not None else client_timeout(ctx)
            self._session = Session(ctx, timeout=timeout, connector=self.connector)
        return self._session

    def target(self, op: Op) -> str:
        """The node to ask: the op's (generators name it: final reads and samples pick theirs,
        others name the worker's), else the one the client was opened on."""
        node = op.node or self.node
        if node is None:
            raise ValueError(f"no node to send {op.f} to: client not opened and op names none")
        return node

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        try:
            return self.handle(self.session(ctx), ctx, op)
        except Exception as e:  # a bug here must not crash the worker or leave the op open
            log.exception("client failed on %s", op)
            typ = "fail" if op.f in self.read_fs else "info"
            return op.complete(typ, op.value, error=f"client error: {_describe(e)}")

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        raise NotImplementedError

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
