"""What a log-safety anomaly is, for both engines: DLedger invariants I1-I6 (dledger-protocol
§12) and the membership rules (docs/membership.md M12, M14).

The local engine (:mod:`checker.log_safety`, over a history's Arrow columns) and the Spark
engine (:mod:`checker.spark.log_safety`, as DataFrame jobs) compute the same anomalies;
this module is what they share and must not restate: each kind's name and meaning and
the fields of its examples (:data:`KINDS`), which kinds are notes and which a mode-ha
loss window turns into notes (:data:`NOTES`, :data:`LOSS_WINDOW`), the order values and
examples are listed in, and the shape of the result map. It imports neither pyarrow nor
pyspark.

Conventions every definition below relies on:

* **History order** is the records' ``index`` field.
* **Pairing.** A client op's invocation is paired with the next record of the same
  ``process`` (:func:`harness.core.paired.pair_positions`); a malformed history is
  rejected before any check.
* **Samples** are the records with ``f == "sample"`` and ``type == "ok"`` whose value is
  an object: ``{role, term, leader, begin, end, committed, incarnation, member,
  config}``, sampled on the record's ``node`` (the host). The per-node checks key a sample
  by its **member**: ``member`` when it is a string, else the host (a host re-added wiped
  runs a new member, whose term and committed index start again), and examples name it as
  ``node``. ``config`` (``{voters, learners, index}``, by member id) is the configuration
  in force on it, read by the membership checks only. A sample whose field needed by a
  check is not an integer is ignored by that check (``incarnation`` may be any JSON
  value, including null).
* **Appends** are pairs with ``f == "append"``. An ``ok`` completion's value is
  ``{"payload", "index", "term"}`` (the payload falls back to the invocation's
  ``{"payload": p}``); ``fail`` = certainly not appended; ``info`` or no completion =
  unknown, never judged.
* **Log reads** are pairs with ``f == "read"``, ``key`` null, and an ``ok`` completion
  whose value is an object with a list ``"entries"``: ``[[index, term, payload], ...]``
  (items that are not such triples with an integer index are ignored) and optionally
  ``"committed": c``. A read is named by the ``index`` of its **ok completion**. It is
  *final* when its invocation value is an object with ``"final": true``.
* **Committed observations** of a read: its entries with ``index <= c``, all of them when
  ``committed`` is absent or null, none when it is anything else. An entry with a null
  payload is a NOOP: it counts for divergent-committed but the payload checks ignore it.
* **Final reach.** A final read *reaches its end* when its ok value has no integer
  ``"end"`` (the node's ledger end), or when its ``committed`` (absent or null: all) is at
  least ``end`` and its highest entry index is at least ``end`` or it has no entries. When
  no final read reaches its end (a final phase that ran out of time read a prefix; a
  DLedger leader restarted with no entry of its term keeps its committed index short of
  its end), lost-ack judges only the acks at or below the highest committed final
  observation, and counts the others (``stats.lost_ack_unjudged``).
* **Equality.** Terms and payloads are compared as their canonical JSON text (sorted
  keys, compact: :func:`canon`), so JSON types stay apart: the number ``1`` is neither
  ``1.0`` nor ``true`` nor the string ``"1"``.
* **Value ordering.** Where an example lists ``[term, payload]`` values, they are sorted
  by :func:`value_key`; every kind's examples are listed by their ``indexes`` (the sorted
  history indexes of the records that prove it), compared as lists. Examples with equal
  ``indexes`` (the same reads prove several log indexes or payloads: divergent-committed,
  duplicate-payload, unproposed-committed) are then ordered by their other fields, by
  name (``index`` before ``payload``), each integer by value and anything else by its
  canonical text (:func:`tie_key`); capped lists keep the first ones in this order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from harness.core.checker import CheckConfig
from harness.core.options import option

__all__ = [
    "ANOMALIES",
    "KINDS",
    "LOSS_WINDOW",
    "NOTES",
    "SETTLED_ROLES",
    "HaOptions",
    "Kind",
    "LogSafetyOptions",
    "by_indexes",
    "canon",
    "first_examples",
    "ha_of",
    "is_int",
    "is_system",
    "judgeable",
    "result",
    "tie_key",
    "unsettled",
    "value_key",
    "volatile_of",
]


@dataclass(frozen=True)
class Kind:
    """One anomaly or note of the log-safety checker: its name, what it means (the
    definition both engines implement) and the fields of its examples, in order."""

    name: str
    meaning: str
    example: tuple[str, ...]
    note: bool = False


KINDS: tuple[Kind, ...] = (
    Kind(
        "committed-regress",
        "I1: committedIndex went backwards within one process lifetime of a member. Per "
        "(member, incarnation), samples in history order: a sample whose integer "
        "committed is below the maximum committed of the earlier ones regresses; only the "
        "first such sample of each (member, incarnation) is reported (a flapping node would "
        "flood the report). from: the earlier maximum; indexes: the first sample that "
        "reached it, the offending one.",
        ("node", "incarnation", "from", "to", "indexes"),
    ),
    Kind(
        "committed-beyond-end",
        "I1: a member claims an index committed that its own log does not hold: one "
        "example per sample whose integer committed is above its integer end.",
        ("node", "incarnation", "committed", "end", "indexes"),
    ),
    Kind(
        "two-leaders-in-term",
        "I5: two members sampled as leader (role leader) of the same integer term. One "
        "example per term led by two or more; nodes sorted by name, indexes the first "
        "leader sample of each in that term.",
        ("term", "nodes", "indexes"),
    ),
    Kind(
        "term-regress",
        "I6: a member's term went down, possibly across a restart (currentTerm not "
        "fsynced). Per member (every incarnation together) in history order, every sample "
        "whose integer term is below the maximum of the earlier ones is one example. With "
        "the option settled_terms_only (a DB that persists a term before it answers an RPC "
        "in it, as Raft asks, but shows it earlier), a term seen only in samples of another "
        "role than leader or follower (a candidate, a node an error stopped) sets no floor: "
        "the node neither led nor followed anyone in it (a vote given twice is the "
        "node-events check's event-double-vote). from: the earlier maximum; indexes: the "
        "first sample that reached it, the offending one.",
        ("node", "incarnation", "from", "to", "indexes"),
    ),
    Kind(
        "divergent-committed",
        "I2: two committed observations of the same log index disagree. Over the committed "
        "observations of every log read (final or not, NOOPs included): a log index seen "
        "with two or more distinct (term, payload). values: those, sorted (value_key); "
        "indexes: every read that observed that log index committed.",
        ("index", "values", "indexes"),
    ),
    Kind(
        "lost-ack",
        "I3: an acknowledged append is not in the final committed log (the union of the "
        "final reads' committed observations). An ok append with an integer acked index is "
        "lost when no final observation at that index equals its (term, payload); acks past "
        "the final reach are not judged, and with no final read none is (the verdict is "
        "then unknown). found: the smallest (value_key) [term, payload] finally observed "
        "there, or null; indexes: the ok completion.",
        ("payload", "index", "term", "found", "indexes"),
    ),
    Kind(
        "failed-append-present",
        "I3: an append that ended fail (certainly not appended) shows up committed: one "
        "example per fail with a non-null payload that some committed observation holds. "
        "index: the smallest log index at which the first (lowest-index) read holding it "
        "shows it; indexes: the fail completion and that read.",
        ("payload", "index", "indexes"),
    ),
    Kind(
        "duplicate-payload",
        "I4: one non-null payload committed at two or more distinct log indexes (over every "
        "read's committed observations). log_indexes: those indexes; indexes: every read "
        "that observed the payload committed.",
        ("payload", "log_indexes", "indexes"),
    ),
    Kind(
        "unproposed-committed",
        "A committed entry no client proposed: a replicated log commits only what a client "
        "appended, or entries of its own. A recovery that keeps a torn or corrupted record "
        "commits a body nobody wrote, which neither lost-ack nor divergent-committed sees. "
        "One example per log index at which some committed observation holds a payload P "
        "that is no system entry (is_system), equals (canonical text) no append "
        "invocation's payload and no ok append completion's payload, whatever the append's "
        "outcome (a failed append's is failed-append-present's), at an index at least the "
        "lowest integer index an ok append was acked at (below it may lie entries from "
        "before the run; with no such ack nothing is judged). payload: the smallest such P "
        "there by canonical text; indexes: the reads holding one there.",
        ("index", "payload", "indexes"),
    ),
    Kind(
        "append-order",
        "Real-time order: an append invoked after another was acked got a lower or equal "
        "index. For ok appends A and B with integer acked indexes, A's completion before B's "
        "invocation and B's index at most A's: each B once, paired with the A of the largest "
        "acked index completed before B was invoked (ties: the earliest completion). "
        "indexes: A's completion, B's completion.",
        ("a_index", "b_index", "indexes"),
    ),
    Kind(
        "leader-after-removal",
        "M12: a member sampled as leader in a term above the one in which its removal was "
        "seen committed (the new voters refuse it, and a majority of them hold the entry "
        "that removed it). A configuration is committed on the member reporting it when its "
        "index is at most that sample's committed index; a member is removed by a committed "
        "configuration at log index ci when some configuration below ci listed it (a "
        "startup list, index -1, by its voters only: a joiner lists itself there as a "
        "learner) and none at or above ci does. The removal's term is the lowest term of a "
        "sample showing it committed (ties: the earliest sample). One example per member, "
        "at its first such leader sample; indexes: that sample and the one showing the "
        "removal committed.",
        ("node", "term", "removed_term", "config_index", "indexes"),
    ),
    Kind(
        "ack-after-removal",
        "An append acknowledged by a removed member in a term above the one in which its "
        "removal was seen committed (only a leader acks, and it can lead no such term). The "
        "member that answered is the one its host's samples name on both sides of the "
        "append: the last sample before its invocation and the first after its completion; "
        "an append whose host changed member in between, or has no sample on one side, or "
        "whose acked term is not an integer, is not judged. One example per ack; indexes: "
        "the ack's completion and the sample showing the removal committed.",
        ("node", "term", "index", "removed_term", "indexes"),
    ),
    Kind(
        "committed-regress-restart",
        "A note: a restarted member reports a lower committedIndex (DLedger does not "
        "persist it; it climbs back). Per member, a sample whose incarnation differs from "
        "the previous sample's and whose committed is below it (both integers).",
        ("node", "incarnation", "previous_incarnation", "from", "to", "indexes"),
        note=True,
    ),
    Kind(
        "loss-window",
        "A note, mode ha with an async master only: the lost-ack examples, a loss window "
        "by design (spec §12), measured rather than judged (docs/ha-mode.md).",
        ("payload", "index", "term", "found", "indexes"),
        note=True,
    ),
    Kind(
        "loss-window-order",
        "A note, mode ha with an async master only: the append-order examples the loss "
        "window causes (a promoted slave reuses the lost indexes).",
        ("a_index", "b_index", "indexes"),
        note=True,
    ),
)
"""Every kind of the log-safety checker, anomalies first, in the order results list them."""

ANOMALIES = tuple(k.name for k in KINDS if not k.note)
"""Every anomaly kind, in the order results list them (both engines)."""

NOTES = tuple(k.name for k in KINDS if k.note)
"""Every note kind, in the order results list them."""

LOSS_WINDOW = (("lost-ack", "loss-window"), ("append-order", "loss-window-order"))
"""Mode ha with an async master: these anomalies are measured as these notes instead."""

SETTLED_ROLES = ("leader", "follower")
"""The roles in which a sample's term is saved (see term-regress's settled_terms_only)."""


# --------------------------------------------------------------------------- values


def is_int(x: Any) -> TypeGuard[int]:
    """A JSON integer (a bool is not one, though Python says so)."""
    return isinstance(x, int) and not isinstance(x, bool)


def canon(x: Any) -> str:
    """The canonical JSON text terms and payloads are compared and ordered by."""
    return json.dumps(x, sort_keys=True, separators=(",", ":"), default=str)


def value_key(tp: Sequence[Any]) -> tuple[Any, str]:
    """The order of ``[term, payload]`` values in examples: integer terms first by value
    (any other term as -1), then the payload's canonical text."""
    term, payload = tp
    return (term if is_int(term) else -1, canon(payload))


