"""Java programs of the project, built by Maven from Maven Central, cached, then used offline.

A Java DB (``dledger-java``, ``jraft``) keeps its sources and a ``pom.xml`` in the
repository. :func:`build` compiles that project once per *key* (the project's files, the
Maven properties such as the system's version, and the JDK's major version), copies the
program's jar and every runtime dependency into one cache directory, and writes a
``manifest.json`` there: each artifact's coordinate and SHA-256. Later runs find the
manifest and never call Maven, so a second run fetches nothing; Maven's own repository
lives under the same root, so even a rebuild for a new key asks the network only for
what it lacks (Maven runs offline first).

Why a cache outside the checkout: CI clones afresh, and every lab host of this machine
shares its file system, so one build serves every node of every run. Hosts that do not
share it receive the jars with :meth:`JavaProgram.install`.

The manifest is what the run records in ``test.json`` (``artifacts``): the resolved
versions and checksums, so a finding names exactly the jars that ran.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError, LabError, RemoteError

if TYPE_CHECKING:
    from harness.core.remote import Remote

__all__ = [
    "JAVA_ROOT",
    "Artifact",
    "JavaProgram",
    "build",
    "java_major",
    "mvn_command",
    "require_java",
]

log = logging.getLogger(__name__)

JAVA_ROOT = Path(os.environ.get("SPLITBRAIN_JAVA_ROOT", "/var/lib/splitbrain/java"))
"""Builds and Maven's local repository; ``SPLITBRAIN_JAVA_ROOT`` moves it."""

BUILD_TIMEOUT_S = 1200.0
"""A first build resolves a few dozen jars; a slow mirror day still fits."""

_DEP_LINE = re.compile(
    r"^\s*(?P<group>[\w.\-]+):(?P<artifact>[\w.\-]+):(?P<type>[\w\-]+)"
    r"(?::(?P<classifier>[\w.\-]+))?:(?P<version>[\w.\-]+):(?P<scope>\w+):(?P<file>/\S+\.jar)"
)


@dataclass(frozen=True)
class Artifact:
    """One jar of a program's class path: where it came from and what it was."""

    coordinate: str
    """``group:artifact:version`` as Maven resolved it (the program's own jar included)."""
    file: str
    """Its file name in the build's ``lib/``."""
    sha256: str

    def to_json(self) -> dict[str, str]:
        return {"coordinate": self.coordinate, "file": self.file, "sha256": self.sha256}


@dataclass(frozen=True)
class JavaProgram:
    """A built program: its jars on this machine and what they are."""

    name: str
    home: Path
    """The cache directory; its ``lib/`` holds every jar of the class path."""
    key: str
    properties: Mapping[str, str]
    artifacts: tuple[Artifact, ...]
    java_major: int

    @property
    def lib(self) -> Path:
        return self.home / "lib"

    def classpath(self, lib: str | None = None) -> str:
        """The class path with the jars in ``lib`` (default: this machine's copy)."""
        base = lib or str(self.lib)
        return ":".join(f"{base}/{a.file}" for a in self.artifacts)

    def version_of(self, group_artifact: str) -> str | None:
        """The resolved version of ``group:artifact``, None when it is not on the path."""
        for a in self.artifacts:
            g, art, ver = a.coordinate.split(":")
            if f"{g}:{art}" == group_artifact:
                return ver
        return None

    def manifest(self) -> dict[str, Any]:
        """What ``test.json`` records: the key, the properties and every jar's checksum."""
        return {
            "program": self.name,
            "key": self.key,
            "properties": dict(self.properties),
            "java_major": self.java_major,
            "artifacts": [a.to_json() for a in self.artifacts],
        }

    def install(self, remote: Remote, dest: str) -> str:
        """Make the jars present under ``dest`` on ``remote``'s host; returns that ``lib``.

        A host that shares this machine's file system (every lab host) sees the cache
        itself, which is then used in place: nothing is copied. Other hosts get a copy,
        kept between runs and refreshed only when the build's key changed.
        """
        marker = f"{self.lib}/.key"
        probe = remote.run(f"cat {shlex.quote(marker)}", check=False, timeout=30)
        if probe.ok and probe.stdout.strip() == self.key:
            return str(self.lib)
        lib = f"{dest.rstrip('/')}/lib"
        probe = remote.run(f"cat {shlex.quote(lib)}/.key", check=False, timeout=30)
        if probe.ok and probe.stdout.strip() == self.key:
            return lib
        from harness.core.remote import UploadsTrees

        remote.run(f"rm -rf {shlex.quote(lib)} && mkdir -p {shlex.quote(dest)}", timeout=60)
        if isinstance(remote, UploadsTrees):
            remote.upload_tree(str(self.lib), lib)
        else:
            remote.run(f"mkdir -p {shlex.quote(lib)}", timeout=60)
            for a in self.artifacts:
                remote.upload(str(self.lib / a.file), f"{lib}/{a.file}")
            remote.upload(str(self.lib / ".key"), f"{lib}/.key")
        return lib


