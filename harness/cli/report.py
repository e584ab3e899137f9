"""``splitbrain report PATH``: rebuild the interactive HTML report of a stored run."""

from __future__ import annotations

from pathlib import Path

import click

from harness.core.errors import ConfigError


@click.command(name="report")
@click.argument("path", type=click.Path(path_type=Path))
def report(path: Path) -> int:
    """Write report.html for the run stored at PATH: one self-contained page.

    The page has the verdict and checker tables, the anomalies (click one to zoom the
    timeline onto its ops, the faults then in force and the nodes' log lines), and a
    zoomable timeline of every op with the faults and each node's role and committed
    index. PATH is a run directory (store/<test>/<time>) or a test's `latest` link.
    """
    from harness.report.html import write_report

    if not path.is_dir():
        raise ConfigError("not a run directory (expected store/<test>/<time>)", path=path)
    from harness.run.progress import step_status

    with step_status(f"building the report of {path}"):
        out = write_report(path)
    click.echo(str(out))
    return 0
