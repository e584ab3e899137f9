"""The registry of seeded bugs (spec §11).

Each bug is a deliberate, named deviation that the checker should catch. The node
reads them only through :class:`Bugs`, one boolean per bug, so every deviation is a
small ``if self.bugs.x:`` branch beside the correct code rather than a fork of it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["BROKER_BUGS", "BUGS", "HA_BUGS", "Bugs", "UnknownBug", "parse_bugs"]

# name -> one-line description (what the node does wrong)
BUGS: dict[str, str] = {
    "ack-before-quorum": "leader acks appends and kv writes right after its local write, before a quorum holds them",
    "no-truncate": "follower acks TRUNCATE without cutting, and acks APPENDs at indexes it already holds without comparing",
    "commit-old-term": "leader commits the quorum index by counting, whatever its term, and appends no election NOOP (DLedger 0.2)",
    "vote-without-log-check": "voter skips the log up-to-date check and grants votes to candidates with shorter logs",
    "stale-read": "every node serves kv-read and get from its local state, with no read barrier and no redirect",
    "wallclock-lease": "leader serves local reads (and followers' read indexes, read mode follower), and does not step down, while time.time() says its last quorum round is younger than E",
    "no-fsync": "log and term.json stay in a process buffer flushed every 1 s, after acks and votes",
    "skip-fsync": "log, term.json and checkpoint are written to the OS at once but never fsynced (files nor directories), acked and voted as if durable: only a power cut loses them",
    "forget-vote": "votedFor is kept only in memory (term.json always says null)",
    "commit-regress": "committedIndex is assigned, not raised: followers take a lower leader value, a new leader resets to the checkpoint it recovered at startup",
    "lax-push-term": "follower takes COMPARE from anyone and COMMIT from any term >= its own, capping commit at ledgerEnd (DLedger 0.2)",
    "ok-on-term-change": "pending client ops complete with SUCCESS on step-down or quorum-ack timeout",
    "skip-crc": "recovery and local reads do not verify entry CRCs (DLedger's scan): a flipped bit in data.log is kept and served",
    "trust-torn-tail": "recovery keeps a torn last record of data.log (zero-padded to its header's size, CRCs re-stamped) instead of cutting it",
    "trust-term-file": "startup takes term.json as it is even when the log holds a later term (a rolled-back term file): the node may vote twice in a term",
    # membership and leadership transfer (docs/membership.md M11)
    "reconfig-before-term-commit": "a new leader starts a membership change before it has committed an entry of its own term (the 2015 single-server bug)",
    "config-on-commit": "a node applies a configuration only once the entry is committed, not as soon as it is in its log",
    "removed-node-votes": "members grant votes to any node they ever knew, removed ones included, and a removed node keeps campaigning",
    "transfer-skip-catchup": "leadership transfer tells the target to campaign at once, without first bringing its log up to date",
}

# Mode `ha` bugs (node_impl/ha.py); only valid with --mode ha (config.py checks).
HA_BUGS: dict[str, str] = {
    "ha-ok-on-timeout": "sync master says SUCCESS on slave timeout or with no slave (mode ha)",
    "ha-ack-on-send": "push2SlaveMaxOffset raised on send, not on the slave's report (mode ha)",
}

# Mode `broker` bugs (node_impl/broker.py); only valid with --mode broker.
BROKER_BUGS: dict[str, str] = {
    "broker-stale-master": "the broker's role handler never demotes a master, and a deposed master acks sends after its local write (mode broker)",
    "broker-cq-beyond-commit": "consume queues are rebuilt at start from every entry in the log, committed or not (mode broker)",
    "broker-divided-from-start": "on the upgrade from mode ha, the divided commitlog offset is taken from the old commitlog's start, not its end (mode broker)",
}


class UnknownBug(ValueError):
    """A --bug name that is not in the registry."""


@dataclass(frozen=True)
class Bugs:
    ack_before_quorum: bool = False
    no_truncate: bool = False
    commit_old_term: bool = False
    vote_without_log_check: bool = False
    stale_read: bool = False
    wallclock_lease: bool = False
    no_fsync: bool = False
    skip_fsync: bool = False
    forget_vote: bool = False
    commit_regress: bool = False
    lax_push_term: bool = False
    ok_on_term_change: bool = False
    skip_crc: bool = False
    trust_torn_tail: bool = False
    trust_term_file: bool = False
    # membership and leadership transfer
    reconfig_before_term_commit: bool = False
    config_on_commit: bool = False
    removed_node_votes: bool = False
    transfer_skip_catchup: bool = False
    # mode ha
    ha_ok_on_timeout: bool = False
    ha_ack_on_send: bool = False
    # mode broker
    broker_stale_master: bool = False
    broker_cq_beyond_commit: bool = False
    broker_divided_from_start: bool = False

    @property
    def names(self) -> list[str]:
        return [f.name.replace("_", "-") for f in fields(self) if getattr(self, f.name)]


def parse_bugs(spec: str | None) -> Bugs:
    """``"a,b"`` -> Bugs; raises UnknownBug naming the first unknown or unsupported name."""
    if not spec:
        return Bugs()
    on: dict[str, bool] = {}
    for raw in spec.split(","):
        name = raw.strip()
        if not name:
            continue
        if name not in BUGS and name not in HA_BUGS and name not in BROKER_BUGS:
            known = ", ".join(sorted(BUGS) + sorted(HA_BUGS) + sorted(BROKER_BUGS))
            raise UnknownBug(f"unknown bug {name!r} (known: {known})")
        on[name.replace("-", "_")] = True
    return Bugs(**on)
