"""The default campaign's fault deck: every fault script a DB can take, and why not the rest.

``splitbrain run`` with no ``--nemesis`` and every zoo run of the reference node play
the same deck: the per-bug profiles of :mod:`nemesis.profiles` and the generic motifs of
:mod:`nemesis.motifs` (the membership motifs too, for a ``Reconfigurable`` DB), drawn
shuffled, each once per pass (:class:`~nemesis.profiles.ProfileSchedule`). A stock
schedule of one fault at a time finds a fraction of what these overlaps find
(docs/zoo.md), so the strong campaign must not be the zoo's privilege.

A script is kept when the DB and the hosts can take every fault kind it plays, as the
faults themselves declare it (:meth:`harness.core.fault.Fault.why_not`: the DB's
capabilities and what it declines of a fault's effects and needs, the inventory's host
facts; :func:`nemesis.package.check_faults` holds faults named with ``--nemesis`` to the
same check). A script made of parts that play without one
another (:data:`nemesis.profiles.SCRIPT_PARTS`: ``disk``) loses only the parts holding a
refused kind and keeps the rest; the kinds it goes without are its ``dropped``, each with
the reason, and the runner builds its steps without them. A script with a refused kind
outside every part, or with no part left, is left out *with the reason*. Both are
recorded in ``test.json`` and printed before the load: a campaign that silently played
half its deck would look as strong as the whole. Nothing is probed; the kinds a script
plays are read from its own steps, so a new script needs no table here.

A DB that declares its process roles (``HasRoles``, harness/core/roles.py) also gets the
role scripts of :mod:`nemesis.role_motifs` (each fault at each role, and at pairs of
roles at once); a DB without roles never sees them, so its deck is unchanged.

Scripts aimed at the leader need ``HasPrimaries`` to find it; on a DB without it they
hit a seeded random node instead (:func:`nemesis.profiles.aim_without_leader`), and the
deck's notes say so.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.core.db import HasPrimaries
from harness.core.errors import ConfigError
from harness.core.roles import HasRoles
from nemesis import registry
from nemesis.motifs import script_refusal
from nemesis.profiles import SCRIPT_PARTS, SCRIPTS, profile_steps
from nemesis.role_motifs import NO_ROLES, ROLE_MOTIFS

if TYPE_CHECKING:
    from harness.core.fault import Fault
    from harness.core.remote import Host

__all__ = [
    "DECK",
    "HOLD",
    "DEFAULT_TIME_LIMIT",
    "Deck",
    "deck_for",
    "deck_record",
    "script_faults",
]

DECK = "deck"
"""The ``--nemesis`` value that selects the deck (the default of ``splitbrain run``)."""
HOLD = 2.5
"""The scripts' basic hold in seconds: every wait of a script is a multiple of it."""
DEFAULT_TIME_LIMIT = 300.0
"""The cap on the default campaign's load (``run`` and the zoo), which ends once every
script of the deck has played (``passes=1``): about two minutes for the reference node's
scripts on a quiet machine, over three at a load of 30 on two cores (docs/zoo.md), where
a 180 s cap left a quarter of the deck unplayed. With ``--time-limit`` the deck cycles
until that time instead."""
NO_LEADER_NOTE = (
    "the DB does not report its leader (HasPrimaries): steps aimed at the leader hit a "
    "seeded random node"
)


