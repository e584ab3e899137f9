"""The append-log workload: unique payloads appended, ranges of the log read back.

History values (docs/architecture.md §3):

- ``append``: invoke ``{"payload": p}``, ok ``{"payload": p, "index": i, "term": t}``.
  Payloads are ``"<process>-<n>"`` with n counting every append of the test, so
  no two attempts share one, even across retries after info (invariant I4).
- ``read`` (key null): invoke ``{"from": a, "to": b}``, ok ``{"entries": [[index,
  term, payload], ...], "committed": c}``; payload is null for NOOP entries and
  ``{"kind", "at": index, "op": kv op map}`` for kv (and log-mode read) entries,
  which are not unique by content, and ``{"undecodable": hex}`` for a body the node
  could not read (no client proposed it: log safety's ``unproposed-committed``). During the run a read goes to the leader
  (non-local get: committed entries only, linearizable) and covers at most
  ``read_chunk`` entries near the highest index seen acked.
- final reads: invoke ``{"from", "to", "final": true, "local": true}`` naming the
  node to read; the client sends a *local* get to that very node (no redirect),
  clipped to its ledger end, and the ok value adds ``"end"``, the node's
  ledgerEndIndex. :class:`NodeLogReader` walks each node in chunks from 0 until
  it has passed that end, so the checker sees every node's log (it trusts
  entries up to each read's ``committed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.core.options import as_options, declares_options
from harness.core.workload import PENDING, GenContext, Generator, Workload
from workloads.dledger_client import DLedgerClient, Session, finish
from workloads.generator import each_node, invoke
from workloads.options import DEFAULT_CHUNK, LogOptions, SamplerOptions
from workloads.register import checks
from workloads.sampler import handle_sample, maybe_sampler_workers

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.spec import RunContext

__all__ = [
    "AppendOptions",
    "AppendGen",
    "NodeLogReader",
    "final_log_reads",
    "AppendClient",
    "handle_append",
    "log_entries",
    "workload",
]


class AppendGen:
    """Appends with unique payloads, and a fraction of reads of the recent committed log.

    Only reads during a lull: what a quiet leader commits is then still read.
    """

    def __init__(self, *, read_fraction: float = 0.1, chunk: int = DEFAULT_CHUNK) -> None:
        self.read_fraction = read_fraction
        self.chunk = chunk
        self.n = 0
        self.hi = -1  # highest index known committed

    def op(self, ctx: GenContext) -> Op:
        if ctx.lull or (self.read_fraction > 0 and ctx.rng.random() < self.read_fraction):
            to = max(self.hi, 0)
            frm = max(0, to - ctx.rng.randrange(self.chunk))
            return invoke(ctx, "read", {"from": frm, "to": to})
        payload = f"{ctx.process}-{self.n}"
        self.n += 1
        return invoke(ctx, "append", {"payload": payload})

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type != "ok" or event.key is not None or not isinstance(event.value, dict):
            return
        if event.f == "append" and isinstance(event.value.get("index"), int):
            self.hi = max(self.hi, event.value["index"])
        elif event.f == "read" and isinstance(event.value.get("committed"), int):
            self.hi = max(self.hi, event.value["committed"])


class NodeLogReader:
    """One node's final read, chunk after chunk, until past that node's ledger end.

    A chunk that fails is retried up to ``attempts`` times in a row; then the
    node is given up (it is down), and the checker sees no final read from it.
    """

    def __init__(self, node: str, *, chunk: int = DEFAULT_CHUNK, attempts: int = 3) -> None:
        self.node, self.chunk, self.attempts = node, chunk, attempts
        self.next_from = 0
        self.failures = 0
        self.done = False
        self.inflight: tuple[int | str, int] | None = None  # (process, to)

    def op(self, ctx: GenContext) -> Any:
        if self.done:
            return None
        if self.inflight is not None:
            return PENDING
        to = self.next_from + self.chunk - 1
        self.inflight = (ctx.process, to)
        return invoke(
            ctx,
            "read",
            {"from": self.next_from, "to": to, "final": True, "local": True},
            node=self.node,
        )

    def update(self, ctx: GenContext, event: Op) -> None:
        if (
            event.type == "invoke"
            or self.inflight is None
            or event.process != self.inflight[0]
            or event.f != "read"
        ):
            return
        _, to = self.inflight
        self.inflight = None
        if event.type == "ok" and isinstance(event.value, dict):
            self.failures = 0
            entries = event.value.get("entries") or []
            self.next_from = max((e[0] for e in entries), default=to) + 1
            end = event.value.get("end")
            if not isinstance(end, int) or self.next_from > end:
                self.done = True
            return
        self.failures += 1
        if self.failures >= self.attempts:
            self.done = True


def final_log_reads(*, chunk: int = DEFAULT_CHUNK, attempts: int = 3) -> Generator:
    """Every node's whole log, read locally in chunks, all nodes side by side."""
    return each_node(lambda node: NodeLogReader(node, chunk=chunk, attempts=attempts))


