"""Real-host helpers for nemesis tests: a run context over the shared lab, probes, a sleep DB.

Probes run inside the lab hosts over SSH with this machine's Python (the hosts
share its file system): a listener daemon per host (TCP accept + UDP echo) and
one-shot scripts that try every peer, so each check costs one SSH round per host.
"""

from __future__ import annotations

import json
import random
import shlex
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from harness.core.history import HistoryWriter
from harness.core.spec import RunContext, TestSpec
from nemesis.base import on_nodes

PORT = 7077
LISTENER = f"""
import selectors, socket
sel = selectors.DefaultSelector()
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", {PORT})); t.listen(128); t.setblocking(False)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", {PORT}))
sel.register(t, selectors.EVENT_READ); sel.register(u, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj is t:
            c, _ = t.accept(); c.close()
        else:
            data, addr = u.recvfrom(2048); u.sendto(data, addr)
"""

TCP_PROBE = """
import json, socket, sys, threading
peers, out = json.loads(sys.argv[1]), {}
def one(name, addr):
    try:
        socket.create_connection((addr, PORT), timeout=0.6).close(); out[name] = True
    except OSError:
        out[name] = False
ts = [threading.Thread(target=one, args=kv) for kv in peers.items()]
[t.start() for t in ts]; [t.join() for t in ts]
print(json.dumps(out))
""".replace("PORT", str(PORT))

UDP_PROBE = """
import json, select, socket, sys, time
addr, n, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setblocking(False)
sent, rtts = {}, []
def drain():
    try:
        while True:
            d, _ = s.recvfrom(64); i = int(d)
            rtts.append(time.monotonic() - sent[i])
    except OSError:
        pass
for i in range(n):
    sent[i] = time.monotonic(); s.sendto(str(i).encode(), (addr, PORT)); select.select([], [], [], gap); drain()  # time.sleep fails under the lab libfaketime
s.settimeout(0.05)
end = time.monotonic() + 0.6
while time.monotonic() < end and len(rtts) < n:
    drain()
print(json.dumps({"received": len(rtts), "rtts": sorted(rtts)}))
""".replace("PORT", str(PORT))


class SleepDB:
    """A DB whose process is a real ``sleep`` daemon: kill, start, pause and resume are real signals."""

    PID = "/tmp/sb-nemesis-sleep.pid"

    def __init__(self, primaries: list[str] | None = None) -> None:
        self._primaries = primaries or []

    def setup(self, ctx: RunContext, node: str) -> None:
        self.start(ctx, node)

    def teardown(self, ctx: RunContext, node: str) -> None:
        r = ctx.remotes[node]
        r.signal_daemon(self.PID, "CONT")
        r.stop_daemon(self.PID, timeout=2)

    def _signal(self, ctx: RunContext, node: str, sig: str) -> None:
        if not ctx.remotes[node].signal_daemon(self.PID, sig):
            raise RuntimeError(f"no sleep process runs on {node}")

    def kill(self, ctx: RunContext, node: str) -> None:
        self._signal(ctx, node, "KILL")

    def start(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].start_daemon(
            "sleep 1000", pidfile=self.PID, logfile="/tmp/sb-nemesis-sleep.log"
        )

    def pause(self, ctx: RunContext, node: str) -> None:
        self._signal(ctx, node, "STOP")

    def resume(self, ctx: RunContext, node: str) -> None:
        self._signal(ctx, node, "CONT")

    def primaries(self, ctx: RunContext) -> list[str]:
        return list(self._primaries)

    def state(self, ctx: RunContext, node: str) -> str:
        """The process state letter (S running/sleeping, T stopped), or "-" if none runs."""
        r = ctx.remotes[node].run(
            f"p=$(cat {self.PID} 2>/dev/null) && awk '/^State:/{{print $2}}' /proc/$p/status 2>/dev/null"
            " || echo -",
            check=False,
        )
        return (r.stdout.strip() or "-")[0]


