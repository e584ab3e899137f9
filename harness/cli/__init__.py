"""The ``splitbrain`` command: a thin edge over the packages.

Subcommands are defined here, one module each (``harness/cli/check.py``, ...), over
the code they drive; the exceptions are ``node`` and the node's benchmarks
(``node_impl/``, which ships alone to hosts) and the ``bench`` commands of
``harness/bench/``. All are imported only when invoked, so ``splitbrain --help``
stays fast and ``splitbrain check`` never imports paramiko.

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

__all__ = ["main", "cli", "LazyGroup", "EXIT_VALID", "EXIT_INVALID", "EXIT_UNKNOWN", "EXIT_USAGE"]


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
    "node": "node_impl.bench:bench_node",
    "crash": "node_impl.bench:bench_crash",
    "checker": "harness.bench.checker:bench_checker",
    "harness": "harness.bench.recording:bench_harness",
    "campaign": "harness.bench.campaign:bench_campaign",
    "soak": "harness.bench.soak:bench_soak",
    "fuzz-frames": "node_impl.fuzz:bench_fuzz_frames",
    "report": "harness.bench.report:bench_report",
}


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
