"""The command-line options several commands take, each declared once.

A command names the option by its decorator (``@options.store()``) and may say in
``help`` what the option means for it; the flag, the parameter it fills, its type and
its default are the same everywhere. The inventory options (``--lab`` with
``--nodes-file``, ``--vagrant``, ...) are :func:`harness.cli.inventory.inventory_options`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = [
    "store",
    "lab",
    "json_path",
    "output",
    "db_options",
    "bug",
    "engine",
    "spark_master",
    "mutant_options",
    "count",
    "non_negative",
    "seconds",
    "concurrency",
    "seed",
    "stack",
]

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]


def store(*, default: str | None = "store", help: str = "Results store directory.") -> Decorator:
    """``--store DIR`` as ``store_root``: where runs are written (or read)."""
    return click.option(
        "--store",
        "store_root",
        default=default,
        show_default=default is not None,
        type=click.Path(file_okay=False),
        help=help,
    )


def lab(
    *,
    default: str | None = "default",
    help: str = "Embedded lab (`splitbrain lab up --name NAME`).",
) -> Decorator:
    """``--lab NAME``: the lab a command runs on."""
    return click.option("--lab", default=default, show_default=default is not None, help=help)


def json_path(*, help: str = "Write a JSON summary here (for CI).") -> Decorator:
    """``--json FILE`` as ``json_path``: a machine-readable copy of what the command printed."""
    return click.option(
        "--json", "json_path", type=click.Path(dir_okay=False), default=None, help=help
    )


def output(*, help: str = "Also write the JSON here.") -> Decorator:
    """``--output FILE`` as a ``Path`` (or None)."""
    return click.option(
        "--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help=help
    )


def db_options(*, help: str = "DB option (repeatable).") -> Decorator:
    """``--db-option KEY=VALUE`` (repeatable) as ``db_options``, a tuple of strings."""
    return click.option("--db-option", "db_options", multiple=True, metavar="KEY=VALUE", help=help)


def bug(*, help: str = "Seeded bug for the reference node (--bug NAME).") -> Decorator:
    """``--bug NAME``: a seeded bug of the reference node (None: the recorded or none)."""
    return click.option("--bug", default=None, help=help)


def engine(*, help: str = "Checker engine.") -> Decorator:
    """``--engine local|spark|auto``: where the checker runs (``checker.dispatch.ENGINES``)."""
    from checker.dispatch import ENGINES

    return click.option(
        "--engine", type=click.Choice(ENGINES), default="local", show_default=True, help=help
    )


def spark_master(*, help: str = "Spark master URL (default local[*]).") -> Decorator:
    """``--spark-master URL`` (None: a local session)."""
    return click.option("--spark-master", default=None, help=help)


def mutant_options(*, hidden: bool = False) -> Decorator:
    """What chooses and runs mutants: ``--mutant``, ``--sample``, ``--list``, ``--out``,
    ``--smoke-time``, ``--unit-timeout`` (``splitbrain mutants``, and the deprecated
    ``zoo --mutants``, which hides them)."""
    opts = [
        click.option(
            "--mutant",
            "mutant_ids",
            multiple=True,
            metavar="ID",
            hidden=hidden,
            help="Only this mutant (repeatable; ids from --list).",
        ),
        click.option(
            "--sample",
            type=click.IntRange(min=1),
            default=None,
            hidden=hidden,
            help="A random sample of N mutants, drawn from --seed.",
        ),
        click.option(
            "--list",
            "list_only",
            is_flag=True,
            hidden=hidden,
            help="List mutants, run none.",
        ),
        click.option(
            "--out",
            "out_dir",
            default="store/mutants",
            show_default=True,
            type=click.Path(file_okay=False),
            hidden=hidden,
            help="Where mutant trees and mutants.jsonl go (a rerun resumes from it).",
        ),
        click.option(
            "--smoke-time",
            type=click.FloatRange(min=1.0),
            default=10.0,
            show_default=True,
            hidden=hidden,
            help="Seconds of the fault-free run.",
        ),
        click.option(
            "--unit-timeout",
            type=click.FloatRange(min=10.0),
            default=600.0,
            show_default=True,
            hidden=hidden,
            help="Seconds before the node's unit tests count as hung.",
        ),
    ]

    return stack(*opts)


def count(flag: str, dest: str | None = None, *, default: int, help: str) -> Decorator:
    """``flag N``: how many (runs, times), at least 1, its default shown in ``--help``."""
    names = (flag, dest) if dest else (flag,)
    return click.option(
        *names, type=click.IntRange(min=1), default=default, show_default=True, help=help
    )


def non_negative(flag: str, dest: str | None = None, *, default: float, help: str) -> Decorator:
    """``flag X``: an amount (seconds, minutes) of 0 or more, its default shown in ``--help``."""
    names = (flag, dest) if dest else (flag,)
    return click.option(
        *names, type=click.FloatRange(min=0), default=default, show_default=True, help=help
    )


def seconds(*, default: float, help: str) -> Decorator:
    """``--seconds S``: how long a benchmark's load lasts, at least 1 s, default shown."""
    return click.option(
        "--seconds", type=click.FloatRange(min=1), default=default, show_default=True, help=help
    )


def concurrency(*, default: int | None = 10, help: str | None = None) -> Decorator:
    """``--concurrency/-c N``: client worker threads, at least 1 (None: the command
    chooses, and says how in ``help``)."""
    return click.option(
        "--concurrency",
        "-c",
        type=click.IntRange(min=1),
        default=default,
        show_default=default is not None,
        help=help,
    )


def seed(*, default: int | None, help: str | None = None) -> Decorator:
    """``--seed N``: the seed a command draws from (None: the command picks and says one)."""
    return click.option(
        "--seed", type=int, default=default, show_default=default is not None, help=help
    )


def stack(*decorators: Callable[[Any], Any]) -> Decorator:
    """The options as one decorator, listed in the order ``--help`` shows them."""

    def decorate(fn: F) -> F:
        for option in reversed(decorators):
            fn = option(fn)
        return fn

    return decorate
