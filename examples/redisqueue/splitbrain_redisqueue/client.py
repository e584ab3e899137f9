"""The queue client: RESP over a socket, the reliable-queue recipe, the history it records.

Outcomes follow what the client can know. A command that got no reply may have run,
so once a command that changes the queue has been sent without a reply the op is
``info``; before that (a refused connection, a read-only command without a reply,
an error reply: Redis refused the command before running it) nothing changed and
the op is ``fail``. A dequeue reports every body it was handed, with or without a
confirmed ack, also when it ends ``info``.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from harness.api import Op, RunContext

__all__ = ["QueueClient", "Resp", "RespError", "QUEUE", "processing"]

QUEUE = "sbq:queue"


def processing(slot: int) -> str:
    """The processing list of one worker slot (it survives the worker's process changes)."""
    return f"sbq:processing:{slot}"


class RespError(Exception):
    """An error reply: Redis refused the command (it did not run)."""


class Resp:
    """One connection, one command at a time (RESP2)."""

    def __init__(self, address: tuple[str, int], timeout: float) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = self.sock.makefile("rb")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def call(self, *args: Any) -> Any:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def _reply(self) -> Any:
        line = self.buf.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed mid-reply")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.buf.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed mid-reply")
            return data[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError(f"not a RESP reply: {line[:40]!r}")


class QueueClient:
    """Enqueue with RPUSH; dequeue with LMOVE into this slot's processing list, ack with LREM."""

    read_fs: frozenset[str] = frozenset()

    def __init__(
        self,
        address: tuple[str, int] = ("", 0),
        timeout: float = 1.5,
        drop_acked: int = 0,
        concurrency: int = 1,
    ) -> None:
        self.address, self.timeout = address, timeout
        self.drop_left = [drop_acked]  # shared by every opened copy: a test aid
        self.concurrency = concurrency
        self.conn: Resp | None = None

    def open(self, ctx: RunContext, node: str) -> QueueClient:
        c = QueueClient(ctx.addresses["client"][node], self.timeout, 0, ctx.spec.concurrency)
        c.drop_left = self.drop_left
        return c

    def setup(self, ctx: RunContext) -> None:
        pass

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        try:
            if self.conn is None:
                self.conn = Resp(self.address, self.timeout)
        except OSError as e:  # nothing was sent
            return op.complete("fail", op.value, error=f"connect: {e}")
        if op.f == "enqueue":
            return self._enqueue(op)
        if op.f == "dequeue":
            return self._dequeue(op)
        raise ValueError(f"redis-queue cannot do {op.f!r}")

    def _lost(self, op: Op, value: Any, e: Exception, changed: bool) -> Op:
        """A command without a reply: the connection is spent; the op is info if a
        command that changes the queue may have run, else fail."""
        self.close(None)  # type: ignore[arg-type]
        return op.complete("info" if changed else "fail", value, error=f"{type(e).__name__}: {e}")

    def _enqueue(self, op: Op) -> Op:
        assert self.conn is not None
        body = op.value["body"]
        try:
            length = self.conn.call("RPUSH", QUEUE, body)
        except RespError as e:
            return op.complete("fail", op.value, error=str(e))
        except (OSError, ValueError) as e:
            return self._lost(op, op.value, e, changed=True)
        return op.complete("ok", {"body": body, "id": length})

    def _dequeue(self, op: Op) -> Op:
        """Redeliver what this slot's processing list holds, else take one message;
        a final drain empties every processing list before the queue."""
        assert self.conn is not None
        final = bool((op.value or {}).get("final"))
        msgs: list[dict[str, Any]] = []
        value = {"messages": msgs}
        changed = False  # has a command that changes the queue been sent?
        try:
            if final:
                lists = sorted(self.conn.call("KEYS", "sbq:processing:*"))
            else:
                lists = [processing(op.process % self.concurrency)]
            for plist in lists:
                stale = self.conn.call("LRANGE", plist, 0, -1)
                if not stale:
                    continue
                for body in stale:  # taken by an earlier op whose outcome we never learned
                    msgs.append({"body": body, "acked": False})
                    changed = True
                    msgs[-1]["acked"] = self.conn.call("LREM", plist, 1, body) == 1
                return op.complete("ok", self._dropped(value, final))
            mine = processing(op.process % self.concurrency)
            changed = True
            body = self.conn.call("LMOVE", QUEUE, mine, "LEFT", "RIGHT")
            if body is None:
                return op.complete("ok", value)
            msgs.append({"body": body, "acked": False})
            msgs[-1]["acked"] = self.conn.call("LREM", mine, 1, body) == 1
        except RespError as e:
            # this command was refused before it ran; any delivery listed did happen
            return op.complete("info" if msgs else "fail", value, error=str(e))
        except (OSError, ValueError) as e:
            return self._lost(op, value, e, changed)
        return op.complete("ok", self._dropped(value, final))

    def _dropped(self, value: dict[str, Any], final: bool) -> dict[str, Any]:
        """The value as recorded: with ``drop_acked``, acked deliveries of the load left
        out on purpose (never of a final drain, whose empty answer means "drained")."""
        if self.drop_left[0] <= 0 or final:
            return value
        kept, dropped = [], []
        for m in value["messages"]:
            if m["acked"] and self.drop_left[0] > 0:
                self.drop_left[0] -= 1
                dropped.append(m["body"])
            else:
                kept.append(m)
        return {**value, "messages": kept, "dropped_on_purpose": dropped}
