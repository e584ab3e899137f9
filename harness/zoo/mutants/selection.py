"""Which code of the reference node is mutated, and why that code.

Mutation testing measures the campaign, so it mutates only code whose bugs are
safety bugs: the decisions and the persistence that Raft-like safety rests on.
Everything else (the wire format, the socket servers, the benchmarks, the fuzzer,
mode ha and broker, timers that only change liveness) would mostly give
mutants that either break the node outright or change nothing a checker could
see, and would dilute the score. The list is explicit, one entry per function,
so a reader can argue with each choice; a function renamed in ``node_impl``
makes :func:`node_mutants` fail loudly instead of silently mutating less.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.zoo.mutants.mutator import Mutant, mutate_source

__all__ = ["Area", "SAFETY_CODE", "area_of", "node_mutants", "selected_functions"]


@dataclass(frozen=True)
class Area:
    """A group of functions of one module, and the safety property they carry."""

    name: str
    file: str
    functions: tuple[str, ...]
    why: str


SAFETY_CODE: tuple[Area, ...] = (
    Area(
        "voting",
        "voting.py",
        ("is_quorum", "decide_vote", "tally_votes", "candidate_outcome", "decide_heartbeat"),
        "the voter's and candidate's rules: one vote per term, the log check (election "
        "restriction), what a quorum is; a slip elects two leaders in a term or a leader "
        "missing committed entries",
    ),
    Area(
        "election",
        "election.py",
        (
            "Elector.heartbeat_round",
            "Elector._lease_expired",
            "Elector._maintain_leader",
            "Elector._confirm_loop",
            "Elector._maintain_candidate",
            "Elector._vote_round",
            "Elector.handle_vote",
            "Elector.handle_heartbeat",
        ),
        "the elector around those rules: counting replies, stepping down, confirming "
        "leadership for reads, granting and persisting votes, following a heartbeat",
    ),
    Area(
        "quorum",
        "quorum.py",
        ("quorum_index", "next_committed", "follower_commit"),
        "the commit rule: the index a majority holds, only entries of the current term "
        "commit by counting, a follower never raises its commit past what matches",
    ),
    Area(
        "commit",
        "node.py",
        (
            "Node.persist_term",
            "Node._save_term_now",
            "Node.next_term",
            "Node.grant_vote",
            "Node.become_candidate",
            "Node.become_leader",
            "Node._leave_leader",
            "Node.propose",
            "Node.raise_mark",
            "Node.own_mark",
            "Node.check_quorum",
            "Node.set_committed",
        ),
        "the leader's side: term and vote persisted before they are used, the new "
        "leader's NOOP, proposals, match marks and the commit index",
    ),
    Area(
        "apply",
        "node.py",
        ("Node._apply_to_committed", "Node.start"),
        "the state machine fed from the log: applied up to the commit index only, pending "
        "ops acked only for their own term, the kv map rebuilt at start (R4)",
    ),
    Area(
        "read path",
        "node.py",
        ("Node.wait_applied", "Node.read_barrier", "Node.read_view"),
        "read-index reads: the leader's NOOP committed, leadership confirmed by a quorum "
        "after the read arrived, the state applied up to the read index",
    ),
    Area(
        "recovery",
        "node.py",
        ("Node.__init__",),
        "what a restarted node believes: its term, its vote and its commit index from disk",
    ),
    Area(
        "follower",
        "follower.py",
        (
            "gate",
            "EntryHandler.reset",
            "EntryHandler.take_commit",
            "EntryHandler.handle_push",
            "EntryHandler._still_valid",
            "EntryHandler._do_control",
            "EntryHandler._do_appends",
        ),
        "a follower's pushes: only from its leader of its term, the log matching check, "
        "truncation, durable before SUCCESS, the commit index it takes",
    ),
    Area(
        "replication",
        "replication.py",
        (
            "compare_decision",
            "EntryDispatcher._stale",
            "EntryDispatcher._check_term",
            "EntryDispatcher._compare",
            "EntryDispatcher._truncate",
            "EntryDispatcher._on_append_reply",
        ),
        "the leader's per-peer dispatcher: where the logs agree, what to truncate, which "
        "replies raise a match mark",
    ),
    Area(
        "log store",
        "store.py",
        (
            "LogStore._recover",
            "LogStore.append_follower",
            "LogStore._check_fits",
            "LogStore.truncate",
            "LogStore._cut",
            "LogStore.flush",
            "TermStore.load",
            "TermStore.save",
            "Checkpoint.load",
            "Checkpoint.save",
            "_atomic_write_json",
        ),
        "durability and recovery: the valid prefix kept after a crash, what flush claims "
        "durable, truncation, the term/vote and checkpoint files",
    ),
    Area(
        "kv",
        "kv.py",
        ("KV.apply", "KV.read"),
        "the replicated map: put, cas decided at apply time, read",
    ),
    Area(
        "kv reads",
        "server.py",
        ("ClientAPI.kv_read", "LogAPI.get"),
        "the client-facing read handlers: which barrier a read passes, which index bounds it",
    ),
)


def selected_functions(areas: Sequence[Area] = SAFETY_CODE) -> dict[str, list[str]]:
    """file -> its selected functions, in the order of the areas."""
    out: dict[str, list[str]] = {}
    for a in areas:
        names = out.setdefault(a.file, [])
        names += [f for f in a.functions if f not in names]
    return out


def node_mutants(node_dir: Path, areas: Sequence[Area] = SAFETY_CODE) -> list[Mutant]:
    """Every mutant of the selected code of the node package at ``node_dir``."""
    out: list[Mutant] = []
    for file, functions in selected_functions(areas).items():
        source = (node_dir / file).read_text(encoding="utf-8")
        out += mutate_source(source, file, functions)
    return out


def area_of(file: str, function: str, areas: Sequence[Area] = SAFETY_CODE) -> str:
    """The name of the area a selected function belongs to ("" if none)."""
    for a in areas:
        if a.file == file and function in a.functions:
            return a.name
    return ""
