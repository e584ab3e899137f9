"""Configuration coverage: the default campaign tries every configuration a DB declares.

A DB whose safety logic changes with an option (the reference node's read mode: the
leader's read index, a follower's, reads through the log) declares those dimensions
(:class:`harness.core.db.DeclaresConfigurations`). A campaign that always runs the
default configuration never tests the others: the follower-read mutant of issue 42
escaped because ``read_mode=follower`` never ran. So the default campaign (a spec that
plays the deck) picks its configuration from its seed, cycling through
:func:`configurations` over consecutive seeds: ``--test-count N`` runs seeds S..S+N-1,
and any ``len(configurations)`` of them in a row cover every one. A dimension the user
set with ``--db-option`` is left as set; a spec with its own ``--nemesis`` is left alone.

The choice is written into the spec's DB options before ``test.json`` is written, so
the run, its re-check and its replay all build the same DB, and recorded under the
deck (``options.deck.configuration``): the dimensions, what was chosen and why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from harness.core.db import DeclaresConfigurations
from harness.core.spec import TestSpec

__all__ = ["configuration_of", "configurations", "cover_configuration"]


def configurations(dims: Mapping[str, tuple[str, ...]]) -> list[dict[str, str]]:
    """The configurations to cycle through: the default one first, then each other value
    of each dimension with the rest at their defaults (one change at a time: with D
    dimensions of V values, 1 + D(V-1) runs cover every value, not V^D)."""
    base = {k: v[0] for k, v in dims.items() if v}
    out = [dict(base)]
    for k, values in dims.items():
        for v in values[1:]:
            out.append({**base, k: v})
    return out


def cover_configuration(spec: TestSpec, db: object) -> TestSpec:
    """``spec`` in the configuration its seed picks, when it plays the deck and ``db``
    declares dimensions the user left open; otherwise ``spec`` unchanged."""
    deck = spec.options.get("deck")
    if not isinstance(deck, Mapping) or not isinstance(db, DeclaresConfigurations):
        return spec
    if isinstance(deck.get("configuration"), Mapping):
        return spec  # chosen already (a re-check or a replay of test.json)
    dims = dict(db.configuration_dimensions())
    if not dims:
        return spec
    set_by_user = {k: v for k, v in spec.db_options.items() if k in dims}
    open_dims = {k: v for k, v in dims.items() if k not in set_by_user}
    record: dict[str, Any] = {"dimensions": {k: list(v) for k, v in dims.items()}}
    db_opts = spec.db_options
    if open_dims:
        cycle = configurations(open_dims)
        pick = cycle[spec.seed % len(cycle)]
        db_opts.update(pick)
        record["chosen"] = {**pick, **{k: str(v) for k, v in set_by_user.items()}}
        record["by"] = f"seed {spec.seed} mod {len(cycle)} configurations"
        record["cycle"] = cycle
    else:
        record["chosen"] = {k: str(v) for k, v in set_by_user.items()}
        record["by"] = "--db-option"
    options = {**spec.options, "db": db_opts, "deck": {**deck, "configuration": record}}
    return dataclasses.replace(spec, options=options)


def configuration_of(db: object) -> dict[str, Any] | None:
    """What ``db`` runs as, along the dimensions it declares, or None for a DB that
    declares none: what each verdict says it tested (``results.json`` → ``evidence``)."""
    if not isinstance(db, DeclaresConfigurations):
        return None
    return dict(db.configuration())
