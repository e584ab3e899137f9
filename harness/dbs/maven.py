"""Java programs of the project, built by Maven from Maven Central, cached, then used offline.

A Java DB (``dledger-java``, ``jraft``) keeps its sources and a ``pom.xml`` in the
repository. :func:`build` compiles that project once per *key* (the project's files, the
Maven properties such as the system's version, and the JDK's major version), and puts
the program's jar and every runtime dependency in one build of the cache
(:mod:`harness.dbs.artifacts`), each jar named by the coordinate Maven resolved and its
SHA-256. Maven's own repository lives under the same root and Maven runs offline first,
so a rebuild for a new key asks the network only for what it lacks, and a run that finds
its build calls no Maven at all.

Java sources several projects share (the gateways' framing, :data:`SHARED`) are not an
artifact of their own: a project that names them (``shared=``) gets them copied into its
sources at build, and their files are part of its key.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.errors import ConfigError, LabError, RemoteError
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

if TYPE_CHECKING:
    from harness.core.remote import Remote

__all__ = [
    "JAVA_ROOT",
    "SHARED",
    "SOURCES",
    "Artifact",
    "JavaProgram",
    "build",
    "build_release",
    "java_major",
    "mvn_command",
    "release_version",
    "require_java",
]

log = logging.getLogger(__name__)

SOURCES = Path(__file__).resolve().parent / "java"
"""The Java DBs' Maven projects (``harness/dbs/java/<name>/``: a ``pom.xml`` and sources)."""

SHARED = SOURCES / "shared"
"""Sources the client gateways share (``splitbrain.shared.Frames``: the reference node's
framing, their ports and their stdin lifeline), compiled into each gateway's project."""

JAVA_ROOT = Path(os.environ.get("SPLITBRAIN_JAVA_ROOT", str(CACHE_ROOT / "java")))
"""Builds and Maven's local repository; ``SPLITBRAIN_JAVA_ROOT`` moves it."""

BUILD_TIMEOUT_S = 1200.0
"""A first build resolves a few dozen jars; a slow mirror day still fits."""

_DEP_LINE = re.compile(
    r"^\s*(?P<group>[\w.\-]+):(?P<artifact>[\w.\-]+):(?P<type>[\w\-]+)"
    r"(?::(?P<classifier>[\w.\-]+))?:(?P<version>[\w.\-]+):(?P<scope>\w+):(?P<file>/\S+\.jar)"
)


@dataclass(frozen=True)
class JavaProgram(Program):
    """A built Java program: its jars (the program's own first) and what they are."""

    def classpath(self, lib: str | None = None) -> str:
        """The class path with the jars in ``lib`` (default: this machine's copy)."""
        base = lib or str(self.lib)
        return ":".join(f"{base}/{a.file}" for a in self.artifacts)

    @property
    def java_major(self) -> int:
        """The JDK's major version it was compiled with (``toolchain`` is ``java N``)."""
        return int(self.toolchain.split()[1])


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


def _key(
    project: Path, properties: Mapping[str, str], major: int, shared: Sequence[Path] = ()
) -> str:
    return build_key(
        tree_digest(project), dict(properties), f"java {major}", *(tree_digest(d) for d in shared)
    )


