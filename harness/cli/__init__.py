"""The ``splitbrain`` command: a thin edge over the packages.

Every command is defined here, one module each (``harness/cli/check.py``, ...; the
``bench`` group's commands all in ``harness/cli/bench.py``), over the code it drives,
with the options several commands share declared once (``harness/cli/options.py``).
The exceptions, :data:`OUTSIDE_CLI`, say why. Commands are imported only when invoked,
so ``splitbrain --help`` stays fast and ``splitbrain check`` never imports paramiko;
a command imports what it drives only when it runs.

Exit codes (docs/architecture.md §8): 0 valid, 1 invalid, 2 unknown, 3+ usage or
environment errors. Click's own usage errors would exit 2, which a CI job would
read as "unknown", so :func:`main` maps them to 3.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

from harness import __version__
from harness.core.errors import SplitbrainError
from harness.core.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_USAGE, EXIT_VALID

__all__ = [
    "main",
    "cli",
    "LazyGroup",
    "OUTSIDE_CLI",
    "EXIT_VALID",
    "EXIT_INVALID",
    "EXIT_UNKNOWN",
    "EXIT_USAGE",
]


class LazyGroup(click.Group):
    """A click group whose subcommands are ``"module:attr"`` strings, imported on use."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._lazy:
            mod_name, attr = self._lazy[name].split(":")
            try:
                mod = importlib.import_module(mod_name)
            except ModuleNotFoundError as e:
                if e.name and mod_name.startswith(e.name):
                    return _unavailable(name, f"{mod_name} is not installed in this build")
                raise
            return getattr(mod, attr)
        return super().get_command(ctx, name)


def _unavailable(name: str, why: str) -> click.Command:
    @click.command(name=name, help=f"(unavailable: {why})")
    def cmd() -> None:
        raise click.ClickException(why)

    return cmd


BENCH_COMMANDS = {
    "node": "harness.cli.bench:bench_node",
    "crash": "harness.cli.bench:bench_crash",
    "checker": "harness.cli.bench:bench_checker",
    "harness": "harness.cli.bench:bench_harness",
    "campaign": "harness.cli.bench:bench_campaign",
    "soak": "harness.cli.bench:bench_soak",
    "fuzz-frames": "harness.cli.bench:bench_fuzz_frames",
    "report": "harness.cli.bench:bench_report",
}

OUTSIDE_CLI = {
    "node": "node_impl/cli.py: the reference node's own command line (its options go "
    "unchanged to the parser of `python -m node_impl`, its bug list is node_impl's), kept "
    "with the node, which ships to hosts alone and never imports the harness",
}
"""Commands whose click definition lives outside ``harness/cli``, and why
(tests/harness/test_cli_commands.py holds every other command to this package)."""


@click.group(cls=LazyGroup, lazy=BENCH_COMMANDS, name="bench")
def bench() -> None:
    """Benchmarks: each prints JSON with its figures and a same-run baseline."""


COMMANDS = {
    "lab": "harness.cli.lab:lab",
    "run": "harness.cli.run:run",
    "check": "harness.cli.check:check",
    "gen-history": "harness.cli.gen_history:gen_history",
    "spark-archive": "harness.cli.spark_archive:spark_archive",
    "report": "harness.cli.report:report",
    "serve": "harness.cli.serve:serve",
    "node": "node_impl.cli:node",
    "zoo": "harness.cli.zoo:zoo",
    "mutants": "harness.cli.mutants:mutants",
    "plugins": "harness.cli.plugins:plugins",
    "heal": "harness.cli.heal:heal",
    "replay": "harness.cli.replay:replay",
    "shrink": "harness.cli.shrink:shrink",
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="splitbrain")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(verbose: int) -> None:
    """splitbrain: break a replicated log on purpose and check what it lost.

    Typical session: `splitbrain lab up`, `splitbrain run --nemesis partition,kill`,
    `splitbrain serve` to browse the results, `splitbrain lab down`.
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


cli.add_command(bench)


def main(argv: list[str] | None = None) -> None:
    try:
        rv = cli.main(args=argv, prog_name="splitbrain", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(EXIT_USAGE)
    except SplitbrainError as e:
        click.echo(f"splitbrain: error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
