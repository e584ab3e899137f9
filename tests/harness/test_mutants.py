"""Mutation testing: the mutator, the selection, the plan and the score (pure); one lab run.

The lab tests run real mutants of ``node_impl`` through the node's own unit
tests and the lab (slow).
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli.zoo import zoo
from harness.core.errors import ConfigError
from harness.dbs.dledger import NODE_IMPL_DIR, DLedgerDB
from harness.zoo.mutants.ledger import Ledger
from harness.zoo.mutants.mutator import (
    OPERATORS,
    MutatorError,
    apply_mutant,
    mutant_diff,
    mutate_source,
)
from harness.zoo.mutants.plan import choose, mutant_spec, smoke_campaign, with_node_src
from harness.zoo.mutants.record import (
    BROKEN,
    KILLED,
    KILLED_BY_UNIT,
    SURVIVED,
    UNKNOWN,
    MutantRecord,
    StageResult,
)
from harness.zoo.mutants.score import mutation_score, outcome_counts, render_table, score_json
from harness.zoo.mutants.selection import SAFETY_CODE, area_of, node_mutants
from harness.zoo.mutants.stages import unit_tests
from harness.zoo.mutants.tree import write_tree
from harness.zoo.targets import DEFAULT_CAMPAIGN

SRC = textwrap.dedent(
    '''\
    def quorum(count: int, n: int) -> bool:
        """Docstring stays."""
        return count >= n // 2 + 1


    class Node:
        def commit(self, marks, term):
            if not self.leader and term > 0:
                return
            self.log.info("commit", term=term, n=3)
            self.committed = min(marks[0], marks[1])
            self.store.flush()
            if self.bugs.lax:
                self.committed += 1
            else:
                self.save(term, self.id)
    '''
)


def _by_op(ms, op):
    return [m for m in ms if m.operator == op]


def _mutated(m) -> str:
    return apply_mutant(SRC, m)


def test_every_operator_makes_the_expected_source() -> None:
    ms = mutate_source(SRC, "demo.py", ["quorum", "Node.commit"])
    got = {m.id: (m.original, m.replacement) for m in ms}
    assert got["demo.quorum.cmp.1"] == (">=", ">")
    assert got["demo.quorum.arith.1"] == ("+", "-")
    assert got["demo.quorum.const+1.1"] == ("2", "3")
    assert got["demo.quorum.const-1.2"] == ("1", "0")
    assert got["demo.quorum.return-true.1"] == ("count >= n // 2 + 1", "True")
    assert got["demo.quorum.return-false.1"][1] == "False"
    assert got["demo.Node.commit.cmp.1"] == (">", ">=")
    assert got["demo.Node.commit.if-true.1"] == ("not self.leader and term > 0", "True")
    assert got["demo.Node.commit.if-false.1"][1] == "False"
    assert got["demo.Node.commit.bool-drop.1"][1] == "term > 0"
    assert got["demo.Node.commit.bool-drop.2"][1] == "not self.leader"
    assert got["demo.Node.commit.not-drop.1"] == ("not self.leader", "self.leader")
    assert got["demo.Node.commit.swap-args.1"] == ("term, self.id", "self.id, term")
    assert not any(m.original == "marks[0], marks[1]" for m in ms)  # min is symmetric
    assert got["demo.Node.commit.minmax.1"] == ("min", "max")
    drops = {m.original for m in _by_op(ms, "stmt-drop")}
    assert drops == {
        "self.committed = min(marks[0], marks[1])",
        "self.store.flush()",
        "self.save(term, self.id)",
    }
    assert {m.operator for m in ms} <= set(OPERATORS)
    # the whole-file edit: only the span changed, and the result says so
    m = next(m for m in ms if m.id == "demo.Node.commit.minmax.1")
    assert _mutated(m) == SRC.replace("= min(marks", "= max(marks")


def test_logging_and_seeded_bug_switches_are_never_mutated() -> None:
    ms = mutate_source(SRC, "demo.py", ["Node.commit"])
    for m in ms:
        assert "bugs." not in m.original and '"commit"' not in m.original, m
        assert m.original != "3"  # the log call's argument
        assert "self.committed += 1" not in m.original  # inside the bug-on branch
    # the bug-off branch is mutated
    assert any(m.original == "self.save(term, self.id)" for m in ms)


def test_ids_are_stable_and_unique_and_every_mutant_parses() -> None:
    a = mutate_source(SRC, "demo.py", ["quorum", "Node.commit"])
    # an edit in another function changes neither the ids nor the edits of this one
    other = SRC.replace("return count >= n // 2 + 1", "x = 1\n    return count >= n // 2 + 1")
    b = mutate_source(other, "demo.py", ["Node.commit"])
    assert [(m.id, m.original, m.replacement) for m in a if m.function == "Node.commit"] == [
        (m.id, m.original, m.replacement) for m in b
    ]
    assert len({m.id for m in a}) == len(a)
    for m in a:
        tree = ast.parse(_mutated(m))
        assert ast.dump(tree) != ast.dump(ast.parse(SRC)), m.id


def test_bool_drop_parenthesises_a_lower_precedence_operand() -> None:
    src = "def f(a, b, c):\n    return a and (b or c)\n"
    ms = mutate_source(src, "m.py", ["f"])
    drop_a = next(m for m in ms if m.operator == "bool-drop" and m.replacement.startswith("("))
    assert apply_mutant(src, drop_a) == "def f(a, b, c):\n    return (b or c)\n"


def test_unknown_function_and_bad_source_are_clear_errors() -> None:
    with pytest.raises(MutatorError, match="no function nope"):
        mutate_source(SRC, "demo.py", ["nope"])
    with pytest.raises(MutatorError, match="does not parse"):
        mutate_source("def (:\n", "x.py", [])
    m = mutate_source(SRC, "demo.py", ["quorum"])[0]
    with pytest.raises(MutatorError, match="no longer holds"):
        apply_mutant(SRC.replace(">=", "=>"), m)


def test_diff_names_the_node_file() -> None:
    m = next(m for m in mutate_source(SRC, "demo.py", ["quorum"]) if m.operator == "cmp")
    d = mutant_diff(SRC, m)
    assert "--- a/node_impl/demo.py" in d and "+++ b/node_impl/demo.py" in d
    assert "-    return count >= n // 2 + 1" in d and "+    return count > n // 2 + 1" in d


def test_the_node_selection_is_current_and_every_mutant_parses() -> None:
    ms = node_mutants(NODE_IMPL_DIR)
    assert len(ms) > 500 and len({m.id for m in ms}) == len(ms)
    files = {a.file for a in SAFETY_CODE}
    assert {m.file for m in ms} == files
    for m in ms[::7]:
        ast.parse(apply_mutant((NODE_IMPL_DIR / m.file).read_text(), m))
    assert area_of("quorum.py", "quorum_index") == "quorum"
    assert all(area_of(m.file, m.function) for m in ms[::50])


def test_choose_is_a_seeded_prefix_and_rejects_unknown_ids() -> None:
    ms = mutate_source(SRC, "demo.py", ["quorum", "Node.commit"])
    assert choose(ms, sample=5, seed=7) == choose(ms, sample=5, seed=7)
    assert choose(ms, sample=8, seed=7)[:5] == choose(ms, sample=5, seed=7)
    assert choose(ms, sample=5, seed=7) != choose(ms, sample=5, seed=8)
    assert [m.id for m in choose(ms, ids=["demo.quorum.cmp.1"])] == ["demo.quorum.cmp.1"]
    with pytest.raises(ConfigError, match="unknown mutant demo.nope"):
        choose(ms, ids=["demo.nope"])


def test_plan_uses_the_default_campaign_with_the_mutant_tree(tmp_path: Path) -> None:
    from harness.core.remote import Host

    m = mutate_source(SRC, "demo.py", ["quorum"])[0]
    (tmp_path / "__main__.py").write_text("")  # a node package, as write_tree makes one
    c = with_node_src(DEFAULT_CAMPAIGN, tmp_path)
    hosts = [Host(name=f"n{i}", address="127.0.0.1", extras={"fuse": True}) for i in (1, 2, 3)]
    spec = mutant_spec(c, hosts, m, 5, "campaign")
    assert spec.workload == DEFAULT_CAMPAIGN.workload and "deck" in spec.options
    assert set(spec.nemesis) >= {"kill", "partition", "lose-unfsynced"}  # the deck's faults
    assert spec.options["db"]["node_src"] == str(tmp_path)
    assert spec.options["mutant"]["id"] == m.id and spec.name.startswith("mutant-campaign-demo")
    smoke = mutant_spec(smoke_campaign(c, 10), hosts[:1], m, 5, "smoke")
    assert smoke.nemesis == () and smoke.time_limit == 10 and "deck" not in smoke.options
    assert smoke.options["db"]["node_src"] == str(tmp_path)


def test_dledger_db_node_src_is_checked(tmp_path: Path) -> None:
    assert DLedgerDB().node_src == NODE_IMPL_DIR
    with pytest.raises(ConfigError, match="not a node package"):
        DLedgerDB(node_src=str(tmp_path))
    with pytest.raises(ConfigError, match="absolute"):
        DLedgerDB(node_src="rel/dir")
    m = node_mutants(NODE_IMPL_DIR)[0]
    pkg = write_tree(NODE_IMPL_DIR, m, tmp_path)
    assert DLedgerDB(node_src=str(pkg)).node_src == pkg
    assert (pkg / m.file).read_text() != (NODE_IMPL_DIR / m.file).read_text()
    assert (pkg / "kv.py").read_text() == (NODE_IMPL_DIR / "kv.py").read_text() or m.file == "kv.py"


def _rec(i: str, outcome: str) -> MutantRecord:
    ok = StageResult(True, "ok")
    stages: dict[str, StageResult | None] = {
        KILLED_BY_UNIT: {"unit": StageResult(False, "FAILED t")},
        BROKEN: {"unit": ok, "smoke": StageResult(False, "UNKNOWN", verdict="unknown")},
        KILLED: {
            "unit": ok,
            "smoke": ok,
            "campaign": StageResult(False, verdict=False, kinds=("lost",)),
        },
        SURVIVED: {"unit": ok, "smoke": ok, "campaign": StageResult(True, verdict=True)},
        UNKNOWN: {"unit": ok, "smoke": ok, "campaign": StageResult(False, verdict="unknown")},
    }[outcome]  # type: ignore[assignment]
    return MutantRecord(id=i, description=i, operator="cmp", area="a", diff=f"diff {i}", **stages)  # type: ignore[arg-type]


def test_score_counts_only_campaign_verdicts() -> None:
    recs = [
        _rec("u", KILLED_BY_UNIT),
        _rec("b", BROKEN),
        _rec("k1", KILLED),
        _rec("k2", KILLED),
        _rec("k3", KILLED),
        _rec("s", SURVIVED),
        _rec("x", UNKNOWN),
    ]
    assert [r.outcome for r in recs] == [
        KILLED_BY_UNIT, BROKEN, KILLED, KILLED, KILLED, SURVIVED, UNKNOWN,
    ]  # fmt: skip
    assert mutation_score(recs) == 0.75
    assert outcome_counts(recs)[KILLED] == 3
    assert mutation_score(recs[:2]) is None
    table = render_table(recs)
    assert "mutation score: 75% (3/4)" in table and "1 broken" in table
    doc = score_json(recs, lab="x")
    assert doc["survivors"] == ["s"] and doc["score"] == 0.75 and doc["lab"] == "x"
    assert json.loads(json.dumps(doc))["mutants"][5]["diff"] == "diff s"


def test_ledger_keeps_finished_mutants_of_the_same_settings(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "m.jsonl")
    k = MutantRecord(**{**_rec("k", KILLED).__dict__, "settings": {"seed": 1}})
    x = MutantRecord(**{**_rec("x", UNKNOWN).__dict__, "settings": {"seed": 1}})
    led.append(k)
    led.append(x)
    with led.path.open("a") as f:
        f.write('{"id": "torn", "unit": {"pas')  # a run killed mid-line
    assert set(led.load()) == {"k", "x"}
    assert list(led.done({"seed": 1})) == ["k"]  # unknown ones run again
    assert led.done({"seed": 2}) == {}
    assert led.load()["k"].campaign == k.campaign


def test_mutants_is_a_command_of_its_own_and_zoo_mutants_still_works() -> None:
    """Issue 45: `splitbrain mutants`; `zoo --mutants` says it is deprecated and gives the
    same answer; the mutants' options are not in the zoo's help any more."""
    from harness.cli import main
    from harness.cli.mutants import mutants

    new = CliRunner().invoke(mutants, ["--list", "--sample", "3", "--seed", "4"])
    assert new.exit_code == 0, new.output
    old = CliRunner().invoke(zoo, ["--mutants", "--list", "--sample", "3", "--seed", "4"])
    assert old.exit_code == 0 and old.stdout == new.stdout
    assert "--mutants is deprecated; run `splitbrain mutants`" in old.stderr
    assert "--sample" not in CliRunner().invoke(zoo, ["--help"]).output
    assert "--sample" in CliRunner().invoke(mutants, ["--help"]).output
    with pytest.raises(SystemExit) as e:
        main(["mutants", "--list", "--mutant", "voting.is_quorum.arith.1"])
    assert e.value.code == 0


def test_cli_lists_mutants_and_rejects_misplaced_options() -> None:
    res = CliRunner().invoke(zoo, ["--mutants", "--list", "--sample", "3", "--seed", "4"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if "\t" in ln]
    assert len(lines) == 3
    res2 = CliRunner().invoke(zoo, ["--mutants", "--list", "--sample", "3", "--seed", "4"])
    assert res2.stdout == res.stdout
    bad = CliRunner().invoke(zoo, ["--sample", "3", "--lab", "no-such-lab"])
    assert bad.exit_code != 0 and "--mutants" in bad.output
    bad = CliRunner().invoke(zoo, ["--mutants", "--bugs", "stale-read", "--list"])
    assert bad.exit_code != 0 and "--bugs" in bad.output
    bad = CliRunner().invoke(zoo, ["--mutants", "--mutant", "no.such.id", "--list"])
    assert bad.exit_code != 0


@pytest.mark.slow
@pytest.mark.integration
def test_unit_tests_kill_a_mutant_they_guard_and_pass_the_real_node(tmp_path: Path) -> None:
    # quorum_index taking the wrong mark: tests/node_impl/test_quorum.py pins it
    m = next(m for m in node_mutants(NODE_IMPL_DIR) if m.id == "quorum.quorum_index.const-1.2")
    pkg = write_tree(NODE_IMPL_DIR, m, tmp_path / "t")
    res = unit_tests(pkg.parent, timeout=900)
    assert not res.passed and "test_quorum" in res.detail, res


EQUIVALENT = "store.LogStore.truncate.const-1.2"
"""``e.index < 0`` -> ``< -1`` in LogStore.truncate: passes the unit tests and the
fault-free run, and no correct leader sends index -1, so it always survives the
campaign (docs/zoo.md, survivor 3). No mutant that the unit tests miss was killed
by the campaign in the measured runs, so none can be asserted killed here."""
UNIT_KILLED = "voting.is_quorum.arith.1"
"""``n // 2 - 1``: a quorum of one; tests/node_impl/test_voting.py catches it."""


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_mutants_end_to_end_on_the_lab_and_resume(lab, tmp_path: Path) -> None:
    out, js = tmp_path / "mut", tmp_path / "m.json"
    args = [
        "--mutants", "--mutant", UNIT_KILLED, "--mutant", EQUIVALENT, "--time-limit", "20",
        "--lab", lab.name, "--store", str(tmp_path / "store"), "--out", str(out),
        "--seed", "16", "--json", str(js),
    ]  # fmt: skip
    res = CliRunner().invoke(zoo, args, standalone_mode=False)
    assert res.exception is None, res.output
    doc = json.loads(js.read_text())
    got = {m["id"]: m for m in doc["mutants"]}
    assert got[UNIT_KILLED]["outcome"] == KILLED_BY_UNIT, res.output
    assert "test_voting" in got[UNIT_KILLED]["unit"]["detail"]
    assert got[UNIT_KILLED]["smoke"] is None  # the first filter that stops it ends it
    k = got[EQUIVALENT]
    assert k["outcome"] == SURVIVED, res.output
    assert k["unit"]["passed"] and k["smoke"]["passed"] and k["smoke"]["ok_ops"] >= 20
    assert k["campaign"]["verdict"] is True and "-1" in k["diff"]
    assert doc["score"] == 0.0 and doc["survivors"] == [EQUIVALENT] and res.return_value == 1
    assert "mutation score: 0% (0/1)" in res.stdout and "survivor " + EQUIVALENT in res.stdout
    # the lab ran the mutant tree, and test.json says so
    test_json = json.loads((Path(k["campaign"]["store"]) / "test.json").read_text())
    src = Path(test_json["options"]["db"]["node_src"])
    assert src.parent.name == EQUIVALENT and "e.index < -1" in (src / "store.py").read_text()
    assert test_json["options"]["mutant"]["id"] == EQUIVALENT
    assert test_json["options"]["zoo_profiles"]  # the zoo's campaign, faults and all
    # a second run on the same --out resumes: nothing runs again
    again = CliRunner().invoke(zoo, args, standalone_mode=False)
    assert again.exception is None and again.output.count("from an earlier run") == 2
    assert len((out / "mutants.jsonl").read_text().splitlines()) == 2
