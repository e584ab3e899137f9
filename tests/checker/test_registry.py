"""A checker is one registered object: the built-ins, an external package's checker, the
checker-options mapping, refusals, and crashes that name the checker.

The external checker lives in tests/plugins/sb_ext_checker, a package of its own with its
own pyproject.toml. :func:`installed` installs it for one test the way pip would leave it
on ``sys.path`` (the package directory plus a ``.dist-info`` whose entry points are read
from that pyproject.toml) and takes it away afterwards: no pip run, nothing left behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checker import registry
from checker.dispatch import check_history
from checker.local import check_local
from checker.planted import sets
from harness.core.checker import OpShape
from harness.core.errors import CheckerError, ConfigError, HistoryError
from harness.core.history import write_jsonl
from harness.core.op import Op
from harness.core.paired import PairedHistory
from harness.core.source import read_paired
from tests.plugins import installed as install_plugin

EXT = Path(__file__).resolve().parents[1] / "plugins" / "sb_ext_checker"


def installed(tmp_path: Path, extra: dict[str, str] | None = None) -> Any:
    """sb-ext-checker on ``sys.path`` with its entry points (plus ``extra``) for the block."""
    return install_plugin(EXT, "splitbrain.checkers", tmp_path, registry.refresh, extra)


def _writes(*values: int) -> list[Op]:
    ops: list[Op] = []
    for v in values:
        inv = Op("invoke", len(ops), "write", v, key="k", index=len(ops))
        ops += [inv, inv.replace(type="ok", index=len(ops) + 1)]
    return ops


# --- the built-ins ------------------------------------------------------------------


def test_the_builtins_are_registered_and_their_kinds_listed_once() -> None:
    specs = registry.checkers()
    assert {"linearizable", "log-safety", "queue", "set"} <= set(specs)
    kinds = [k for s in specs.values() for k in (*s.anomalies, *s.notes)]
    assert len(kinds) == len(set(kinds))
    mine = ("linearizable", "log-safety", "queue", "set")
    assert all(specs[n].local is not None and specs[n].examples is not None for n in mine)
    from checker.log_safety import ANOMALIES, check_log_safety

    assert specs["log-safety"].anomalies == ANOMALIES
    # a log history's anomalies are all declared
    (ops, _, planted) = registry.examples(specs["log-safety"])["every-anomaly"]  # type: ignore[index]
    assert set(check_log_safety(ops)["anomalies"]) == set(planted) <= set(ANOMALIES)


def test_claims_follow_the_op_families() -> None:
    specs = registry.checkers()
    settings = registry.parse_settings({}, specs=specs)

    def who(shape: OpShape) -> dict[str, str]:
        out = {}
        for name, s in specs.items():
            part = s.claims(shape, settings.config(name))
            if part is not None:
                out[name] = part
        return out

    def shape(f: str, keyed: bool, inv: str, ct: str | None, ck: str | None, adds: bool = False):
        return OpShape(f, keyed, inv, ct, ck, adds)

    assert who(shape("append", False, "object", "ok", "object")) == {"log-safety": "all"}
    assert who(shape("append", True, "string", "ok", "string")) == {"linearizable": "kv"}
    assert who(shape("read", False, "null", "ok", "array", adds=True)) == {"set": "all"}
    assert who(shape("read", False, "null", "ok", "array")) == {"linearizable": "cas-register"}
    assert who(shape("read", False, "object", "ok", "object", adds=True)) == {"log-safety": "all"}
    # upgrade-phases places the queue's acked sends in a rolling upgrade (and judges
    # only a history holding one)
    assert who(shape("send", False, "object", None, None)) == {
        "queue": "all",
        "upgrade-phases": "all",
    }
    assert who(shape("sample", False, "null", "ok", "object")) == {"log-safety": "all"}
    # a named model takes the ops of its fs from its own family
    named = registry.parse_settings({"model": "append-log"}, specs=specs)
    app = shape("append", False, "object", "ok", "object")
    assert specs["linearizable"].claims(app, named.config("linearizable")) == "append-log"


# --- the options mapping ------------------------------------------------------------


def test_the_options_mapping_is_parsed_and_checked() -> None:
    s = registry.parse_settings(
        {
            "checks": ["log-safety", "samples"],
            "model": "cas-register",
            "model_params": {"initial": 0},
            "keys": False,
            "cap": 5,
            "options": {"log-safety": {"ha": {"sync": "true"}}},
        }
    )
    assert s.checks == ("log-safety",)  # "samples" is log safety's old name
    assert (s.model, dict(s.model_params), s.keys, s.cap) == (
        "cas-register",
        {"initial": 0},
        False,
        5,
    )
    assert s.options["log-safety"].ha.sync is True
    legacy = registry.parse_settings({"independent": False})
    assert legacy.keys is False and legacy.checks is None
    with pytest.raises(ConfigError, match=r"unknown checker option 'ha'"):
        registry.parse_settings({"ha": {"sync": False}})  # mode ha's window is log-safety's
    with pytest.raises(ConfigError, match=r"unknown check 'lin'; known: .*linearizable"):
        registry.parse_settings({"checks": ["lin"]})
    with pytest.raises(ConfigError, match=r"unknown checker log-safety option 'hha'; known: ha"):
        registry.parse_settings({"options": {"log-safety": {"hha": {}}}})
    with pytest.raises(ConfigError, match=r"checker 'set' takes no options"):
        registry.parse_settings({"options": {"set": {"x": 1}}})
    with pytest.raises(ConfigError, match=r"unknown checker queue option 'x'; known: loss_window"):
        registry.parse_settings({"options": {"queue": {"x": 1}}})
    with pytest.raises(ConfigError, match=r"options for unknown checker 'nope'"):
        registry.parse_settings({"options": {"nope": {}}})
    with pytest.raises(ConfigError, match=r"unknown checker option 'chekcs'; known: checks"):
        registry.parse_settings({"chekcs": []})


def test_checks_selects_and_ha_is_log_safetys_option() -> None:
    from checker.synth import generate

    ops = list(generate(1200, workload="append", anomaly="lost-ack", seed=24))
    assert check_local(ops)["valid"] is False
    both = check_local(ops, opts={"options": {"log-safety": {"ha": {"sync": False}}}})
    assert both["valid"] is True and "loss-window" in both["checkers"]["log-safety"]["notes"]
    set_ops = [o.replace(process=int(o.process) + 900) for o in sets()["lost-and-unexpected"][0]]
    mixed = [op.replace(index=i) for i, op in enumerate([*ops, *set_ops])]
    assert set(check_local(mixed)["checkers"]) == {"log-safety", "set"}
    only = check_local(mixed, opts={"checks": ["set"]})
    assert set(only["checkers"]) == {"set"} and only["valid"] is False


# --- the history checkers receive ---------------------------------------------------


def test_a_paired_history_pairs_once_and_rejects_reuse_after_info(tmp_path: Path) -> None:
    ops = _writes(1, 2)
    ops.append(Op("invoke", 9, "read", None, key="k", index=4))  # never completes
    h = PairedHistory.of(list(reversed(ops)))
    assert [op.index for op in h] == [0, 1, 2, 3, 4]
    assert [(i.index, c.index if c else None) for i, c in h.pairs()] == [(0, 1), (2, 3), (4, None)]
    sub = h.subset([0, 2])
    assert [op.index for op in sub] == [0, 1, 4] and sub.pairs("read")[0][1] is None
    crashed = [
        Op("invoke", 1, "write", 1, key="k", index=0),
        Op("info", 1, "write", 1, key="k", index=1),
        Op("invoke", 1, "write", 2, key="k", index=2),
    ]
    PairedHistory.of(crashed)  # only pairing
    path = tmp_path / "h.jsonl"
    write_jsonl(crashed, path)
    with pytest.raises(HistoryError, match="process 1 invoked again after an info completion"):
        read_paired(path)
    with pytest.raises(HistoryError, match="after an info completion"):
        check_history(str(path))


def test_a_crash_names_the_checker_and_the_history_index() -> None:
    v = {"topic": "t", "queue": 0, "body": "a"}
    pull = {"topic": "t", "queue": 0, "offset": 0, "max": 10, "final": True}
    ops = [
        Op("invoke", 0, "send", v, index=0),
        Op("ok", 0, "send", {**v, "offset": None, "queue_offset": None}, index=1),
        Op("invoke", 1, "pull", pull, index=2),
        Op("ok", 1, "pull", {**pull, "messages": [[None, None, "a"]]}, index=3),
    ]
    res = check_local(ops)
    assert res["valid"] == "unknown"
    err = res["checkers"]["queue"]["error"]
    assert err.startswith("checker queue crashed at history index 3: TypeError"), err


# --- an external checker ------------------------------------------------------------


def test_an_external_checker_is_selected_by_name_and_runs_on_a_stored_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    path = tmp_path / "run" / "history.jsonl"
    path.parent.mkdir()
    write_jsonl(_writes(1, 2, 1), path)
    with pytest.raises(ConfigError, match="unknown check 'unique-writes'"):
        check_history(str(path), opts={"checks": ["unique-writes"]})
    with installed(tmp_path):
        assert "unique-writes" in registry.checkers()
        res = check_history(str(path.parent), opts={"checks": ["unique-writes"]})
        assert set(res["checkers"]) == {"unique-writes"} and res["valid"] is False
        assert res["anomalies"]["repeated-write"] == [{"key": "k", "value": 1, "indexes": [0, 4]}]
        opts = {"checks": ["unique-writes"], "options": {"unique-writes": {"tolerated": 1}}}
        assert check_history(str(path), opts=opts)["valid"] is True
        with pytest.raises(ConfigError, match="unknown checker unique-writes option 'tolerate'"):
            check_history(str(path), opts={"options": {"unique-writes": {"tolerate": 1}}})
        # `splitbrain check` runs every checker that claims ops: the plugin's verdict shows.
        with pytest.raises(SystemExit) as e:
            main(["check", str(path.parent)])
        assert e.value.code == 1, capsys.readouterr().out
        written = json.loads((path.parent / "results.json").read_text())
        assert written["checkers"]["unique-writes"]["valid"] is False
        assert written["checkers"]["linearizable"]["valid"] is True
    assert "unique-writes" not in registry.checkers()


@pytest.mark.lab
def test_an_external_checker_runs_in_a_real_campaign_and_its_recheck(
    lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a user adds a check: the package installed, `splitbrain run --check NAME` on a
    real cluster, the verdict in results.json beside the workload's own checks, and the
    same verdict from `splitbrain check RUN_DIR` (the check is recorded in test.json)."""
    from harness.cli import main

    store = tmp_path / "store"
    with installed(tmp_path):
        with pytest.raises(SystemExit) as e:
            main(
                [
                    "run", "--lab", lab.name, "--nodes", "3", "-w", "register",
                    "--check", "unique-writes", "--nemesis", "kill", "--time-limit", "6",
                    "--rate", "40", "--concurrency", "3", "--seed", "5", "--no-progress",
                    "--store", str(store), "--name", "ext-check",
                ]
            )  # fmt: skip
        out = capsys.readouterr().out
        assert e.value.code in (0, 1), out
        run_dir = (store / "ext-check" / "latest").resolve()
        results = json.loads((run_dir / "results.json").read_text())
        assert {"unique-writes", "linearizable"} <= set(results["checkers"]), results["checkers"]
        assert results["checkers"]["unique-writes"]["valid"] in (True, False)
        assert json.loads((run_dir / "test.json").read_text())["options"]["checks"] == [
            "unique-writes"
        ]
        with pytest.raises(SystemExit) as again:
            main(["check", str(run_dir)])
        assert again.value.code == e.value.code
        recheck = json.loads((run_dir / "recheck.json").read_text())
        assert (
            recheck["checkers"]["unique-writes"]["valid"]
            == (results["checkers"]["unique-writes"]["valid"])
        )


