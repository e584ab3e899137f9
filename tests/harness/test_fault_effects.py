"""Faults declare their effects (issue 45): coverage and the report ask the declaration.

* a plugin fault, packaged and installed the way a plugin is, that declares it kills is
  counted by coverage as a kill and drawn by the report as one;
* the clock's periods come from one derivation for coverage and the report (the two used
  to disagree on a clock set back to +0);
* a registration that declares effects wrongly is refused;
* the docs' fault example (docs/your-own-system.md, "A fault of your own") imports only
  from ``harness.api``, registers, and runs its start, stop, journal and undo.
"""

from __future__ import annotations

import ast
import json
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import ConfigError
from harness.core.history import HistoryWriter, Op
from nemesis import registry
from tests.plugins import installed

S = 1_000_000_000
ROOT = Path(__file__).resolve().parents[2]
NODES = ("n1", "n2", "n3")

CRASH = """
from harness.api import Effects, Fault, Periods


class CrashNemesis:
    def fs(self):
        return {"start-crash", "stop-crash"}

    def setup(self, ctx):
        pass

    def invoke(self, ctx, op):
        return op.complete("info", value=dict(op.value or {}))

    def teardown(self, ctx):
        pass


CRASH = Fault(
    name="crash",
    nemesis=lambda chosen: CrashNemesis(),
    heal_rank=610,
    effects=Effects(kills=True),
    periods=Periods(hit=("crashed",), ended=("up",)),
    colour="#123456",
)
"""


def _package(tmp_path: Path, name: str, source: str, entry: str) -> Path:
    """A plugin project on disk: ``name/pyproject.toml`` and its module ``name/name``."""
    project = tmp_path / name
    (project / name).mkdir(parents=True)
    (project / name / "__init__.py").write_text(source)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n\n'
        f'[project.entry-points."splitbrain.faults"]\n{entry}\n'
    )
    return project


@contextmanager
def crash_plugin(tmp_path: Path, source: str = CRASH) -> Iterator[None]:
    project = _package(tmp_path, "sb_crash_fault", source, 'crash = "sb_crash_fault:CRASH"')
    with installed(project, "splitbrain.faults", tmp_path, registry.refresh):
        yield


