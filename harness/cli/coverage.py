"""The coverage tables the zoo and the mutants print after their runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from harness.zoo.summary import (
    RunRecord,
    attach_coverage,
    coverage_json,
    coverage_table,
    never_reached,
    render_coverage,
)

__all__ = ["echo_coverage"]


def echo_coverage(records: Sequence[RunRecord]) -> dict[str, Any]:
    """Print each mode's coverage table over all its runs and the situations never reached.

    Returns the --json form, per mode.
    """
    attach_coverage(records)
    out: dict[str, Any] = {}
    for mode in dict.fromkeys(r.mode for r in records):
        rows = coverage_table([r for r in records if r.mode == mode])
        if not any(r.runs for r in rows):
            continue
        runs = rows[0].runs
        click.echo(f"\ncoverage, mode {mode}, over {runs} run(s) (docs/zoo.md, issue 27):")
        click.echo(render_coverage(rows))
        missed = never_reached(rows)
        click.echo(
            f"never reached: {', '.join(missed)}"
            if missed
            else "every observable situation reached"
        )
        out[mode] = coverage_json(rows)
    return out
