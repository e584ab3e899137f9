"""``splitbrain plugins`` and the name listing in ``splitbrain run --help``.

Both read the entry-point registry (:mod:`harness.core.plugins`), so a package
that was just ``pip install``-ed shows up with no change to splitbrain.
"""

from __future__ import annotations

import click

from harness.core import plugins as registry

__all__ = ["plugins", "ListsPlugins"]


class ListsPlugins(click.Command):
    """A command whose ``--help`` ends with the DB and workload names available now."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        with formatter.section("Available (splitbrain plugins shows where each comes from)"):
            formatter.write_dl([
                ("--db", ", ".join(registry.names("db"))
                 + "; or NAME:ARGUMENT (yaml:FILE), or package.module:factory"),
                ("--workload", ", ".join(registry.names("workload"))
                 + "; or stdio:PROGRAM, or package.module:factory"),
            ])


@click.command(name="plugins")
@click.option("--check", is_flag=True, help="Also import every factory and report failures.")
def plugins(check: bool) -> int:
    """List the DBs, workloads and models splitbrain can use, and which package gave each."""
    broken = 0
    for kind, found in registry.describe().items():
        click.echo(f"{registry.GROUPS[kind]}:")
        for p in found:
            status = ""
            if check:
                try:
                    p.load()
                except Exception as e:
                    broken += 1
                    status = f"  BROKEN: {e}"
            click.echo(f"  {p.name:28} {p.value:44} {p.origin}{status}")
    return 3 if broken else 0