@dataclass(frozen=True)
class Deck:
    """The scripts a run draws from, the fault kinds they play, and what was left out."""

    scripts: tuple[str, ...]
    faults: tuple[str, ...]
    """The ``--nemesis`` names the scripts play: the run's nemeses and final heal."""
    left_out: Mapping[str, str] = field(default_factory=dict)
    """Script name to why this DB or these hosts cannot take it."""
    dropped: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Kept script name to the fault kinds it plays without, each with the reason."""
    notes: tuple[str, ...] = ()
    hold: float = HOLD
    shuffle: bool = True
    passes: int | None = 1
    """Passes over the deck before the load ends (None: cycle until the time limit)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "scripts": list(self.scripts),
            "faults": list(self.faults),
            "left_out": dict(self.left_out),
            "dropped": {k: dict(v) for k, v in self.dropped.items()},
            "notes": list(self.notes),
            "hold": self.hold,
            "shuffle": self.shuffle,
            "passes": self.passes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Deck:
        """A recorded deck (``test.json``'s ``options.deck``); a bad one is a ConfigError."""
        try:
            return cls(
                scripts=tuple(str(s) for s in data["scripts"]),
                faults=tuple(str(f) for f in data["faults"]),
                left_out={str(k): str(v) for k, v in dict(data.get("left_out") or {}).items()},
                dropped={
                    str(k): {str(f): str(w) for f, w in dict(v).items()}
                    for k, v in dict(data.get("dropped") or {}).items()
                },
                notes=tuple(str(n) for n in data.get("notes") or ()),
                hold=float(data.get("hold", HOLD)),
                shuffle=bool(data.get("shuffle", True)),
                passes=None if data.get("passes") is None else int(data["passes"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"a recorded deck is malformed: {e}", field="deck") from None

    def describe(self) -> str:
        """One line for the run's banner and summary."""
        how = "shuffled, each once per pass" if self.shuffle else "in order"
        if self.passes is not None:
            how += f"; the load ends after {self.passes} pass{'es' if self.passes > 1 else ''}"
        out = f"fault scripts {', '.join(self.scripts)} ({how}; hold {self.hold:g} s)"
        if self.dropped:
            out += "; played without some faults: " + "; ".join(
                f"{k} without {', '.join(f'{f} ({w})' for f, w in v.items())}"
                for k, v in self.dropped.items()
            )
        if self.left_out:
            out += "; left out: " + "; ".join(f"{k} ({v})" for k, v in self.left_out.items())
        return out


def script_faults(name: str, n_nodes: int, drop: Sequence[str] = ()) -> tuple[str, ...]:
    """The fault kinds script ``name`` starts, read from its own steps on ``n_nodes`` nodes
    (without the kinds in ``drop``, as the runner builds them).

    The steps are built with a throwaway rng: which kinds a script plays does not depend
    on its draws (a builder may pick among shapes of one kind, never among kinds).
    """
    nodes = [f"n{i + 1}" for i in range(n_nodes)]
    steps = profile_steps(name, nodes, random.Random(0), HOLD, drop=drop)
    return tuple(sorted({s.f.removeprefix("start-") for s in steps if s.f.startswith("start-")}))


def deck_for(db: object, hosts: Sequence[Host], scripts: Sequence[str] | None = None) -> Deck:
    """The deck ``db`` on ``hosts`` can take: ``scripts`` (default: every script, the
    membership motifs included), less those one of whose faults cannot act here, with the
    reason; a script of parts (:data:`~nemesis.profiles.SCRIPT_PARTS`) is kept without
    the parts holding such a fault while a part of it is left.

    A ConfigError when nothing is left: a fault campaign with no faults is not one.
    """
    names = tuple(scripts) if scripts is not None else SCRIPTS
    if scripts is None and isinstance(db, HasRoles):
        names += ROLE_MOTIFS  # each fault at each role the DB declares, and at pairs
    known = registry.faults()
    kept: list[str] = []
    faults: set[str] = set()
    left_out: dict[str, str] = {}
    dropped: dict[str, dict[str, str]] = {}
    for name in names:
        if name in ROLE_MOTIFS and not isinstance(db, HasRoles):
            left_out[name] = NO_ROLES
            continue
        try:
            kinds = script_faults(name, len(hosts))
        except ConfigError as e:
            left_out[name] = str(e)
            continue
        refused = _refusals(kinds, known, db, hosts)
        drop = _parts_dropped(refused, SCRIPT_PARTS.get(name, ())) if refused else {}
        if drop is None:  # a refused kind outside every part: the script is one situation
            why: str | None = next(iter(refused.values()))
        elif set(kinds) <= set(drop):  # every part of it refused
            why = "; ".join(dict.fromkeys(refused.values()))
        else:
            why = script_refusal(name, db)
        if why is not None:
            left_out[name] = why
            continue
        if drop:
            dropped[name] = drop
            kinds = tuple(k for k in kinds if k not in drop)
        kept.append(name)
        faults.update(kinds)
    if not kept:
        reasons = "; ".join(f"{k}: {v}" for k, v in left_out.items())
        raise ConfigError(
            f"no fault script of the default campaign can run against {type(db).__name__} "
            f"on these hosts ({reasons}); name faults with --nemesis",
            field="nemesis",
        )
    notes = () if isinstance(db, HasPrimaries) else (NO_LEADER_NOTE,)
    return Deck(tuple(kept), tuple(sorted(faults)), left_out, dropped, notes)


def deck_record(recorded: Mapping[str, Any], started: Sequence[str]) -> dict[str, Any]:
    """What a run of a deck played: the scripts started (in order, first time each), those
    of the deck time never reached, those left out before the run, with the reason, and
    the fault kinds kept scripts went without, with the reason.

    ``results.json`` keeps it under ``run.deck`` and the summary names what was missed:
    a bug whose script never played could not have been found by this run.
    """
    deck = Deck.from_json(recorded)
    played = list(dict.fromkeys(started))
    return {
        "played": played,
        "not_played": [s for s in deck.scripts if s not in played],
        "left_out": dict(deck.left_out),
        "dropped": {k: dict(v) for k, v in deck.dropped.items()},
    }


def _refusals(
    kinds: Sequence[str], known: Mapping[str, Fault], db: object, hosts: Sequence[Host]
) -> dict[str, str]:
    """Each of ``kinds`` that cannot act on ``db`` and ``hosts``, with the reason."""
    out: dict[str, str] = {}
    for kind in kinds:
        fault = known.get(kind)
        why = f"its fault {kind!r} is not registered" if fault is None else fault.why_not(db, hosts)
        if why is not None:
            out[kind] = why
    return out


def _parts_dropped(
    refused: Mapping[str, str], parts: Sequence[frozenset[str]]
) -> dict[str, str] | None:
    """The kinds a script of ``parts`` goes without when ``refused`` are refused, each with
    the reason (a kind that only plays beside a refused one says so), or None when a
    refused kind belongs to no part: the script is one situation and cannot be cut."""
    out: dict[str, str] = {}
    for kind, why in refused.items():
        part = next((p for p in parts if kind in p), None)
        if part is None:
            return None
        out[kind] = why
        for other in sorted(part - {kind}):
            out.setdefault(other, f"its steps here serve {kind}, which is dropped")
    return dict(sorted(out.items(), key=lambda kv: kv[0] not in refused))
