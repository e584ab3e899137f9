"""Bookkeeping of kill/pause (which nodes the cure must touch), with a recording DB.

The real signals are exercised in test_lab_faults; here only the logic: restart
exactly the dead, never twice, forget a paused node once it is killed, and
report (not crash) when a leader-targeted fault finds no leader.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from harness.core.errors import NemesisError
from harness.core.history import Op
from nemesis.process import KillNemesis, PauseNemesis


class RecordingDB:
    def __init__(self, primaries=()):
        self.calls: list[tuple[str, str]] = []
        self._primaries = list(primaries)

    def setup(self, ctx, node): ...
    def teardown(self, ctx, node): ...
    def kill(self, ctx, node):
        self.calls.append(("kill", node))

    def start(self, ctx, node):
        self.calls.append(("start", node))

    def pause(self, ctx, node):
        self.calls.append(("pause", node))

    def resume(self, ctx, node):
        self.calls.append(("resume", node))

    def primaries(self, ctx):
        return self._primaries


def ctx(db):
    return SimpleNamespace(nodes=["n1", "n2", "n3"], db=db, rng=random.Random(0), journal=None)


def inv(f, value=None):
    return Op(type="invoke", process="nemesis", f=f, value=value)


def test_kill_restarts_exactly_the_dead_once() -> None:
    db = RecordingDB()
    c = ctx(db)
    kill, pause = KillNemesis(), PauseNemesis()
    kill.paused_by = pause
    pause.invoke(c, inv("start-pause", {"nodes": ["n2"]}))
    done = kill.invoke(c, inv("start-kill", {"nodes": ["n1", "n2"]}))
    assert done.value["killed"] == ["n1", "n2"] and done.type == "info"
    assert pause.paused == set()  # a killed node is no longer paused
    assert kill.invoke(c, inv("stop-kill")).value == {"nodes": ["n1", "n2"]}
    kill.teardown(c)
    pause.teardown(c)
    assert sorted(x for x in db.calls if x[0] == "start") == [("start", "n1"), ("start", "n2")]
    assert ("resume", "n2") not in db.calls


def test_leader_target_without_a_leader_does_nothing_and_says_so() -> None:
    db = RecordingDB(primaries=[])
    done = KillNemesis().invoke(ctx(db), inv("start-kill", {"target": "leader"}))
    assert done.value["nodes"] == [] and "no leader" in done.error
    assert db.calls == []
    done = KillNemesis().invoke(ctx(RecordingDB(["n3"])), inv("start-kill", {"target": "leader"}))
    assert done.value["killed"] == ["n3"]


def test_capabilities_are_probed() -> None:
    class Plain:
        def setup(self, ctx, node): ...
        def teardown(self, ctx, node): ...

    with pytest.raises(NemesisError, match="not Killable"):
        KillNemesis().setup(ctx(Plain()))
    with pytest.raises(NemesisError, match="not Pausable"):
        PauseNemesis().setup(ctx(Plain()))
    with pytest.raises(NemesisError, match="unknown nodes"):
        KillNemesis().invoke(ctx(RecordingDB()), inv("start-kill", {"nodes": ["n9"]}))


def test_symbolic_targets_resolve_at_invoke() -> None:
    db = RecordingDB()
    done = PauseNemesis().invoke(ctx(db), inv("start-pause", {"target": "majority"}))
    assert len(done.value["paused"]) == 2
    with pytest.raises(NemesisError, match="needs 'nodes' or a 'target'"):
        PauseNemesis().invoke(ctx(db), inv("start-pause", {"target": "moon"}))
