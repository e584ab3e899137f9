"""Packet loss, delay, duplication and reordering, with tc netem where the kernel has it.

Each host is probed once at setup: if ``tc qdisc add ... netem`` works, the
active kinds become one netem qdisc on the interface towards the peers (egress,
every destination, as Jepsen does). A VM (``Host.machine`` set: its own kernel)
must have netem; a probe that fails there is an error, not a fallback.
Duplication and reordering exist only as netem. Otherwise (this lab's kernel has no
netem) both act on the host's INPUT from peer addresses only: loss is an
``iptables -m statistic`` DROP in chain ``SPLITBRAIN_LOSS``, delay an NFQUEUE
rule in ``SPLITBRAIN_DELAY`` feeding :mod:`nemesis.delayer`, a daemon started
inside the host. The delay chain sits last in INPUT so a partition still drops
first; ``--queue-bypass`` lets packets through if the delayer dies.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core.errors import NemesisError
from harness.core.fault import (
    Draw,
    Effects,
    Fault,
    JournalKind,
    JournalRecord,
    Residue,
    Selected,
)
from nemesis import journal
from nemesis.base import (
    completion,
    host_errors,
    log_errors,
    no_targets,
    on_nodes,
    op_nodes,
    remote_of,
    stop_by_pidfile,
    sudo_kw,
)
from nemesis.net import (
    IPTABLES_CHAIN,
    ensure_chain_script,
    iptables_cmd,
    peer_address,
    remove_chain_script,
    sudo_for,
)
from nemesis.targets import NodeFaultOptions, draw_target

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.remote import Host, Remote
    from harness.core.spec import RunContext

__all__ = [
    "LOSS_CHAIN",
    "DELAY_CHAIN",
    "QUEUE",
    "netem_args",
    "loss_rules",
    "delay_rules",
    "NetemNemesis",
    "LOSS",
    "DELAY",
    "DUPLICATE",
    "REORDER",
]

log = logging.getLogger(__name__)

LOSS_CHAIN = "SPLITBRAIN_LOSS"
DELAY_CHAIN = "SPLITBRAIN_DELAY"
QUEUE = 4242
DELAYER_PATH = "/tmp/splitbrain-delayer.py"
DELAYER_PID = "/tmp/splitbrain-delayer.pid"
DELAYER_LOG = "/tmp/splitbrain-delayer.log"


NETEM_ONLY = ("duplicate", "reorder")
"""Kinds with no iptables fallback."""
KNOWN = ("loss", "delay", *NETEM_ONLY)


def netem_args(
    loss: float | None,
    delay: tuple[float, float] | None,
    duplicate: float | None = None,
    reorder: tuple[float, float] | None = None,
) -> str:
    """The netem parameters for the active kinds (probabilities in [0, 1], times in ms).

    netem reorders by sending a fraction of packets at once while the rest wait
    the delay, so reordering needs a delay: the delay fault's when both are
    active, else the reorder fault's own ``(probability, delay_ms)``.
    """
    parts = []
    if delay is not None:
        d, j = delay
        parts.append(f"delay {d:g}ms" + (f" {j:g}ms" if j else ""))
    elif reorder is not None:
        parts.append(f"delay {reorder[1]:g}ms")
    if reorder is not None:
        parts.append(f"reorder {reorder[0] * 100:g}%")
    if loss is not None:
        parts.append(f"loss {loss * 100:g}%")
    if duplicate is not None:
        parts.append(f"duplicate {duplicate * 100:g}%")
    return " ".join(parts)


def loss_rules(ipt: str, sources: list[str], probability: float) -> list[str]:
    return [
        f"{ipt} -A {LOSS_CHAIN} -s {shlex.quote(a)} -m statistic --mode random "
        f"--probability {probability:.6f} -j DROP"
        for a in sorted(set(sources))
    ]


def delay_rules(ipt: str, sources: list[str], queue: int = QUEUE) -> list[str]:
    return [
        f"{ipt} -A {DELAY_CHAIN} -s {shlex.quote(a)} -j NFQUEUE --queue-num {queue} --queue-bypass"
        for a in sorted(set(sources))
    ]


def _python_for(remote: Remote) -> str:
    """The interpreter to run the delayer: a lab host shares this machine's venv."""
    py = remote.host.extras.get("python")
    if py:
        return str(py)
    return sys.executable if remote.host.address.startswith("127.") else "python3"