def java_major(java: str = "java") -> int:
    """The major version of ``java`` (17 for ``17.0.15``); ConfigError when it does not run."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as e:
        raise ConfigError(f"cannot run {java!r}: {e}", field="java") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        raise ConfigError(
            f"{java} -version printed no version: {out.stderr[-200:]!r}", field="java"
        )
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def _tree_digest(project: Path) -> str:
    """SHA-256 over the project's files (names and contents), Maven's output left out."""
    h = hashlib.sha256()
    for path in sorted(project.rglob("*")):
        rel = path.relative_to(project)
        if not path.is_file() or rel.parts[0] in ("target",):
            continue
        h.update(str(rel).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _key(project: Path, properties: Mapping[str, str], major: int) -> str:
    h = hashlib.sha256(_tree_digest(project).encode())
    h.update(json.dumps(dict(sorted(properties.items()))).encode())
    h.update(f"java{major}".encode())
    return h.hexdigest()[:16]


def _sha256(path: Path) -> str:
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


def mvn_command(root: Path = JAVA_ROOT, repository: Path | None = None) -> list[str]:
    """Maven, batch mode, with its repository under ``root`` (the project's own cache)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LabError(
            "Maven (mvn) is not installed: run scripts/setup.sh, or apt-get install maven"
        )
    repo = repository or root / "m2"
    return [mvn, "-B", "-q", "-Dstyle.color=never", f"-Dmaven.repo.local={repo}"]


