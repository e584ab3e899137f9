"""The node's two TCP servers: peer RPC and the client API (spec §4-6, §8).

Peer frames are dispatched inline (votes and heartbeats answer at once; pushes
answer when the entry handler is done). Each client request runs as its own task,
so one connection may pipeline many requests and get replies out of order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from node_impl.api import DLedgerNode, KVNode, LogNode, Proposal
from node_impl.follower_read import READ_INDEX
from node_impl.kv import (
    KV,
    body_append,
    body_cas,
    body_put,
    body_read,
    body_read_keys,
    entry_view,
)
from node_impl.wire import MAX_FRAME, FrameError, encode_frame, read_frame

__all__ = ["BindError", "ClientAPI", "LogAPI", "Servers", "listen", "send_frame", "serve_requests"]

MAX_GET_BYTES = MAX_FRAME // 2
MAX_READ_KEYS = 10_000
"""Most keys one ``kv-read`` may name: its log entry (read mode ``log``) stays far below a frame."""


class BindError(OSError):
    """A configured port could not be bound."""


def send_frame(writer: asyncio.StreamWriter, msg: dict) -> None:
    """Queue one frame; a closing peer or an unencodable reply must not kill the caller."""
    if writer.is_closing():
        return
    try:
        writer.write(encode_frame(msg))
    except FrameError as e:
        with contextlib.suppress(FrameError):
            writer.write(
                encode_frame(
                    {
                        "type": str(msg.get("type")),
                        "rid": msg.get("rid"),
                        "code": "UNSUPPORTED",
                        "error": str(e),
                    }
                )
            )
    except (OSError, RuntimeError):
        pass


async def listen(
    host: str, port: int, handler: Callable[..., Awaitable[None]], what: str
) -> asyncio.base_events.Server:
    """Bind one of a node's ports; a clear :class:`BindError` rather than a bare OSError."""
    try:
        return await asyncio.start_server(
            handler, host, port, reuse_address=True, limit=MAX_FRAME + 8
        )
    except OSError as e:
        raise BindError(f"cannot bind {what} port {host}:{port}: {e.strerror or e}") from e