@dataclass
class HostState:
    backend: str = "iptables"  # or "netem"
    iface: str | None = None
    delay_ok: bool = False
    delay_problem: str = ""
    netem_problem: str = ""
    loss: float | None = None
    delay: tuple[float, float] | None = None
    duplicate: float | None = None
    reorder: tuple[float, float] | None = None
    peers: list[str] = field(default_factory=list)

    def active(self, kind: str) -> bool:
        return getattr(self, kind) is not None

    def clear(self, kind: str) -> None:
        setattr(self, kind, None)


class NetemNemesis:
    """``start-<kind>``/``stop-<kind>`` for loss, delay, duplicate and reorder on chosen nodes.

    Values: loss ``{"nodes": [...], "probability": p}``, delay ``{"nodes": [...],
    "delay_ms": d, "jitter_ms": j}``, duplicate ``{"nodes": [...], "probability":
    p}``, reorder ``{"nodes": [...], "probability": p, "delay_ms": d}``;
    ``stop-*`` heals that kind everywhere.
    """

    def __init__(self, kinds: tuple[str, ...] = ("loss", "delay")) -> None:
        bad = set(kinds) - set(KNOWN)
        if bad:
            raise ValueError(f"netem nemesis handles {', '.join(KNOWN)}, not {sorted(bad)}")
        self.kinds = tuple(kinds)
        self.hosts: dict[str, HostState] = {}

    def fs(self) -> set[str]:
        return {f"{p}-{k}" for k in self.kinds for p in ("start", "stop")}

    # --- probing -------------------------------------------------------------

    def _probe(self, ctx: RunContext, node: str) -> HostState:
        remote = remote_of(ctx, node)
        st = HostState(peers=[peer_address(ctx, n) for n in ctx.nodes if n != node])
        sudo = sudo_for(remote)
        if st.peers:
            r = remote.run(
                f"ip -o route get {shlex.quote(st.peers[0])}", sudo=sudo, timeout=30, check=False
            )
            m = re.search(r"\bdev (\S+)", r.stdout)
            st.iface = m.group(1) if m else None
        if st.iface:
            dev = shlex.quote(st.iface)
            r = remote.run(
                f"tc qdisc add dev {dev} root netem delay 1ms && tc qdisc del dev {dev} root",
                sudo=sudo,
                timeout=30,
                check=False,
            )
            if r.ok:
                st.backend = "netem"
            else:
                st.netem_problem = (
                    f"tc netem fails on {node} ({st.iface}): "
                    f"{(r.stderr or r.stdout).strip()[:200] or 'exit ' + str(r.exit_status)}"
                )
        elif st.peers:
            st.netem_problem = f"no route from {node} to its peer {st.peers[0]}"
        if st.backend == "netem":
            st.delay_ok = True
        elif "delay" in self.kinds:
            py = _python_for(remote)
            r = remote.run(f"{shlex.quote(py)} -c 'import netfilterqueue'", timeout=30, check=False)
            st.delay_ok = r.ok
            if not r.ok:
                st.delay_problem = (
                    f"delay unsupported on {node}: no tc netem in its kernel and "
                    f"{py} cannot import netfilterqueue (pip install NetfilterQueue)"
                )
        return st

    def setup(self, ctx: RunContext) -> None:
        results = on_nodes(ctx.nodes, lambda n: self._probe(ctx, n))
        errors = host_errors(results)
        if errors:
            raise NemesisError(
                "cannot probe hosts for loss/delay: "
                + "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
            )
        self.hosts = {n: r for n, r in results.items() if isinstance(r, HostState)}
        for n in sorted(self.hosts):
            st = self.hosts[n]
            if st.backend == "netem":
                continue
            if ctx.hosts[n].machine is not None:
                # A VM has its own kernel: falling back to iptables there would hide
                # that the guest image lacks netem (sch_netem).
                raise NemesisError(f"{st.netem_problem}; a VM's kernel must have sch_netem")
            wanted = [k for k in self.kinds if k in NETEM_ONLY]
            if wanted:
                raise NemesisError(
                    f"{', '.join(wanted)} need tc netem, which {n} lacks "
                    f"({st.netem_problem or 'no netem'}); use a VM lab (--driver vm)"
                )
        if "delay" in self.kinds:
            problems = [st.delay_problem for st in self.hosts.values() if not st.delay_ok]
            if problems:
                raise NemesisError(problems[0])
        log_errors("clearing old loss/delay", self._clear(ctx, ctx.nodes))
        for n, st in self.hosts.items():
            log.info("loss/delay on %s via %s", n, st.backend)

    # --- applying ------------------------------------------------------------

    def _state(self, ctx: RunContext, node: str) -> HostState:
        if node not in self.hosts:
            self.hosts[node] = self._probe(ctx, node)
        return self.hosts[node]

    def _apply_netem(self, remote: Remote, st: HostState) -> None:
        dev = shlex.quote(st.iface or "")
        args = netem_args(st.loss, st.delay, st.duplicate, st.reorder)
        if args:
            remote.run(
                f"tc qdisc replace dev {dev} root netem {args}", sudo=sudo_for(remote), timeout=30
            )
        else:
            remote.run(
                f"tc qdisc del dev {dev} root 2>/dev/null; true", sudo=sudo_for(remote), timeout=30
            )

    def _apply_loss(self, remote: Remote, st: HostState) -> None:
        ipt = iptables_cmd(remote)
        cmds = [f"{ipt} -F {LOSS_CHAIN}"]
        if st.loss is not None:
            cmds += loss_rules(ipt, st.peers, st.loss)
        remote.run(
            f"{ensure_chain_script(ipt, LOSS_CHAIN)}; " + " && ".join(cmds),
            sudo=sudo_for(remote),
            timeout=30,
        )

    def _apply_delay(self, remote: Remote, st: HostState) -> None:
        ipt = iptables_cmd(remote)
        sudo = sudo_for(remote)
        remote.run(
            f"{ensure_chain_script(ipt, DELAY_CHAIN, first=False)}; {ipt} -F {DELAY_CHAIN}",
            sudo=sudo,
            timeout=30,
        )
        if remote.daemon_running(DELAYER_PID, **sudo_kw(remote)):
            remote.stop_daemon(DELAYER_PID, timeout=3.0, **sudo_kw(remote))
        if st.delay is None:
            return
        d, j = st.delay
        remote.upload(os.path.join(os.path.dirname(__file__), "delayer.py"), DELAYER_PATH)
        py = _python_for(remote)
        remote.start_daemon(
            f"env -u LD_PRELOAD {shlex.quote(py)} {DELAYER_PATH} --queue {QUEUE} "
            f"--delay-ms {d:g} --jitter-ms {j:g}",
            pidfile=DELAYER_PID,
            logfile=DELAYER_LOG,
            **sudo_kw(remote),
        )
        # The queue must be bound before packets are fed to it (bypass covers the gap).
        remote.run(
            f"for i in $(seq 50); do grep -q delaying {DELAYER_LOG} 2>/dev/null && exit 0; "
            f"sleep 0.1; done; cat {DELAYER_LOG} >&2; exit 1",
            timeout=30,
        )
        remote.run(" && ".join(delay_rules(ipt, st.peers)), sudo=sudo, timeout=30)

    def _push(self, ctx: RunContext, node: str, kind: str) -> None:
        remote = remote_of(ctx, node)
        st = self._state(ctx, node)
        entries = self._journal_entries(remote, st, kind)
        active = st.active(kind)
        for k, key, undo in entries if active else ():
            journal.note(ctx, node, k, key, undo, f"{kind} via {st.backend}")
        if st.backend == "netem":
            self._apply_netem(remote, st)
        elif kind in NETEM_ONLY:
            if active:
                raise NemesisError(f"{kind} needs tc netem, which {node} lacks")
        elif kind == "loss":
            self._apply_loss(remote, st)
        else:
            if not st.delay_ok:
                raise NemesisError(st.delay_problem or f"delay unsupported on {node}")
            self._apply_delay(remote, st)
        if not active and (st.backend != "netem" or not any(st.active(k) for k in KNOWN)):
            for k, key, _undo in entries:
                journal.clear(ctx, node, k, key)

    @staticmethod
    def _journal_entries(remote: Remote, st: HostState, kind: str) -> list[tuple[str, str, dict]]:
        """The journal entries (nemesis/journal.py) that undo ``kind`` on this host."""
        if st.backend == "netem":
            return [("netem", st.iface or "", {"iface": st.iface})]
        if kind in NETEM_ONLY:
            return []
        ipt = iptables_cmd(remote)
        if kind == "loss":
            return [("iptables-chain", LOSS_CHAIN, {"chain": LOSS_CHAIN, "iptables": ipt})]
        return [
            ("iptables-chain", DELAY_CHAIN, {"chain": DELAY_CHAIN, "iptables": ipt}),
            ("daemon", DELAYER_PID, {"pidfile": DELAYER_PID}),
        ]

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        start, _, kind = op.f.partition("-")
        if kind not in self.kinds or start not in ("start", "stop"):
            raise NemesisError(f"netem nemesis cannot handle {op.f!r}")
        if start == "stop":
            active = [n for n, st in self.hosts.items() if st.active(kind)]

            def heal(node: str) -> None:
                st = self._state(ctx, node)
                st.clear(kind)
                self._push(ctx, node, kind)

            errors = host_errors(on_nodes(ctx.nodes, heal))
            return completion(op, {"nodes": sorted(active)}, errors)
        value: dict[str, Any] = dict(op.value or {})
        nodes = op_nodes(ctx, value)
        if not nodes:
            return no_targets(op, value)
        value["nodes"] = nodes
        if kind in ("loss", "duplicate", "reorder"):
            p = float(value.get("probability", 0.2))
            if not 0.0 < p <= 1.0:
                raise NemesisError(f"{kind} probability must be in (0, 1], got {p}")
            value["probability"] = p
            if kind == "reorder":
                d = float(value.get("delay_ms", 20.0))
                if d <= 0:
                    raise NemesisError(f"reorder needs delay_ms > 0, got {d}")
                value["delay_ms"] = d
        else:
            d, j = float(value.get("delay_ms", 50.0)), float(value.get("jitter_ms", 0.0))
            if d <= 0 or j < 0 or j > d:
                raise NemesisError(
                    f"delay needs delay_ms > 0 and 0 <= jitter_ms <= delay_ms, got {d}, {j}"
                )
            value["delay_ms"], value["jitter_ms"] = d, j

        def apply(node: str) -> str:
            st = self._state(ctx, node)
            if kind in NETEM_ONLY and st.backend != "netem":
                raise NemesisError(f"{kind} needs tc netem, which {node} lacks")
            if kind in ("loss", "duplicate"):
                setattr(st, kind, value["probability"])
            elif kind == "reorder":
                st.reorder = (value["probability"], value["delay_ms"])
            else:
                st.delay = (value["delay_ms"], value["jitter_ms"])
            self._push(ctx, node, kind)
            return st.backend

        results = on_nodes(nodes, apply)
        value["backend"] = {n: r for n, r in results.items() if isinstance(r, str)}
        return completion(op, value, host_errors(results))

    # --- healing -------------------------------------------------------------

    def _clear(self, ctx: RunContext, nodes: list[str]) -> dict[str, str]:
        def one(node: str) -> None:
            remote = remote_of(ctx, node)
            st = self.hosts.get(node)
            sudo = sudo_for(remote)
            ipt = iptables_cmd(remote)
            problems = []
            for chain in (LOSS_CHAIN, DELAY_CHAIN):
                r = remote.run(remove_chain_script(ipt, chain), sudo=sudo, timeout=30, check=False)
                if not r.ok:
                    problems.append(f"chain {chain} still present")
            if remote.daemon_running(DELAYER_PID, **sudo_kw(remote)):
                remote.stop_daemon(DELAYER_PID, timeout=3.0, **sudo_kw(remote))
            if st is not None and st.backend == "netem" and st.iface:
                remote.run(
                    f"tc qdisc del dev {shlex.quote(st.iface)} root 2>/dev/null; true",
                    sudo=sudo,
                    timeout=30,
                )
            if st is not None:
                for k in KNOWN:
                    st.clear(k)
            if problems:
                raise NemesisError("; ".join(problems))
            for k, key in (
                ("iptables-chain", LOSS_CHAIN),
                ("iptables-chain", DELAY_CHAIN),
                ("daemon", DELAYER_PID),
                ("netem", st.iface if st and st.iface else ""),
            ):
                journal.clear(ctx, node, k, key)

        return host_errors(on_nodes(nodes, one))

    def teardown(self, ctx: RunContext) -> None:
        log_errors("clearing loss/delay", self._clear(ctx, list(ctx.nodes)))