def _nem(ops: list[Op], f: str, t: float, value: Any, done: Any) -> None:
    ops.append(Op("invoke", "nemesis", f, value, time=int(t * S)))
    ops.append(Op("info", "nemesis", f, done, time=int(t * S) + S // 20))


def _crash_history() -> list[Op]:
    """A write to n1 left open across a crash of every node, healed at 3 s."""
    ops = [
        Op("invoke", 0, "write", 1, node="n1", time=0),
        Op("ok", 0, "write", 1, node="n1", time=S // 100),
        Op("invoke", 1, "write", 2, node="n1", time=int(0.9 * S)),
    ]
    _nem(ops, "start-crash", 1.0, {"nodes": list(NODES)}, {"crashed": list(NODES)})
    _nem(ops, "stop-crash", 3.0, None, {"up": list(NODES)})
    ops.append(Op("info", 1, "write", 2, node="n1", time=int(3.5 * S)))
    return sorted(ops, key=lambda o: o.time)


def test_a_plugin_fault_that_kills_is_counted_by_coverage(tmp_path: Path) -> None:
    from checker.situations import coverage, observed_from

    ops = _crash_history()
    before = coverage(observed_from(ops, nodes=NODES))  # not installed: nothing known of it
    assert before["kill-with-ops-in-flight"]["count"] == 0
    with crash_plugin(tmp_path):
        assert registry.fault_of("crash") is not None
        cov = coverage(observed_from(ops, nodes=NODES))
    # Counted at the kill's invocation, the restart of every node once it landed.
    assert cov["kill-with-ops-in-flight"] == {"count": 1, "first_s": 1.0}
    assert cov["whole-cluster-restart"] == {"count": 1, "first_s": 1.05}


def test_a_plugin_fault_that_kills_is_drawn_by_the_report(tmp_path: Path) -> None:
    from harness.report.html import write_report

    run = tmp_path / "store" / "t" / "20261126T120000.000Z"
    run.mkdir(parents=True)
    with HistoryWriter(run / "history.jsonl") as w:
        for op in _crash_history():
            w.append(op)
    (run / "test.json").write_text(json.dumps({"name": "t", "nodes": list(NODES)}))
    (run / "results.json").write_text(json.dumps({"valid": True, "checkers": {}}))
    with crash_plugin(tmp_path):
        text = write_report(run).read_text()
    data = json.loads(re.search(r'"faults":(\[\[.*?\]\])', text).group(1))  # type: ignore[union-attr]
    [(kind, start, end, colour, what)] = data
    assert (kind, colour) == ("crash", "#123456")
    assert (start, end) == (1_000_000, 3_050_000)  # µs: invoked at 1 s, healed at 3.05 s
    assert what.startswith("kills n1, n2, n3")
    assert "kills n1, n2, n3" in text.split("<h2>Faults</h2>", 1)[1]  # the faults table


def test_coverage_and_the_report_read_one_set_of_clock_periods() -> None:
    """The clock's periods, as both read them. The report used to open a period at +0 (a
    node's clock set back by ``mode: reset``) and marked that node's lines as shifted by
    0 ms until the next stop; coverage closed it, which is right: the clock is true again."""
    from harness.report.data import fault_timeline

    ops: list[Op] = []
    _nem(ops, "start-clock", 1.0, {"nodes": ["n1", "n2"], "mode": "bump", "offset_ms": -500},
         {"nodes": ["n1", "n2"], "offsets_ms": {"n1": -500.0, "n2": -500.0}})  # fmt: skip
    _nem(ops, "start-clock", 2.0, {"nodes": ["n1"], "mode": "reset"},
         {"nodes": ["n1"], "mode": "reset", "offsets_ms": {"n1": 0.0}})  # fmt: skip
    _nem(ops, "start-clock", 3.0, {"nodes": ["n3"], "mode": "strobe"},
         {"nodes": ["n3"], "mode": "strobe"})  # fmt: skip
    _nem(ops, "stop-clock", 4.0, None, {"mode": "reset", "offsets_ms": {n: 0.0 for n in NODES}})
    shifts = registry.timeline(ops).clock_shifts()
    assert shifts == fault_timeline(ops).clock_shifts()
    got = sorted((s.node, s.start / S, s.end / S, s.offset_ms) for s in shifts)
    assert got == [
        ("n1", 1.05, 2.05, -500.0),  # reset at 2.05: nothing after it
        ("n2", 1.05, 4.05, -500.0),
        ("n3", 3.05, 4.05, None),  # a strobe: its stamps cannot be corrected
    ]


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ("effects={'kills': True}", "effects must be a harness.core.fault.Effects"),
        ("effects=Effects(kills=1)", "must be True or False"),
        ("effects=Effects(cuts_network=True)", "names no periods.grudge"),
        ("effects=Effects(kills=True), periods=Periods(hit=())", "periods.hit names no key"),
        ("periods=Periods(hit='nodes')", "periods.hit must be a tuple"),
    ],
)
def test_effects_are_checked_at_registration(tmp_path: Path, declared: str, message: str) -> None:
    source = CRASH.replace("    effects=Effects(kills=True),\n", "").replace(
        '    periods=Periods(hit=("crashed",), ended=("up",)),\n', f"    {declared},\n"
    )
    with crash_plugin(tmp_path, source), pytest.raises(ConfigError, match=message) as e:
        registry.registry()
    assert "fault 'crash' (from sb_crash_fault" in str(e.value)


def test_faults_of_one_kind_must_declare_the_same_effects(tmp_path: Path) -> None:
    source = CRASH.replace('name="crash",', 'name="crash", kind="pause",')
    with crash_plugin(tmp_path, source), pytest.raises(ConfigError, match="one op kind"):
        registry.registry()


# --- the docs' example ----------------------------------------------------------------


def _docs_example() -> str:
    doc = (ROOT / "docs" / "your-own-system.md").read_text()
    section = doc.split("### A fault of your own", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_docs_fault_example_imports_only_from_harness_api() -> None:
    import harness.api

    tree = ast.parse(_docs_example())
    ours = ("harness", "nemesis", "checker", "workloads", "node_impl")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ours:
            assert node.module == "harness.api", node.module
            missing = [a.name for a in node.names if a.name not in harness.api.__all__]
            assert not missing, f"harness.api does not export {missing}"
        if isinstance(node, ast.Import):
            assert not [a.name for a in node.names if a.name.split(".")[0] in ours]


class _Journal:
    """The run's journal as a nemesis sees it (``ctx.journal``), recording its calls."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, str], dict[str, Any]] = {}

    def note(self, node: str, kind: str, key: str, undo: Any, what: str = "") -> None:
        self.entries[(node, kind, key)] = dict(undo)

    def clear(self, node: str, kind: str, key: str) -> None:
        self.entries.pop((node, kind, key), None)


class _Entry:
    def __init__(self, host: str, kind: str, key: str, undo: dict[str, Any]) -> None:
        self.host, self.kind, self.key, self.undo = host, kind, key, undo

    def describe(self) -> str:
        return f"{self.kind} {self.key} on {self.host}"


def test_the_docs_fault_example_registers_and_runs(tmp_path: Path) -> None:
    from harness.api import Host, MemoryRemote, RunContext, TestSpec
    from nemesis.package import build_package

    project = _package(tmp_path, "my_faults", _docs_example(), 'hog = "my_faults:HOG"')
    with installed(project, "splitbrain.faults", tmp_path, registry.refresh):
        hog = registry.fault("hog")
        assert hog.package == "my_faults" and "hog-daemon" in registry.journal_kinds()
        pkg = build_package(["hog", "kill"], interval=1, rng=random.Random(3), hog_targets="all")
        assert [o.f for o in pkg.final_ops] == ["stop-kill", "stop-hog"]  # by heal rank
        remotes = {n: MemoryRemote(n) for n in NODES}
        hosts = {n: r.host for n, r in remotes.items()}
        assert isinstance(hosts["n1"], Host)
        ctx = RunContext(
            spec=TestSpec(name="docs", nodes=NODES),
            hosts=hosts,
            remotes=dict(remotes),  # type: ignore[arg-type]
            db=None,  # type: ignore[arg-type]
            history=None,  # type: ignore[arg-type]
            rng=random.Random(0),
            store_dir=str(tmp_path),
        )
        journal = _Journal()
        ctx.journal = journal
        nem = hog.nemesis({})
        nem.setup(ctx)
        value = hog.draw(registry_draw(hog))
        start = Op("invoke", "nemesis", "start-hog", value)
        done = nem.invoke(ctx, start)
        hit = done.value["hogged"]
        assert hit and all(remotes[n].daemon_running("/tmp/sb-hog.pid") for n in hit)
        assert set(journal.entries) == {(n, "hog-daemon", "/tmp/sb-hog.pid") for n in hit}
        # A killed run's leftover, undone from its entry by a later process:
        (node, kind, key), undo = next(iter(journal.entries.items()))
        registry.journal_kind(kind).undo(remotes[node], _Entry(node, kind, key, undo))  # type: ignore[union-attr]
        assert not remotes[node].daemon_running(key)
        stop = nem.invoke(ctx, Op("invoke", "nemesis", "stop-hog", None))
        assert stop.value == {"nodes": sorted(hit)} and journal.entries == {}
        assert not any(r.daemon_running("/tmp/sb-hog.pid") for r in remotes.values())
        nem.teardown(ctx)
        periods = registry.timeline([start, done, stop]).periods
        assert sorted(p.node for p in periods if p.kind == "hog") == sorted(hit)
    assert "hog" not in registry.registry().names


def registry_draw(fault: Any) -> Any:
    from harness.api import Draw

    return Draw(rng=random.Random(1), nodes=list(NODES), leader_ok=False, interval=1.0,
                targets=("one", "all"))  # fmt: skip


def test_a_failover_kills_its_old_master_and_the_rejoin_ends_it() -> None:
    """Changed on purpose: failover SIGKILLs the old master (``db.kill``) but was not among
    the names coverage counted as kills; it now declares ``kills`` like the others."""
    ops: list[Op] = []
    _nem(ops, "start-failover", 1.0, {"target": "master"}, {"nodes": ["n1"], "killed": "n1"})
    _nem(ops, "stop-failover", 2.0, None, {"rejoined": ["n1"]})
    t = registry.timeline(ops)
    assert [(x.kind, x.nodes) for x in t.landed("kills")] == [("failover", ["n1"])]
    [p] = t.during("kills")
    assert (p.node, p.start / S, p.end / S if p.end else None) == ("n1", 1.05, 2.05)
