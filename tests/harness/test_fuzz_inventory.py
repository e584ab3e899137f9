"""Fuzzing the files users and crashes hand us (issue #15): nodes files and lab state.

Malformed YAML/JSON, wrong types, bad tags, binary junk: each must end as a
one-line :class:`ConfigError` naming the file (and the line or field where the
parser knows it), never a traceback of another type. Regressions for what the
fuzzing found come first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.core.errors import ConfigError, LabError
from harness.inventory.lab import Lab
from harness.inventory.nodes_file import load_nodes_file

ROOT = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

GOOD = """- name: n1
  host: 10.0.0.1
  port: 22
  user: root
  key: id_ed25519
- name: n2
  host: 10.0.0.2
"""


def _load_or_config_error(path: Path) -> None:
    try:
        hosts = load_nodes_file(path)
    except ConfigError as e:
        assert str(path) in str(e), e
        assert "\n" not in str(e), repr(e)
        return
    assert hosts and all(h.name and h.address for h in hosts)


# ------------------------------------------------------------------ regressions


@pytest.mark.parametrize("text,line", [
    ("- name: n1\n  host: !!int xyz\n", 2),            # ConstructorError outside the try
    ("- name: n1\n  host: a\n  ? [1, 2]\n  : x\n", 3),  # list key: unhashable for `in _FIELDS`
    ("- name: n1\n  host: !!binary '%%%'\n", 2),
    ("- name: n1\n  host: !!python/object:os.system x\n", 2),
    ("- name: n1\n  host: a\n  extras: {? [1] : 2}\n", 3),
    ("- name: n1\n  host: a\n  port: 2001-13-45\n", 3),
    ("- name: n1\n  host: a\x00\n", 2),                # reader error: str() spans two lines
])
def test_nodes_file_bad_values_name_the_line(tmp_path: Path, text: str, line: int) -> None:
    p = tmp_path / "nodes.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_nodes_file(p)
    assert e.value.line == line and str(p) in str(e.value) and "\n" not in str(e.value)


def test_nodes_file_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "nodes.yaml"
    p.write_bytes(b"- name: n1\n  host: \xff\xfe\n")
    with pytest.raises(ConfigError, match="UTF-8") as e:
        load_nodes_file(p)
    assert e.value.line == 2


def test_nodes_file_deep_nesting(tmp_path: Path) -> None:
    p = tmp_path / "nodes.yaml"
    p.write_text("[" * 700 + "]" * 700)  # PyYAML composer: RecursionError from ~600 levels
    with pytest.raises(ConfigError, match="nodes.yaml"):
        load_nodes_file(p)


def _lab_json(tmp_path: Path, content: str | bytes) -> Path:
    d = tmp_path / "lab1"
    d.mkdir(exist_ok=True)
    p = d / "lab.json"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return p


@pytest.mark.parametrize("content,field", [
    ('{"nodes": 1e999, "subnet": "127.77.0"}', "nodes"),   # int(inf): OverflowError
    ('{"nodes": true, "subnet": "127.77.0"}', "nodes"),    # int(True) was one node
    ('{"nodes": 2.7, "subnet": "127.77.0"}', "nodes"),
    ('{"nodes": 500, "subnet": "127.77.0"}', "nodes"),
    ('{"subnet": "127.77.0"}', "nodes"),
    ('{"nodes": 3, "subnet": ["127"]}', "subnet"),
    ('{"nodes": 3, "subnet": "10.0.0"}', "subnet"),
])
def test_lab_state_wrong_fields_name_file_and_field(tmp_path: Path, content: str, field: str) -> None:
    p = _lab_json(tmp_path, content)
    with pytest.raises(ConfigError) as e:
        Lab.load("lab1", state_root=tmp_path)
    assert e.value.field == field and str(p) in str(e.value) and "lab down" in str(e.value)


@pytest.mark.parametrize("content", ["[" * 100_000, '{"nodes": 3,', b"\xff\xfe{}", "[1, 2]", "null"])
def test_lab_state_unreadable(tmp_path: Path, content: str | bytes) -> None:
    p = _lab_json(tmp_path, content)
    with pytest.raises(ConfigError) as e:
        Lab.load("lab1", state_root=tmp_path)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_lab_state_syntax_error_names_the_line(tmp_path: Path) -> None:
    _lab_json(tmp_path, '{\n"nodes": 3,\n"subnet": }\n')
    with pytest.raises(ConfigError) as e:
        Lab.load("lab1", state_root=tmp_path)
    assert e.value.line == 3


def test_missing_lab_is_still_a_lab_error(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="no lab named"):
        Lab.load("nope", state_root=tmp_path)


def test_good_lab_state_loads(tmp_path: Path) -> None:
    _lab_json(tmp_path, json.dumps({"nodes": 3, "subnet": "127.78.0"}))
    lab = Lab.load("lab1", state_root=tmp_path)
    assert lab.nodes == 3 and lab.subnet == "127.78.0"


# ------------------------------------------------------------------ fuzzing

yaml_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
                | st.text(max_size=12) | st.binary(max_size=8))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
host_rows = st.dictionaries(
    st.sampled_from(["name", "host", "port", "user", "key", "known_hosts", "verify_host_key",
                     "extras", "junk"]),
    yaml_values | st.sampled_from(["n1", "10.0.0.1", 22, 0, 70000, True]),
    max_size=8)


@FUZZ
@given(rows=st.lists(host_rows, max_size=4) | yaml_values)
def test_nodes_files_of_wrong_shapes(tmp_path_factory, rows) -> None:
    p = tmp_path_factory.mktemp("inv") / "nodes.yaml"
    p.write_text(yaml.safe_dump(rows, allow_unicode=True), encoding="utf-8")
    _load_or_config_error(p)


@FUZZ
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
                      min_size=1, max_size=4),
       cut=st.floats(0.2, 1), junk=st.binary(max_size=10))
def test_byte_flipped_nodes_files(tmp_path_factory, flips, cut, junk) -> None:
    data = bytearray(GOOD.encode())
    for where, byte in flips:
        data[int(where * len(data))] = byte
    p = tmp_path_factory.mktemp("inv") / "nodes.yaml"
    p.write_bytes(bytes(data[: int(cut * len(data))]) + junk)
    _load_or_config_error(p)


@FUZZ
@given(text=st.text(alphabet=st.sampled_from(list("-:[]{}!&*?|>'\"%@`#,\n\t ab1")), max_size=80))
def test_yaml_punctuation_soup(tmp_path_factory, text) -> None:
    p = tmp_path_factory.mktemp("inv") / "nodes.yaml"
    p.write_text(text, encoding="utf-8")
    _load_or_config_error(p)


@FUZZ
@given(meta=st.dictionaries(st.sampled_from(["nodes", "subnet", "name", "bridge"]),
                            yaml_values.filter(lambda v: not isinstance(v, bytes)), max_size=4)
       | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_lab_state_fuzz(tmp_path_factory, meta) -> None:
    root = tmp_path_factory.mktemp("labs")
    d = root / "lab1"
    d.mkdir()
    try:
        text = meta if isinstance(meta, str) else json.dumps(meta, default=repr)
    except ValueError:
        return
    (d / "lab.json").write_text(text, encoding="utf-8")
    try:
        lab = Lab.load("lab1", state_root=root)
    except ConfigError as e:
        assert str(d / "lab.json") in str(e) and "\n" not in str(e)
        return
    assert 1 <= lab.nodes <= 99


# ------------------------------------------------------------------ the CLI


def test_run_with_a_broken_nodes_file_is_one_line_exit_3(tmp_path: Path) -> None:
    p = tmp_path / "nodes.yaml"
    p.write_text("- name: n1\n  host: !!int nope\n")
    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--nodes-file", str(p),
                        "--time-limit", "1"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("splitbrain: error:") and f"{p}:2:" in lines[-1], r.stderr


@pytest.mark.parametrize("content", ['[{"name": "n1"}]', "[1]", "{", '[{"name": "n1", "nope": 2}]'])
def test_docker_lab_inventory_damage_is_a_config_error(tmp_path: Path, content: str) -> None:
    from harness.inventory.docker import DockerLab

    lab = DockerLab(name="fz", state_root=tmp_path)
    lab.dir.mkdir(parents=True)
    (lab.dir / "inventory.json").write_text(content)
    with pytest.raises(ConfigError, match="inventory.json") as e:
        lab.hosts()
    assert "\n" not in str(e.value)
