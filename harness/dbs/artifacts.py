"""Programs the harness builds for a DB from a package registry, cached by key.

Two builders feed this cache: :mod:`harness.dbs.maven` (Java projects of the repository,
their jars from Maven Central) and :mod:`harness.dbs.gobuild` (Go programs from the Go
module proxy: a current etcd, say). Both end the same way, which lives here once: one
directory per *key* (what was built, for which versions, with which toolchain) holding
the files to run and a ``manifest.json`` naming each with its origin and SHA-256. A
build whose manifest exists is used as it is, so a second run fetches and builds
nothing; a run records the manifest in ``test.json`` (``artifacts``), so a finding names
exactly what ran.

Lab hosts share this machine's file system and use the cache in place; other hosts get
a copy with :meth:`Program.install`, refreshed only when the key changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from harness.core.errors import LabError

if TYPE_CHECKING:
    from harness.core.remote import Remote

__all__ = [
    "CACHE_ROOT",
    "Artifact",
    "Program",
    "cached_build",
    "offline_first",
    "tree_digest",
    "sha256_file",
]

CACHE_ROOT = Path(os.environ.get("SPLITBRAIN_CACHE_ROOT", "/var/lib/splitbrain"))
"""Where every builder keeps its builds and its registry cache (Maven's, Go's)."""

KEY_FILE = ".key"


@dataclass(frozen=True)
class Artifact:
    """One file of a build: where it came from and what it was."""

    coordinate: str
    """Its origin with the version resolved: ``group:artifact:version`` for a jar,
    ``module@version`` for a Go module."""
    file: str
    """Its name in the build's ``lib/`` (empty for a module compiled into a binary)."""
    sha256: str

    def to_json(self) -> dict[str, str]:
        return {"coordinate": self.coordinate, "file": self.file, "sha256": self.sha256}


P = TypeVar("P", bound="Program")


@dataclass(frozen=True)
class Program:
    """A build on this machine: its files and what they are."""

    name: str
    home: Path
    """The cache directory; its ``lib/`` holds every file to run."""
    key: str
    properties: Mapping[str, str]
    artifacts: tuple[Artifact, ...]
    toolchain: str
    """What built it (``java 17``, ``go1.26.8``): part of the key."""

    @property
    def lib(self) -> Path:
        return self.home / "lib"

    def version_of(self, origin: str) -> str | None:
        """The resolved version of ``group:artifact`` or of a Go module path; None if absent."""
        for a in self.artifacts:
            if "@" in a.coordinate:
                mod, ver = a.coordinate.rsplit("@", 1)
                if mod == origin:
                    return ver
                continue
            parts = a.coordinate.split(":")
            if len(parts) >= 3 and f"{parts[0]}:{parts[1]}" == origin:
                return parts[2]
        return None

    def manifest(self) -> dict[str, Any]:
        """What ``test.json`` records: the key, the properties and every file's checksum."""
        return {
            "program": self.name,
            "key": self.key,
            "properties": dict(self.properties),
            "toolchain": self.toolchain,
            "artifacts": [a.to_json() for a in self.artifacts],
        }

    def install(self, remote: Remote, dest: str) -> str:
        """Make the files present under ``dest`` on ``remote``'s host; returns that ``lib``.

        A host that shares this machine's file system (every lab host) sees the cache
        itself, which is then used in place: nothing is copied. Other hosts get a copy,
        kept between runs and refreshed only when the build's key changed.
        """
        for lib in (str(self.lib), f"{dest.rstrip('/')}/lib"):
            probe = remote.run(f"cat {shlex.quote(lib)}/{KEY_FILE}", check=False, timeout=30)
            if probe.ok and probe.stdout.strip() == self.key:
                return lib
        from harness.core.remote import UploadsTrees

        lib = f"{dest.rstrip('/')}/lib"
        remote.run(f"rm -rf {shlex.quote(lib)} && mkdir -p {shlex.quote(dest)}", timeout=60)
        if isinstance(remote, UploadsTrees):
            remote.upload_tree(str(self.lib), lib)
        else:
            remote.run(f"mkdir -p {shlex.quote(lib)}", timeout=60)
            for f in sorted(p.name for p in self.lib.iterdir()):
                remote.upload(str(self.lib / f), f"{lib}/{f}")
        remote.run(f"chmod -R a+rX {shlex.quote(lib)}", check=False, timeout=60)
        return lib


