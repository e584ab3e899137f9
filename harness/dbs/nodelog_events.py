"""The reference node's ``node.log`` read as :class:`~harness.core.events.NodeEvent`s.

``node_impl/nodelog.py`` writes one ``KIND key=value ... time=<epoch>`` line per fact;
the ones the coverage report needs:

- ``INFO event=start id=N incarnation=I term=T ...``: a process start;
- ``ROLE term=T role=R leader=L``: on every change of (term, role, leader);
- ``INFO event=vote term=T candidate=C``: a vote granted (a candidate's own included);
- ``INFO event=truncated at=I old_end=.. new_end=..``: a follower cut its log back.

Mode ``ha`` logs ``ROLE`` lines with ``master``/``slave`` roles and no votes; those
roles are not election roles and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.core.events import NodeEvent

__all__ = ["NodeLogEvents", "parse_node_log_line"]

_ELECTION_ROLES = frozenset({"leader", "follower", "candidate"})


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


def _name(v: str | None) -> str | None:
    return None if v in (None, "-", "") else v


def parse_node_log_line(node: str, line: str) -> NodeEvent | None:
    """The event one ``node.log`` line records, or None (other lines, torn lines)."""
    parts = line.split()
    if len(parts) < 2:
        return None
    f = _fields(parts[1:])
    try:
        wall = float(f["time"]) if "time" in f else None
    except ValueError:
        wall = None
    kind = parts[0]
    if kind == "ROLE":
        role = f.get("role")
        if role not in _ELECTION_ROLES:
            return None
        return NodeEvent(node, "role", wall, _int(f.get("term")), role, _name(f.get("leader")))
    if kind != "INFO":
        return None
    what = f.get("event")
    if what == "start":
        return NodeEvent(node, "start", wall, _int(f.get("term")))
    if what == "vote":
        return NodeEvent(
            node, "vote", wall, _int(f.get("term")), candidate=_name(f.get("candidate"))
        )
    if what == "truncated":
        return NodeEvent(node, "truncate", wall, _int(f.get("term")), index=_int(f.get("at")))
    return None


class NodeLogEvents:
    """:class:`~harness.core.events.ReportsEvents` for DBs running ``node_impl``."""

    def event_kinds(self) -> frozenset[str]:
        return frozenset({"start", "role", "vote", "truncate"})

    def node_events(self, node: str, files: Sequence[Path]) -> Iterator[NodeEvent]:
        for path in files:
            if path.name != "node.log":
                continue  # stdout.log holds tracebacks, not events
            try:
                fh = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
            except OSError:
                continue
            with fh:
                for line in fh:
                    ev = parse_node_log_line(node, line)
                    if ev is not None:
                        yield ev