@pytest.mark.spark
def test_an_external_checker_without_spark_code_runs_on_the_spark_driver(tmp_path: Path) -> None:
    with installed(tmp_path, {"spark-fails": "sb_ext_checker.broken:SPARK_FAILS"}):
        ops = _writes(1, 2, 1)
        res = check_history(ops, engine="spark", master="local[1]")
        assert res["checkers"]["spark-fails"] == {
            "valid": "unknown",
            "error": "checker spark-fails failed on Spark: RuntimeError: no executors left",
        }
        assert res["checkers"]["unique-writes"]["valid"] is False and res["valid"] is False
        spec = registry.checkers()["unique-writes"]
        assert spec.spark is None
        for label, (ops, options, kinds) in registry.examples(spec).items():  # type: ignore[union-attr]
            opts = {**options, "checks": ["unique-writes"]}
            local = check_history(ops, opts=opts)
            spark = check_history(ops, engine="spark", opts=opts, master="local[1]")
            assert set(local["anomalies"]) == set(kinds), label
            assert spark["checkers"] == local["checkers"], label


def test_an_incomplete_checker_is_a_registration_error_naming_it_and_its_package(
    tmp_path: Path,
) -> None:
    no_local = r"checker 'no-local' \(from sb-ext-checker\) has no local implementation"
    with (
        installed(tmp_path / "a", {"no-local": "sb_ext_checker.broken:NO_LOCAL"}),
        pytest.raises(CheckerError, match=no_local),
    ):
        registry.checkers()
    stolen = (
        r"'steals-a-kind' \(from sb-ext-checker\) registers anomaly kind 'lost-ack', "
        r"already checker 'log-safety'"
    )
    with (
        installed(tmp_path / "b", {"steals-a-kind": "sb_ext_checker.broken:STEALS_A_KIND"}),
        pytest.raises(CheckerError, match=stolen),
    ):
        registry.checkers()
    with (
        installed(tmp_path / "c", {"misnamed": "sb_ext_checker:UNIQUE_WRITES"}),
        pytest.raises(CheckerError, match=r"'misnamed' .* calls itself 'unique-writes'"),
    ):
        registry.checkers()
    assert "no-local" not in registry.checkers()
