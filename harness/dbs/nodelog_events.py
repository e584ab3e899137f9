"""The reference node's ``node.log`` read as :class:`~harness.core.events.NodeEvent`s.

``node_impl/nodelog.py`` writes one ``KIND key=value ... time=<epoch> mono=<s>`` line
per fact (older nodes wrote no ``mono``); the ones the coverage report needs:

- ``INFO event=start id=N incarnation=I term=T ... boot=B``: a process start, on the
  kernel whose boot id is B;
- ``ROLE term=T role=R leader=L``: on every change of (term, role, leader);
- ``INFO event=candidacy term=T``: the node asked for votes in T (once per term);
- ``INFO event=vote term=T candidate=C``: a vote granted (a candidate's own included);
- ``INFO event=vote-refused term=T candidate=C why=RESULT``: a vote refused;
- ``INFO event=read-refused why=STAGE code=C term=T``: a client read refused;
- ``INFO event=truncated at=I old_end=.. new_end=.. term=T removed=T:A-B,...``: a
  follower cut its log back (``removed``: the terms of what it cut);
- ``INFO event=commit index=I eterm=ET term=T role=R match=M``: the commit index moved;
- ``INFO event=elected term=T end=E eterm=ET``: a new leader's log as its term began;
- ``SAFETY check=NAME ...``: one of the node's own invariant checks failed.

Every event carries the member that wrote it (the ``id`` of the file's last ``start``).
The node keeps Raft's election safety and persists its vote, so its DB declares both
:data:`~harness.core.events.INVARIANTS`.

Mode ``ha`` logs ``ROLE`` lines with ``master``/``slave`` roles and no votes; those
roles are not election roles and are skipped.

A DB host's node directory holds ``node.log`` and, when the host's member was removed
and re-added wiped, the old members' ``node.<id>.log``; all are read, the old ones
first (they were written first).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from harness.core.events import NodeEvent

__all__ = ["NodeLogEvents", "parse_node_log_line", "node_log_files", "read_node_logs"]

_ELECTION_ROLES = frozenset({"leader", "follower", "candidate"})
_OLD_MEMBER_LOG = re.compile(r"^node\.(.+)\.log$")


def _fields(parts: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in parts:
        k, sep, v = p.partition("=")
        if sep:
            out[k] = v
    return out


def _int(v: str | None) -> int | None:
    try:
        return None if v is None else int(v)
    except ValueError:
        return None


def _float(v: str | None) -> float | None:
    try:
        return None if v is None else float(v)
    except ValueError:
        return None


def _name(v: str | None) -> str | None:
    return None if v in (None, "-", "") else v


def parse_node_log_line(node: str, line: str) -> NodeEvent | None:
    """The event one ``node.log`` line records, or None (other lines, torn lines)."""
    parts = line.split()
    if len(parts) < 2:
        return None
    f = _fields(parts[1:])
    wall = _float(f.get("time"))
    mono = _float(f.get("mono"))
    kind = parts[0]
    term = _int(f.get("term"))
    if kind == "SAFETY":
        return NodeEvent(node, "safety", wall, term, why=_name(f.get("check")), mono_s=mono)
    if kind == "ROLE":
        role = f.get("role")
        if role not in _ELECTION_ROLES:
            return None
        return NodeEvent(node, "role", wall, term, role, _name(f.get("leader")), mono_s=mono)
    if kind != "INFO":
        return None
    what = f.get("event")
    if what == "start":
        return NodeEvent(
            node, "start", wall, term, mono_s=mono, boot=_name(f.get("boot")),
            member=_name(f.get("id")),
        )  # fmt: skip
    if what in ("vote", "vote-refused"):
        return NodeEvent(
            node,
            what,
            wall,
            term,
            candidate=_name(f.get("candidate")),
            why=_name(f.get("why")),
            mono_s=mono,
        )
    if what == "candidacy":
        return NodeEvent(node, "candidacy", wall, term, candidate=node, mono_s=mono)
    if what == "read-refused":
        return NodeEvent(
            node, "read-refused", wall, term, role=_name(f.get("role")),
            why=_name(f.get("why")), mono_s=mono,
        )  # fmt: skip
    if what == "truncated":
        return NodeEvent(
            node, "truncate", wall, term, index=_int(f.get("at")), mono_s=mono,
            removed=_runs(f.get("removed")),
        )  # fmt: skip
    if what == "commit":
        return NodeEvent(
            node, "commit", wall, term, role=_name(f.get("role")), index=_int(f.get("index")),
            entry_term=_int(f.get("eterm")), match=_int(f.get("match")), mono_s=mono,
        )  # fmt: skip
    if what == "elected":
        return NodeEvent(
            node, "elected", wall, term, role="leader", index=_int(f.get("end")),
            entry_term=_int(f.get("eterm")), mono_s=mono,
        )  # fmt: skip
    return None


def _runs(v: str | None) -> tuple[tuple[int, int, int], ...]:
    """``5:10-12,6:13-13`` as ``((5, 10, 12), (6, 13, 13))``; a malformed run is skipped."""
    out: list[tuple[int, int, int]] = []
    for part in (v or "").split(","):
        term, _, span = part.partition(":")
        first, _, last = span.partition("-")
        t, a, b = _int(term), _int(first), _int(last)
        if t is not None and a is not None and b is not None:
            out.append((t, a, b))
    return tuple(out)


def _old_member_key(path: Path) -> tuple[int, str]:
    """The member's generation: ``n3`` first, then ``n3.1``, ``n3.2``, ..."""
    m = _OLD_MEMBER_LOG.match(path.name)
    ident = m.group(1) if m else path.name
    _, dot, k = ident.rpartition(".")
    return (int(k) if dot and k.isdigit() else 0, path.name)


def node_log_files(files: Sequence[Path]) -> list[Path]:
    """The node logs among a host's fetched files, in the order they were written: the
    removed members' ``node.<id>.log`` (``n3``, then ``n3.1``, ...), then ``node.log``."""
    old = sorted((p for p in files if _OLD_MEMBER_LOG.match(p.name)), key=_old_member_key)
    return old + [p for p in files if p.name == "node.log"]


def read_node_logs(node: str, files: Sequence[Path]) -> Iterator[NodeEvent]:
    """The events of a host's node logs in the order written, each with its member."""
    for path in node_log_files(files):  # stdout.log holds tracebacks, not events
        try:
            fh = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
        except OSError:
            continue
        member: str | None = None
        with fh:
            for line in fh:
                ev = parse_node_log_line(node, line)
                if ev is None:
                    continue
                if ev.kind == "start":
                    member = ev.member
                yield ev if ev.member == member else replace(ev, member=member)


class NodeLogEvents:
    """:class:`~harness.core.events.ReportsEvents` for DBs running ``node_impl``."""

    event_invariants = frozenset({"one-vote-per-term", "one-leader-per-term"})

    def event_kinds(self) -> frozenset[str]:
        return frozenset(
            {
                "start", "role", "vote", "truncate", "candidacy", "vote-refused",
                "read-refused", "safety",
            }
        )  # fmt: skip

    def node_events(self, node: str, files: Sequence[Path]) -> Iterator[NodeEvent]:
        return read_node_logs(node, files)