def _load(home: Path) -> JavaProgram | None:
    try:
        m = json.loads((home / "manifest.json").read_text())
        arts = tuple(Artifact(a["coordinate"], a["file"], a["sha256"]) for a in m["artifacts"])
        if not all((home / "lib" / a.file).is_file() for a in arts):
            return None
        return JavaProgram(
            name=m["program"],
            home=home,
            key=m["key"],
            properties=m["properties"],
            artifacts=arts,
            java_major=m["java_major"],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _mvn_error(name: str, properties: Mapping[str, str], out: str) -> ConfigError:
    """Maven's reason in one line; a version that does not resolve names the option."""
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    chatter = ("-e switch", "-X switch", "For more information", "[Help 1] http", "re-run Maven")
    lines = [
        ln.replace("[ERROR]", "").replace("-> [Help 1]", "").strip()
        for ln in out.splitlines()
        if "[ERROR]" in ln and not any(w in ln for w in chatter)
    ]
    reason = " | ".join(ln for ln in lines if ln)[:600] or out.strip()[-400:]
    which = ", ".join(f"{k}={v}" for k, v in sorted(properties.items()))
    field = "version" if "resolve" in reason.lower() or "not find" in reason.lower() else "build"
    return ConfigError(f"building {name} ({which}) with Maven failed: {reason}", field=field)


def build(
    project: Path,
    *,
    name: str,
    properties: Mapping[str, str] | None = None,
    root: Path = JAVA_ROOT,
    repository: Path | None = None,
    java: str = "java",
    timeout: float = BUILD_TIMEOUT_S,
) -> JavaProgram:
    """The program of the Maven ``project``, built for ``properties`` (cached by key).

    ``properties`` are passed as ``-Dname=value`` (a system's version, say); builds go
    under ``root``, Maven's repository too unless ``repository`` names another. The first
    call for a key runs ``mvn package`` and copies the runtime class path; the jars'
    coordinates come from Maven's own dependency list. Errors are ConfigErrors naming
    the properties and Maven's first error lines (a version that is not served, a
    compile error against an older API).
    """
    props = {k: str(v) for k, v in (properties or {}).items()}
    if not (project / "pom.xml").is_file():
        raise ConfigError(f"{project}: no pom.xml", field="project")
    major = java_major(java)
    key = _key(project, props, major)
    home = root / "builds" / f"{name}-{key}"
    cached = _load(home)
    if cached is not None:
        return cached
    with _locked(root / "locks" / f"{name}-{key}.lock"):
        cached = _load(home)
        if cached is not None:
            return cached
        started = time.monotonic()
        mvn = mvn_command(root, repository)
        program = _build_now(project, name, props, mvn, root, home, key, major, timeout)
        log.info("built %s (%s) in %.1f s", name, props, time.monotonic() - started)
        return program


def _build_now(
    project: Path,
    name: str,
    props: Mapping[str, str],
    mvn: list[str],
    root: Path,
    home: Path,
    key: str,
    major: int,
    timeout: float,
) -> JavaProgram:
    defines = [f"-D{k}={v}" for k, v in sorted(props.items())]
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-build-", dir=root) as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(project, work, ignore=shutil.ignore_patterns("target"))
        deps = Path(tmp) / "deps.txt"
        lib = Path(tmp) / "lib"
        goals = [
            "package",
            "dependency:copy-dependencies",
            "dependency:list",
            "-DskipTests",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
            f"-DoutputFile={deps}",
            "-DoutputAbsoluteArtifactFilename=true",
            "-DexcludeTransitive=false",
        ]
        # Offline first: a rebuild whose jars are all in the local repository asks nothing.
        out = ""
        for offline in (["-o"], []):
            try:
                res = subprocess.run(
                    [*mvn, *offline, *defines, *goals],
                    cwd=work,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                raise LabError(f"building {name} with Maven took over {timeout:g} s") from None
            out = res.stdout + res.stderr
            if res.returncode == 0:
                break
        else:
            raise _mvn_error(name, props, out)
        artifacts = _collect(work, deps, lib)
        staged = Path(tmp) / "home"
        (staged / "lib").mkdir(parents=True)
        for a in artifacts:
            src = lib / a.file if (lib / a.file).exists() else work / "target" / a.file
            shutil.copy2(src, staged / "lib" / a.file)
        (staged / "lib" / ".key").write_text(key + "\n")
        program = JavaProgram(
            name=name,
            home=home,
            key=key,
            properties=dict(props),
            artifacts=artifacts,
            java_major=major,
        )
        (staged / "manifest.json").write_text(json.dumps(program.manifest(), indent=1) + "\n")
        home.parent.mkdir(parents=True, exist_ok=True)
        if home.exists():
            shutil.rmtree(home)
        staged.rename(home)
    loaded = _load(home)
    if loaded is None:
        raise LabError(f"the build of {name} in {home} left no usable manifest")
    return loaded


def _own_jar(work: Path) -> tuple[str, Path]:
    """The project's coordinate (from its pom) and the jar ``mvn package`` made."""
    import xml.etree.ElementTree as ET

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.parse(work / "pom.xml").getroot()

    def text(tag: str) -> str:
        el = pom.find(f"m:{tag}", ns)
        if el is None:
            el = pom.find(f"m:parent/m:{tag}", ns)
        return (el.text or "").strip() if el is not None else ""

    jars = sorted((work / "target").glob("*.jar"))
    jars = [j for j in jars if not j.name.endswith(("-sources.jar", "-javadoc.jar"))]
    if not jars:
        raise LabError(f"mvn package built no jar in {work / 'target'}")
    return f"{text('groupId')}:{text('artifactId')}:{text('version')}", jars[0]


def _collect(work: Path, deps: Path, lib: Path) -> tuple[Artifact, ...]:
    coordinate, jar = _own_jar(work)
    out = [Artifact(coordinate, jar.name, _sha256(jar))]
    lib.mkdir(exist_ok=True)
    shutil.copy2(jar, lib / jar.name)
    seen = {jar.name}
    text = deps.read_text() if deps.exists() else ""
    for line in text.splitlines():
        m = _DEP_LINE.match(line)
        if not m or m.group("type") != "jar" or m.group("scope") not in ("compile", "runtime"):
            continue
        f = Path(m.group("file"))
        if f.name in seen:
            continue
        seen.add(f.name)
        if not (lib / f.name).exists():
            lib.mkdir(exist_ok=True)
            shutil.copy2(f, lib / f.name)
        coord = f"{m.group('group')}:{m.group('artifact')}:{m.group('version')}"
        out.append(Artifact(coord, f.name, _sha256(lib / f.name)))
    if len(out) == 1 and text.strip():
        raise LabError(f"could not read Maven's dependency list {deps}: {text[:200]!r}")
    return tuple(out)


def require_java(remote: Remote, java: str = "java") -> None:
    """A RemoteError naming the host when it has no ``java`` to run the program with."""
    if not remote.run(f"command -v {shlex.quote(java)}", check=False, timeout=30).ok:
        raise RemoteError(
            f"{java} is not installed on this host (a Java DB needs a JRE 17 or newer)",
            host=remote.host.name,
        )
