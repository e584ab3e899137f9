"""harness/dbs/maven.py: a project built once per key, then found in the cache without Maven.

The build tests run real Maven on a one-class project (its plugins come from Maven
Central the first time, into the shared repository; the builds go to a temporary root,
so every run of the test builds for real).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.core.errors import ConfigError
from harness.dbs import maven
from harness.dbs.artifacts import load
from harness.dbs.maven import JAVA_ROOT, JavaProgram, build

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>splitbrain.test</groupId><artifactId>tiny</artifactId><version>1</version>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
    <dep.version>4.13.2</dep.version>
  </properties>
  <dependencies>
    <dependency><groupId>junit</groupId><artifactId>junit</artifactId>
      <version>${dep.version}</version></dependency>
  </dependencies>
  <build><plugins>
    <plugin><groupId>org.apache.maven.plugins</groupId>
      <artifactId>maven-compiler-plugin</artifactId><version>3.11.0</version></plugin>
    <plugin><groupId>org.apache.maven.plugins</groupId>
      <artifactId>maven-dependency-plugin</artifactId><version>3.6.1</version></plugin>
  </plugins></build>
</project>
"""


def _project(root: Path) -> Path:
    src = root / "src/main/java/t"
    src.mkdir(parents=True)
    (root / "pom.xml").write_text(POM)
    (src / "Tiny.java").write_text("package t; public class Tiny { }\n")
    return root


def test_the_key_follows_sources_and_properties_but_not_mavens_output(tmp_path: Path) -> None:
    p = _project(tmp_path / "p")
    k = maven._key(p, {"v": "1"}, 17)
    assert maven._key(p, {"v": "2"}, 17) != k
    assert maven._key(p, {"v": "1"}, 21) != k
    (p / "target").mkdir()
    (p / "target" / "x.class").write_text("built")
    assert maven._key(p, {"v": "1"}, 17) == k
    (p / "src/main/java/t/Tiny.java").write_text("package t; class Tiny { int x; }\n")
    assert maven._key(p, {"v": "1"}, 17) != k


def _shared(root: Path, body: str = "public static int one() { return 1; }") -> Path:
    src = root / "src/main/java/s"
    src.mkdir(parents=True)
    (src / "Shared.java").write_text(f"package s; public final class Shared {{ {body} }}\n")
    return root


def test_shared_sources_are_part_of_the_key(tmp_path: Path) -> None:
    p = _project(tmp_path / "p")
    shared = _shared(tmp_path / "shared")
    alone = maven._key(p, {"v": "1"}, 17)
    k = maven._key(p, {"v": "1"}, 17, [shared])
    assert k != alone
    (shared / "src/main/java/s/Shared.java").write_text(
        "package s; public final class Shared { }\n"
    )
    assert maven._key(p, {"v": "1"}, 17, [shared]) != k


def test_the_gateways_share_one_framing_source() -> None:
    """The three gateway projects compile splitbrain.shared.Frames from harness/dbs/java/shared
    and keep no copy of their own (a copy would be refused at build)."""
    frames = maven.SHARED / "src/main/java/splitbrain/shared/Frames.java"
    assert frames.is_file()
    for name in ("kafka", "rocketmq", "zookeeper"):
        project = maven.SOURCES / name
        assert not list(project.rglob("Frames.java")), name
        gateway = (project / f"src/main/java/splitbrain/{name}/Gateway.java").read_text()
        assert "import splitbrain.shared.Frames;" in gateway and "readInt()" not in gateway


def test_a_cache_missing_a_jar_is_not_used(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "lib").mkdir(parents=True)
    (home / "lib" / "a.jar").write_text("jar")
    manifest = {
        "program": "x",
        "key": "k",
        "properties": {},
        "toolchain": "java 17",
        "artifacts": [
            {"coordinate": "g:a:1", "file": "a.jar", "sha256": "0"},
            {"coordinate": "g:b:1", "file": "b.jar", "sha256": "0"},
        ],
    }
    (home / "manifest.json").write_text(json.dumps(manifest))
    assert load(home, JavaProgram) is None
    (home / "lib" / "b.jar").write_text("jar")
    loaded = load(home, JavaProgram)
    assert loaded is not None and loaded.version_of("g:b") == "1"
    assert loaded.classpath() == f"{home}/lib/a.jar:{home}/lib/b.jar"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mvn") is None, reason="Maven is not installed")
def test_build_once_then_the_cache_without_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path / "p")
    root = tmp_path / "root"
    repo = JAVA_ROOT / "m2"
    first = build(
        project, name="tiny", properties={"dep.version": "4.13.2"}, root=root, repository=repo
    )
    assert first.version_of("junit:junit") == "4.13.2"
    assert first.version_of("org.hamcrest:hamcrest-core") == "1.3"  # a transitive one
    assert first.artifacts[0].coordinate == "splitbrain.test:tiny:1"
    for a in first.artifacts:
        assert (first.lib / a.file).is_file() and len(a.sha256) == 64
    assert json.loads((first.home / "manifest.json").read_text()) == first.manifest()

    def no_maven(*a: object, **k: object) -> None:
        raise AssertionError("Maven ran for a cached build")

    monkeypatch.setattr(subprocess, "run", no_maven)
    monkeypatch.setattr(maven, "java_major", lambda java="java": int(first.toolchain.split()[1]))
    again = build(
        project, name="tiny", properties={"dep.version": "4.13.2"}, root=root, repository=repo
    )
    assert again == first


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mvn") is None, reason="Maven is not installed")
def test_a_version_that_is_not_served_names_the_option(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    with pytest.raises(ConfigError) as e:
        build(
            project,
            name="tiny",
            properties={"dep.version": "0.0.0-none"},
            root=tmp_path / "root",
            repository=JAVA_ROOT / "m2",
        )
    assert e.value.field == "version"
    assert "dep.version=0.0.0-none" in str(e.value) and "junit" in str(e.value)


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mvn") is None, reason="Maven is not installed")
def test_shared_sources_are_compiled_in_and_a_clash_is_refused(tmp_path: Path) -> None:
    import zipfile

    project = _project(tmp_path / "p")
    (project / "src/main/java/t/Tiny.java").write_text(
        "package t; public class Tiny { int x = s.Shared.one(); }\n"
    )
    shared = _shared(tmp_path / "shared")
    root, repo = tmp_path / "root", JAVA_ROOT / "m2"
    built = build(project, name="tiny", root=root, repository=repo, shared=[shared])
    jar = built.lib / built.artifacts[0].file
    assert "s/Shared.class" in zipfile.ZipFile(jar).namelist()
    assert not (project / "src/main/java/s").exists()  # the project itself is left alone
    _shared(project)  # the project holds the same file: refused, not overwritten
    with pytest.raises(ConfigError, match="is in both"):
        build(project, name="tiny", root=root, repository=repo, shared=[shared])
