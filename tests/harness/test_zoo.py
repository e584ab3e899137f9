"""The zoo: pure table/verdict/median logic, and a real quick zoo on the lab."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.core.errors import ConfigError
from harness.zoo.campaign import (
    CORRECT,
    DEFAULT_CAMPAIGN,
    HA_CAMPAIGN,
    PROFILES,
    ProfileSchedule,
    RunRecord,
    bug_mode,
    build_zoo_package,
    campaign_command,
    describe_campaign,
    first_anomaly_seconds,
    profile_steps,
    read_op_times,
    render_table,
    run_seeds,
    select_targets,
    summarize,
    summary_json,
    zoo,
    zoo_bugs,
    zoo_exit_code,
)


def rec(bug: str | None, run: int, valid: object, first: float | None = None,
        kinds: tuple[str, ...] = ()) -> RunRecord:
    return RunRecord(bug=bug, run=run, seed=7 + run, valid=valid, kinds=list(kinds),
                     first_anomaly_s=first, store=f"store/zoo-{bug or 'correct'}/r{run}")


# --------------------------------------------------------------------------- pure logic


def test_bug_list_is_read_from_the_node_in_both_modes() -> None:
    from node_impl.bugs import BUGS, HA_BUGS

    bugs = zoo_bugs()
    assert bugs == [*BUGS, *HA_BUGS]
    assert bug_mode("stale-read") == "dledger" and bug_mode("ha-ack-on-send") == "ha"


def test_select_targets_puts_each_modes_correct_node_first_and_keeps_list_order() -> None:
    avail = ["a", "b", "c", "ha-x", "ha-y"]
    assert select_targets(avail, None) == [("dledger", None), ("dledger", "a"), ("dledger", "b"),
                                           ("dledger", "c"), ("ha", None), ("ha", "ha-x"),
                                           ("ha", "ha-y")]
    assert select_targets(avail, "c, a,a") == [("dledger", None), ("dledger", "a"), ("dledger", "c")]
    assert select_targets(avail, "none") == [("dledger", None)]
    assert select_targets(avail, "ha-y") == [("dledger", None), ("ha", None), ("ha", "ha-y")]
    with pytest.raises(ConfigError, match="unknown bug 'zz'"):
        select_targets(avail, "a,zz")
    with pytest.raises(ConfigError, match="empty"):
        select_targets(avail, " , ")


def test_each_mode_has_its_own_correct_row() -> None:
    records = [rec(None, 0, True), RunRecord(bug=None, run=0, seed=7, valid=False, mode="ha",
                                             kinds=["lost-ack"]),
               RunRecord(bug="ha-x", run=0, seed=7, valid=False, mode="ha", kinds=["lost-ack"])]
    rows = summarize(records)
    assert [r.label for r in rows] == [CORRECT, "(correct, ha)", "ha-x"]
    assert [r.status for r in rows] == ["ok", "FALSE ALARM", "found"]
    assert zoo_exit_code(rows) == 1
    text = describe_campaign(HA_CAMPAIGN)
    assert "mode=ha" in text and "overlap=2" in text and "partition-leader,failover" in text


def test_a_campaign_without_profiles_keeps_the_stock_schedule_with_its_overlap() -> None:
    pkg = build_zoo_package(HA_CAMPAIGN, 5)
    assert pkg.schedule.overlap == 2 and set(pkg.schedule.kinds) == {"partition", "failover"}
    assert [op.f for op in pkg.final_ops] == ["stop-partition", "stop-failover"]


def test_seeds_are_derived_from_the_base_seed() -> None:
    assert run_seeds(41, 3) == [41, 42, 43]


def test_first_anomaly_is_the_earliest_op_named_by_any_example() -> None:
    anomalies = {"lost-ack": [{"indexes": [10, 12]}, {"indexes": [30]}],
                 "nonlinearizable": [{"indexes": [5, 40], "op": {"index": 1}}],
                 "counted-only": 3}
    times = {5: 9_000_000_000, 10: 2_500_000_000, 12: 1, 30: 7, 40: 8}
    # 12 -> 1 ns is the earliest; ops not in the map are ignored
    assert first_anomaly_seconds(anomalies, times) == pytest.approx(1e-9)
    assert first_anomaly_seconds(anomalies, {5: 3_000_000_000}) == pytest.approx(3.0)
    assert first_anomaly_seconds({}, times) is None
    assert first_anomaly_seconds({"x": [{"why": "no indexes"}]}, times) is None


def test_read_op_times_keeps_wanted_ops_and_skips_torn_lines(tmp_path: Path) -> None:
    lines = [json.dumps({"index": i, "time": 1000 * i, "type": "invoke", "process": 0, "f": "read"})
             for i in range(5)]
    (tmp_path / "history.jsonl").write_text("\n".join(lines) + '\n{"index": 5, "ti')
    assert read_op_times(tmp_path, {1, 3, 5}) == {1: 1000, 3: 3000}
    assert len(read_op_times(tmp_path)) == 5
    assert read_op_times(tmp_path / "missing") == {}


def test_summary_counts_finds_medians_and_statuses() -> None:
    records = [
        rec(None, 0, True), rec(None, 1, True), rec(None, 2, True),
        rec("a", 0, False, 4.0, ("lost-ack",)), rec("a", 1, True),
        rec("a", 2, False, 10.0, ("nonlinearizable", "lost-ack")),
        rec("b", 0, True), rec("b", 1, True), rec("b", 2, "unknown"),
        rec("c", 0, "unknown"), rec("c", 1, "unknown"), rec("c", 2, "unknown"),
    ]
    rows = {r.label: r for r in summarize(records)}
    assert list(rows) == [CORRECT, "a", "b", "c"]
    a = rows["a"]
    assert (a.invalid, a.valid, a.unknown, a.status) == (2, 1, 0, "found")
    assert a.median_first_s == pytest.approx(7.0)
    assert a.kinds == ["lost-ack", "nonlinearizable"]
    assert len(a.stores) == 3
    assert rows["b"].status == "ESCAPED" and rows["b"].median_first_s is None
    assert rows["c"].status == "unknown"       # never finished: not evidence of escape
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
    records = [rec(None, 0, True), rec("a", 0, False, 2.25, ("lost-ack",)), rec("b", 0, True),
               rec("b", 1, "unknown")]
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
    doc = summary_json(rows, records, campaign=DEFAULT_CAMPAIGN, base_seed=7, runs=2,
                       exit_code=zoo_exit_code(rows), lab="zoo")
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
    assert "mixed" in text and ",".join(PROFILES) in text


class _Ctx:
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    db = None


class _LeaderDB:
    """Reports a fixed leader: enough for the pure side-picking of the rejoin profile."""

    def __init__(self, leader: str) -> None:
        self.leader = leader

    def primaries(self, ctx: object) -> list[str]:
        return [self.leader]


class _LedCtx:
    nodes = _Ctx.nodes

    def __init__(self, leader: str) -> None:
        self.db = _LeaderDB(leader)
        self.stop = threading.Event()


def test_every_profile_heals_what_it_breaks() -> None:
    for name in PROFILES:
        steps = profile_steps(name, _Ctx.nodes, random.Random(1), 2.5)
        fs = [f for _, f, _ in steps]
        assert all(w >= 0 for w, _, _ in steps)
        for kind in ("partition", "kill", "clock", "pause", "lull"):
            assert fs.count(f"start-{kind}") <= fs.count(f"stop-{kind}"), (name, fs)
            if f"start-{kind}" in fs:
                assert fs.index(f"stop-{kind}") > fs.index(f"start-{kind}"), (name, fs)
        for _, f, v in steps:
            if callable(v):
                v = v(_Ctx())
            if f == "start-partition" and v["shape"] != "leader":
                assert set(v["grudge"]) == set(_Ctx.nodes)


def _sides(grudge: dict[str, list[str]]) -> set[frozenset[str]]:
    return {frozenset([n, *(m for m in grudge if m not in grudge[n] and m != n)]) for n in grudge}


def test_rejoin_profile_restarts_the_new_leaders_last_voter_beside_the_sleepers() -> None:
    for seed in range(20):
        steps = profile_steps("rejoin", _Ctx.nodes, random.Random(seed), 2.5)
        assert [f for _, f, _ in steps] == ["start-pause", "stop-pause", "start-partition",
                                            "start-kill", "stop-kill", "stop-partition"]
        # The first step lands while n3 leads: n3 and one other sleep.
        paused = steps[0][2](_LedCtx("n3"))["nodes"]
        assert paused[0] == "n3" and len(paused) == 2
        voters = [n for n in _Ctx.nodes if n not in paused]
        new_leader = voters[seed % 3]
        cut = steps[2][2](_LedCtx(new_leader))
        victim = steps[3][2](_LedCtx(new_leader))["nodes"]
        assert len(victim) == 1 and victim[0] in voters and victim[0] != new_leader
        sides = _sides(cut["grudge"])
        assert frozenset([*paused, victim[0]]) in sides
        assert len(sides) == 2 and any(new_leader in s and len(s) == 2 for s in sides)
    # With nobody leading (or no way to ask), the profile still picks valid sides.
    steps = profile_steps("rejoin", _Ctx.nodes, random.Random(1), 2.5)
    assert len(steps[0][2](_Ctx())["nodes"]) == 2
    assert len(_sides(steps[2][2](_Ctx())["grudge"])) == 2


def test_profile_schedule_builds_leader_dependent_ops_when_they_land() -> None:
    sch = ProfileSchedule(("rejoin",), hold=2.5, rng=random.Random(3))
    wait, make = sch.next(_Ctx())
    assert callable(make) and wait >= 0
    op = make(_LedCtx("n2"))
    assert op.f == "start-pause" and op.process == "nemesis" and "n2" in op.value["nodes"]
    _, stop = sch.next(_Ctx())
    assert not callable(stop) and stop.f == "stop-pause"
    lease = profile_steps("lease", _Ctx.nodes, random.Random(2), 2.5)
    assert lease[0][1] == "start-clock" and lease[0][2]["offset_ms"] < -10_000
    assert lease[1][2] == {"shape": "leader"}
    with pytest.raises(ConfigError, match="unknown fault profile"):
        profile_steps("nope", _Ctx.nodes, random.Random(1), 2.5)


def test_profile_schedule_cycles_in_order_and_is_seeded() -> None:
    def ops(seed: int) -> list[tuple[float, str, object]]:
        sch = ProfileSchedule(PROFILES, hold=2.5, rng=random.Random(seed))
        out = []
        for _ in range(40):
            wait, op = sch.next(_Ctx())
            if callable(op):
                op = op(_Ctx())
            assert op.type == "invoke" and op.process == "nemesis"
            out.append((wait, op.f, op.value))
        return out

    a = ops(5)
    assert a == ops(5) and a != ops(6)
    first = [f for _, f, _ in a]
    n_lease = len(profile_steps("lease", _Ctx.nodes, random.Random(0), 2.5))
    assert first[0] == "start-clock" and first[n_lease] == "start-pause"
    with pytest.raises(ConfigError):
        ProfileSchedule((), hold=1.0, rng=random.Random(0))


def test_cli_rejects_an_unknown_bug_before_touching_any_lab() -> None:
    res = CliRunner().invoke(zoo, ["--bugs", "no-such-bug", "--lab", "no-such-lab"],
                             standalone_mode=False)
    assert isinstance(res.exception, ConfigError)
    assert "unknown bug 'no-such-bug'" in str(res.exception)


# --------------------------------------------------------------------------- the real thing


@pytest.mark.integration
@pytest.mark.lab
@pytest.mark.slow
def test_quick_zoo_finds_two_bugs_and_no_false_alarm(lab, tmp_path: Path) -> None:
    out = tmp_path / "zoo.json"
    res = CliRunner().invoke(
        zoo, ["--quick", "--bugs", "ack-before-quorum,stale-read", "--lab", lab.name,
              "--store", str(tmp_path / "store"), "--seed", "11", "--json", str(out)],
        standalone_mode=False)
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
def test_figure8_profile_finds_commit_old_term_and_passes_the_correct_node(lab, tmp_path: Path) -> None:
    """Raft's Figure 8 on a real 5-node cluster: a commit by counting, read, then overwritten.

    Two runs each (the bug was found in 7 of 8 tuning runs; one is allowed to miss).
    """
    out = tmp_path / "zoo.json"
    res = CliRunner().invoke(
        zoo, ["--runs", "2", "--bugs", "commit-old-term", "--profiles", "figure8",
              "--time-limit", "24", "--lab", lab.name, "--store", str(tmp_path / "store"),
              "--seed", "11", "--json", str(out)],
        standalone_mode=False)
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


def test_figure8_profile_stages_the_old_tail_the_lone_new_leader_and_its_comeback() -> None:
    for seed in range(10):
        steps = profile_steps("figure8", _Ctx.nodes, random.Random(seed), 0.1)
        assert [f for _, f, _ in steps] == [
            "start-kill", "start-lull", "start-pause", "stop-kill", "start-partition", "stop-lull",
            "start-lull", "stop-pause", "start-kill", "stop-partition", "stop-lull", "stop-kill"]
        # The kill lands while n2 leads: a majority without n2 and one partner dies.
        majority = steps[0][2](_LedCtx("n2"))["nodes"]
        assert len(majority) == 3 and "n2" not in majority
        old = steps[2][2](_Ctx())["nodes"]
        assert sorted(old + majority) == sorted(_Ctx.nodes) and "n2" in old
        # The majority elects L; L is cut off alone.
        lone = majority[seed % 3]
        cut = steps[4][2](_LedCtx(lone))
        assert frozenset([lone]) in _sides(cut["grudge"])
        assert frozenset(n for n in _Ctx.nodes if n != lone) in _sides(cut["grudge"])
        # Whoever leads beside L, the old side is killed as L comes back.
        killed = steps[8][2](_LedCtx(old[0]))["nodes"]
        assert sorted(killed) == sorted(old)
    # Without a DB that names its leader, the profile still picks valid sides and does not wait.
    steps = profile_steps("figure8", _Ctx.nodes, random.Random(1), 2.5)
    assert len(steps[0][2](_Ctx())["nodes"]) == 3
    t0 = time.monotonic()
    assert len(_sides(steps[4][2](_Ctx())["grudge"])) == 2
    assert time.monotonic() - t0 < 1.0


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