def offline_first(
    attempts: Sequence[tuple[Sequence[Sequence[str]], Mapping[str, str] | None]],
    *,
    cwd: Path,
    timeout: float,
    what: str,
) -> tuple[bool, str]:
    """Run each attempt's commands in turn until one attempt's all succeed.

    An attempt is (commands, environment): the builders pass an offline one first (a
    rebuild whose dependencies are all in the harness's own cache asks no registry),
    then the same online. Returns (whether an attempt succeeded, the last output).
    """
    out = ""
    for commands, env in attempts:
        for cmd in commands:
            try:
                res = subprocess.run(
                    list(cmd),
                    cwd=cwd,
                    env=None if env is None else dict(env),
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                raise LabError(f"building {what} took over {timeout:g} s") from None
            out = res.stdout + res.stderr
            if res.returncode != 0:
                break
        else:
            return True, out
    return False, out


def tree_digest(project: Path, *, skip: tuple[str, ...] = ("target",)) -> str:
    """SHA-256 over a project's files (names and contents), build output left out."""
    h = hashlib.sha256()
    for path in sorted(project.rglob("*")):
        rel = path.relative_to(project)
        if not path.is_file() or rel.parts[0] in skip:
            continue
        h.update(str(rel).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def build_key(*parts: object) -> str:
    """A short stable key over JSON-able parts (a digest, properties, a toolchain)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per key at a time, across processes (two test runs may start together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def load(home: Path, cls: type[P]) -> P | None:
    """The build in ``home`` when its manifest and every file it names are there."""
    try:
        m = json.loads((home / "manifest.json").read_text())
        arts = tuple(Artifact(a["coordinate"], a["file"], a["sha256"]) for a in m["artifacts"])
        if not all((home / "lib" / a.file).is_file() for a in arts if a.file):
            return None
        return cls(
            name=m["program"],
            home=home,
            key=m["key"],
            properties=m["properties"],
            artifacts=arts,
            toolchain=m["toolchain"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cached_build(
    cls: type[P],
    *,
    name: str,
    key: str,
    properties: Mapping[str, str],
    toolchain: str,
    root: Path,
    make: Callable[[Path, Path], tuple[Artifact, ...]],
) -> P:
    """The build ``name``/``key`` under ``root/builds``, made by ``make`` when absent.

    ``make(tmp, lib)`` builds in the scratch directory ``tmp`` and leaves every file to
    run in ``lib``; it returns their artifacts. The result is moved into place only once
    complete, under a lock, so a build killed half-way is never taken for a build.
    """
    home = root / "builds" / f"{name}-{key}"
    found = load(home, cls)
    if found is not None:
        return found
    with _locked(root / "locks" / f"{name}-{key}.lock"):
        found = load(home, cls)
        if found is not None:
            return found
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"{name}-build-", dir=root) as tmp:
            staged = Path(tmp) / "home"
            lib = staged / "lib"
            lib.mkdir(parents=True)
            artifacts = make(Path(tmp), lib)
            (lib / KEY_FILE).write_text(key + "\n")
            program = cls(
                name=name,
                home=home,
                key=key,
                properties=dict(properties),
                artifacts=artifacts,
                toolchain=toolchain,
            )
            (staged / "manifest.json").write_text(json.dumps(program.manifest(), indent=1) + "\n")
            home.parent.mkdir(parents=True, exist_ok=True)
            if home.exists():
                shutil.rmtree(home)
            staged.rename(home)
    loaded = load(home, cls)
    if loaded is None:
        raise LabError(f"the build of {name} in {home} left no usable manifest")
    return loaded
