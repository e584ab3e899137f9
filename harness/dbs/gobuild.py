"""Go programs built from the Go module proxy at a chosen version, cached, then used offline.

A current etcd is not in Debian; its modules are on the Go module proxy. Installing a
module's command with ``go install module@version`` fails for modules whose go.mod
replaces its siblings by relative paths (etcd's server does), so each program here is
a *wrapper*: a directory of the repository with one ``main`` package per binary (a few
lines that call the system's own entry point, e.g. ``etcdmain.Main``). :func:`build`
writes a go.mod for it, asks ``go get`` for each module at its version (the proxy
resolves the rest), builds every binary, and leaves them in one build of the cache
(:mod:`harness.dbs.artifacts`) with each module's resolved version and every binary's
SHA-256. The module cache lives under the same root, and a rebuild tries without the
network first.

``GOTOOLCHAIN=local``: a module asking for a newer Go must fail here with its reason,
not download a toolchain.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import ConfigError, LabError
from harness.dbs.artifacts import (
    CACHE_ROOT,
    Artifact,
    Program,
    build_key,
    cached_build,
    offline_first,
    sha256_file,
    tree_digest,
)

__all__ = ["GO_ROOT", "GoProgram", "build", "go_version"]

log = logging.getLogger(__name__)

GO_ROOT = Path(os.environ.get("SPLITBRAIN_GO_ROOT", str(CACHE_ROOT / "go")))
"""Builds, the module cache and the build cache; ``SPLITBRAIN_GO_ROOT`` moves it."""

BUILD_TIMEOUT_S = 1500.0
"""etcd's first build downloads ~150 modules and compiles for about a minute on 2 cores."""

_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.\-]+)?$")


@dataclass(frozen=True)
class GoProgram(Program):
    """Built Go binaries: ``binary(name)`` is where each one lies on this machine."""

    def binary(self, name: str, lib: str | None = None) -> str:
        return f"{lib or self.lib}/{name}"


def go_version(go: str = "go") -> str:
    """``go1.26.8``; a LabError when Go is not installed."""
    exe = shutil.which(go)
    if exe is None:
        raise LabError("Go is not installed: apt-get install golang, or put go on PATH")
    out = subprocess.run([exe, "env", "GOVERSION"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or "go"


def module_version(version: str) -> str:
    """``3.6.6`` or ``v3.6.6`` as the proxy names it (``v3.6.6``); ConfigError otherwise."""
    if not _VERSION.match(version):
        raise ConfigError(
            f"version {version!r} is not a release number like 3.6.6", field="version"
        )
    return version if version.startswith("v") else f"v{version}"


def _env(root: Path, *, offline: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(root / "mod"),
        GOCACHE=str(root / "cache"),
        GOPATH=str(root / "path"),
        GOTOOLCHAIN="local",
        GOFLAGS="-mod=mod -buildvcs=false",
        CGO_ENABLED="0",
    )
    if offline:
        env["GOPROXY"] = "off"
    return env


def _go_error(name: str, modules: Mapping[str, str], out: str) -> ConfigError:
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    reason = " | ".join(lines[-3:])[:600]
    which = ", ".join(f"{m}@{v}" for m, v in sorted(modules.items()))
    unknown = any(
        w in out for w in ("unknown revision", "invalid version", "no matching", "is not available")
    )
    return ConfigError(
        f"building {name} ({which}) from the Go module proxy failed: {reason}",
        field="version" if unknown else "build",
    )


def build(
    project: Path,
    *,
    name: str,
    modules: Mapping[str, str],
    binaries: Sequence[str],
    root: Path = GO_ROOT,
    go: str = "go",
    timeout: float = BUILD_TIMEOUT_S,
) -> GoProgram:
    """The ``binaries`` of wrapper ``project`` (one ``main`` package per subdirectory of
    that name) against ``modules`` (module path -> version), built once per key."""
    for b in binaries:
        if not (project / b).is_dir():
            raise ConfigError(f"{project}: no package directory {b!r}", field="project")
    mods = {m: module_version(v) for m, v in modules.items()}
    toolchain = go_version(go)
    exe = shutil.which(go) or go

    def make(tmp: Path, lib: Path) -> tuple[Artifact, ...]:
        started = time.monotonic()
        work = tmp / "src"
        shutil.copytree(project, work)
        (work / "go.mod").write_text(f"module splitbrain.local/{name}\n\ngo 1.22\n")
        steps = [[exe, "get", *(f"{m}@{v}" for m, v in sorted(mods.items()))]]
        steps += [[exe, "build", "-trimpath", "-o", str(lib / b), f"./{b}"] for b in binaries]
        attempts = [(steps, _env(root, offline=offline)) for offline in (True, False)]
        built, out = offline_first(attempts, cwd=work, timeout=timeout, what=f"{name} with Go")
        if not built:
            raise _go_error(name, mods, out)
        resolved = _resolved(work, exe, _env(root, offline=True), mods)
        arts = [Artifact(f"{m}@{v}", "", "") for m, v in sorted(resolved.items())]
        arts += [
            Artifact(f"splitbrain.local/{name}/{b}", b, sha256_file(lib / b)) for b in binaries
        ]
        arts.append(Artifact("go.sum", "", sha256_file(work / "go.sum")))
        log.info("built %s (%s) in %.1f s", name, mods, time.monotonic() - started)
        return tuple(arts)

    return cached_build(
        GoProgram,
        name=name,
        key=build_key(tree_digest(project), mods, list(binaries), toolchain),
        properties=mods,
        toolchain=toolchain,
        root=root,
        make=make,
    )


def _resolved(
    work: Path, go: str, env: Mapping[str, str], mods: Mapping[str, str]
) -> dict[str, str]:
    """The versions the build used of the modules asked for (``go list -m``)."""
    res = subprocess.run(
        [go, "list", "-m", *sorted(mods)],
        cwd=work,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out[parts[0]] = parts[1]
    return out or dict(mods)