LOSS_P = (0.05, 0.1, 0.2, 0.4)
DELAY_MS = (10, 50, 100, 250)
DUPLICATE_P = (0.05, 0.2, 0.5)
REORDER_P = (0.1, 0.25, 0.5)
REORDER_DELAY_MS = (5, 20, 50)


def _draw_loss(d: Draw) -> dict[str, Any]:
    value = draw_target(d, "loss")
    value["probability"] = d.rng.choice(LOSS_P)
    return value


def _draw_delay(d: Draw) -> dict[str, Any]:
    value = draw_target(d, "delay")
    ms = d.rng.choice(DELAY_MS)
    value["delay_ms"], value["jitter_ms"] = ms, ms / 5
    return value


def _draw_duplicate(d: Draw) -> dict[str, Any]:
    value = draw_target(d, "duplicate")
    value["probability"] = d.rng.choice(DUPLICATE_P)
    return value


def _draw_reorder(d: Draw) -> dict[str, Any]:
    value = draw_target(d, "reorder")
    value["probability"] = d.rng.choice(REORDER_P)
    value["delay_ms"] = d.rng.choice(REORDER_DELAY_MS)
    return value


def _undo_netem(remote: Remote | None, entry: JournalRecord) -> None:
    remote = journal.connected(remote, entry)
    remote.run(
        f"tc qdisc del dev {shlex.quote(str(entry.undo['iface']))} root 2>/dev/null; true",
        sudo=sudo_for(remote),
        timeout=30,
    )


