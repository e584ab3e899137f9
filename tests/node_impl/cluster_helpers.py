"""Helpers shared by the multi-process node tests: short timers, retrying clients."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node_impl.client import NodeClient
from node_impl.local_cluster import LocalCluster

HB_MS = 50
ELECTION_MS = 500


@contextlib.contextmanager
def running_cluster(
    tmp_path: Path,
    n: int = 3,
    *,
    bug: str | None = None,
    extra_args: tuple[str, ...] = (),
    cls: type = LocalCluster,
    **kw: Any,
) -> Iterator[LocalCluster]:
    c = cls(
        n,
        tmp_path,
        bug=bug,
        extra_args=extra_args,
        heartbeat_ms=HB_MS,
        election_timeout_ms=ELECTION_MS,
        **kw,
    )
    try:
        c.start_all()
        yield c
    finally:
        c.close()


TRANSIENT = ("LEADER_NOT_READY", "TERM_CHANGED", "WAIT_QUORUM_ACK_TIMEOUT")


def call_leader(
    c: LocalCluster,
    msg: dict,
    *,
    timeout: float = 10.0,
    call_timeout: float = 2.0,
    retry: tuple[str, ...] = (),
) -> dict:
    """Send msg to whoever leads, following redirects, until a reply that is neither a
    redirect nor a transient refusal (``TRANSIENT``, plus the caller's ``retry`` codes)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        for node in c.nodes:
            if not c.is_running(node):
                continue
            st = c.status(node, timeout=0.5)
            if not st or st.get("role") != "leader":
                continue
            try:
                with c.client(node, timeout=call_timeout) as cl:
                    r = cl.call(msg)
            except (ConnectionError, TimeoutError, OSError) as e:
                last = e
                continue
            if r.get("type") != "redirect" and r.get("code") not in TRANSIENT + retry:
                return r
            last = r
        time.sleep(0.05)
    raise TimeoutError(f"no leader answered {msg.get('type')} within {timeout}s (last: {last})")


def append_ok(c: LocalCluster, body: Any, **kw: Any) -> dict:
    r = call_leader(c, {"type": "append", "body": body}, **kw)
    assert r["code"] == "SUCCESS", r
    return r


def local_log(c: LocalCluster, node: str) -> tuple[list, int]:
    """(entries, committedIndex) of a node's whole local log."""
    with c.client(node, timeout=3.0) as cl:
        r = cl.get(frm=0, to=1 << 40, local=True)
    assert r["code"] == "SUCCESS", r
    return r["entries"], r["committedIndex"]


def committed_log(c: LocalCluster) -> list:
    """The leader's committed entries through a linearizable (non-local) get."""
    r = call_leader(c, {"type": "get", "from": 0, "to": 1 << 40, "local": False})
    assert r["code"] == "SUCCESS", r
    return r["entries"]


def wait_all_committed(
    c: LocalCluster, index: int, nodes: list[str] | None = None, timeout: float = 10.0
) -> None:
    nodes = nodes or [n for n in c.nodes if c.is_running(n)]

    def done() -> bool:
        st = c.status_all(timeout=0.5)
        return all(st.get(n) and st[n]["committedIndex"] >= index for n in nodes)

    c.wait_until(done, timeout, f"committedIndex >= {index} on {nodes}")


def node_log(c: LocalCluster, node: str) -> str:
    p = c.data_dir(node) / "node.log"
    return p.read_text() if p.exists() else ""


def leader_of(c: LocalCluster, timeout: float = 10.0) -> str:
    return c.wait_for_leader(timeout)


def client(c: LocalCluster, node: str, timeout: float = 2.0) -> NodeClient:
    return c.client(node, timeout=timeout)


IPTABLES = shutil.which("iptables")
IPTABLES_RESTORE = shutil.which("iptables-restore")


def can_partition() -> bool:
    if IPTABLES is None or IPTABLES_RESTORE is None or os.geteuid() != 0:
        return False
    return subprocess.run([IPTABLES, "-L", "INPUT", "-n"], capture_output=True).returncode == 0


class IsolatableCluster(LocalCluster):
    """Each node on its own loopback address, so iptables rules can cut pairs of nodes.

    Cuts reject with a TCP reset in both directions (fast failure, nothing queued),
    and ``heal``/``close`` remove every rule this cluster added. ``node_args`` adds
    command-line options to single nodes (later options override earlier ones).
    """

    def __init__(
        self, n: int, base_dir: Path, *, node_args: dict[str, list[str]] | None = None, **kw: Any
    ) -> None:
        super().__init__(n, base_dir, **kw)
        rng = random.Random()
        prefix = f"127.{rng.randint(100, 250)}.{rng.randint(1, 250)}"
        self.addrs = {node: f"{prefix}.{10 + i}" for i, node in enumerate(self.nodes)}
        self.node_args = dict(node_args or {})
        self._rules: dict[frozenset, list[list[str]]] = {}

    @property
    def peers_arg(self) -> str:
        return ",".join(f"{n}={self.addrs[n]}:{self.peer_ports[n]}" for n in self.nodes)

    def command(self, node: str) -> list[str]:
        return super().command(node) + list(self.node_args.get(node, ()))

    def client_addr(self, node: str) -> tuple[str, int]:
        self._check(node)
        return self.addrs[node], self.client_ports[node]

    def peer_addr(self, node: str) -> tuple[str, int]:
        self._check(node)
        return self.addrs[node], self.peer_ports[node]

    def _iptables(self, action: str, rules: list[list[str]]) -> None:
        """Apply many rules with one iptables-restore, so a cut lands all at once."""
        if not rules:
            return
        text = "*filter\n" + "".join(f"{action} {' '.join(r)}\n" for r in rules) + "COMMIT\n"
        subprocess.run(
            [IPTABLES_RESTORE, "--noflush"], input=text, text=True, check=True, capture_output=True
        )

    def _pair_rules(self, a: str, b: str) -> list[list[str]]:
        return [
            [
                "INPUT",
                "-s",
                self.addrs[src],
                "-d",
                self.addrs[dst],
                "-p",
                "tcp",
                "-j",
                "REJECT",
                "--reject-with",
                "tcp-reset",
            ]
            for src, dst in ((a, b), (b, a))
        ]

    def cut(self, a: str, b: str) -> None:
        self.cut_many([(a, b)])

    def cut_many(self, pairs: list[tuple[str, str]]) -> None:
        new: list[list[str]] = []
        for a, b in pairs:
            key = frozenset((a, b))
            if key not in self._rules:
                self._rules[key] = self._pair_rules(a, b)
                new += self._rules[key]
        self._iptables("-I", new)

    def isolate(self, node: str) -> None:
        self.cut_many([(node, other) for other in self.nodes if other != node])

    def heal_pair(self, a: str, b: str) -> None:
        rules = self._rules.pop(frozenset((a, b)), [])
        with contextlib.suppress(subprocess.CalledProcessError):
            self._iptables("-D", rules)

    def heal(self) -> None:
        rules = [r for rs in self._rules.values() for r in rs]
        self._rules.clear()
        try:
            self._iptables("-D", rules)
        except subprocess.CalledProcessError:  # fall back to one at a time
            for r in rules:
                subprocess.run([IPTABLES, "-D", *r], capture_output=True)

    def close(self) -> None:
        try:
            self.heal()
        finally:
            super().close()


needs_iptables = pytest.mark.skipif(not can_partition(), reason="needs root and iptables")


def try_append(c: LocalCluster, node: str, body: Any, timeout: float) -> dict | None:
    try:
        with c.client(node, timeout=timeout) as cl:
            return cl.append(body)
    except (TimeoutError, ConnectionError):
        return None


def diverge_and_heal(c: IsolatableCluster) -> tuple[str, str, int]:
    """Cut the leader off while it takes writes, let the rest elect and write, heal.

    Returns (old leader, new leader, index of a write acked by the new leader).
    """
    wait_all_committed(c, append_ok(c, "base")["index"])
    old = stable_leader(c)
    c.isolate(old)
    with contextlib.suppress(TimeoutError, ConnectionError), c.client(old, timeout=0.2) as cl:
        cl.append_batch(["lost0", "lost1", "lost2"])  # before it notices and steps down
    dirty, _ = local_log(c, old)
    assert [e[3] for e in dirty[-3:]] == ["lost0", "lost1", "lost2"]
    new = wait_new_leader(c, old)
    kept = append_ok(c, "new-leader-write")["index"]
    c.heal()
    wait_all_committed(c, kept, [old])
    return old, new, kept


def wait_new_leader(c: LocalCluster, old: str, timeout: float = 10.0) -> str:
    """Wait until a majority agrees on a leader other than ``old``."""
    found: list[str] = []

    def other() -> bool:
        lid = c.leader()
        if lid is not None and lid != old:
            found.append(lid)
            return True
        return False

    c.wait_until(other, timeout, f"a leader other than {old}")
    return found[-1]


def stable_leader(c: LocalCluster, timeout: float = 15.0) -> str:
    """A leader that two polls 0.1 s apart agree on (elections churn on a loaded box)."""
    deadline = time.monotonic() + timeout
    while True:
        first = c.wait_for_leader(max(0.5, deadline - time.monotonic()))
        time.sleep(0.1)
        if c.leader() == first:
            return first
        if time.monotonic() > deadline:
            raise TimeoutError("leadership did not settle")
