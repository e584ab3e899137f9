"""``splitbrain spark-archive``: the Spark driver's class-data archive, once per install."""

from __future__ import annotations

import json
from pathlib import Path

import click

from checker.spark.class_archive import ENV, build

__all__ = ["spark_archive"]


@click.command("spark-archive")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Where to write it (default: this install's cache path, or ${ENV}).",
)
def spark_archive(out: Path | None) -> None:
    """Make the Spark driver's class-data archive: sessions start 2-3 s sooner.

    Run once per install (again after upgrading pyspark or the JDK; a stale archive
    is ignored, not harmful). Prints JSON: the archive, its size, the classes listed.
    """
    click.echo(json.dumps(build(out), indent=2))
