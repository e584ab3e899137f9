"""``--db jraft``: the Python side alone, then the real JRaft server on a lab.

The pure tests pin what the DB class decides without a host: which versions it refuses,
the JVM's command line (the faketime workaround, the heap), how JRaft member ids map back
to the run's nodes, how a transfer's answer is read. The lab test builds the server from
Maven Central (the first time; afterwards from the cache), runs a short campaign with a
kill of the leader on five real JVMs, and asserts what could fail: a valid verdict on
acknowledged ops, the kill landed and the cluster served again, and test.json names the
jraft-core version and every jar's checksum.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.core.errors import ConfigError
from harness.dbs import get_db
from harness.dbs.jraft import (
    NEWEST,
    NO_COND_FIX,
    JRaftDB,
    JRaftOptions,
    check_version,
    java_command,
    outcome_of,
)

REPO = Path(__file__).resolve().parents[2]


# --- pure ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.2.4", "1.2.7.beta1", "1.3.14", "1.3.15.bugfix", "1.4.1"])
def test_versions_from_1_3_are_accepted(version: str) -> None:
    check_version(version)


@pytest.mark.parametrize("version", ["1.2.3", "1.1.0", "", "latest"])
def test_older_or_malformed_versions_are_refused_naming_the_option(version: str) -> None:
    with pytest.raises(ConfigError) as e:
        check_version(version)
    assert e.value.field == "version"


def test_the_registered_factory_parses_options_and_rejects_unknown_keys() -> None:
    db = get_db("jraft", {"read": "lease", "election_timeout_ms": "1500"})
    assert isinstance(db, JRaftDB)
    assert db.opts.read == "lease" and db.opts.election_timeout_ms == 1500
    assert db.opts.version == NEWEST
    with pytest.raises(ConfigError):
        get_db("jraft", {"reed": "lease"})
    with pytest.raises(ConfigError):
        get_db("jraft", {"version": "1.0.0"})


def test_the_jvm_runs_without_faketimes_monotonic_fix_and_with_a_small_heap() -> None:
    cmd = java_command(
        "java", "/lib/a.jar:/lib/b.jar", heap_mb=200, tmp="/d/tmp", extra="-Dx=1",
        args=["--id", "n1"],
    )  # fmt: skip
    assert cmd.startswith(f"env {NO_COND_FIX} java ")
    assert "-Xmx200m" in cmd and "-XX:+UseSerialGC" in cmd and "-Djava.io.tmpdir=/d/tmp" in cmd
    assert cmd.index("-Dx=1") < cmd.index("-cp") < cmd.index("splitbrain.jraft.Server")
    assert cmd.endswith("--id n1")


def _ctx(nodes: list[str]) -> Any:
    hosts = {
        n: SimpleNamespace(address=f"10.0.0.{i + 1}", extras={"lab": "L"})
        for i, n in enumerate(nodes)
    }
    return SimpleNamespace(nodes=nodes, hosts=hosts, spec=SimpleNamespace(name="t"), remotes={})


def test_member_ids_map_back_to_nodes_and_a_readded_member_is_its_own_identity() -> None:
    db = JRaftDB(JRaftOptions())
    ctx = _ctx(["n1", "n2", "n3"])
    db._idents["n3"] = "n3.1"
    voters = {"n1": "10.0.0.1:8100", "n2": "10.0.0.2:8100", "n3.1": "10.0.0.3:8100"}
    reply: dict[str, Any] = {
        "voters": voters,
        "learners": {},
        "leader": "n3.1",
        "pending": False,
    }
    view = db._view(ctx, reply, "n1")
    assert view.voters == {"n1": "n1", "n2": "n2", "n3": "n3.1"}
    assert view.leader == "n3" and view.asked == "n1" and not view.unknown
    # the removed member n3 (generation 0) and the new n3.1 both listed: one is unknown
    both = {**reply, "voters": {**voters, "n3": "10.0.0.3:8100"}}
    assert db._view(ctx, both, "n1").unknown


def test_the_command_names_the_member_its_peers_and_an_empty_conf_when_joining() -> None:
    db = JRaftDB(JRaftOptions(read="lease", sync_meta=True))
    db._program = SimpleNamespace(classpath=lambda lib: f"{lib}/x.jar")  # type: ignore[assignment]
    ctx = _ctx(["n1", "n2", "n3"])
    cmd = db.command(ctx, "n2", "/lib")
    assert "--nodes n1=10.0.0.1:8100:8101,n2=10.0.0.2:8100:8101,n3=10.0.0.3:8100:8101" in cmd
    assert "--conf n1,n2,n3" in cmd and "--read lease" in cmd and "--sync-meta true" in cmd
    assert "/var/lib/splitbrain/jraft/L/t/n2/data" in cmd
    db._idents["n2"], db._joining = "n2.1", {"n2"}
    cmd = db.command(ctx, "n2", "/lib")
    assert "--id n2.1" in cmd and "--conf -" in cmd


def test_transfer_answers_read_as_outcomes() -> None:
    assert outcome_of("SUCCESS") == "handed-over"
    assert outcome_of("TRANSFER_TIMEOUT") == "kept"
    assert outcome_of("TRANSFER_FAILED") == "lost"
    assert outcome_of("TRANSFER_REFUSED") == "refused"
    assert outcome_of(None) is None
    assert JRaftDB.transfer_hands_over is False


def test_the_default_workload_is_the_register_with_samplers() -> None:
    choice = JRaftDB().default_workload()
    assert choice.name == "register" and choice.concurrency and choice.rate


# --- the real thing ------------------------------------------------------------------


def _usable() -> str | None:
    if shutil.which("mvn") is None:
        return "no Maven"
    if shutil.which("java") is None:
        return "no java"
    return None


@pytest.mark.integration
@pytest.mark.lab
def test_a_short_campaign_with_leader_kills_is_valid_and_records_the_jars(
    lab: Any, tmp_path: Path
) -> None:
    why = _usable()
    if why:
        pytest.skip(why)
    store = tmp_path / "store"
    p = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--db", "jraft"]
        + ["--nemesis", "kill", "--nemesis-option", "targets=leader"]
        + ["--nemesis-interval", "4", "--time-limit", "20", "--seed", "7"]
        + ["--no-progress", "--store", str(store), "--name", "jraft-kill"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(p.stdout, p.stderr[-3000:])
    run = store / "jraft-kill" / "latest"
    results = json.loads((run / "results.json").read_text())
    test = json.loads((run / "test.json").read_text())
    ops = [json.loads(ln) for ln in (run / "history.jsonl").read_text().splitlines()]
    assert p.returncode == 0, results.get("run")
    assert results["valid"] is True
    assert results["checkers"]["linearizable"]["valid"] is True
    kills = [
        o for o in ops
        if o["process"] == "nemesis" and o["f"] == "start-kill" and o["type"] == "info"
        and (o.get("value") or {}).get("nodes")
    ]  # fmt: skip
    assert kills, "no kill landed"
    first_kill = min(o["time"] for o in kills)
    acked_after = [
        o for o in ops
        if o["type"] == "ok" and o["f"] in ("write", "cas") and o["time"] > first_kill + 3e9
    ]  # fmt: skip
    assert len(acked_after) > 10, "the cluster did not serve writes again after the kill"
    arts = test["artifacts"]
    assert arts["jraft-core"] == NEWEST
    jars = {a["coordinate"]: a["sha256"] for a in arts["artifacts"]}
    assert f"com.alipay.sofa:jraft-core:{NEWEST}" in jars
    assert all(len(h) == 64 for h in jars.values())


def test_coverage_is_told_what_jraft_cannot_show_and_what_it_rules_out() -> None:
    from harness.core.db import unreachable_situations

    db = JRaftDB()
    assert "truncate" not in db.event_kinds() and "vote" in db.event_kinds()
    assert "read-from-non-leader" in unreachable_situations(db)


def test_node_log_lines_of_the_server_parse_as_events() -> None:
    """The Java server's node.log lines (NodeLog, Server.poll) in the reference format."""
    from harness.dbs.nodelog_events import parse_node_log_line

    t = "time=1796182970.063000 mono=546.856268"
    role = parse_node_log_line("n1", f"ROLE term=3 role=leader leader=n1.1 {t}")
    assert role is not None and (role.kind, role.term, role.role, role.leader) == (
        "role", 3, "leader", "n1.1",
    )  # fmt: skip
    vote = parse_node_log_line("n1", f"INFO event=vote term=3 candidate=n2 {t}")
    assert vote is not None and vote.candidate == "n2" and vote.mono_s == 546.856268
    refused = parse_node_log_line(
        "n1", f"INFO event=read-refused why=read-index code=EPERM term=3 role=follower {t}"
    )
    assert refused is not None and refused.kind == "read-refused"


