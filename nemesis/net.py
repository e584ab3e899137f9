"""Grudges applied with iptables, inside each receiving host.

Drops happen on the receiver's INPUT (lab-notes: an OUTPUT drop hands the
sender ``EPERM``, which no real network does) and live in a chain of our own,
``SPLITBRAIN``, jumped to from INPUT: healing is one flush, and anything a
crashed run left behind is easy to find and remove. Only the peers' addresses
are dropped, so the harness's SSH and client traffic keep flowing. Plain
``iptables`` commands work with both the nft and the legacy backend; a host can
name another binary in ``Host.extras["iptables"]``.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import nemesis.grudge as g
from harness.core.errors import NemesisError
from harness.core.fault import Draw, Effects, Fault, JournalKind, JournalRecord, Periods, Selected
from nemesis import journal
from nemesis.base import completion, host_errors, leader_now, log_errors, on_nodes, remote_of

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.remote import Remote
    from harness.core.spec import RunContext

__all__ = [
    "CHAIN",
    "iptables_cmd",
    "peer_address",
    "ensure_chain_script",
    "remove_chain_script",
    "drop_script",
    "apply_grudge",
    "heal",
    "remove",
    "chain_rules",
    "PartitionNemesis",
    "IPTABLES_CHAIN",
    "PARTITION",
]

log = logging.getLogger(__name__)

CHAIN = "SPLITBRAIN"


def iptables_cmd(remote: Remote) -> str:
    return str(remote.host.extras.get("iptables", "iptables")) + " -w 10"


def sudo_for(remote: Remote) -> bool:
    return remote.host.user != "root"


def peer_address(ctx: RunContext, node: str) -> str:
    """The address other nodes' packets from ``node`` carry (may differ from the SSH address)."""
    try:
        host = ctx.hosts[node]
    except KeyError:
        raise NemesisError(
            f"unknown node {node!r} in grudge; nodes: {', '.join(ctx.hosts)}"
        ) from None
    return str(host.extras.get("cluster_address", host.address))


def ensure_chain_script(ipt: str, chain: str, *, first: bool = True) -> str:
    """Create ``chain`` and its jump from INPUT unless present; first or last in INPUT.

    Drop chains go first; a chain whose verdict accepts (the NFQUEUE delayer)
    goes last, so a partition still drops what the delayer would have let through.
    """
    where = "-I INPUT 1" if first else "-A INPUT"
    return (
        f"{ipt} -N {chain} 2>/dev/null; "
        f"{ipt} -C INPUT -j {chain} 2>/dev/null || {ipt} {where} -j {chain}"
    )


def remove_chain_script(ipt: str, chain: str) -> str:
    """Remove every jump to ``chain``, then the chain; fails only if it is still there."""
    return (
        f"while {ipt} -D INPUT -j {chain} 2>/dev/null; do :; done; "
        f"{ipt} -F {chain} 2>/dev/null; {ipt} -X {chain} 2>/dev/null; "
        f"! {ipt} -n -L {chain} >/dev/null 2>&1"
    )


def drop_script(ipt: str, chain: str, sources: Iterable[str]) -> str:
    """Replace the chain's rules with one DROP per source address, in one shell line."""
    rules = [f"{ipt} -F {chain}"]
    rules += [f"{ipt} -A {chain} -s {shlex.quote(a)} -j DROP" for a in sorted(set(sources))]
    return f"{ensure_chain_script(ipt, chain)}; " + " && ".join(rules)


def chain_rules(remote: Remote, chain: str = CHAIN) -> list[str]:
    """The rules of ``chain`` as ``iptables -S`` prints them (empty if the chain is absent)."""
    ipt = iptables_cmd(remote)
    r = remote.run(f"{ipt} -S {chain} 2>/dev/null || true", sudo=sudo_for(remote), timeout=30)
    return [ln for ln in r.stdout.splitlines() if ln.startswith("-A ")]


