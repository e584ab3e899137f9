"""Workloads against Redis primary/replica with Sentinel failover, in plain RESP.

The wire protocol is tiny (RESP2: a command is an array of bulk strings; a
reply is one of five typed lines), so the client is a socket and a parser,
with no third-party package.

Every op follows the current primary the way an application behind Sentinel
does: it asks the Sentinel on its bound node ``SENTINEL
get-master-addr-by-name`` and sends the command there. A client whose node
sits on the minority side of a partition therefore keeps writing to the old
primary, whose acknowledged writes are discarded when the partition heals and
Sentinel turns it into a replica of the new one: the anomaly these workloads
exist to show.

Two workloads (history values of docs/architecture.md §3):

- register (``redis-register``): per-key ``read`` (GET), ``write`` (SET) and
  ``cas`` (a Lua script comparing then setting, atomic on the server); the
  generator is :class:`workloads.register.RegisterGen`.
- set (``redis-set``): ``add e`` is SADD on one set key, final ``read`` is
  SMEMBERS at the primary each node's Sentinel names; the set check reports
  acknowledged adds that are missing (lost) from the final read.

Outcomes: an error reply means Redis refused the command before running it
(READONLY on a replica, LOADING, MASTERDOWN, ...) -> ``fail``; a refused
connection -> ``fail``; a timeout or a dropped connection -> ``info`` for
writes, ``fail`` for reads.
"""

from __future__ import annotations

import copy
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.core.options import as_options, declares_options
from harness.core.spec import DEFAULT_CLIENT_TIMEOUT
from harness.core.workload import Workload, client_timeout
from workloads.addr import parse_addr
from workloads.options import NoOptions, RegisterGenOptions
from workloads.register import CHECKER, register_gen
from workloads.sets import SetGen, final_set_reads

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = [
    "MASTER_NAME",
    "RespError",
    "RespConnection",
    "encode_command",
    "parse_reply",
    "RedisClient",
    "classify",
    "workload",
    "set_workload",
]

MASTER_NAME = "splitbrain"
"""The name Sentinel monitors the primary under (``sentinel monitor <name> ...``)."""
SET_KEY = "splitbrain-set"
CAS_SCRIPT = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "redis.call('set', KEYS[1], ARGV[2]) return 1 else return 0 end"
)


class RespError(Exception):
    """An error reply (``-ERR ...``): the server refused the command."""


def encode_command(*args: Any) -> bytes:
    parts = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


def parse_reply(read_line: Any, read_exact: Any) -> Any:
    """One RESP2 reply from ``read_line() -> bytes`` (with CRLF) and ``read_exact(n)``.

    An error reply is returned as a :class:`RespError` value (not raised) so that
    errors nested in arrays keep their place; :meth:`RespConnection.call` raises it.
    """
    line = read_line()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed in the middle of a reply")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body.decode()
    if kind == b"-":
        return RespError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        n = int(body)
        if n < 0:
            return None
        data = read_exact(n + 2)
        if len(data) != n + 2:
            raise ConnectionError("connection closed in the middle of a bulk string")
        return data[:-2].decode(errors="replace")
    if kind == b"*":
        n = int(body)
        return None if n < 0 else [parse_reply(read_line, read_exact) for _ in range(n)]
    raise ConnectionError(f"not a RESP reply: {line[:80]!r}")


