"""Cluster membership as pure rules (docs/membership.md).

A configuration is a set of voters and a set of learners, each with a peer
address. It travels as an ordinary NORMAL log entry whose body is the msgpack
map ``{"op": "config", "voters": {id: addr}, "learners": {id: addr}}``: the
store is opaque to bodies, so a configuration survives restarts and truncations
exactly as any entry does. Changes are single-server (one voter added or removed
per entry, or one learner added, promoted or removed), one at a time, and only
after the leader has committed an entry of its own term (M3).

Everything that decides *which* configuration is in force, *who* counts toward a
quorum and *when* a change may start lives here, so each rule is one unit test;
``node.py`` owns the timers, sockets and the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from node_impl.store import MAGIC_NOOP, Entry, decode_body, encode_body

__all__ = [
    "Config",
    "ConfigError",
    "CONFIG_PREFIX",
    "encode_config",
    "decode_config",
    "config_of_entry",
    "config_in_force",
    "committed_config",
    "quorum_of",
    "voter_quorum_index",
    "change_precondition",
    "caught_up",
    "add_learner",
    "promote",
    "remove",
    "single_server_change",
]


class ConfigError(ValueError):
    """A requested change is not a valid single-server change of the current config."""


@dataclass(frozen=True)
class Config:
    """Voters and learners (id -> "host:port" peer address), in a stable order."""

    voters: tuple[tuple[str, str], ...]
    learners: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(voters: Mapping[str, str], learners: Mapping[str, str] | None = None) -> Config:
        return Config(tuple(voters.items()), tuple((learners or {}).items()))

    @property
    def voter_ids(self) -> frozenset[str]:
        return frozenset(v for v, _ in self.voters)

    @property
    def learner_ids(self) -> frozenset[str]:
        return frozenset(v for v, _ in self.learners)

    @property
    def members(self) -> frozenset[str]:
        """Everyone who receives the log: voters and learners."""
        return self.voter_ids | self.learner_ids

    def addr(self, node: str) -> str | None:
        for k, a in (*self.voters, *self.learners):
            if k == node:
                return a
        return None

    def to_dict(self) -> dict[str, dict[str, str]]:
        return {"voters": dict(self.voters), "learners": dict(self.learners)}


# msgpack of {"op": "config", ...} up to the first field: a cheap test on the hot
# path (every appended entry is checked), no decode of ordinary bodies.
CONFIG_PREFIX = b"\x83\xa2op\xa6config"


def encode_config(c: Config) -> bytes:
    body = encode_body({"op": "config", **c.to_dict()})
    assert body.startswith(CONFIG_PREFIX)
    return body


def _addr_map(v: Any) -> dict[str, str] | None:
    if not isinstance(v, dict):
        return None
    if not all(isinstance(k, str) and isinstance(a, str) for k, a in v.items()):
        return None
    return v


def decode_config(body: bytes) -> Config | None:
    """The configuration a body carries, or None if it is not a (valid) config body."""
    if not body.startswith(CONFIG_PREFIX):
        return None
    try:
        obj = decode_body(body)
    except Exception:
        return None
    if not isinstance(obj, dict) or obj.get("op") != "config":
        return None
    voters, learners = _addr_map(obj.get("voters")), _addr_map(obj.get("learners"))
    if voters is None or learners is None:
        return None
    return Config.of(voters, learners)


def config_of_entry(e: Entry) -> Config | None:
    if e.magic == MAGIC_NOOP:
        return None
    return decode_config(e.body)


def config_in_force(
    history: Sequence[tuple[int, Config]],
    startup: Config,
    end: int,
    committed: int,
    *,
    on_commit: bool = False,
) -> tuple[int, Config]:
    """(index, config) in force: the last config entry in the log (M2), else the startup
    list (index -1). ``history`` is every config entry of the log, in index order.

    Entries above ``end`` (truncated away) do not count, so cutting an uncommitted
    config entry reverts to the previous one. ``on_commit`` is the seeded bug
    ``config-on-commit``: only committed config entries count.
    """
    limit = min(end, committed) if on_commit else end
    for idx, c in reversed(history):
        if idx <= limit:
            return idx, c
    return -1, startup


def committed_config(
    history: Sequence[tuple[int, Config]], startup: Config, committed: int
) -> tuple[int, Config]:
    """The last configuration at or below the commit index (the one a change replaces)."""
    return config_in_force(history, startup, committed, committed)


def quorum_of(voters: Iterable[str], acks: Iterable[str]) -> bool:
    """True if ``acks`` holds a majority of ``voters`` (non-voters' acks do not count)."""
    vs = set(voters)
    if not vs:
        return False
    return len(vs & set(acks)) >= len(vs) // 2 + 1


def voter_quorum_index(marks: Mapping[str, int], voters: Iterable[str]) -> int:
    """The highest index held by a majority of ``voters`` (missing marks are -1).

    Learners' marks and marks of nodes outside the config are ignored: this is the
    whole difference between a learner and a voter on the leader's side.
    """
    vals = sorted((marks.get(v, -1) for v in set(voters)), reverse=True)
    if not vals:
        return -1
    return vals[len(vals) // 2]


def change_precondition(
    *,
    committed: int,
    ready_index: int,
    config_index: int,
    transferring: bool = False,
    skip_term_commit: bool = False,
) -> str | None:
    """None if a leader may append a config entry now, else the refusal code (M3).

    1. The leader has committed an entry of its own term (its election NOOP at
       ``ready_index``). Skipping this is seeded bug ``reconfig-before-term-commit``,
       the single-server bug found in 2015: a change appended by a fresh leader can
       commit with a majority that does not intersect a change committed by an
       earlier leader that this one never saw.
    2. No change is pending: the config in force is committed (one at a time).
    3. No leadership transfer is under way.
    """
    if not skip_term_commit and committed < ready_index:
        return "LEADER_NOT_READY"
    if config_index > committed:
        return "CONFIG_CHANGE_PENDING"
    if transferring:
        return "LEADER_TRANSFERRING"
    return None


def caught_up(learner_mark: int, leader_committed: int, leader_end: int, max_lag: int) -> bool:
    """A learner is caught up when it durably holds every entry the leader has committed
    and trails the leader's log end by at most ``max_lag`` entries (M4)."""
    return learner_mark >= leader_committed and leader_end - learner_mark <= max_lag


def add_learner(c: Config, node: str, addr: str) -> Config:
    if node in c.members:
        raise ConfigError(f"{node} is already a member")
    return Config(c.voters, (*c.learners, (node, addr)))


def promote(c: Config, node: str) -> Config:
    if node not in c.learner_ids:
        raise ConfigError(f"{node} is not a learner")
    addr = c.addr(node)
    assert addr is not None
    return Config((*c.voters, (node, addr)), tuple(x for x in c.learners if x[0] != node))


def remove(c: Config, node: str) -> Config:
    if node not in c.members:
        raise ConfigError(f"{node} is not a member")
    voters = tuple(x for x in c.voters if x[0] != node)
    if not voters:
        raise ConfigError("cannot remove the last voter")
    return Config(voters, tuple(x for x in c.learners if x[0] != node))


def single_server_change(old: Config, new: Config) -> bool:
    """True if the voter sets differ by at most one node: any majority of the old
    voters then intersects any majority of the new ones (the single-server rule)."""
    return len(old.voter_ids ^ new.voter_ids) <= 1
