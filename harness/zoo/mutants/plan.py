"""The tests a mutant meets, built from the zoo's default campaign (pure).

The campaign is whatever :data:`harness.zoo.targets.DEFAULT_CAMPAIGN` says at run
time, turned into specs by the zoo's own :func:`~harness.zoo.targets.zoo_spec`,
so a change to the default campaign changes what every mutant meets. Only the
node source (the ``node_src`` db option), the name and a record of the mutant
are added; the fault-free smoke run is the same campaign with no faults.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from harness.core.errors import ConfigError
from harness.core.layout import safe_name
from harness.core.remote import Host
from harness.core.spec import TestSpec
from harness.zoo.mutants.mutator import Mutant
from harness.zoo.targets import Campaign, zoo_spec

__all__ = ["with_node_src", "smoke_campaign", "mutant_spec", "choose"]


def with_node_src(c: Campaign, pkg: Path) -> Campaign:
    """The campaign, shipping the node package at ``pkg`` instead of ``node_impl``."""
    rest = tuple((k, v) for k, v in c.db_options if k != "node_src")
    return replace(c, db_options=(*rest, ("node_src", str(pkg))))


def smoke_campaign(c: Campaign, seconds: float) -> Campaign:
    """The same load with no faults at all, for ``seconds``."""
    return replace(c, nemesis=(), profiles=(), deck=False, time_limit=seconds)


def mutant_spec(c: Campaign, hosts: Sequence[Host], m: Mutant, seed: int, stage: str) -> TestSpec:
    """The zoo's spec for this campaign, named for the mutant; test.json records which one."""
    spec = zoo_spec(c, hosts, "dledger", None, seed)
    return replace(
        spec,
        name=safe_name(f"mutant-{stage}-{m.id}"),
        options={
            **spec.options,
            "mutant": {"id": m.id, "file": m.file, "line": m.line, "operator": m.operator},
        },
    )


def choose(
    mutants: Sequence[Mutant], *, ids: Sequence[str] = (), sample: int | None = None, seed: int = 0
) -> list[Mutant]:
    """The mutants to run: those named (in the order named), else a seeded sample, else all.

    The sample is the first ``sample`` of a permutation drawn from ``seed``: the
    same seed gives the same mutants in the same order, and a larger sample
    extends a smaller one. An unknown id is a :class:`ConfigError` naming it.
    """
    if ids:
        by_id = {m.id: m for m in mutants}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise ConfigError(
                f"unknown mutant {', '.join(unknown)} (see `splitbrain mutants --list`)",
                field="mutant",
            )
        return [by_id[i] for i in ids]
    if sample is None:
        return list(mutants)
    order = list(mutants)
    random.Random(seed).shuffle(order)
    return order[:sample]
