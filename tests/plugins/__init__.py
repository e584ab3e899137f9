"""Plugin packages of their own (each with its pyproject.toml), and how a test installs one.

:func:`installed` puts a package on ``sys.path`` the way pip would leave it (the project
directory plus a ``.dist-info`` whose entry points are read from its pyproject.toml), for
one block, and takes it away again: no pip run, no network, nothing left in the venv.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import tomllib

__all__ = ["installed"]


@contextmanager
def installed(
    project_dir: Path,
    group: str,
    tmp_path: Path,
    refresh: Callable[[], None],
    extra: dict[str, str] | None = None,
) -> Iterator[None]:
    """The plugin in ``project_dir`` installed with its ``group`` entry points (plus
    ``extra``); ``refresh`` makes the registry forget what it scanned, before and after."""
    project = tomllib.loads((project_dir / "pyproject.toml").read_text())["project"]
    module = project_dir.name
    eps = {**project["entry-points"][group], **(extra or {})}
    site = tmp_path / "site"
    dist = site / f"{module}-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = [f"[{group}]", *(f"{k} = {v}" for k, v in eps.items())]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    sys.path[:0] = [str(site), str(project_dir)]
    refresh()
    try:
        yield
    finally:
        for p in (str(site), str(project_dir)):
            sys.path.remove(p)
        for m in [m for m in sys.modules if m.split(".")[0] == module]:
            del sys.modules[m]
        refresh()
