"""``splitbrain plugins`` and the name listing in ``splitbrain run --help``.

Both read the entry-point registry (:mod:`harness.core.plugins`), so a package
that was just ``pip install``-ed shows up with no change to splitbrain.
"""

from __future__ import annotations

import click

from harness.core import plugins as registry

__all__ = ["plugins", "ListsPlugins"]


class ListsPlugins(click.Command):
    """A command whose ``--help`` ends with the DB, workload and fault names available now."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        with formatter.section("Available (splitbrain plugins shows where each comes from)"):
            formatter.write_dl(
                [
                    (
                        "--db",
                        ", ".join(registry.names("db"))
                        + "; or NAME:ARGUMENT (yaml:FILE), or package.module:factory",
                    ),
                    (
                        "--workload",
                        ", ".join(registry.names("workload"))
                        + "; or stdio:PROGRAM, or package.module:factory",
                    ),
                    ("--nemesis", _fault_names()),
                ]
            )


def _fault_names() -> str:
    """Every ``--nemesis`` name, aliases included, from the fault registry."""
    from nemesis.registry import registry as faults

    try:
        return ", ".join(faults().names)
    except Exception as e:  # noqa: BLE001 - help must still print; `plugins --check` says more
        return f"(cannot list: {e})"


@click.command(name="plugins")
@click.option(
    "--check",
    is_flag=True,
    help="Also import every factory and registered object (faults, checks) and report failures.",
)
def plugins(check: bool) -> int:
    """List the DBs, workloads, models, faults and checks splitbrain can use, and which
    package gave each."""
    broken = 0
    for kind, found in registry.describe().items():
        click.echo(f"{registry.GROUPS[kind]}:")
        for p in found:
            status = ""
            if check:
                try:
                    obj = p.load()
                    if kind == "fault":  # an incomplete fault is refused, as a run would
                        from nemesis.registry import validate

                        validate(obj, f"{p.origin}, {p.value}")
                    elif kind == "checker":  # so is a checker spec, as a check would
                        from checker.registry import validate as validate_checker

                        validate_checker({p.name: (obj, p.origin)})
                except Exception as e:
                    broken += 1
                    status = f"  BROKEN: {e}"
            click.echo(f"  {p.name:28} {p.value:44} {p.origin}{status}")
    if check and not broken:
        # What no single entry shows: two checkers claiming one anomaly kind, two faults
        # one name or heal rank.
        from checker.registry import checkers
        from nemesis.registry import registry as faults

        for what, load in (("checkers", checkers), ("faults", faults)):
            try:
                load()
            except Exception as e:
                broken += 1
                click.echo(f"{what}: BROKEN: {e}")
    return 3 if broken else 0