def log_entries(reply: Mapping[str, Any]) -> list[list[Any]]:
    """``[[index, term, payload]]`` from a get reply's ``[[index, term, kind, payload]]``."""
    out = []
    for e in reply.get("entries") or []:
        index, term, kind, payload = e[0], e[1], e[2], e[3] if len(e) > 3 else None
        if kind == "noop":
            payload = None
        elif kind == "undecodable":
            # A body the node could not read (a torn or flipped record it kept): shown as
            # its bytes, not a system entry, so log safety asks who ever proposed it.
            payload = {"undecodable": payload}
        elif kind != "append":
            # kv ops repeat by content (two clients may both put k0=3), so only
            # append payloads are unique (I4); a kv entry's identity is its index.
            payload = {"kind": kind, "at": index, "op": payload}
        out.append([index, term, payload])
    return out


def _read_value(reply: Mapping[str, Any], *, end: bool) -> dict[str, Any]:
    v = {"entries": log_entries(reply), "committed": reply.get("committedIndex")}
    if end:
        v["end"] = reply.get("ledgerEndIndex")
    return v


def _local_read(client: DLedgerClient, session: Session, op: Op) -> Op:
    node = client.target(op)
    frm, to = int(op.value["from"]), int(op.value["to"])
    st = session.call(node, lambda c: c.status(), follow=False)
    if st.reply is None or st.code != "SUCCESS":
        return finish(op, st, read=True)
    end = st.reply.get("ledgerEndIndex")
    if not isinstance(end, int) or end < frm:
        return finish(
            op,
            st,
            read=True,
            ok_value=lambda r: {
                "entries": [],
                "committed": r.get("committedIndex"),
                "end": r.get("ledgerEndIndex"),
            },
        )
    hi = min(to, end)
    res = session.call(node, lambda c: c.get(frm=frm, to=hi, local=True), follow=False)
    return finish(op, res, read=True, ok_value=lambda r: _read_value(r, end=True))


def handle_append(client: DLedgerClient, session: Session, op: Op) -> Op:
    """An ``append`` or a log ``read`` (key null) against the reference node."""
    if op.f == "append":
        payload = op.value["payload"]
        res = session.call(client.target(op), lambda c: c.append(payload), to_leader=True)
        return finish(
            op,
            res,
            read=False,
            ok_value=lambda r: {"payload": payload, "index": r.get("index"), "term": r.get("term")},
        )
    if op.f == "read":
        if op.value.get("local"):
            return _local_read(client, session, op)
        frm, to = int(op.value["from"]), int(op.value["to"])
        res = session.call(client.target(op), lambda c: c.get(frm=frm, to=to))
        return finish(op, res, read=True, ok_value=lambda r: _read_value(r, end=False))
    raise ValueError(f"append workload cannot do {op.f!r}")


class AppendClient(DLedgerClient):
    read_fs = frozenset({"read", "sample"})

    def handle(self, session: Session, ctx: RunContext, op: Op) -> Op:
        if op.f == "sample":
            return handle_sample(self, session, op)
        return handle_append(self, session, op)


@dataclass(frozen=True)
class AppendOptions(SamplerOptions, LogOptions):
    """The append workload's knobs; what mode ``ha`` allows to be lost is the DB's to say."""


@declares_options(AppendOptions)
def workload(options: AppendOptions | Mapping[str, Any]) -> Workload:
    opts = as_options(AppendOptions, options, role="workload append")
    return Workload(
        name="append",
        client=AppendClient(),
        generator=AppendGen(read_fraction=opts.read_fraction, chunk=opts.read_chunk),
        final_generator=final_log_reads(chunk=opts.read_chunk),
        checker={"model": None, "checks": checks(["log-safety"], opts)},
        extra_workers=maybe_sampler_workers(opts),
    )