def unsettled(role: Any) -> bool:
    """A sample's role says its term may not be saved yet (a string, not leader/follower)."""
    return isinstance(role, str) and role not in SETTLED_ROLES


def is_system(payload: Any) -> bool:
    """An entry the system wrote for itself, not a client's append: a NOOP (null), or a
    JSON object with a key ``"kind"`` (workloads/append.py reports kv, config and read
    entries as ``{"kind", "at", "op"}``; their identity is their index). A body a node
    could not decode, ``{"undecodable": hex}``, is none."""
    return payload is None or (isinstance(payload, dict) and "kind" in payload)


# --------------------------------------------------------------------------- examples


def _field_key(x: Any) -> tuple[int, Any]:
    """One field's place in :func:`tie_key`: integers by value, lists item by item,
    anything else by its canonical text (tagged, so that no two kinds are compared)."""
    if is_int(x):
        return (0, x)
    if isinstance(x, list):
        return (1, [_field_key(v) for v in x])
    return (2, canon(x))


def tie_key(example: Mapping[str, Any]) -> list[tuple[str, tuple[int, Any]]]:
    """The order of examples whose ``indexes`` are equal: their other public fields (no
    leading underscore: an engine's scratch), by name, each by :func:`_field_key`.

    Without it the order of such ties was whatever order an engine built them in (the
    local engine's Arrow group-by, the Spark engine's collect), and a capped list kept
    different examples in each."""
    return [
        (k, _field_key(example[k]))
        for k in sorted(example)
        if k != "indexes" and not k.startswith("_")
    ]