class Servers:
    def __init__(self, node: DLedgerNode) -> None:
        self.node = node
        self.api = ClientAPI(node)
        self._servers: list[asyncio.base_events.Server] = []
        self._conns: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        cfg = self.node.cfg
        host = cfg.host
        for port, handler, what in (
            (cfg.peer_port, self._peer_conn, "peer"),
            (cfg.client_port, self._client_conn, "client"),
        ):
            self._servers.append(await listen(host, port, handler, what))

    async def stop(self) -> None:
        for s in self._servers:
            s.close()
        for w in list(self._conns):
            with contextlib.suppress(Exception):
                w.close()
        for t in list(self._tasks):
            t.cancel()
        for s in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.wait_closed(), 1.0)

    # ------------------------------------------------------------------ peers

    async def _peer_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        node = self.node
        self._conns.add(writer)

        def reply(msg: dict) -> None:
            send_frame(writer, msg)

        try:
            while not node.stopping:
                msg = await read_frame(reader)
                t = msg.get("type")
                try:
                    if t == "vote":
                        reply(node.elector.handle_vote(msg))
                    elif t == "heartbeat":
                        reply(node.elector.handle_heartbeat(msg))
                    elif t == "push":
                        node.handler.handle_push(msg, reply)
                    elif t == "timeout-now":  # leadership transfer (docs/membership.md M9)
                        reply(node.handle_timeout_now(msg))
                    elif t == READ_INDEX:  # a follower's read (§8.3a): answered once confirmed
                        self._spawn(_answer(msg, writer, node.answer_read_index, node.log))
                    else:
                        reply({"type": f"{t}-resp", "rid": msg.get("rid"), "code": "UNSUPPORTED"})
                except Exception as e:
                    # A handler bug met by a malformed RPC: answer and keep the connection
                    # (as the client port does) instead of an unhandled-callback traceback.
                    node.log.info("peer-error", type=t, error=repr(e))
                    reply(
                        {
                            "type": f"{t}-resp",
                            "rid": msg.get("rid"),
                            "code": "BAD_REQUEST",
                            "term": node.term,
                        }
                    )
                if writer.transport.get_write_buffer_size() > (4 << 20):
                    await writer.drain()
        except (OSError, EOFError, FrameError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    # ------------------------------------------------------------------ clients

    async def _client_conn(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await serve_requests(
            reader,
            writer,
            self.api.handle,
            running=lambda: not self.node.stopping,
            spawn=self._spawn,
            conns=self._conns,
            log=self.node.log,
        )

    def _spawn(self, coro: Any) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t


async def serve_requests(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handle: Callable[[dict], Awaitable[dict]],
    *,
    running: Callable[[], bool],
    spawn: Callable[[Any], Any],
    conns: set[asyncio.StreamWriter],
    log: Any,
) -> None:
    """One client connection of either node mode, until EOF or shutdown.

    Every request runs on its own task (``spawn``), so a write waiting for its
    quorum never holds up a read behind it; replies carry the request's rid and
    may leave in any order. A handler that raises answers UNSUPPORTED instead
    of closing the connection; a bad frame closes it.
    """
    conns.add(writer)
    try:
        while running():
            try:
                msg = await read_frame(reader)
            except FrameError as e:
                send_frame(
                    writer, {"type": "error", "rid": None, "code": "BAD_FRAME", "error": str(e)}
                )
                break
            spawn(_answer(msg, writer, handle, log))
    except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass
    finally:
        conns.discard(writer)
        with contextlib.suppress(Exception):
            writer.close()


async def _answer(
    msg: dict, writer: asyncio.StreamWriter, handle: Callable[[dict], Awaitable[dict]], log: Any
) -> None:
    t = msg.get("type")
    try:
        resp = await handle(msg)
    except asyncio.CancelledError:
        return
    except Exception as e:  # a bug in a handler must not kill the connection
        log.info("client-error", type=t, error=repr(e))
        resp = {"code": "UNSUPPORTED", "error": repr(e)}
    resp.setdefault("type", f"{t}-resp")
    resp["rid"] = msg.get("rid")
    send_frame(writer, resp)
    if writer.transport.get_write_buffer_size() > (4 << 20):
        with contextlib.suppress(Exception):
            await writer.drain()


class LogAPI:
    """Client requests -> node operations -> reply maps (without rid), for any node mode.

    Mode ``ha`` serves status, append and get through this very code; what differs
    between the modes (who may write, how far a read may see) is the node's answer
    to :meth:`LogNode.propose` and :meth:`LogNode.read_view`.
    """

    def __init__(self, node: LogNode) -> None:
        self.node = node
        self.handlers: dict[Any, Callable[[dict], Awaitable[dict]]] = {
            "status": self.status,
            "append": self.append,
            "get": self.get,
        }

    def redirect(self) -> dict:
        n = self.node
        return {
            "type": "redirect",
            "code": "NOT_LEADER",
            "leader": n.leader_id,
            "leader_addr": n.leader_addr,
        }

    async def handle(self, msg: dict) -> dict:
        t = msg.get("type")
        fn = self.handlers.get(t)
        if fn is None:
            return {
                "type": f"{t}-resp",
                "code": "UNSUPPORTED",
                "error": f"unknown request type {t!r}",
            }
        return await fn(msg)

    def _err(self, t: str, code: str, error: str | None = None) -> dict:
        if code == "NOT_LEADER":
            return self.redirect()
        out = {"type": f"{t}-resp", "code": code}
        if error:
            out["error"] = error
        return out

    async def status(self, msg: dict) -> dict:
        return {"type": "status-resp", "code": "SUCCESS", **self.node.status()}

    async def _propose(self, t: str, bodies: list[bytes], kind: str) -> tuple[dict | None, Any]:
        r = self.node.propose(bodies, kind)
        if isinstance(r, str):
            return self._err(t, r), None
        code, res = await r.fut
        if code != "SUCCESS":
            return self._err(t, code), None
        return None, res

    async def append(self, msg: dict) -> dict:
        if "bodies" in msg:
            bodies = msg["bodies"]
            if not isinstance(bodies, list) or not bodies:
                return self._err("append", "UNSUPPORTED", "'bodies' must be a non-empty list")
        elif "body" in msg:
            bodies = [msg["body"]]
        else:
            return self._err("append", "UNSUPPORTED", "append needs 'body' or 'bodies'")
        err, res = await self._propose("append", [body_append(b) for b in bodies], "append")
        if err is not None:
            return err
        out = {
            "type": "append-resp",
            "code": "SUCCESS",
            "index": res["index"],
            "term": res["term"],
            "leader": self.node.id,
        }
        if "bodies" in msg:
            out["indexes"] = res.get("indexes", [res["index"]])
        return out

    async def get(self, msg: dict) -> dict:
        n = self.node
        local = bool(msg.get("local"))
        if "index" in msg and msg["index"] is not None:
            lo = hi = msg["index"]
            single = True
        else:
            lo, hi = msg.get("from"), msg.get("to")
            single = False
            if lo is None:
                lo = 0
            if hi is None:
                hi = n.store.end_index
        if not isinstance(lo, int) or not isinstance(hi, int):
            return self._err("get", "UNSUPPORTED", "'index', 'from' and 'to' must be ints")
        view = await n.read_view(local)
        if isinstance(view, str):
            return self._err("get", view)
        limit = view.limit
        if lo < 0 or (single and lo > n.store.end_index and not view.committed_only):
            return self._err(
                "get",
                "INDEX_OUT_OF_RANGE",
                f"index {lo} outside [{n.store.begin_index}, {n.store.end_index}]",
            )
        if view.committed_only and lo > limit:
            return self._err("get", "NOT_COMMITTED", f"index {lo} > committedIndex {limit}")
        hi = min(hi, limit)
        entries: list[list] = []
        size = 0
        for e in n.store.entries(lo, hi):
            size += e.size
            if size > MAX_GET_BYTES and entries:
                break
            entries.append(entry_view(e))
        return {
            "type": "get-resp",
            "code": "SUCCESS",
            "entries": entries,
            "committedIndex": n.committed,
            "ledgerEndIndex": n.store.end_index,
        }


def _valid_addr(addr: str) -> bool:
    host, sep, port = addr.rpartition(":")
    return bool(host and sep and port.isdigit() and 0 < int(port) < 65536)


class ClientAPI(LogAPI):
    """The DLedger node's client API: the log requests plus the replicated kv map."""

    def __init__(self, node: KVNode) -> None:
        super().__init__(node)
        self.node: KVNode = node
        self.handlers.update(
            {
                "kv-write": self.kv_write,
                "kv-read": self.kv_read,
                "kv-cas": self.kv_cas,
                "members": self.members,
                "add-member": self.add_member,
                "remove-member": self.remove_member,
                "transfer-leader": self.transfer_leader,
            }
        )

    # ------------------------------------------------------------------ membership
    # docs/membership.md §M10: any node answers ``members`` with its own view; the
    # changes are served by the leader only, and answered once the entry commits.

    async def members(self, msg: dict) -> dict:
        n = self.node
        return {
            "type": "members-resp",
            "code": "SUCCESS",
            "id": n.id,
            "leader": n.leader_id,
            "term": n.term,
            "committedIndex": n.committed,
            **n.members_view(),
        }

    async def _change(self, t: str, r: Proposal | str) -> dict:
        if isinstance(r, str):
            code, _, error = r.partition(":")
            return self._err(t, code, error or None)
        code, res = await r.fut
        if code != "SUCCESS":
            return self._err(t, code)
        return {
            "type": f"{t}-resp",
            "code": "SUCCESS",
            "index": res["index"],
            "term": res["term"],
            **self.node.members_view(),
        }

    async def add_member(self, msg: dict) -> dict:
        node_id, addr = msg.get("id"), msg.get("addr")
        if not isinstance(node_id, str) or not node_id or "," in node_id or "=" in node_id:
            return self._err("add-member", "UNSUPPORTED", "'id' must be a non-empty string")
        if not isinstance(addr, str) or not _valid_addr(addr):
            return self._err("add-member", "UNSUPPORTED", "'addr' must be HOST:PORT (peer port)")
        return await self._change("add-member", self.node.add_member(node_id, addr))

    async def remove_member(self, msg: dict) -> dict:
        node_id = msg.get("id")
        if not isinstance(node_id, str):
            return self._err("remove-member", "UNSUPPORTED", "'id' must be a string")
        return await self._change("remove-member", self.node.remove_member(node_id))

    async def transfer_leader(self, msg: dict) -> dict:
        n = self.node
        target, ms = msg.get("id"), msg.get("timeout_ms")
        if not isinstance(target, str):
            return self._err("transfer-leader", "UNSUPPORTED", "'id' must be a string")
        if ms is None:
            ms = max(2 * n.cfg.election_timeout_ms, 2000)
        if type(ms) is not int or ms <= 0:
            return self._err("transfer-leader", "UNSUPPORTED", "'timeout_ms' must be positive")
        code, res = await n.transfer_leader(target, ms / 1000.0)
        if code == "NOT_LEADER":
            return self.redirect()
        return {"type": "transfer-leader-resp", "code": code, **res}

    async def kv_write(self, msg: dict) -> dict:
        key = msg.get("key")
        if not isinstance(key, str):
            return self._err("kv-write", "UNSUPPORTED", "'key' must be a string")
        err, res = await self._propose("kv-write", [body_put(key, msg.get("value"))], "put")
        if err is not None:
            return err
        return {
            "type": "kv-write-resp",
            "code": "SUCCESS",
            "index": res["index"],
            "term": res["term"],
        }

    async def kv_cas(self, msg: dict) -> dict:
        key = msg.get("key")
        if not isinstance(key, str):
            return self._err("kv-cas", "UNSUPPORTED", "'key' must be a string")
        err, res = await self._propose(
            "kv-cas", [body_cas(key, msg.get("old"), msg.get("new"))], "cas"
        )
        if err is not None:
            return err
        return {
            "type": "kv-cas-resp",
            "code": "SUCCESS",
            "ok": bool(res.get("ok")),
            "value": res.get("value"),
            "index": res["index"],
            "term": res["term"],
        }

    async def kv_read(self, msg: dict) -> dict:
        """A linearizable read of ``key``, or of every key in ``keys`` at one point.

        ``keys`` exists for reads of many keys (the kv set's final read asks for every
        element): one barrier, or in read mode ``log`` one entry, serves them all,
        where a key at a time costs a quorum round (a commit in mode ``log``) each and
        a few hundred of them outlast a client's patience on a loaded machine. The
        answer is ``values``, one ``{found, value}`` per key in order, all from the
        state at ``readIndex``.
        """
        n = self.node
        keys = msg.get("keys")
        well_formed = (
            isinstance(keys, list)
            and 0 < len(keys) <= MAX_READ_KEYS
            and all(isinstance(k, str) for k in keys)
        )
        if keys is not None and not well_formed:
            return self._err(
                "kv-read", "UNSUPPORTED", f"'keys' must be a list of 1 to {MAX_READ_KEYS} strings"
            )
        key = msg.get("key")
        if keys is None and not isinstance(key, str):
            return self._err("kv-read", "UNSUPPORTED", "'key' must be a string")
        local = n.bugs.stale_read or (n.bugs.wallclock_lease and n.lease_valid_wallclock())
        if local:  # seeded bugs: answer from local state, no barrier
            return _kv_read_reply(n.kv, key, keys, n.applied)
        if n.cfg.read_mode == "log":
            body = body_read_keys(keys) if keys is not None else body_read(str(key))
            err, res = await self._propose("kv-read", [body], "read")
            if err is not None:
                return err
            out = {"type": "kv-read-resp", "code": "SUCCESS", "readIndex": res["index"]}
            if keys is None:
                out.update(found=bool(res.get("found")), value=res.get("value"))
            else:
                out["values"] = res.get("values")
            return out
        why, read_index = await n.read_barrier()
        if why is not None:
            return self._err("kv-read", why)
        return _kv_read_reply(n.kv, key, keys, read_index)


def _kv_read_reply(kv: KV, key: Any, keys: list[str] | None, read_index: int) -> dict:
    """A kv-read answer from ``kv`` as it stands: one key's ``found``/``value``, or ``values``."""
    out: dict[str, Any] = {"type": "kv-read-resp", "code": "SUCCESS", "readIndex": read_index}
    if keys is None:
        out.update(kv.read(key))
    else:
        out["values"] = kv.read_keys(keys)
    return out
