"""The zoo: pure table/verdict/median logic, and a real quick zoo on the lab.

The fault profiles it cycles are tested in tests/nemesis/test_profiles.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli.zoo import zoo
from harness.core.errors import ConfigError
from harness.core.remote import Host
from harness.zoo.summary import (
    RunRecord,
    first_anomaly_seconds,
    read_op_times,
    render_table,
    summarize,
    summary_json,
    zoo_exit_code,
)
from harness.zoo.targets import (
    CAMPAIGNS,
    CORRECT,
    DEFAULT_CAMPAIGN,
    HA_CAMPAIGN,
    PROFILES,
    bug_mode,
    build_zoo_package,
    campaign_command,
    describe_campaign,
    run_seeds,
    select_targets,
    split_vm_targets,
    zoo_bugs,
    zoo_spec,
)


def rec(
    bug: str | None,
    run: int,
    valid: object,
    first: float | None = None,
    kinds: tuple[str, ...] = (),
) -> RunRecord:
    return RunRecord(
        bug=bug,
        run=run,
        seed=7 + run,
        valid=valid,
        kinds=list(kinds),
        first_anomaly_s=first,
        store=f"store/zoo-{bug or 'correct'}/r{run}",
    )


# --------------------------------------------------------------------------- pure logic


def _lab_hosts(n: int) -> list[Host]:
    """Hosts as a namespace lab declares them (libfaketime clocks, FUSE)."""
    return [
        Host(
            name=f"n{i}", address=f"127.0.0.{10 + i}", extras={"fuse": True, "faketime_file": "/f"}
        )
        for i in range(1, n + 1)
    ]


def test_bug_list_is_read_from_the_node_in_both_modes() -> None:
    from harness.zoo.targets import NO_CAMPAIGN_YET
    from node_impl.bugs import BROKER_BUGS, BUGS, HA_BUGS

    bugs = zoo_bugs()
    assert bugs == [*BUGS, *HA_BUGS, *(b for b in BROKER_BUGS if b not in NO_CAMPAIGN_YET)]
    assert bug_mode("broker-stale-master") == "broker"
    assert bug_mode("broker-divided-from-start") == "upgrade"
    assert bug_mode("stale-read") == "dledger" and bug_mode("ha-ack-on-send") == "ha"


def test_disk_bugs_meet_the_default_campaign_on_any_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    """skip-fsync needed a VM's power cut; the default campaign's disk profile reaches it
    (and the three disk bugs) through the lazy fs, so a namespace lab leaves none out."""
    import harness.zoo.targets as t
    from nemesis.disk import DISK_KINDS

    disk_bugs = ("skip-fsync", "skip-crc", "trust-torn-tail", "trust-term-file")
    assert all(bug_mode(b) == "dledger" and b in zoo_bugs() for b in disk_bugs)
    spec = zoo_spec(DEFAULT_CAMPAIGN, _lab_hosts(5), "dledger", None, 1)
    assert "disk" in spec.options["deck"]["scripts"]
    assert set(DISK_KINDS) <= set(spec.nemesis)
    targets = select_targets(zoo_bugs(), None)
    assert split_vm_targets(targets, vm=False) == (targets, [])
    # The VM-only mechanism stays for a bug only a power cut reaches.
    monkeypatch.setattr(t, "POWER_BUGS", frozenset({"skip-fsync"}))
    targets = select_targets(["a", "skip-fsync"], None)
    assert ("power", "skip-fsync") in targets and ("power", None) in targets
    kept, left_out = split_vm_targets(targets, vm=False)
    assert kept == [("dledger", None), ("dledger", "a")] and left_out == ["skip-fsync"]
    assert split_vm_targets(targets, vm=True) == (targets, [])
    assert CAMPAIGNS["power"].nemesis == ("power",)


def test_select_targets_puts_each_modes_correct_node_first_and_keeps_list_order() -> None:
    avail = ["a", "b", "c", "ha-x", "ha-y"]
    assert select_targets(avail, None) == [
        ("dledger", None),
        ("dledger", "a"),
        ("dledger", "b"),
        ("dledger", "c"),
        ("ha", None),
        ("ha", "ha-x"),
        ("ha", "ha-y"),
    ]
    assert select_targets(avail, "c, a,a") == [
        ("dledger", None),
        ("dledger", "a"),
        ("dledger", "c"),
    ]
    assert select_targets(avail, "none") == [("dledger", None)]
    assert select_targets(avail, "ha-y") == [("ha", None), ("ha", "ha-y")]
    with pytest.raises(ConfigError, match="unknown bug 'zz'"):
        select_targets(avail, "a,zz")
    with pytest.raises(ConfigError, match="empty"):
        select_targets(avail, " , ")


def test_each_mode_has_its_own_correct_row() -> None:
    records = [
        rec(None, 0, True),
        RunRecord(bug=None, run=0, seed=7, valid=False, mode="ha", kinds=["lost-ack"]),
        RunRecord(bug="ha-x", run=0, seed=7, valid=False, mode="ha", kinds=["lost-ack"]),
    ]
    rows = summarize(records)
    assert [r.label for r in rows] == [CORRECT, "(correct, ha)", "ha-x"]
    assert [r.status for r in rows] == ["ok", "FALSE ALARM", "found"]
    assert zoo_exit_code(rows) == 1
    text = describe_campaign(HA_CAMPAIGN)
    assert "mode=ha" in text and "overlap=2" in text and "partition-leader,failover" in text


def test_a_campaign_without_profiles_keeps_the_stock_schedule_with_its_overlap() -> None:
    from nemesis.package import Schedule

    pkg = build_zoo_package(HA_CAMPAIGN, _lab_hosts(5), 5)
    assert isinstance(pkg.schedule, Schedule)
    assert pkg.schedule.overlap == 2 and set(pkg.schedule.kinds) == {"partition", "failover"}
    assert [op.f for op in pkg.final_ops] == ["stop-partition", "stop-failover"]


def test_seeds_are_derived_from_the_base_seed() -> None:
    assert run_seeds(41, 3) == [41, 42, 43]


def test_first_anomaly_is_the_earliest_op_named_by_any_example() -> None:
    anomalies = {
        "lost-ack": [{"indexes": [10, 12]}, {"indexes": [30]}],
        "nonlinearizable": [{"indexes": [5, 40], "op": {"index": 1}}],
        "counted-only": 3,
    }
    times = {5: 9_000_000_000, 10: 2_500_000_000, 12: 1, 30: 7, 40: 8}
    # 12 -> 1 ns is the earliest; ops not in the map are ignored
    assert first_anomaly_seconds(anomalies, times) == pytest.approx(1e-9)
    assert first_anomaly_seconds(anomalies, {5: 3_000_000_000}) == pytest.approx(3.0)
    assert first_anomaly_seconds({}, times) is None
    assert first_anomaly_seconds({"x": [{"why": "no indexes"}]}, times) is None


def test_read_op_times_keeps_wanted_ops_and_skips_torn_lines(tmp_path: Path) -> None:
    lines = [
        json.dumps({"index": i, "time": 1000 * i, "type": "invoke", "process": 0, "f": "read"})
        for i in range(5)
    ]
    (tmp_path / "history.jsonl").write_text("\n".join(lines) + '\n{"index": 5, "ti')
    assert read_op_times(tmp_path, {1, 3, 5}) == {1: 1000, 3: 3000}
    assert len(read_op_times(tmp_path)) == 5
    assert read_op_times(tmp_path / "missing") == {}


def test_summary_counts_finds_medians_and_statuses() -> None:
    records = [
        rec(None, 0, True),
        rec(None, 1, True),
        rec(None, 2, True),
        rec("a", 0, False, 4.0, ("lost-ack",)),
        rec("a", 1, True),
        rec("a", 2, False, 10.0, ("nonlinearizable", "lost-ack")),
        rec("b", 0, True),
        rec("b", 1, True),
        rec("b", 2, "unknown"),
        rec("c", 0, "unknown"),
        rec("c", 1, "unknown"),
        rec("c", 2, "unknown"),
    ]
    rows = {r.label: r for r in summarize(records)}
    assert list(rows) == [CORRECT, "a", "b", "c"]
    a = rows["a"]
    assert (a.invalid, a.valid, a.unknown, a.status) == (2, 1, 0, "found")
    assert a.median_first_s == pytest.approx(7.0)
    assert a.kinds == ["lost-ack", "nonlinearizable"]
    assert len(a.stores) == 3
    assert rows["b"].status == "ESCAPED" and rows["b"].median_first_s is None
    assert rows["c"].status == "unknown"  # never finished: not evidence of escape
    assert rows[CORRECT].status == "ok"
    assert zoo_exit_code(list(rows.values())) == 1


def test_exit_codes() -> None:
    found = [rec(None, 0, True), rec("a", 0, False, 1.0, ("lost-ack",))]
    assert zoo_exit_code(summarize(found)) == 0
    # one unknown run of a found bug: nothing failed, but not everything finished
    assert zoo_exit_code(summarize([*found, rec("a", 1, "unknown")])) == 2
    assert zoo_exit_code(summarize([*found, rec("c", 0, "unknown")])) == 2
    # a false alarm beats everything, even with every bug found
    alarm = summarize([*found, rec(None, 1, False, 3.0, ("lost-ack",))])
    assert alarm[0].status == "FALSE ALARM" and zoo_exit_code(alarm) == 1
    assert zoo_exit_code(summarize([rec(None, 0, True), rec("b", 0, True)])) == 1
    assert zoo_exit_code([]) == 2


def test_table_and_json_name_every_target() -> None:
    records = [
        rec(None, 0, True),
        rec("a", 0, False, 2.25, ("lost-ack",)),
        rec("b", 0, True),
        rec("b", 1, "unknown"),
    ]
    rows = summarize(records)
    table = render_table(rows)
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["bug", "found"]
    assert set(lines[1]) <= {"-", " "}
    body = {ln.split()[0]: ln for ln in lines[2:]}
    assert "0/1" in body[CORRECT] and " ok " in body[CORRECT]
    assert "1/1" in body["a"] and "2.2" in body["a"] and "lost-ack" in body["a"]
    assert "0/2 (1 unknown)" in body["b"] and "ESCAPED" in body["b"]
    assert "store/zoo-a/r0" in body["a"]
    doc = summary_json(
        rows,
        records,
        campaign=DEFAULT_CAMPAIGN,
        base_seed=7,
        runs=2,
        exit_code=zoo_exit_code(rows),
        lab="zoo",
    )
    assert doc["exit_code"] == 1 and doc["escaped"] == ["b"] and doc["false_alarms"] == 0
    assert [r["label"] for r in doc["rows"]] == [CORRECT, "a", "b"]
    assert doc["runs"][1]["seed"] == 7 and doc["runs"][1]["first_anomaly_s"] == 2.25
    assert doc["command"].startswith("splitbrain zoo") and "--lab zoo" in doc["command"]
    json.dumps(doc)  # serializable


def test_campaign_command_reproduces_one_run() -> None:
    line = campaign_command(DEFAULT_CAMPAIGN, bug="stale-read", seed=3, lab="zoo")
    assert line == "splitbrain zoo --runs 1 --bugs stale-read --seed 3 --lab zoo"
    assert "--time-limit 9 " in campaign_command(DEFAULT_CAMPAIGN.with_time_limit(9), seed=1)
    text = describe_campaign(DEFAULT_CAMPAIGN)
    assert "mixed" in text and "deck of every fault script" in text and "1 pass" in text
    text = describe_campaign(DEFAULT_CAMPAIGN.with_profiles(PROFILES))
    assert ",".join(PROFILES) in text and "cycled" in text


def test_node_src_ships_another_node_tree_and_the_repro_command_says_so(tmp_path: Path) -> None:
    from harness.zoo.mutants.plan import with_node_src

    c = with_node_src(DEFAULT_CAMPAIGN, tmp_path / "node_impl")
    assert f"--node-src {tmp_path / 'node_impl'} " in campaign_command(c, seed=3)
    assert "--node-src" not in campaign_command(DEFAULT_CAMPAIGN, seed=3)
    res = CliRunner().invoke(zoo, ["--node-src", str(tmp_path / "nope"), "--lab", "no-such"])
    assert res.exit_code != 0 and "nope" in res.output
    res = CliRunner().invoke(zoo, ["--mutants", "--node-src", str(tmp_path), "--lab", "no-such"])
    assert res.exit_code != 0 and "--node-src do not apply to --mutants" in res.output


def test_cli_rejects_an_unknown_bug_before_touching_any_lab() -> None:
    res = CliRunner().invoke(
        zoo, ["--bugs", "no-such-bug", "--lab", "no-such-lab"], standalone_mode=False
    )
    assert isinstance(res.exception, ConfigError)
    assert "unknown bug 'no-such-bug'" in str(res.exception)


# --------------------------------------------------------------------------- the real thing


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_quick_zoo_finds_two_bugs_and_no_false_alarm(lab, tmp_path: Path) -> None:
    out = tmp_path / "zoo.json"
    res = CliRunner().invoke(
        zoo,
        [
            "--quick",
            "--bugs",
            "ack-before-quorum,stale-read",
            "--lab",
            lab.name,
            "--store",
            str(tmp_path / "store"),
            "--seed",
            "11",
            "--json",
            str(out),
        ],
        standalone_mode=False,
    )
    assert res.exception is None, res.output
    doc = json.loads(out.read_text())
    rows = {r["label"]: r for r in doc["rows"]}
    assert list(rows) == [CORRECT, "ack-before-quorum", "stale-read"], res.output
    assert rows[CORRECT]["found"] == 0 and rows[CORRECT]["status"] in ("ok", "unknown"), res.output
    for bug in ("ack-before-quorum", "stale-read"):
        assert rows[bug]["found"] == 1 and rows[bug]["status"] == "found", res.output
        assert rows[bug]["kinds"] and rows[bug]["median_first_anomaly_s"] > 0
        assert Path(rows[bug]["stores"][0], "results.json").exists()
    assert doc["false_alarms"] == 0 and doc["escaped"] == []
    assert res.return_value == doc["exit_code"] in (0, 2)
    assert [r["seed"] for r in doc["runs"]] == [11, 11, 11]
    # the printed table says the same
    table = {ln.split()[0]: ln for ln in res.stdout.splitlines() if ln and not ln.startswith("zoo")}
    assert "1/1" in table["stale-read"] and "found" in table["stale-read"]
    assert "0/1" in table[CORRECT] and "FALSE ALARM" not in res.output


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_figure8_profile_finds_commit_old_term_and_passes_the_correct_node(
    lab, tmp_path: Path
) -> None:
    """Raft's Figure 8 on a real 5-node cluster: a commit by counting, read, then overwritten.

    Two runs each (the bug was found in 7 of 8 tuning runs; one is allowed to miss).
    """
    out = tmp_path / "zoo.json"
    res = CliRunner().invoke(
        zoo,
        [
            "--runs",
            "2",
            "--bugs",
            "commit-old-term",
            "--profiles",
            "figure8",
            "--time-limit",
            "24",
            "--lab",
            lab.name,
            "--store",
            str(tmp_path / "store"),
            "--seed",
            "11",
            "--json",
            str(out),
        ],
        standalone_mode=False,
    )
    assert res.exception is None, res.output
    doc = json.loads(out.read_text())
    rows = {r["label"]: r for r in doc["rows"]}
    assert rows[CORRECT]["found"] == 0 and doc["false_alarms"] == 0, res.output
    bug = rows["commit-old-term"]
    assert bug["found"] >= 1 and bug["status"] == "found", res.output
    assert "divergent-committed" in bug["kinds"]
    assert doc["campaign"]["profiles"] == ["figure8"]
    assert "--profiles figure8" in doc["command"]
    # Every lull of every run ended: the history shows a stop-lull after each start-lull.
    for run in doc["runs"]:
        lines = Path(run["store"], "history.jsonl").read_text().splitlines()
        fs = [json.loads(line)["f"] for line in lines if '"nemesis"' in line and '"invoke"' in line]
        lulls = [f for f in fs if f.endswith("-lull")]
        assert lulls and lulls[-1] == "stop-lull" and lulls.count("start-lull") >= 2


def test_profiles_option_narrows_the_campaign_and_the_repro_command_says_so() -> None:
    c = DEFAULT_CAMPAIGN.with_profiles(["figure8", "lease"])
    assert c.profiles == ("figure8", "lease") and c.nemesis == DEFAULT_CAMPAIGN.nemesis
    assert "--profiles figure8,lease" in campaign_command(c, bug="commit-old-term", seed=3)
    assert "--profiles" not in campaign_command(DEFAULT_CAMPAIGN, seed=3)
    assert HA_CAMPAIGN.with_profiles(["lease"]) == HA_CAMPAIGN  # the stock schedule has none
    with pytest.raises(ConfigError, match="unknown fault profile.*nope"):
        DEFAULT_CAMPAIGN.with_profiles(["nope"])
    res = CliRunner().invoke(zoo, ["--profiles", "nope", "--lab", "no-such-lab-here"])
    assert res.exit_code != 0 and "nope" in (res.output + str(res.exception))


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_default_campaign_on_the_correct_node_is_valid_and_reads_the_past(
    lab, tmp_path: Path
) -> None:
    """The default campaign, shortened: motifs and profiles drawn from the deck, every
    part of the workload in the history, every check VALID on the correct node."""
    out = tmp_path / "zoo.json"
    res = CliRunner().invoke(
        zoo,
        [
            "--runs",
            "1",
            "--bugs",
            "none",
            "--time-limit",
            "40",
            "--lab",
            lab.name,
            "--store",
            str(tmp_path / "store"),
            "--seed",
            "5",
            "--json",
            str(out),
        ],
        standalone_mode=False,
    )
    assert res.exception is None, res.output
    doc = json.loads(out.read_text())
    assert doc["false_alarms"] == 0 and doc["runs"][0]["valid"] is True, res.output
    run = Path(doc["runs"][0]["store"])
    results = json.loads((run / "results.json").read_text())
    assert {"linearizable", "log-safety", "set"} <= set(results["checkers"]), results
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    ok = [o for o in ops if o["type"] == "ok" and o["process"] != "nemesis"]
    assert any(o["f"] == "read" and (o["key"] or "").startswith("a") for o in ok)
    final_set = [
        o for o in ok if o["f"] == "read" and o["key"] is None and isinstance(o["value"], list)
    ]
    assert len(final_set) == len(lab.hosts()), "one final kv-set read per node"
    faults = [o for o in ops if o["process"] == "nemesis" and o["type"] == "info"]
    whys = {str((o["value"] or {}).get("why")) for o in faults}
    motifs = ("restart-all", "elections", "stopped-leader", "rolling", "overlap")
    assert any(w.startswith(motifs) for w in whys), whys  # the seed's deck deals a motif early
    # healed: the last fault op of every kind is a stop
    last: dict[str, str] = {}
    for o in faults:
        last[o["f"].split("-", 1)[1]] = o["f"]
    assert all(f.startswith("stop-") for f in last.values()), last


def test_zoo_prints_coverage_over_its_runs_and_names_what_was_never_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27: the zoo reads each run's coverage block and tabulates it per mode."""
    from harness.cli.zoo import echo_coverage
    from harness.zoo.summary import RunRecord

    records = []
    for k, count in enumerate((0, 2)):
        store = tmp_path / f"run{k}"
        store.mkdir()
        cov = {
            "concurrent-candidates": {"count": count, "first_s": 5.0 if count else None},
            "kill-with-ops-in-flight": {"count": 0, "first_s": None},
            "unobservable": {"split-vote": "needs events:vote, which this run did not have"},
        }
        (store / "results.json").write_text(json.dumps({"valid": True, "coverage": cov}))
        records.append(RunRecord(bug=None, run=k, seed=k, valid=True, store=str(store)))
    records.append(RunRecord(bug=None, run=2, seed=2, valid=True, store=str(tmp_path / "gone")))
    doc = echo_coverage(records)
    out = capsys.readouterr().out
    assert "coverage, mode dledger, over 2 run(s)" in out
    assert "never reached: kill with acks in flight" in out
    assert "concurrent candidates" not in out.split("never reached:")[1]
    sits = doc["dledger"]["situations"]
    assert (
        sits["concurrent-candidates"]["reached"] == 1
        and sits["concurrent-candidates"]["count"] == 2
    )
    assert sits["split-vote"]["state"] == "unobservable"
    assert doc["dledger"]["never_reached"] == ["kill with acks in flight"]


def test_zoo_mutants_tabulates_the_coverage_of_its_campaign_runs(tmp_path: Path) -> None:
    """``splitbrain mutants`` keeps its records in a ledger; their campaign runs' stores are the
    runs whose coverage it prints (a mutant stopped by the unit tests has none)."""
    from harness.cli.mutants import mutant_campaign_records
    from harness.zoo.mutants.ledger import Ledger
    from harness.zoo.mutants.record import MutantRecord, StageResult
    from harness.zoo.mutants.runner import LEDGER_FILE

    ledger = Ledger(tmp_path / LEDGER_FILE)
    ok = StageResult(passed=True)
    ran = MutantRecord("m1", "d", "op", "area", "", ok, ok, StageResult(True, store="/s/run1"))
    stopped = MutantRecord("m2", "d", "op", "area", "", StageResult(passed=False))
    ledger.append(ran)
    ledger.append(stopped)
    recs = mutant_campaign_records(tmp_path)
    assert [(r.bug, r.store) for r in recs] == [("m1", "/s/run1")]