def test_the_deck_keeps_the_disk_script_for_jraft() -> None:
    """Refusing corrupt (it hits nothing on JRaft) would drop the deck's whole ``disk``
    script, lose-unfsynced with it: no disk fault is refused."""
    from nemesis import registry

    faults = registry.faults()
    db = JRaftDB()
    for name in ("lose-unfsynced", "torn-write", "corrupt", "kill", "pause", "membership"):
        assert faults[name].why_not(db, []) is None, name


@pytest.mark.lab
@pytest.mark.slow
def test_a_member_removed_and_added_back_wiped_rejoins_as_a_voter(lab: Any, tmp_path: Path) -> None:
    """The membership asking (harness/dbs/members.py) on real JVMs: removePeer until the
    member is gone, then addPeer of the wiped host under a fresh id until it votes."""
    why = _usable()
    if why:
        pytest.skip(why)
    store = tmp_path / "store"
    p = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--db", "jraft"]
        + ["--nemesis", "membership-remove-add", "--nemesis-interval", "1"]
        + ["--time-limit", "10", "--seed", "29"]
        + ["--no-progress", "--store", str(store), "--name", "jraft-membership"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(p.stdout, p.stderr[-3000:])
    run = store / "jraft-membership" / "latest"
    results = json.loads((run / "results.json").read_text())
    ops = [json.loads(ln) for ln in (run / "history.jsonl").read_text().splitlines()]
    assert p.returncode == 0, results.get("run")
    starts = [
        o for o in ops
        if o["process"] == "nemesis" and o["f"] == "start-membership" and o["type"] == "info"
    ]  # fmt: skip
    assert starts, "no membership change landed"
    changes = starts[0]["value"]["changes"]
    assert [(c["op"], c["ok"]) for c in changes] == [("remove", True), ("add", True)], changes
    node = changes[0]["node"]
    assert node not in changes[0]["members"]["voters"]
    assert changes[1]["node"] == node and changes[1]["id"].startswith(f"{node}.")
    stops = [o for o in ops if o["f"] == "stop-membership" and o["type"] == "info"]
    assert sorted(stops[-1]["value"]["members"]["voters"]) == sorted(h.name for h in lab.hosts())
