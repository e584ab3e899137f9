"""``splitbrain node``: run a reference node, or list its seeded bugs.

Every argument other than ``--list-bugs`` goes unchanged to the node's own parser
(``python -m node_impl``), so both entry points accept exactly the same options.
"""

from __future__ import annotations

import sys

import click

from node_impl.bugs import BROKER_BUGS, BUGS, HA_BUGS

__all__ = ["node"]


@click.command(
    "node",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                      "help_option_names": []},
    add_help_option=False,
)
@click.option("--list-bugs", is_flag=True, help="Print each seeded bug with a one-line description.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def node(list_bugs: bool, args: tuple[str, ...]) -> None:
    """Run one reference DLedger node (options as for `python -m node_impl --help`)."""
    if list_bugs:
        width = max(len(k) for k in BUGS)
        for name, desc in BUGS.items():
            click.echo(f"{name:<{width}}  {desc}")
        for name, desc in (*HA_BUGS.items(), *BROKER_BUGS.items()):
            click.echo(f"{name:<{width}}  {desc}")
        return
    from node_impl.__main__ import main

    rc = main(list(args))
    if rc:
        sys.exit(rc)
