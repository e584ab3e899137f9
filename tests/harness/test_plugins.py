"""Discovery through real entry points: a plugin distribution on a temporary sys.path entry.

``importlib.metadata`` finds a ``*.dist-info`` directory on ``sys.path`` exactly as
it finds an installed package's, so these tests exercise the same lookup that
``pip install my-plugin`` feeds, without installing anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from checker.models import get_model, known_models
from harness.core import plugins
from harness.core.errors import CheckerError, ConfigError
from harness.dbs import db_names, get_db
from workloads import get_workload, workload_names

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = textwrap.dedent("""\
    from harness.api import Model, Workload
    from workloads.null import CountingGenerator, NullClient
    from checker.models import register


    class Good:
        def __init__(self, options):
            self.options = dict(options)

        def setup(self, ctx, node):
            pass

        def teardown(self, ctx, node):
            pass


    def good(options):
        return Good(options)


    def raising(options):
        raise RuntimeError("cannot find the frobnicator")


    def wrong_type(options):
        return 42


    def work(options):
        return Workload(name="mywork", client=NullClient(), generator=CountingGenerator())


    def model(**params):
        return register(**params)
""")

ENTRY_POINTS = textwrap.dedent("""\
    [splitbrain.dbs]
    gooddb = my_plugin:good
    raisingdb = my_plugin:raising
    wrongdb = my_plugin:wrong_type
    missingdb = not_installed_anywhere.db:make
    noattrdb = my_plugin:nothing_here
    dledger = my_plugin:good

    [splitbrain.workloads]
    mywork = my_plugin:work

    [splitbrain.models]
    mymodel = my_plugin:model
""")


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "my_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.refresh()
    yield tmp_path
    plugins.refresh()


def test_builtins_are_entry_points_declared_in_pyproject():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert set(declared["splitbrain.dbs"]) == {
        "dledger", "etcd", "redis", "null", "yaml", "dledger-java", "jraft", "rocketmq",
        "postgres",
    } | ({"kafka", "zookeeper", "nats"} & set(declared["splitbrain.dbs"]))  # fmt: skip
    for kind, group in plugins.GROUPS.items():
        found = plugins.available(kind)
        for name, value in declared[group].items():
            assert found[name].value == value and found[name].origin.startswith("splitbrain")
    assert {"dledger", "etcd", "redis", "null"} <= set(db_names())
    assert {"register", "append", "stdio"} <= set(workload_names())
    assert {"cas-register", "append-log"} <= set(known_models())


def test_an_installed_plugin_is_found_and_built(plugin_path):
    assert "gooddb" in db_names() and "mywork" in workload_names() and "mymodel" in known_models()
    assert plugins.available("db")["gooddb"].origin == "my-plugin"
    db = get_db("gooddb", {"x": 1})
    assert type(db).__name__ == "Good" and db.options == {"x": 1}
    assert get_workload("mywork", {}).name == "mywork"
    assert get_model("mymodel").name == "register"


def test_a_plugin_cannot_replace_a_builtin(plugin_path):
    assert plugins.available("db")["dledger"].origin.startswith("splitbrain")
    assert type(get_db("dledger", {})).__name__ == "DLedgerDB"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        (
            "missingdb",
            r"db plugin 'missingdb' \(not_installed_anywhere.db:make, from my-plugin\): "
            r"import failed: ModuleNotFoundError: No module named 'not_installed_anywhere'",
        ),
        ("noattrdb", r"db plugin 'noattrdb' .*module 'my_plugin' has no 'nothing_here'"),
        (
            "raisingdb",
            r"db plugin 'raisingdb' .*factory raised RuntimeError: cannot find the frobnicator",
        ),
        ("wrongdb", r"db plugin 'wrongdb' .*factory returned int, not a DB"),
        ("nosuchdb", r"unknown db 'nosuchdb' \(known: .*dledger.*gooddb"),
    ],
)
def test_a_broken_plugin_is_one_line_naming_it(plugin_path, name, says):
    with pytest.raises(ConfigError, match=says) as e:
        get_db(name)
    assert "\n" not in str(e.value)


def test_module_factory_on_the_path_needs_no_packaging(plugin_path):
    assert type(get_db("my_plugin:good")).__name__ == "Good"
    with pytest.raises(ConfigError, match="factory returned int"):
        get_db("my_plugin:wrong_type")
    assert get_workload("my_plugin:work", {}).name == "mywork"
    with pytest.raises(ConfigError, match="not a Workload"):
        get_workload("my_plugin:good", {})


def test_broken_models_are_checker_errors(plugin_path):
    with pytest.raises(CheckerError, match="unknown model 'nope'"):
        get_model("nope")
    with pytest.raises(CheckerError, match="model plugin 'my_plugin:good'.*not a Model"):
        get_model("my_plugin:good", options={})


def _cli(args: list[str], path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


@pytest.mark.integration
def test_the_cli_lists_plugins_and_reports_a_broken_one_in_one_line(plugin_path, tmp_path):
    help_text = _cli(["run", "--help"], plugin_path, tmp_path).stdout
    assert "gooddb" in help_text and "mywork" in help_text and "dledger" in help_text
    listing = _cli(["plugins"], plugin_path, tmp_path)
    assert listing.returncode == 0
    assert any("gooddb" in line and "my-plugin" in line for line in listing.stdout.splitlines())
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("- {name: n1, host: 127.0.0.1}\n")
    bad = _cli(
        [
            "run",
            "--nodes-file",
            str(nodes),
            "--db",
            "raisingdb",
            "--no-progress",
            "--store",
            str(tmp_path / "store"),
        ],
        plugin_path,
        tmp_path,
    )
    assert bad.returncode == 3
    assert bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "raisingdb" in bad.stderr and "cannot find the frobnicator" in bad.stderr
