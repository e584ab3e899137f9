"""``splitbrain serve``: browse the results store (``harness.report.serve``)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli import options
from harness.report.serve import make_server

__all__ = ["serve"]


@click.command(name="serve")
@options.store(help="Results store to browse.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8080, show_default=True, type=int, help="Port (0: any free port).")
def serve(store_root: str, host: str, port: int) -> int:
    """Browse stored runs in a web browser: verdicts, faults, reports, raw files."""
    store = Path(store_root)
    if not store.is_dir():
        raise click.BadParameter(
            f"{store} is not a directory (run a campaign first)", param_hint="--store"
        )
    srv = make_server(store, host, port)
    click.echo(
        f"serving {store.resolve()} at http://{host}:{srv.server_address[1]}/ (Ctrl-C stops)"
    )
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0