def mvn_command(root: Path = JAVA_ROOT, repository: Path | None = None) -> list[str]:
    """Maven, batch mode, with its repository under ``root`` (the project's own cache)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LabError(
            "Maven (mvn) is not installed: run scripts/setup.sh, or apt-get install maven"
        )
    repo = repository or root / "m2"
    return [mvn, "-B", "-q", "-Dstyle.color=never", f"-Dmaven.repo.local={repo}"]


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
    shared: Sequence[Path] = (),
) -> JavaProgram:
    """The program of the Maven ``project``, built for ``properties`` (cached by key).

    ``properties`` are passed as ``-Dname=value`` (a system's version, say); builds go
    under ``root``, Maven's repository too unless ``repository`` names another. The first
    call for a key runs ``mvn package`` and copies the runtime class path; the jars'
    coordinates come from Maven's own dependency list. Errors are ConfigErrors naming
    the properties and Maven's first error lines (a version that is not served, a
    compile error against an older API). Each of ``shared`` is a tree of sources
    (``src/main/java/...``) copied into the project for the build; a file the project has
    too is a ConfigError rather than a silent overwrite.
    """
    props = {k: str(v) for k, v in (properties or {}).items()}
    if not (project / "pom.xml").is_file():
        raise ConfigError(f"{project}: no pom.xml", field="project")
    major = java_major(java)
    mvn = mvn_command(root, repository)

    def make(tmp: Path, lib: Path) -> tuple[Artifact, ...]:
        started = time.monotonic()
        artifacts = _maven_package(project, name, props, mvn, tmp, lib, timeout, shared)
        log.info("built %s (%s) in %.1f s", name, props, time.monotonic() - started)
        return artifacts

    return cached_build(
        JavaProgram,
        name=name,
        key=_key(project, props, major, shared),
        properties=props,
        toolchain=f"java {major}",
        root=root,
        make=make,
    )


_RELEASE = re.compile(r"^\d+\.\d+\.\d+$")


def release_version(system: str, version: str, example: str) -> tuple[int, ...]:
    """``"4.4.0"`` -> ``(4, 4, 0)``: a release's ``x.y.z`` (it becomes a Maven property, so
    nothing else is let through); a ConfigError on ``version`` naming ``system`` otherwise."""
    if not _RELEASE.match(version):
        raise ConfigError(
            f"{system} version {version!r}: x.y.z expected (e.g. {example})", field="version"
        )
    return tuple(int(x) for x in version.split("."))


def build_release(
    project: Path,
    *,
    name: str,
    system: str,
    prop: str,
    version: str,
    artifact: str | None = None,
    java: str = "java",
    shared: Sequence[Path] = (),
) -> JavaProgram:
    """:func:`build` of one release of a system: the one place a Java DB's ``version``
    option becomes a build, so every such DB names the option alike when it fails.

    ``prop`` is the pom's version property, set to ``version``; a failed build is a
    ConfigError on ``version`` naming the system and release; with ``artifact`` (a
    ``group:artifact`` coordinate), a build whose class path holds another release of it
    than asked (a version range, a relocation) is refused too.
    """
    started = time.monotonic()
    try:
        program = build(project, name=name, properties={prop: version}, java=java, shared=shared)
    except ConfigError as e:
        raise ConfigError(f"{system} version {version}: {e}", field="version") from None
    if artifact is not None:
        got = program.version_of(artifact)
        if got != version:
            raise ConfigError(f"asked {system} {version}, Maven resolved {got}", field="version")
    log.info(
        "%s %s ready in %.1f s (%s)", system, version, time.monotonic() - started, program.home
    )
    return program


def _maven_package(
    project: Path,
    name: str,
    props: Mapping[str, str],
    mvn: list[str],
    tmp: Path,
    lib: Path,
    timeout: float,
    shared: Sequence[Path] = (),
) -> tuple[Artifact, ...]:
    """``mvn package`` in a copy of ``project`` (with the ``shared`` sources copied in); the
    jars of the runtime class path to ``lib``."""
    defines = [f"-D{k}={v}" for k, v in sorted(props.items())]
    work = tmp / "src"
    shutil.copytree(project, work, ignore=shutil.ignore_patterns("target"))
    for tree in shared:
        for f in sorted(tree.rglob("*")):
            if not f.is_file():
                continue
            to = work / f.relative_to(tree)
            if to.exists():
                raise ConfigError(
                    f"{name}: {f.relative_to(tree)} is in both {project} and {tree}", field="build"
                )
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, to)
    deps = tmp / "deps.txt"
    goals = [
        "package",
        "dependency:copy-dependencies",
        "dependency:list",
        "-DskipTests",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={lib}",
        f"-DoutputFile={deps}",
        "-DoutputAbsoluteArtifactFilename=true",
    ]
    # Offline first: a rebuild whose jars are all in the local repository asks nothing.
    attempts = [([[*mvn, *offline, *defines, *goals]], None) for offline in (["-o"], [])]
    built, out = offline_first(attempts, cwd=work, timeout=timeout, what=f"{name} with Maven")
    if built:
        return _collect(work, deps, lib)
    raise _mvn_error(name, props, out)


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
    out = [Artifact(coordinate, jar.name, sha256_file(jar))]
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
        out.append(Artifact(coord, f.name, sha256_file(lib / f.name)))
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
