"""``--db dledger-java``: DLedger's real Java server. Pure helpers first, then a real
campaign on the lab (the first build fetches from Maven Central; later runs fetch nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.core.db import (
    Addressable,
    HasDefaultWorkload,
    HasFootprint,
    HasLogFiles,
    HasPrimaries,
    Killable,
    Pausable,
    Reconfigurable,
    ResolvesArtifacts,
    TransfersLeadership,
    WaitsReady,
)
from harness.core.errors import ConfigError
from harness.core.options import parse_options
from harness.dbs.dledger_java import (
    DEFAULT_WORKLOAD,
    DLedgerJavaDB,
    DLedgerJavaOptions,
    dledger_peers,
    factory,
    parse_version,
    transfer_supported,
)

ROOT = Path(__file__).resolve().parents[2]


def test_versions_are_dotted_numbers_and_transfer_starts_at_0_2() -> None:
    assert parse_version("0.3.1.2") == (0, 3, 1, 2)
    for bad in ("0.4.3; rm -rf /", "latest", "0", ""):
        with pytest.raises(ConfigError) as e:
            parse_version(bad)
        assert e.value.field == "version"
    assert not transfer_supported("0.1")
    assert transfer_supported("0.2.0") and transfer_supported("0.4.3")


def test_peers_use_node_names_as_member_ids_and_spread_shared_addresses() -> None:
    assert dledger_peers({"n1": "10.0.0.1", "n2": "10.0.0.2"}, 9110) == (
        "n1-10.0.0.1:9110;n2-10.0.0.2:9110"
    )
    assert dledger_peers({"n1": "h", "n2": "h"}, 9110) == "n1-h:9110;n2-h:9120"
    with pytest.raises(ConfigError):
        dledger_peers({"a-b": "h"}, 9110)


def test_options_are_checked_before_anything_starts() -> None:
    opts = parse_options(
        DLedgerJavaOptions, {"version": "0.2.7", "heartbeat_ms": "300"}, role="db dledger-java"
    )
    assert opts.version == "0.2.7" and opts.heartbeat_ms == 300
    with pytest.raises(ConfigError):
        parse_options(DLedgerJavaOptions, {"versoin": "0.2.7"}, role="db")
    with pytest.raises(ConfigError):
        parse_options(DLedgerJavaOptions, {"root": "relative"}, role="db")
    with pytest.raises(ConfigError):
        parse_options(DLedgerJavaOptions, {"min_vote_ms": "2000", "max_vote_ms": "1000"}, role="db")


def test_capabilities_declared_and_membership_left_out() -> None:
    db = factory({})
    assert isinstance(db, DLedgerJavaDB)
    for cap in (
        Killable,
        Pausable,
        HasPrimaries,
        HasLogFiles,
        WaitsReady,
        Addressable,
        HasFootprint,
        HasDefaultWorkload,
        ResolvesArtifacts,
        TransfersLeadership,
    ):
        assert isinstance(db, cap), cap.__name__
    # DLedger 0.x has no runtime membership change: of the membership motifs the deck keeps
    # only the leadership transfer, and only for a version that has one.
    assert not isinstance(db, Reconfigurable)
    from harness.core.remote import Host
    from nemesis.deck import deck_for
    from nemesis.motifs import MEMBERSHIP_MOTIFS

    hosts = [Host(name=f"n{i}", address=f"127.0.0.{i}") for i in range(1, 6)]
    deck = deck_for(db, hosts, MEMBERSHIP_MOTIFS)
    assert deck.scripts == ("reconfig-transfer",) and deck.faults == ("membership",)
    assert "Reconfigurable" in deck.left_out["reconfig-race"]
    with pytest.raises(ConfigError) as e:  # 0.1: nothing of the membership motifs is left
        deck_for(factory({"version": "0.1"}), hosts, MEMBERSHIP_MOTIFS)
    assert "no leadership transfer" in str(e.value)
    assert db.default_workload() == DEFAULT_WORKLOAD
    assert DEFAULT_WORKLOAD.name == "append"
    assert db.event_kinds() == frozenset({"start", "role"})


def test_command_line_configures_dledger_and_the_endpoint(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from harness.dbs.maven import JavaProgram

    db = DLedgerJavaDB(DLedgerJavaOptions(heartbeat_ms=400))
    db._program = JavaProgram(
        name="dledger-java",
        home=tmp_path,
        key="k",
        properties={},
        artifacts=(),
        toolchain="java 17",
    )
    hosts = {
        n: SimpleNamespace(address=f"127.9.0.{i}", extras={"lab": "x"})
        for i, n in enumerate(["n1", "n2", "n3"], 1)
    }
    ctx: Any = SimpleNamespace(hosts=hosts, nodes=list(hosts), spec=SimpleNamespace(name="t-1"))
    cmd = db.command(ctx, "n2", "/lib")
    assert cmd.startswith("env FAKETIME_FORCE_MONOTONIC_FIX=0 java ")
    for part in (
        "-XX:+UseSerialGC",
        "-Xmx256m",
        "'/lib/*'",
        "splitbrain.dledger.Launcher",
        "--id n2",
        "--group sb_x_t_1",
        "--heartbeat-ms 400",
        "'n1-127.9.0.1:9110;n2-127.9.0.2:9110;n3-127.9.0.3:9110'",
        "--client-host 127.9.0.2 --client-port 9111",
        "/var/lib/splitbrain/dledger-java/x/t-1/n2/data",
    ):
        assert part in cmd, part
    assert db.ports(ctx, "n2") == [9110, 9111]


def test_watcher_lines_are_read_as_events(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text(
        "INFO event=start id=n1 incarnation=9-1 term=0 version=0.4.3 boot=b time=1.0 mono=2.0\n"
        "ROLE term=1 role=candidate leader=- time=1.5 mono=2.5\n"
        "ROLE term=1 role=leader leader=n1 time=1.6 mono=2.6\n"
    )
    events = list(factory({}).node_events("n1", [log, tmp_path / "stdout.log"]))
    assert [(e.kind, e.term, e.role, e.leader) for e in events] == [
        ("start", 0, None, None),
        ("role", 1, "candidate", None),
        ("role", 1, "leader", "n1"),
    ]
    assert events[2].mono_s == 2.6 and events[0].boot == "b"


# --- the real system on the lab ----------------------------------------------------


def _campaign(lab: Any, tmp_path: Path, *extra: str) -> tuple[int, dict, dict, Path]:
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--lab", lab.name, "--db", "dledger-java",
         "--nemesis", "kill", "--nemesis-interval", "4", "--time-limit", "20",
         "--no-progress", "--store", str(store), "--seed", "7", *extra],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    runs = sorted(p for p in store.glob("*/*") if p.is_dir() and not p.is_symlink())
    assert runs, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = runs[-1]
    return (
        proc.returncode,
        json.loads((run / "results.json").read_text()),
        json.loads((run / "test.json").read_text()),
        run,
    )


def test_dledger_java_campaign_with_kills_on_the_lab(lab: Any, tmp_path: Path) -> None:
    """A short real campaign: DLedger 0.4.3 on five lab hosts, the leader or others killed.

    It must reach a verdict (valid or a real anomaly, never "could not judge"), with acked
    appends, at least one kill, every node read at the end, and test.json naming the
    DLedger jar that ran with its checksum."""
    code, results, test, run = _campaign(lab, tmp_path)
    assert code in (0, 1), (code, results.get("run"))
    assert results["valid"] in (True, False)
    hist = [json.loads(ln) for ln in (run / "history.jsonl").open()]
    ok = sum(1 for o in hist if o["type"] == "ok" and o["f"] == "append")
    assert ok > 50, ok
    kills = [o for o in hist if o["process"] == "nemesis" and o["f"] == "start-kill"
             and o["type"] == "info" and (o["value"] or {}).get("killed")]  # fmt: skip
    assert kills, "no kill landed"
    finals = {o["node"] for o in hist if o["f"] == "read" and o["type"] == "ok"
              and isinstance(o["value"], dict) and "end" in o["value"]}  # fmt: skip
    assert finals == {"n1", "n2", "n3", "n4", "n5"}, finals
    art = test["artifacts"]
    assert art["dledger"] == "0.4.3"
    jars = {a["coordinate"]: a["sha256"] for a in art["artifacts"]}
    assert len(jars["io.openmessaging.storage:dledger:0.4.3"]) == 64


def test_converged_only_when_every_member_has_the_leaders_log_committed() -> None:
    from harness.dbs.dledger_java import converged_look

    def st(role: str, end: int, committed: int, term: int = 3, leader: str = "n1") -> dict:
        return {"role": role, "term": term, "leader": leader, "ledgerEndIndex": end,
                "committedIndex": committed}  # fmt: skip

    good = {"n1": st("leader", 9, 9), "n2": st("follower", 9, 9), "n3": st("follower", 9, 9)}
    c = converged_look(good)
    assert c.converged and c.token == ("n1", 3, 9)
    # a restarted member whose committed index is still -1 (DLedger keeps it in memory)
    assert not converged_look({**good, "n3": st("follower", 9, -1)}).converged
    assert "n3" in (converged_look({**good, "n3": st("follower", 7, 7)}).why or "")
    assert not converged_look({**good, "n2": None}).converged
    assert not converged_look({**good, "n2": st("leader", 9, 9, term=4, leader="n2")}).converged
    assert not converged_look({**good, "n2": st("follower", 9, 9, term=2)}).converged
