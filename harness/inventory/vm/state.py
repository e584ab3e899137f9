"""A VM lab's record on this machine: its parameters, image and accelerator, in one file.

``lab.json`` is written before any guest starts, so a ``down`` after a killed
``up`` knows what to look for; every resource is also findable from the lab's
name alone (interface names, qemu process names), for when even that file is lost.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, LabError
from harness.inventory.lab.state import write_atomic

__all__ = ["VmLabRecord", "read_record", "write_record"]


@dataclass(frozen=True)
class VmLabRecord:
    name: str
    subnet: str
    nodes: int
    memory_mib: int
    bridge: str
    image_key: str
    image_dir: str
    accel: str
    driver: str = "vm"
    packages: tuple[str, ...] = ()


def write_record(lab_dir: Path, record: VmLabRecord) -> None:
    lab_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(lab_dir / "lab.json", json.dumps(asdict(record), indent=1) + "\n")


def read_record(lab_dir: Path) -> VmLabRecord:
    """The lab's record; :class:`LabError` when it has none, :class:`ConfigError` naming
    the field when it is damaged."""
    path = lab_dir / "lab.json"
    try:
        raw: Any = json.loads(path.read_text())
    except FileNotFoundError:
        raise LabError(
            f"VM lab {lab_dir.name!r} is not up (no {path}); "
            f"start it with `splitbrain lab up --driver vm --name {lab_dir.name}`"
        ) from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"unreadable VM lab record: {e}", path=path) from None
    if not isinstance(raw, dict):
        raise ConfigError("not a JSON object", path=path)
    fields = VmLabRecord.__dataclass_fields__
    for key in fields:
        if key not in raw and key not in ("driver", "packages"):
            raise ConfigError("missing", path=path, field=key)
    try:
        values = {k: raw[k] for k in fields if k in raw}
        if "packages" in values:
            if not isinstance(values["packages"], list) or not all(
                isinstance(p, str) for p in values["packages"]
            ):
                raise ConfigError("not a list of package names", path=path, field="packages")
            values["packages"] = tuple(values["packages"])
        return VmLabRecord(**values)
    except TypeError as e:
        raise ConfigError(str(e), path=path) from None