def by_indexes(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Examples in the order results list them: by their ``indexes``, as lists, ties by
    :func:`tie_key`."""
    return sorted(examples, key=lambda e: (e["indexes"], tie_key(e)))


def first_examples(examples: list[dict[str, Any]], cap: int | None) -> list[dict[str, Any]]:
    """The first ``cap`` examples (all with None) in :func:`by_indexes` order."""
    ordered = by_indexes(examples)
    return ordered if cap is None else ordered[:cap]


def judgeable(final_reads: int, ok_appends: int, unjudged: int) -> bool:
    """Whether lost-ack judged every ok append: there is a final read and every ack lies
    within the final reach, or there is no ok append at all."""
    return unjudged == 0 if final_reads else ok_appends == 0


def result(
    anomalies: Mapping[str, list[dict[str, Any]]],
    notes: Mapping[str, list[dict[str, Any]]],
    stats: dict[str, Any],
    *,
    judgeable: bool,
    ha: dict[str, Any] | None,
    totals: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The checker's result map from each kind's examples (empty kinds are left out).

    ``{"valid", "anomalies": {kind: [examples]}, "notes": {kind: [examples]}, "unknown":
    [checks that could not judge], "stats"}``: ``valid`` is False if any anomaly was found,
    else ``"unknown"`` when lost-ack could not judge every ok append (``judgeable``), else
    True. ``ha`` (mode ha, ``{"sync": bool}``): with an async master the kinds of
    :data:`LOSS_WINDOW` become their notes, and ``stats.loss_window`` counts the lost acks
    in any mode ha. ``totals``: each kind's count where the examples are only the first
    few (the Spark engine), put in ``stats.anomaly_counts``; without it the lists are
    whole and :func:`checker.results.cap_examples` counts them.
    """
    found = {k: list(anomalies[k]) for k in ANOMALIES if anomalies.get(k)}
    kept = {k: list(v) for k, v in notes.items() if v}

    def count(kind: str) -> int:
        if kind not in found:
            return 0
        return int(totals[kind]) if totals is not None else len(found[kind])

    if ha is not None:
        stats["loss_window"] = count("lost-ack")
        if not ha.get("sync"):  # an async master: a loss window by design
            for kind, note in LOSS_WINDOW:
                if kind in found:
                    kept[note] = found.pop(kind)
    if totals is not None:
        stats["anomaly_counts"] = {k: int(totals[k]) for k in found}
    unknown = [] if judgeable else ["lost-ack"]
    valid: bool | str = False if found else ("unknown" if unknown else True)
    return {
        "valid": valid,
        "anomalies": found,
        "notes": {k: kept[k] for k in NOTES if k in kept},
        "unknown": unknown,
        "stats": stats,
    }


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class HaOptions:
    """Mode ha (classic master/slave, docs/ha-mode.md)."""

    sync: bool = option(False, "the master acks only what a slave holds (no loss window)")


@dataclass(frozen=True)
class LogSafetyOptions:
    ha: HaOptions | None = option(
        None,
        "mode ha: {sync: bool}; with an async master, lost acks are the loss-window note",
    )
    settled_terms_only: bool = option(
        False,
        "only terms a node was seen leading or following in set a floor for term-regress "
        "(a DB that persists its term before answering in it, as Raft asks, but shows it "
        "earlier; declared by the DB)",
    )


def ha_of(config: CheckConfig) -> dict[str, Any] | None:
    """The mode-ha setting of a check, as the engines take it (None: not mode ha)."""
    ha = config.options.ha if config.options is not None else None
    return None if ha is None else {"sync": ha.sync}


def volatile_of(config: CheckConfig) -> bool:
    """Whether the DB declared only settled terms binding (:class:`LogSafetyOptions`)."""
    return bool(config.options is not None and config.options.settled_terms_only)
