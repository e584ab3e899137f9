"""``marker``: a fault that leaves a file on its target hosts until it is healed.

Harmless on purpose (it breaks nothing), yet real: the file is made over the host's own
Remote, journaled before it lands, removed by ``stop-marker`` and by teardown, and a
later process that finds the journal entry of a killed run removes it too. Everything
the harness needs to know about it is the one :data:`MARKER` object below, declared as
the entry point ``marker`` of the ``splitbrain.faults`` group in this package's
pyproject.toml.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harness.api import (
    Draw,
    Fault,
    JournalKind,
    JournalRecord,
    Op,
    Remote,
    RunContext,
    Selected,
    option,
)

__all__ = ["MARKER", "MARKER_FILE", "marker_path"]

ROOT = "/tmp/sb-ext-fault"


def marker_path(test: str, node: str) -> str:
    """Where the marker of ``node`` lives (one directory per test: tests may share a disk)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in test)
    return f"{ROOT}/{safe}/{node}.mark"


@dataclass(frozen=True)
class MarkerOptions:
    """``--nemesis-option marker_targets=all``."""

    targets: tuple[Literal["one", "all"], ...] = option(("one", "all"), "whom a marker may hit")


class MarkerNemesis:
    """``start-marker`` touches the marker on the chosen nodes; ``stop-marker`` removes them all."""

    def __init__(self) -> None:
        self.marked: set[str] = set()

    def fs(self) -> set[str]:
        return {"start-marker", "stop-marker"}

    def setup(self, ctx: RunContext) -> None:
        self._remove(ctx, list(ctx.nodes))

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        if op.f == "start-marker":
            value = dict(op.value or {})
            for node in value["nodes"]:
                path = marker_path(ctx.spec.name, node)
                if ctx.journal is not None:  # written down before the fault lands
                    ctx.journal.note(node, MARKER_FILE.name, path, {"path": path}, "marker file")
                q = shlex.quote(path)
                r = ctx.remotes[node].run(f"mkdir -p $(dirname {q}) && touch {q} && ls {q}")
                self.marked.add(node)
                value.setdefault("seen", []).append(r.stdout.strip())
            return op.complete("info", value=value)
        if op.f == "stop-marker":
            nodes = sorted(self.marked)
            self._remove(ctx, nodes)
            return op.complete("info", value={"nodes": nodes, **dict(op.value or {})})
        raise ValueError(f"marker nemesis cannot handle {op.f!r}")

    def _remove(self, ctx: RunContext, nodes: list[str]) -> None:
        for node in nodes:
            path = marker_path(ctx.spec.name, node)
            ctx.remotes[node].run(f"rm -f {shlex.quote(path)}")
            self.marked.discard(node)
            if ctx.journal is not None:
                ctx.journal.clear(node, MARKER_FILE.name, path)

    def teardown(self, ctx: RunContext) -> None:
        self._remove(ctx, sorted(self.marked))


def _draw(d: Draw) -> dict[str, Any]:
    target = d.rng.choice(d.targets)
    nodes = list(d.nodes) if target == "all" else [d.rng.choice(d.nodes)]
    return {"target": target, "nodes": nodes}


def _undo(remote: Remote | None, entry: JournalRecord) -> None:
    if remote is None:
        raise ValueError(f"removing {entry.describe()} needs a connection to {entry.host}")
    remote.run(f"rm -f {shlex.quote(str(entry.undo['path']))}")


def _nemesis(chosen: Mapping[str, Selected]) -> MarkerNemesis:
    return MarkerNemesis()


MARKER_FILE = JournalKind(name="marker-file", rank=500, undo=_undo, doc="a marker file: removed")

MARKER = Fault(
    name="marker",
    nemesis=_nemesis,
    heal_rank=500,
    draw=_draw,
    options=MarkerOptions,
    journal=(MARKER_FILE,),
    colour="#ff006e",
    doc="a marker file on the target hosts, removed on heal",
)