def apply_grudge(ctx: RunContext, grudge: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Make each node drop its grudge's peers (and only those); per-node errors."""
    for n, peers in grudge.items():
        for p in [n, *peers]:
            peer_address(ctx, p)

    def one(node: str) -> None:
        remote = remote_of(ctx, node)
        sources = [peer_address(ctx, p) for p in grudge.get(node, ())]
        journal.note(
            ctx,
            node,
            "iptables-chain",
            CHAIN,
            {"chain": CHAIN, "iptables": iptables_cmd(remote)},
            f"partition: drops from {', '.join(sorted(sources)) or 'nobody'}",
        )
        remote.run(
            drop_script(iptables_cmd(remote), CHAIN, sources), sudo=sudo_for(remote), timeout=30
        )

    # Nodes the grudge leaves out hold no grudge: their old rules go too.
    return host_errors(on_nodes([*ctx.nodes, *grudge], one))


def heal(ctx: RunContext, nodes: Iterable[str]) -> dict[str, str]:
    """Flush the chain (creating it if needed) on every node; per-node errors."""

    def one(node: str) -> None:
        remote = remote_of(ctx, node)
        ipt = iptables_cmd(remote)
        remote.run(
            f"{ensure_chain_script(ipt, CHAIN)}; {ipt} -F {CHAIN}",
            sudo=sudo_for(remote),
            timeout=30,
        )
        journal.clear(ctx, node, "iptables-chain", CHAIN)

    return host_errors(on_nodes(nodes, one))


def remove(ctx: RunContext, nodes: Iterable[str], chain: str = CHAIN) -> dict[str, str]:
    """Remove the chain and its jump from INPUT on every node; per-node errors."""

    def one(node: str) -> None:
        remote = remote_of(ctx, node)
        remote.run(
            remove_chain_script(iptables_cmd(remote), chain), sudo=sudo_for(remote), timeout=30
        )
        journal.clear(ctx, node, "iptables-chain", chain)

    return host_errors(on_nodes(nodes, one))


class PartitionNemesis:
    """``start-partition`` applies a grudge, ``stop-partition`` heals.

    The invocation carries either a ready grudge (the schedule computes it from
    its seeded rng) or just ``{"shape": "leader"}``, which needs the current
    leader and so is resolved here, through the DB's ``HasPrimaries``.
    """

    def __init__(self, shapes: tuple[str, ...] = ()) -> None:
        self.active: dict[str, frozenset[str]] = {}
        self.shapes = shapes

    def fs(self) -> set[str]:
        return {"start-partition", "stop-partition"}

    def _check_shapes(self, ctx: RunContext) -> None:
        """Refuse a run whose schedule could draw no shape (a schedule's shapes, if given)."""
        if not self.shapes:
            return
        from harness.core.db import HasPrimaries

        if self.shapes == ("leader",) and not isinstance(ctx.db, HasPrimaries):
            raise NemesisError(
                f"partition-leader needs a DB that reports its primaries; "
                f"{type(ctx.db).__name__} does not"
            )
        PARTITION.check_usable(self.shapes, len(ctx.nodes))

    def setup(self, ctx: RunContext) -> None:
        self._check_shapes(ctx)
        errors = heal(ctx, ctx.nodes)
        if errors:
            raise NemesisError(
                "cannot prepare iptables for partitions: "
                + "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
            )
        self.active = {}

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        if op.f == "start-partition":
            return self._start(ctx, op)
        if op.f == "stop-partition":
            errors = heal(ctx, ctx.nodes)
            log_errors("healing partition", errors)
            self.active = {}
            return completion(op, {"healed": sorted(ctx.nodes)}, errors)
        raise NemesisError(f"partition nemesis cannot handle {op.f!r}")

    def _start(self, ctx: RunContext, op: Op) -> Op:
        value: dict[str, Any] = dict(op.value or {})
        shape = value.get("shape")
        if "grudge" in value and value["grudge"] is not None:
            grudge = g.grudge_from_json(value["grudge"])
        elif shape == "leader":
            leaders = leader_now(ctx, ctx.rng)
            if not leaders:
                return completion(
                    op, {"shape": shape, "grudge": {}}, {"cluster": "no leader known"}
                )
            value["isolated"] = leaders[0]
            grudge = g.isolate(ctx.nodes, leaders[0])
        elif isinstance(shape, str):
            grudge = g.build_shape(shape, ctx.nodes, ctx.rng)
        else:
            raise NemesisError(f"start-partition needs a 'grudge' or a 'shape', got {op.value!r}")
        if isinstance(shape, str) and g.cuts_nothing(grudge):
            # never recorded as a partition that was applied: nothing was cut
            return completion(
                op,
                {"shape": shape, "grudge": {}},
                {"cluster": f"shape {shape!r} cuts nothing on {len(ctx.nodes)} nodes"},
            )
        errors = apply_grudge(ctx, grudge)
        self.active = dict(grudge)
        value["grudge"] = g.grudge_to_json(grudge)
        return completion(op, value, errors)

    def teardown(self, ctx: RunContext) -> None:
        log_errors("removing partition rules", remove(ctx, ctx.nodes))
        self.active = {}


def _undo_chain(remote: Remote | None, entry: JournalRecord) -> None:
    remote = journal.connected(remote, entry)
    u = entry.undo
    remote.run(
        remove_chain_script(str(u.get("iptables", "iptables -w 10")), str(u["chain"])),
        sudo=sudo_for(remote),
        timeout=30,
    )


IPTABLES_CHAIN = JournalKind(
    name="iptables-chain",
    rank=20,
    undo=_undo_chain,
    doc="a chain of ours jumped to from INPUT (partition, loss, delay): removed with its jumps",
)


def _draw_partition(d: Draw) -> dict[str, Any]:
    """One of the selected shapes that can cut something here, and its grudge."""
    shapes = [s for s in d.variants if (s != "leader" or d.leader_ok) and g.cuts(s, len(d.nodes))]
    if not shapes:
        if "leader" in d.variants and not d.leader_ok:
            raise NemesisError("partition-leader needs a DB that reports its primaries")
        PARTITION.check_usable(d.variants, len(d.nodes))
        raise NemesisError(f"no partition shape to draw among {d.variants}")
    shape = d.rng.choice(shapes)
    if shape == "leader":
        return {"shape": shape}
    return {"shape": shape, "grudge": g.grudge_to_json(g.build_shape(shape, d.nodes, d.rng))}


def _partition_nemesis(chosen: Mapping[str, Selected]) -> PartitionNemesis:
    return PartitionNemesis(chosen["partition"].variants)


PARTITION = Fault(
    name="partition",
    nemesis=_partition_nemesis,
    heal_rank=30,
    draw=_draw_partition,
    variants=("halves", "majority", "majorities-ring", "bridge", "random", "leader"),
    aliases={
        "partition-halves": ("halves",),
        "partition-majority": ("majority",),
        "partition-ring": ("majorities-ring",),
        "partition-bridge": ("bridge",),
        "partition-leader": ("leader",),
        "partition-random": ("random",),
    },
    usable=g.cuts,
    targets="cluster",
    journal=(IPTABLES_CHAIN,),
    effects=Effects(cuts_network=True),
    periods=Periods(hit=(), grudge="grudge"),  # one cut of the whole cluster, as its grudge says
    colour="#e4572e",
    doc="iptables drops between groups of nodes (a grudge); the shape names the groups",
)
"""``partition``: the bare name draws any shape that cuts something on the run's nodes."""
