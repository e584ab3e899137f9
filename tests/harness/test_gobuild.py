"""harness/dbs/gobuild.py: Go programs from the module proxy, built once per key.

The build test compiles a two-line wrapper against a small real module (google/uuid) with
the real Go toolchain; its module cache is the harness's own, so after the first run it
asks the proxy nothing. The etcd build itself takes minutes and is a slow test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.core.errors import ConfigError
from harness.dbs import gobuild
from harness.dbs.etcd import build_etcd
from harness.dbs.gobuild import GO_ROOT, module_version

WRAPPER = """package main

import (
	"fmt"

	"github.com/google/uuid"
)

func main() { fmt.Println(uuid.NewSHA1(uuid.NameSpaceURL, []byte("splitbrain")).String()) }
"""


def _wrapper(root: Path) -> Path:
    (root / "uuidgen").mkdir(parents=True)
    (root / "uuidgen" / "main.go").write_text(WRAPPER)
    return root


def test_release_numbers_are_the_proxys_and_nonsense_is_refused() -> None:
    assert module_version("3.6.6") == "v3.6.6"
    assert module_version("v3.7.0-rc.1") == "v3.7.0-rc.1"
    with pytest.raises(ConfigError) as e:
        module_version("latest; rm -rf /")
    assert e.value.field == "version"


def test_etcd_before_35_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="3.5 and newer") as e:
        build_etcd("3.4.23")
    assert e.value.field == "version"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed")
def test_build_once_then_the_cache_without_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _wrapper(tmp_path / "w")
    root = tmp_path / "root"
    # The module and build caches of the harness, so a second test run fetches nothing.
    monkeypatch.setattr(gobuild, "_env", _shared_caches(gobuild._env))
    first = gobuild.build(
        project,
        name="uuidgen",
        modules={"github.com/google/uuid": "1.6.0"},
        binaries=["uuidgen"],
        root=root,
    )
    assert first.version_of("github.com/google/uuid") == "v1.6.0"
    out = subprocess.run([first.binary("uuidgen")], capture_output=True, text=True, check=True)
    assert len(out.stdout.strip()) == 36  # it ran: a UUID from the real module
    sums = {a.coordinate: a.sha256 for a in first.artifacts}
    assert len(sums["splitbrain.local/uuidgen/uuidgen"]) == 64 and len(sums["go.sum"]) == 64

    def no_go(*a: object, **k: object) -> None:
        raise AssertionError("Go ran for a cached build")

    monkeypatch.setattr(subprocess, "run", no_go)
    monkeypatch.setattr(gobuild, "go_version", lambda go="go": first.toolchain)
    again = gobuild.build(
        project,
        name="uuidgen",
        modules={"github.com/google/uuid": "v1.6.0"},
        binaries=["uuidgen"],
        root=root,
    )
    assert again == first


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed")
def test_a_version_that_is_not_served_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gobuild, "_env", _shared_caches(gobuild._env))
    with pytest.raises(ConfigError) as e:
        gobuild.build(
            _wrapper(tmp_path / "w"),
            name="uuidgen",
            modules={"github.com/google/uuid": "0.0.9"},
            binaries=["uuidgen"],
            root=tmp_path / "root",
        )
    assert e.value.field == "version" and "github.com/google/uuid@v0.0.9" in str(e.value)


def _shared_caches(env_of):  # type: ignore[no-untyped-def]
    def env(root: Path, *, offline: bool) -> dict[str, str]:
        return env_of(GO_ROOT, offline=offline)

    return env


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed")
def test_etcd_of_a_release_is_built_and_runs() -> None:
    program = build_etcd("3.6.6")
    assert program.version_of("go.etcd.io/etcd/server/v3") == "v3.6.6"
    out = subprocess.run(
        [program.binary("etcd"), "--version"], capture_output=True, text=True, check=True
    )
    assert "etcd Version: 3.6.6" in out.stdout
