"""The register workload against etcd, through its v3 JSON/HTTP gateway.

Only the standard library: etcd 3.4 serves a grpc-gateway on every client URL,
so a POST of a small JSON body is a whole client. Keys and values travel as
base64 (the gateway's encoding of protobuf ``bytes``).

History values are the register's (docs/architecture.md §3): ``read`` -> the value or
null, ``write v`` -> v, ``cas [old, new]`` -> ``[old, new]`` or ``fail`` with
``CAS_MISMATCH``. The generator is :class:`workloads.register.RegisterGen`; only
the client differs.

Reads are linearizable (etcd's default: a ReadIndex round through the leader)
unless the workload option ``serializable`` is true: then each member answers
from its own state, which may be stale, and a minority member cut off by a
partition keeps answering with old values. That variant exists to show the
checker catching stale reads.

Outcomes: a read that did not answer is ``fail`` (reads change nothing); a
write or cas that could not connect is ``fail`` (the request never left);
any other error or a timeout is ``info`` (it may still commit), except etcd's
InvalidArgument, which it refuses before proposing.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from harness.core.options import as_options, declares_options, option
from harness.core.workload import Workload, client_timeout
from workloads.addr import client_addr
from workloads.options import RegisterGenOptions
from workloads.register import CHECKER, register_gen

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = [
    "EtcdOptions",
    "EtcdError",
    "EtcdHTTP",
    "EtcdRegisterClient",
    "classify",
    "workload",
    "CHECKER",
]

_DEFINITE_CODES = frozenset({3})  # gRPC InvalidArgument: refused before any proposal


class EtcdError(Exception):
    """etcd answered with an error body (``{"error": ..., "code": grpc code}``)."""

    def __init__(self, message: str, code: int | None, status: int) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def unb64(s: str) -> str:
    return base64.b64decode(s).decode()


class EtcdHTTP:
    """POSTs to one member's gateway; a fresh connection per request.

    A fresh connection keeps outcomes honest: a refused connect proves that
    the request never left, which a reused keep-alive socket cannot.
    """

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout

    def call(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(
                "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            raise EtcdError(
                f"HTTP {resp.status}: not JSON: {raw[:200]!r}", None, resp.status
            ) from None
        if resp.status != 200 or "error" in data:
            raise EtcdError(
                str(data.get("error") or data.get("message") or data), data.get("code"), resp.status
            )
        return data

    # the three register operations -------------------------------------------
    def get(self, key: str, *, serializable: bool = False) -> str | None:
        body: dict[str, Any] = {"key": b64(key)}
        if serializable:
            body["serializable"] = True
        kvs = self.call("/v3/kv/range", body).get("kvs") or []
        return unb64(kvs[0].get("value", "")) if kvs else None

    def put(self, key: str, value: str) -> None:
        self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def cas(self, key: str, old: str, new: str) -> bool:
        """Put ``new`` if the value is ``old``; a missing key never matches."""
        reply = self.call(
            "/v3/kv/txn",
            {
                "compare": [
                    {"key": b64(key), "target": "VALUE", "result": "EQUAL", "value": b64(old)}
                ],
                "success": [{"requestPut": {"key": b64(key), "value": b64(new)}}],
            },
        )
        return bool(reply.get("succeeded", False))  # proto3 JSON omits a false

    def status(self) -> dict[str, Any]:
        return self.call("/v3/maintenance/status", {})


def _never_sent(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionRefusedError) or (
        isinstance(exc, OSError) and exc.errno in (111, 113) and not isinstance(exc, TimeoutError)
    )


def classify(f: str, exc: BaseException) -> str:
    """``fail`` when the op certainly had no effect, else ``info``."""
    if f == "read" or _never_sent(exc):
        return "fail"
    if isinstance(exc, EtcdError) and exc.code in _DEFINITE_CODES:
        return "fail"
    return "info"


def describe(exc: BaseException) -> str:
    if isinstance(exc, EtcdError):
        return f"etcd: {exc} (code {exc.code})"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "timeout"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _decode(v: str | None) -> Any:
    """Values are small ints written by the generator; anything else stays text."""
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        return v


class EtcdRegisterClient:
    """Sends each op to the member the op names (the worker's bound node)."""

    def __init__(self, *, timeout: float | None = None, serializable: bool = False) -> None:
        self.timeout = timeout
        self.serializable = serializable
        self.node: str | None = None

    def open(self, ctx: RunContext, node: str) -> EtcdRegisterClient:
        c = copy.copy(self)
        c.node = node
        if c.timeout is None:
            c.timeout = client_timeout(ctx)
        return c

    def setup(self, ctx: RunContext) -> None:
        pass

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        node = op.node or self.node
        if node is None or op.key is None:
            return op.complete(
                "fail" if op.f == "read" else "info",
                op.value,
                error="client error: no node or no key",
            )
        host, port = client_addr(ctx, node)
        api = EtcdHTTP(host, port, self.timeout or client_timeout(ctx))
        try:
            if op.f == "read":
                value = _decode(api.get(op.key, serializable=self.serializable))
                return op.complete("ok", value).replace(node=node)
            if op.f == "write":
                api.put(op.key, str(op.value))
                return op.complete("ok", op.value).replace(node=node)
            if op.f == "cas":
                old, new = op.value
                if api.cas(op.key, str(old), str(new)):
                    return op.complete("ok", op.value).replace(node=node)
                return op.complete("fail", op.value, error="CAS_MISMATCH").replace(node=node)
        except Exception as e:  # every failure of a request is a completion, never a crash
            return op.complete(classify(op.f, e), op.value, error=describe(e)).replace(node=node)
        return op.complete(
            "fail" if op.f == "read" else "info",
            op.value,
            error=f"client error: etcd-register cannot do {op.f!r}",
        )

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        pass


@dataclass(frozen=True)
class EtcdOptions(RegisterGenOptions):
    serializable: bool = option(
        False, "serializable (possibly stale) reads instead of linearizable ones"
    )


@declares_options(EtcdOptions)
def workload(options: EtcdOptions | Mapping[str, Any]) -> Workload:
    opts = as_options(EtcdOptions, options, role="workload etcd-register")
    serializable = opts.serializable
    return Workload(
        name="etcd-register-serializable" if serializable else "etcd-register",
        client=EtcdRegisterClient(serializable=serializable),
        generator=register_gen(opts),
        final_generator=None,
        checker=dict(CHECKER),
    )


@declares_options(EtcdOptions)
def serializable_workload(options: EtcdOptions | Mapping[str, Any]) -> Workload:
    """The stale-read variant under its own name (``etcd-register-serializable``)."""
    opts = as_options(EtcdOptions, options, role="workload etcd-register-serializable")
    return workload(replace(opts, serializable=True))