@pytest.fixture
def nctx(lab: Any, remotes: dict, tmp_path: Any) -> Iterator[RunContext]:
    hosts = {h.name: h for h in lab.hosts()}
    names = sorted(hosts)
    writer = HistoryWriter(tmp_path / "history.jsonl")
    ctx = RunContext(
        spec=TestSpec(name="nemesis-test", nodes=tuple(names)),
        hosts=hosts,
        remotes=remotes,
        db=SleepDB(primaries=[names[0]]),
        history=writer,
        rng=random.Random(5),
        store_dir=str(tmp_path),
    )
    try:
        yield ctx
    finally:
        writer.close()


@pytest.fixture
def listeners(nctx: RunContext) -> Iterator[None]:
    """A TCP/UDP listener on every host, stopped after the test."""
    pid = "/tmp/sb-nemesis-listener.pid"

    def start(n: str) -> None:
        r = nctx.remotes[n]
        r.start_daemon(
            f"{shlex.quote(sys.executable)} -c {shlex.quote(LISTENER)}",
            pidfile=pid,
            logfile="/tmp/sb-nemesis-listener.log",
        )

    errs = {n: e for n, e in on_nodes(nctx.nodes, start).items() if isinstance(e, BaseException)}
    assert not errs, errs
    try:
        yield
    finally:
        on_nodes(nctx.nodes, lambda n: nctx.remotes[n].stop_daemon(pid, timeout=2))


def reachability(ctx: RunContext) -> dict[str, set[str]]:
    """For every node, the peers it can open a TCP connection to (0.6 s timeout)."""

    def probe(n: str) -> set[str]:
        peers = {m: ctx.hosts[m].address for m in ctx.nodes if m != n}
        cmd = f"{shlex.quote(sys.executable)} -c {shlex.quote(TCP_PROBE)} {shlex.quote(json.dumps(peers))}"
        out = json.loads(ctx.remotes[n].run(cmd, timeout=20).stdout)
        return {m for m, ok in out.items() if ok}

    res = on_nodes(ctx.nodes, probe)
    for r in res.values():
        if isinstance(r, BaseException):
            raise r
    return res  # type: ignore[return-value]


def udp_probe(
    ctx: RunContext, src: str, dst: str, n: int = 200, gap: float = 0.002
) -> dict[str, Any]:
    cmd = (
        f"{shlex.quote(sys.executable)} -c {shlex.quote(UDP_PROBE)} "
        f"{ctx.hosts[dst].address} {n} {gap}"
    )
    return json.loads(ctx.remotes[src].run(cmd, timeout=30).stdout)


def leftovers(ctx: RunContext, *, chains: bool = True) -> dict[str, list[str]]:
    """Anything a nemesis could leave behind, per host: chain rules, offsets, stopped processes.

    ``chains=False`` accepts our empty chains and their jumps (healed, not yet torn down).
    """

    def one(n: str) -> list[str]:
        r = ctx.remotes[n]
        ft = ctx.hosts[n].extras.get("faketime_file")
        out = r.run(
            "iptables -w 10 -S | grep -i splitbrain; tc qdisc show | grep -i netem; "
            + (f"echo offset=$(cat {shlex.quote(ft)}); " if ft else "")
            + 'for s in /proc/[0-9]*/status; do awk \'/^State:/{if ($2=="T") print FILENAME" stopped"}\' $s; done 2>/dev/null; '
            "test -s /tmp/splitbrain-delayer.pid && echo delayer-pidfile; true",
            timeout=20,
        ).stdout.split("\n")
        out = [ln for ln in out if ln.strip() and ln.strip() != "offset=+0"]
        if not chains:
            out = [
                ln for ln in out if not ln.startswith(("-N SPLITBRAIN", "-A INPUT -j SPLITBRAIN"))
            ]
        return out

    res = on_nodes(ctx.nodes, one)
    return {n: v for n, v in res.items() if v}  # type: ignore[misc]
