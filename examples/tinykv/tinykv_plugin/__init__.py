"""splitbrain plugin for tinykv: how to install and fault it, and a register client for it.
Registered in pyproject.toml as the DB ``tinykv`` and the workload ``tinykv-register``."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api import (
    GenContext,
    Op,
    RunContext,
    Workload,
    WorkloadChoice,
    address,
    client_timeout,
    declares_options,
    host_addresses,
    kill_daemon,
    node_dir,
    option,
    wait_for_port,
)

SERVER = str(Path(__file__).with_name("server.py"))


@dataclass(frozen=True)
class TinyKVOptions:
    """``--db-option`` keys; a misspelt one stops the run before it starts."""

    port: int = option(7500, "the client port of every node", minimum=1, maximum=65535)


class TinyKV:
    """The DB: Killable, Pausable, HasLogFiles, WaitsReady and Addressable, by its methods."""

    def __init__(self, port: int = 7500) -> None:
        self.port = port

    def default_workload(self) -> WorkloadChoice:
        return WorkloadChoice(name="tinykv-register")

    def _dir(self, ctx: RunContext, node: str) -> str:
        return node_dir(ctx, node, "/srv/tinykv-plugin")

    def addresses(self, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return host_addresses(ctx, self.port)

    def setup(self, ctx: RunContext, node: str) -> None:
        self.teardown(ctx, node)  # a killed earlier run may have left a server behind
        ctx.remotes[node].run(f"mkdir -p {self._dir(ctx, node)}")
        ctx.remotes[node].upload(SERVER, f"{self._dir(ctx, node)}/server.py")
        self.start(ctx, node)

    def start(self, ctx: RunContext, node: str) -> None:
        d = self._dir(ctx, node)
        peers = ",".join(f"{n}={ctx.hosts[n].address}:{self.port}" for n in ctx.nodes)
        ctx.remotes[node].start_daemon(
            f"python3 {d}/server.py --node {node} --peers {peers} --data-dir {d}",
            pidfile=f"{d}/pid", logfile=f"{d}/server.log", chdir=d)

    def teardown(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].stop_daemon(f"{self._dir(ctx, node)}/pid")
        ctx.remotes[node].run(f"rm -rf {self._dir(ctx, node)}")

    def kill(self, ctx: RunContext, node: str) -> None:
        kill_daemon(ctx.remotes[node], f"{self._dir(ctx, node)}/pid")

    def pause(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(f"{self._dir(ctx, node)}/pid", "STOP")

    def resume(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(f"{self._dir(ctx, node)}/pid", "CONT")

    def log_files(self, ctx: RunContext, node: str) -> list[str]:
        return [f"{self._dir(ctx, node)}/server.log", f"{self._dir(ctx, node)}/kv.log"]

    def wait_ready(self, ctx: RunContext) -> None:
        for node in ctx.nodes:
            wait_for_port(*address(ctx, node), timeout=30)


class Client:
    """One request per connection; a reply we never got is ``info``, a refused connection ``fail``."""

    read_fs = frozenset({"read"})

    def __init__(self, address: tuple[str, int] = ("", 0), timeout: float = 5.0) -> None:
        self.address, self.timeout = address, timeout

    def open(self, ctx: RunContext, node: str) -> Client:
        return Client(address(ctx, node), client_timeout(ctx))  # the run's --client-timeout

    def setup(self, ctx: RunContext) -> None:
        pass

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        v = op.value
        if op.f == "read":
            request = f"GET {op.key}"
        elif op.f == "write":
            request = f"PUT {op.key} {json.dumps(v)}"
        else:
            request = f"CAS {op.key} {json.dumps(v[0])} {json.dumps(v[1])}"
        try:
            sock = socket.create_connection(self.address, timeout=self.timeout)
        except OSError as e:  # nothing was sent
            return op.complete("fail", v, error=f"connect: {e}")
        try:
            with sock:
                sock.sendall(request.encode() + b"\n")
                answer = sock.makefile().readline().strip()
        except OSError as e:
            return op.complete("info", v, error=f"no answer: {e}")
        if answer == "NIL" or answer.startswith("OK "):
            read = json.loads(answer[3:]) if answer != "NIL" else None
            return op.complete("ok", read if op.f == "read" else v)
        if answer.startswith("FAIL"):
            return op.complete("fail", v, error="cas mismatch")
        return op.complete("info", v, error=answer or "connection closed")

    def teardown(self, ctx: RunContext) -> None:
        pass

    def close(self, ctx: RunContext) -> None:
        pass


class Registers:
    """Random read/write/cas; a fresh key every 50 ops keeps each key's history small."""

    def __init__(self) -> None:
        self.n = 0

    def op(self, ctx: GenContext) -> Op:
        self.n += 1
        key, f = f"k{self.n // 50}", "read" if ctx.lull else ctx.rng.choice(["read", "write", "cas"])
        value = {"read": None, "write": ctx.rng.randrange(5),
                 "cas": [ctx.rng.randrange(5), ctx.rng.randrange(5)]}[f]
        return Op(type="invoke", process=ctx.process, f=f, value=value, key=key, node=ctx.node)

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


@declares_options(TinyKVOptions)
def db(options: TinyKVOptions) -> TinyKV:
    return TinyKV(port=options.port)


def workload(options: Mapping[str, Any]) -> Workload:  # declares no options: gets the mapping
    return Workload(name="tinykv-register", client=Client(), generator=Registers(),
                    checker={"model": "cas-register", "keys": True, "checks": ["linearizable"]})