def _undo_daemon(remote: Remote | None, entry: JournalRecord) -> None:
    remote = journal.connected(remote, entry)
    stop_by_pidfile(remote, str(entry.undo["pidfile"]))


def _delayer_pidfiles(host: Host) -> list[str]:
    return [DELAYER_PID]


QDISC = JournalKind(
    name="netem",
    rank=21,
    undo=_undo_netem,
    doc="a netem qdisc on the interface towards the peers: deleted",
)
DAEMON = JournalKind(
    name="daemon",
    rank=22,
    undo=_undo_daemon,
    doc="a fault's daemon on the host (the NFQUEUE delayer), by pid file: stopped",
)
_NET_JOURNAL = (IPTABLES_CHAIN, QDISC, DAEMON)
_NET_RESIDUE = Residue(pidfiles=_delayer_pidfiles, markers=("splitbrain-delayer",))


def _netem_nemesis(chosen: Mapping[str, Selected]) -> NetemNemesis:
    return NetemNemesis(tuple(k for k in KNOWN if k in chosen))


def _net_fault(name: str, rank: int, draw: Any, colour: str, doc: str, netem: bool) -> Fault:
    return Fault(
        name=name,
        nemesis=_netem_nemesis,
        group="netem",
        heal_rank=rank,
        draw=draw,
        options=NodeFaultOptions,
        needs=frozenset({"netem"}) if netem else frozenset(),
        journal=_NET_JOURNAL,
        residue=_NET_RESIDUE,
        effects=Effects(degrades_network=True),  # periods: the default, start's "nodes"
        colour=colour,
        doc=doc,
    )


LOSS = _net_fault(
    "loss", 40, _draw_loss, "#669bbc", "packets dropped at random (netem, else iptables)", False
)
DELAY = _net_fault(
    "delay", 41, _draw_delay, "#2a9d8f", "packets delayed (netem, else an NFQUEUE daemon)", False
)
DUPLICATE = _net_fault(
    "duplicate", 42, _draw_duplicate, "#90be6d", "packets sent twice (tc netem only)", True
)
REORDER = _net_fault(
    "reorder", 43, _draw_reorder, "#f9844a", "some packets skip the delay (tc netem only)", True
)
