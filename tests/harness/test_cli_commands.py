"""Where the ``splitbrain`` commands are defined: in ``harness/cli``, but the documented
exceptions (``harness.cli.OUTSIDE_CLI``), and each ``bench`` command's ``--help`` works
without running what it measures."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from harness.cli import BENCH_COMMANDS, OUTSIDE_CLI, cli


def _commands() -> dict[str, click.Command]:
    """Every registered command by its full name (``bench soak``), groups walked."""
    out: dict[str, click.Command] = {}

    def walk(group: click.Group, prefix: str) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            assert cmd is not None, name
            full = f"{prefix}{name}"
            if isinstance(cmd, click.Group):
                walk(cmd, full + " ")
            else:
                out[full] = cmd

    walk(cli, "")
    return out


def test_every_command_is_defined_in_harness_cli_but_the_documented_exceptions() -> None:
    commands = _commands()
    assert {"run", "check", "node", "bench soak", "bench fuzz-frames"} <= set(commands)
    outside = {
        name: cmd.callback.__module__
        for name, cmd in commands.items()
        if cmd.callback is not None
        and not (cmd.callback.__module__ + ".").startswith("harness.cli.")
    }
    assert set(outside) == set(OUTSIDE_CLI), outside
    assert all(why for why in OUTSIDE_CLI.values())


@pytest.mark.parametrize("name", sorted(BENCH_COMMANDS))
def test_bench_help_lists_the_options_without_running_anything(name: str) -> None:
    r = CliRunner().invoke(cli, ["bench", name, "--help"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"Usage: cli bench {name}"), r.output
    assert "--help" in r.output


def test_a_bad_size_list_is_a_usage_error_naming_its_option() -> None:
    r = CliRunner().invoke(cli, ["bench", "checker", "--scale-register", "1e6,lots"])
    assert r.exit_code == 2, r.output
    assert "--scale-register" in r.output and "expected sizes" in r.output