class RespConnection:
    """One connection; ``call`` sends a command and returns its reply."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def call(self, *args: Any) -> Any:
        self.sock.sendall(encode_command(*args))
        reply = parse_reply(self.file.readline, self.file.read)
        if isinstance(reply, RespError):
            raise reply
        return reply

    def close(self) -> None:
        try:
            self.file.close()
        finally:
            self.sock.close()

    def __enter__(self) -> RespConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def call_once(addr: tuple[str, int], timeout: float, *args: Any) -> Any:
    with RespConnection(addr[0], addr[1], timeout) as c:
        return c.call(*args)


def classify(f: str, exc: BaseException) -> str:
    """``fail`` when the command certainly did not run, else ``info``."""
    if f == "read" or isinstance(exc, (RespError, ConnectionRefusedError)):
        return "fail"
    return "info"


def describe(exc: BaseException) -> str:
    if isinstance(exc, RespError):
        return f"redis: {exc}"
    if isinstance(exc, TimeoutError):
        return "timeout"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _decode(v: Any) -> Any:
    if v is None:
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return v


def _addr_of(ctx: RunContext, table: str, node: str) -> tuple[str, int]:
    addrs = ctx.addresses.get(table) or {}
    if node not in addrs:
        raise LookupError(f"no {table} entry for node {node!r} (is --db redis set up?)")
    return parse_addr(addrs[node], what=f"{table}[{node}]")


class RedisClient:
    """Asks its node's Sentinel for the primary, then runs the op there."""

    read_fs = frozenset({"read"})

    def __init__(self, *, kind: str = "register", timeout: float | None = None) -> None:
        self.kind = kind
        self.timeout = timeout
        self.node: str | None = None

    def open(self, ctx: RunContext, node: str) -> RedisClient:
        c = copy.copy(self)
        c.node = node
        if c.timeout is None:
            c.timeout = client_timeout(ctx)
        return c

    @property
    def deadline(self) -> float:
        """Seconds a call may take: the run's client timeout once opened."""
        return self.timeout if self.timeout is not None else DEFAULT_CLIENT_TIMEOUT

    def setup(self, ctx: RunContext) -> None:
        pass

    def primary(self, ctx: RunContext, node: str) -> tuple[str, int]:
        reply = call_once(
            _addr_of(ctx, "sentinel", node),
            self.deadline,
            "SENTINEL",
            "get-master-addr-by-name",
            MASTER_NAME,
        )
        if not isinstance(reply, list) or len(reply) != 2:
            raise RespError(f"sentinel on {node} names no primary: {reply!r}")
        return str(reply[0]), int(reply[1])

    def _name(self, ctx: RunContext, addr: tuple[str, int]) -> str:
        for n, a in ctx.addresses.get("client", {}).items():
            if parse_addr(a) == addr:
                return n
        return f"{addr[0]}:{addr[1]}"

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        node = op.node or self.node
        if node is None:
            return op.complete(
                "fail" if op.f in self.read_fs else "info", op.value, error="client error: no node"
            )
        try:
            # Before the command leaves: any failure here means nothing happened.
            target = self.primary(ctx, node)
        except Exception as e:  # noqa: BLE001
            return op.complete("fail", op.value, error=f"sentinel: {describe(e)}").replace(
                node=node
            )
        served = self._name(ctx, target)
        try:
            return self._run(op, target).replace(node=served)
        except Exception as e:  # every failure of a request is a completion, never a crash
            return op.complete(classify(op.f, e), op.value, error=describe(e)).replace(node=served)

    def _run(self, op: Op, addr: tuple[str, int]) -> Op:
        if self.kind == "set":
            if op.f == "add":
                call_once(addr, self.deadline, "SADD", SET_KEY, op.value)
                return op.complete("ok", op.value)
            if op.f == "read":
                members = call_once(addr, self.deadline, "SMEMBERS", SET_KEY) or []
                return op.complete("ok", sorted(_decode(m) for m in members))
            raise ValueError(f"redis-set cannot do {op.f!r}")
        if op.key is None:
            raise ValueError(f"register op {op.f!r} has no key")
        if op.f == "read":
            return op.complete("ok", _decode(call_once(addr, self.deadline, "GET", op.key)))
        if op.f == "write":
            call_once(addr, self.deadline, "SET", op.key, op.value)
            return op.complete("ok", op.value)
        if op.f == "cas":
            old, new = op.value
            if call_once(addr, self.deadline, "EVAL", CAS_SCRIPT, 1, op.key, old, new) == 1:
                return op.complete("ok", op.value)
            return op.complete("fail", op.value, error="CAS_MISMATCH")
        raise ValueError(f"redis-register cannot do {op.f!r}")

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        pass


@declares_options(RegisterGenOptions)
def workload(options: RegisterGenOptions | Mapping[str, Any]) -> Workload:
    """``redis-register``: per-key registers, checked for linearizability."""
    opts = as_options(RegisterGenOptions, options, role="workload redis-register")
    return Workload(
        name="redis-register",
        client=RedisClient(kind="register"),
        generator=register_gen(opts),
        final_generator=None,
        checker=dict(CHECKER),
    )


@declares_options(NoOptions)
def set_workload(options: NoOptions | Mapping[str, Any]) -> Workload:
    """``redis-set``: unique SADDs, final SMEMBERS via every node's Sentinel; lost adds show."""
    as_options(NoOptions, options, role="workload redis-set")
    return Workload(
        name="redis-set",
        client=RedisClient(kind="set"),
        generator=SetGen(),
        final_generator=final_set_reads(),
        checker={"model": None, "checks": ["set"]},
    )
