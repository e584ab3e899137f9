"""The inventory options every command that reaches hosts takes, declared once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from harness.cli import options

__all__ = ["inventory_options"]

F = TypeVar("F", bound=Callable[..., Any])


def inventory_options(lab_help: str) -> Callable[[F], F]:
    """``--lab``, ``--nodes-file``, ``--vagrant``, ``--docker``, ``--vm``, ``--insecure-no-host-key-check``.

    The command receives them as ``lab``, ``nodes_file``, ``vagrant``, ``docker``, ``vm``
    and ``insecure``, ready for :func:`harness.inventory.resolve.resolve_hosts`.
    """
    decorators = [
        options.lab(help=lab_help),
        click.option(
            "--nodes-file",
            type=click.Path(dir_okay=False),
            default=None,
            help="YAML list of existing hosts.",
        ),
        click.option(
            "--vagrant",
            type=click.Path(file_okay=False),
            default=None,
            help="Directory of a Vagrantfile whose VMs are up.",
        ),
        click.option(
            "--docker",
            is_flag=True,
            help="Containers of `splitbrain lab up --driver docker` (name them with --lab).",
        ),
        click.option(
            "--vm",
            is_flag=True,
            help="Guests of `splitbrain lab up --driver vm` (name them with --lab).",
        ),
        click.option(
            "--insecure-no-host-key-check",
            "insecure",
            is_flag=True,
            help="Do not verify SSH host keys.",
        ),
    ]

    return options.stack(*decorators)
