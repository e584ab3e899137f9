"""The local and Spark engines give the same verdicts and the same evidence.

Every registered checker's example histories (``CheckerSpec.examples``: planted
anomalies) go through both engines in the default run, so a newly registered checker
is covered at once, through the driver fallback if it has no Spark implementation.
The slow tests add seeded random histories (valid, and with random sets of planted
anomalies); verdicts, anomaly kinds and, since every example list here is under the
cap, the examples themselves must be identical.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from checker.dispatch import check_history
from checker.local import check_local, plan
from checker.registry import checkers, examples, parse_settings
from checker.synth import ANOMALIES, generate
from harness.core.errors import HistoryError
from harness.core.history import PARQUET_COLUMNS, PARQUET_VALUE_COLUMNS, Op, write_parquet
from harness.core.paired import PairedHistory, pair_positions

pytestmark = [pytest.mark.spark]
slow = pytest.mark.slow


EVERY_KIND = frozenset({"log-safety"})
"""Checkers whose examples hold every anomaly and note kind they declare: the test fails
when one is missing (a kind added without a planted example), on either engine."""

SAME_EVIDENCE = frozenset({"log-safety"})
"""Checkers whose examples must be identical across engines, not only their kinds."""


def _fields() -> dict[str, dict[str, tuple[str, ...]]]:
    """Per checker that declares them, each kind's example fields, in order."""
    from checker.log_anomalies import KINDS

    return {"log-safety": {k.name: k.example for k in KINDS}}


@pytest.mark.parametrize("name", sorted(checkers()))
def test_every_registered_checker_agrees_across_engines(name: str) -> None:
    """Both engines, on each example of each registered checker: the same verdict and the
    same anomaly kinds, per checker and overall, and the planted kinds found; for the
    checkers of :data:`SAME_EVIDENCE` the same examples and stats, for those of
    :data:`EVERY_KIND` every declared kind found by some example, and examples with the
    fields their kind declares (:func:`_fields`) on both engines."""
    spec = checkers()[name]
    found = examples(spec)
    assert found, f"checker {name!r} registers no examples (CheckerSpec.examples)"
    seen: dict[str, set[str]] = {"local": set(), "spark": set()}
    fields = _fields().get(name)
    for label, (ops, options, kinds) in found.items():
        assert set(kinds) <= set(spec.anomalies), (label, "undeclared anomaly kinds")
        opts = {**options, "checks": [name]}
        local = check_history(ops, engine="local", opts=opts)
        spark = check_history(ops, engine="spark", opts=opts, master="local[1]")
        assert set(local["anomalies"]) == set(kinds), (label, local["anomalies"])
        assert local["valid"] is (not kinds), (label, local)
        assert spark["valid"] == local["valid"], label
        assert set(spark["anomalies"]) == set(local["anomalies"]), label
        assert set(spark["checkers"]) == set(local["checkers"]), label
        for run, lo in local["checkers"].items():
            assert run == name or run.startswith(f"{name}-")
            sp = spark["checkers"][run]
            assert sp["valid"] == lo["valid"], (label, run, sp)
            assert set(sp.get("anomalies") or {}) == set(lo.get("anomalies") or {}), (label, run)
            assert set(sp.get("notes") or {}) == set(lo.get("notes") or {}), (label, run)
            if name in SAME_EVIDENCE:
                for key in ("anomalies", "notes", "stats", "unknown"):
                    assert sp.get(key) == lo.get(key), (label, run, key)
            for engine, res in (("local", lo), ("spark", sp)):
                shown = {**(res.get("anomalies") or {}), **(res.get("notes") or {})}
                seen[engine] |= set(shown)
                for kind, exs in shown.items():
                    assert fields is None or all(tuple(e) == fields[kind] for e in exs), (
                        label,
                        engine,
                        kind,
                        exs[0],
                    )
    if name in EVERY_KIND:
        declared = set(spec.anomalies) | set(spec.notes)
        for engine, kinds_seen in seen.items():
            assert kinds_seen == declared, (engine, "kinds no example shows", declared - kinds_seen)


def test_a_checker_without_spark_code_gets_the_op_times_and_errors_the_local_engine_gives(
    tmp_path: Path,
) -> None:
    """Issue 45: on Spark, the driver fallback handed a generic checker every op with
    ``time = 0`` (and no error); it gets them as the local engine does, from ops and from a
    stored history alike."""
    from checker import registry
    from tests.plugins import installed

    ext = Path(__file__).resolve().parents[1] / "plugins" / "sb_ext_checker"
    extra = {"slow-writes": "sb_ext_checker.timed:SLOW_WRITES"}
    second = 1_000_000_000
    ops: list[Op] = []
    for i, (took, typ) in enumerate([(1, "ok"), (3, "ok"), (1, "fail"), (2, "ok")]):
        inv = Op("invoke", i, "write", i, key="k", time=i * 5 * second, index=len(ops))
        error = "NOT_LEADER" if typ == "fail" else None
        done = inv.complete(typ, i, error=error, time=inv.time + took * second)
        ops += [inv, done.replace(index=len(ops) + 1)]
    path = tmp_path / "history.parquet"
    write_parquet(ops, path)
    with installed(ext, "splitbrain.checkers", tmp_path, registry.refresh, extra):
        assert registry.checkers()["slow-writes"].spark is None
        opts = {"checks": ["slow-writes"]}
        local = check_history(ops, engine="local", opts=opts)
        assert local["checkers"]["slow-writes"]["anomalies"]["slow-write"] == [
            {"indexes": [2, 3], "took_ns": 3 * second},
            {"indexes": [6, 7], "took_ns": 2 * second},
        ]
        assert local["checkers"]["slow-writes"]["notes"] == {
            "write-error": [{"index": 5, "error": "NOT_LEADER"}]
        }
        for source in (ops, str(path)):
            spark = check_history(source, engine="spark", opts=opts, master="local[1]")
            assert spark["checkers"] == local["checkers"]
            assert spark["anomalies"] == local["anomalies"]


@pytest.fixture(scope="module")
def spark() -> Any:
    from checker.spark.session import get_session

    return get_session()


def _spark(ops: list[Op]) -> dict[str, Any]:
    from checker.spark import check_spark

    return check_spark(ops)


def assert_same(local: dict[str, Any], spark: dict[str, Any]) -> None:
    assert spark["valid"] == local["valid"]
    assert set(spark["checkers"]) == set(local["checkers"])
    assert spark["anomalies"] == local["anomalies"]
    for name, lo in local["checkers"].items():
        sp = spark["checkers"][name]
        assert sp["valid"] == lo["valid"], name
        assert sp.get("anomalies", {}) == lo.get("anomalies", {}), name
        assert sp.get("notes", {}) == lo.get("notes", {}), name
        if name == "log-safety":
            assert sp["stats"] == lo["stats"]
            assert sp["unknown"] == lo["unknown"]
        else:
            assert sp["failures"] == lo["failures"]
            assert sp["keys"] == lo["keys"]


def test_jsonl_converted_in_parts_agrees_with_local(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSONL history converted by two processes, one span of lines each, is one frame to
    Spark: anomalies whose records fall in both parts are found as from one file."""
    from checker.spark import check_spark
    from harness.core import history, parquet
    from harness.core.jsonl import write_jsonl

    kinds = ["duplicate-payload", "lost-ack", "committed-regress"]
    ops = list(generate(1500, workload="append", anomaly=kinds, seed=8))
    src = tmp_path / "h.jsonl"
    write_jsonl(ops, src)
    monkeypatch.setattr(parquet, "PARALLEL_BYTES", src.stat().st_size // 2)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    made: list[int] = []

    def parts(*a: Any, **kw: Any) -> Any:
        files = parquet.jsonl_to_parquet_parts(*a, **kw)
        made.append(len(files))
        return files

    monkeypatch.setattr(history, "jsonl_to_parquet_parts", parts)
    res = check_spark(src)
    assert made == [2]
    local = check_local(ops)
    assert set(local["anomalies"]) == set(kinds)
    assert_same(local, res)


@slow
@pytest.mark.parametrize("columns", ["typed", "value-only"])
def test_every_anomaly_at_once(spark: Any, tmp_path: Path, columns: str) -> None:
    """Also on a Parquet file from before the typed value columns: the engine derives them."""
    from checker.spark import check_spark

    ops = list(generate(1500, workload="mixed", anomaly=ANOMALIES, seed=11))
    local = check_local(ops)
    assert set(local["anomalies"]) == set(ANOMALIES)
    path = tmp_path / "h.parquet"
    write_parquet(ops, path)
    if columns == "value-only":
        pq.write_table(pq.read_table(path, columns=list(PARQUET_COLUMNS)), path)
        assert not set(PARQUET_VALUE_COLUMNS) & set(pq.read_schema(path).names)
    assert_same(local, check_spark(str(path)))


@slow
def test_labels_and_pairs_agree_with_the_local_plan_across_window_blocks(spark: Any) -> None:
    """The first pass labels ops as the local engine's plan does (the same claims: keyed
    appends are kv, not log) and pairs completions with their invocations; with windows
    cut into blocks of 8 history indexes, so that nearly every record is a block edge,
    it answers as one window (the rows it keeps held as objects, or serialized)."""
    from pyspark.sql import functions as F

    from checker.spark.claims import build_labels
    from checker.spark.input import to_parquet, with_typed
    from checker.spark.kept import kept_level
    from checker.spark.pairing import Pairing, part_counts
    from checker.spark.session import work_dir
    from checker.spark.tuning import SHORT_CHECK_ROWS

    ops = list(generate(600, workload="mixed", seed=9))
    extra = [
        Op("invoke", 90, "append", "x", key="k1"),
        Op("ok", 90, "append", "x", key="k1"),
        Op("invoke", 91, "add", 3),
        Op("ok", 91, "add", 3),
        Op("invoke", 92, "read", None),
        Op("ok", 92, "read", [3]),
        Op("invoke", 93, "read", None),
        Op("info", 93, "read", None),
        Op("invoke", 94, "txn", [["r", "x", None]]),
    ]
    ops = [op.replace(index=i) for i, op in enumerate(ops + extra)]
    specs = checkers()
    settings = parse_settings({}, specs=specs)
    history = PairedHistory.of(ops)
    want = {
        (p.spec.name, p.part): len(history.subset(p.pairs)) for p in plan(history, settings, specs)
    }
    assert {"linearizable", "log-safety", "set"} <= {n for n, _ in want}
    inv = next(
        i for i, op in enumerate(ops) if op.f == "append" and op.type == "invoke" and i > 300
    )
    bad = [op.replace(index=i) for i, op in enumerate(ops[: inv + 1] + [ops[inv]] + ops[inv + 1 :])]
    with pytest.raises(HistoryError) as lo:
        check_local(bad)
    chosen = list(specs.values())
    configs = {s.name: settings.config(s.name) for s in chosen}

    def first_pass(history: list[Op], block: int) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
        fs = sorted({op.f for op in history})
        labels = build_labels(chosen, configs, fs, "add" in fs)
        hist = spark.read.parquet(to_parquet(history, work_dir()))
        # the kept rows as objects, as for a short check, or serialized, as for a long one
        level = kept_level(1 if block > 3 else SHORT_CHECK_ROWS + 1)
        p = Pairing(
            with_typed(F, hist).where(F.col("process") != "nemesis"),
            labels,
            fs,
            level,
            block=block,
            max_index=len(history) - 1,
        )
        try:
            s = p.summary()
            counts = {
                (labels.checkers[c].name, labels.parts[c][q]): n
                for (c, q), n in part_counts(s, labels).items()
            }
            return s | {"counts": counts}, sorted(tuple(r) for r in p.paired.collect())
        finally:
            p.close()

    whole, pairs = first_pass(ops, 40)  # one block: no edge pass at all
    cut, cut_pairs = first_pass(ops, 3)
    assert whole["counts"] == want
    assert whole["records"] == len(ops)
    assert cut == whole and cut_pairs == pairs and whole["bad"] is None
    expect = {
        (ops[i].index, ops[c].index)
        for i, c in pair_positions(ops).items()
        if c is not None
        and ops[i].key is None
        and (
            (ops[i].f == "append" and ops[c].type in ("ok", "fail"))
            or (ops[i].f == "read" and ops[c].type == "ok")
        )
    }
    assert {(r[1], r[2]) for r in pairs} == expect and len(pairs) == len(expect)
    whole, _ = first_pass(bad, 40)
    cut, _ = first_pass(bad, 3)
    assert whole["bad"] == cut["bad"] == lo.value.index and whole["why"] == cut["why"]


@slow
@pytest.mark.parametrize("seed", [1, 2])
def test_random_histories(spark: Any, seed: int) -> None:
    rng = random.Random(seed)
    kinds = rng.sample(ANOMALIES, rng.randrange(0, 4))
    ops = list(
        generate(
            rng.randrange(600, 1200),
            workload="mixed",
            anomaly=kinds,
            seed=seed,
            nodes=rng.choice([3, 5]),
            concurrency=rng.choice([3, 10]),
        )
    )
    local = check_local(ops)
    assert set(local["anomalies"]) == set(kinds)
    assert_same(local, _spark(ops))


def test_a_check_leaves_no_blocks_behind(spark: Any) -> None:
    """The log-safety job keeps its samples and observations as local checkpoints, which
    Spark would otherwise free only when its cleaner notices; a process checking run
    after run must not pile them up."""
    ops = list(generate(600, workload="mixed", anomaly=["lost-ack"], seed=3))
    assert _spark(ops)["checkers"]["log-safety"]["valid"] is False
    cached = spark.sparkContext._jsc.sc().getRDDStorageInfo()
    assert [info.name() for info in cached] == []


@pytest.mark.slow  # a Spark job run for its cancel: its 120 s bound is load-bound
def test_a_failed_check_cancels_its_background_job(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Log safety computes D on a thread of its own while the driver plans the rest; when
    the driver side fails first, the thread's job is cancelled, not waited for (here it
    would run for hours), and nothing is left running or cached."""
    import time

    from checker.spark.log_safety import LogSafety

    def endless(self: Any) -> list[Any]:
        # short tasks, as D's are: the driver thread's own jobs get slots between them
        self.D.sparkSession.range(0, 10**12, 1, 100_000).selectExpr("sum(id)").collect()
        return []

    def broken(self: Any) -> dict[str, Any]:
        time.sleep(1)  # the endless job is running by now
        raise RuntimeError("planning failed")

    monkeypatch.setattr(LogSafety, "_fill", endless)
    monkeypatch.setattr(LogSafety, "run", broken)
    ops = list(generate(600, workload="append", seed=4))
    t = time.monotonic()
    res = _spark(ops)["checkers"]["log-safety"]
    assert time.monotonic() - t < 120
    assert res["valid"] == "unknown" and "planning failed" in res["error"]
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []
    assert [i.name() for i in spark.sparkContext._jsc.sc().getRDDStorageInfo()] == []


def test_unproposed_payloads_alike_without_a_broadcast(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more candidates than may be broadcast, the proposals are joined by a merge
    join instead; the examples must not change."""
    import checker.spark.log_safety as spark_log_safety

    ops = list(generate(900, workload="append", anomaly=["unproposed-committed"], seed=5))
    local = check_local(ops)
    assert "unproposed-committed" in local["anomalies"]
    monkeypatch.setattr(spark_log_safety, "BROADCAST_ROWS", 0)
    assert_same(local, _spark(ops))


@slow
def test_no_final_read_is_unknown(spark: Any) -> None:
    ops = list(generate(800, workload="append", seed=4))
    first_final = next(
        i for i, op in enumerate(ops) if isinstance(op.value, dict) and op.value.get("final")
    )
    ops = ops[:first_final]
    local = check_local(ops)
    assert local["valid"] == "unknown"
    assert_same(local, _spark(ops))


@slow
def test_final_reads_cut_short_are_judged_alike(spark: Any) -> None:
    """Final reads that stopped before their node's end (the final phase ran out of
    time) judge only the acks they reached; the rest are counted, not called lost."""
    ops = list(generate(800, workload="append", seed=4))
    first_final = next(
        i for i, op in enumerate(ops) if isinstance(op.value, dict) and op.value.get("final")
    )
    inv = ops[first_final]
    ops = ops[:first_final]
    acked = sorted(
        (op.value["index"], op.value["term"], op.value["payload"])
        for op in ops
        if op.f == "append" and op.type == "ok"
    )
    prefix = [list(e) for e in acked[: len(acked) // 2]]
    del prefix[len(prefix) // 2]  # one ack inside the reach is lost
    end = acked[-1][0]
    value = {"from": 0, "to": prefix[-1][0], "final": True, "local": True}
    ops.append(inv.replace(index=len(ops), value=value))
    ops.append(
        inv.replace(
            index=len(ops), type="ok", value={"entries": prefix, "committed": end, "end": end}
        )
    )
    local = check_local(ops)
    ls = local["checkers"]["log-safety"]
    assert local["valid"] is False and ls["stats"]["anomaly_counts"] == {"lost-ack": 1}
    assert ls["stats"]["lost_ack_unjudged"] == len(acked) - len(acked) // 2
    assert_same(local, _spark(ops))


@slow
def test_malformed_history_is_rejected_alike(spark: Any) -> None:
    ops = list(generate(400, workload="append", seed=3))
    inv = next(i for i, op in enumerate(ops) if op.type == "invoke" and op.f == "append")
    bad = ops[: inv + 1] + [ops[inv].replace(index=ops[inv].index)] + ops[inv + 1 :]
    bad = [op.replace(index=i) for i, op in enumerate(bad)]
    with pytest.raises(HistoryError) as lo:
        check_local(bad)
    with pytest.raises(HistoryError) as sp:
        _spark(bad)
    assert str(sp.value) == str(lo.value)
    # A process that invokes again after an info completion (docs/architecture.md §3).
    info = next(i for i, op in enumerate(ops) if op.type == "info" and op.f == "append")
    again = ops[info].replace(type="invoke", value={"payload": "again"})
    reused = [op.replace(index=i) for i, op in enumerate([*ops, again])]
    with pytest.raises(HistoryError, match="after an info completion") as lo:
        check_local(reused)
    with pytest.raises(HistoryError) as sp:
        _spark(reused)
    assert str(sp.value) == str(lo.value)


@slow
@pytest.mark.parametrize(("anomaly", "source"), [(None, "ops"), ("nonlinearizable", "jsonl")])
def test_register_histories_over_many_keys(
    spark: Any, tmp_path: Path, anomaly: str | None, source: str
) -> None:
    """The register-at-scale path (keys sorted into Arrow batches, a key spread over batch
    edges, only non-linearizable keys sent back) against the local engine, on a history
    small enough to compare everything: hot keys shared by concurrent clients, info
    writes left pending, cas fails, and from a JSONL file as a user's tool would give it."""
    from checker.spark import check_spark
    from checker.synth import write_history

    kw: dict[str, Any] = {
        "workload": "register",
        "anomaly": anomaly,
        "seed": 5,
        "keys": 60,
        "key_window": 4,
        "concurrency": 6,
    }
    ops = list(generate(3000, **kw))
    local = check_local(ops)
    assert local["valid"] is (anomaly is None)
    if source == "jsonl":
        path = tmp_path / "h.jsonl"
        write_history(path, 3000, **kw)
        spark_res = check_spark(str(path))
    else:
        spark_res = _spark(ops)
    assert_same(local, spark_res)
    lin = spark_res["checkers"]["linearizable"]
    assert lin["keys"] == 60
    if anomaly is None:
        assert lin["steps"] == local["checkers"]["linearizable"]["steps"]
    else:
        assert spark_res["anomalies"]["nonlinearizable"][0]["why"]


def _committed_short_of_end(ops: list[Op]) -> tuple[list[Op], int]:
    """``ops`` up to its final reads, then one final read of the whole log whose committed
    index stops halfway (a DLedger leader restarted with no entry of its own term)."""
    first_final = next(
        i for i, op in enumerate(ops) if isinstance(op.value, dict) and op.value.get("final")
    )
    inv = ops[first_final]
    ops = ops[:first_final]
    acked = sorted(
        (op.value["index"], op.value["term"], op.value["payload"])
        for op in ops
        if op.f == "append" and op.type == "ok"
    )
    end = acked[-1][0]
    half = acked[len(acked) // 2][0]
    value = {"from": 0, "to": end, "final": True, "local": True}
    ops.append(inv.replace(index=len(ops), value=value))
    out = {"entries": [list(e) for e in acked], "committed": half, "end": end}
    ops.append(inv.replace(index=len(ops), type="ok", value=out))
    return ops, sum(1 for a in acked if a[0] > half)


def test_entries_past_the_committed_index_are_not_judged_lost_on_the_local_paths(
    tmp_path: Path,
) -> None:
    """A final read that shows the node's whole log but calls only a prefix committed
    leaves the acks past that prefix unjudged (unknown), from ops and from Parquet alike."""
    from checker.local import check_local_columns
    from harness.core.parquet import write_parquet

    ops, beyond = _committed_short_of_end(list(generate(800, workload="append", seed=4)))
    local = check_local(ops)
    ls = local["checkers"]["log-safety"]
    assert local["valid"] == "unknown" and "lost-ack" not in local["anomalies"]
    assert ls["stats"]["lost_ack_unjudged"] == beyond > 0
    write_parquet(ops, tmp_path / "h.parquet")
    cols = check_local_columns(tmp_path / "h.parquet")
    assert cols is not None
    cl = cols["checkers"]["log-safety"]
    assert cols["valid"] == local["valid"] and cols["anomalies"] == local["anomalies"]
    assert cl["stats"] == ls["stats"] and cl["unknown"] == ls["unknown"] == ["lost-ack"]


@slow
def test_entries_past_the_committed_index_are_judged_alike_on_spark(spark: Any) -> None:
    ops, _ = _committed_short_of_end(list(generate(800, workload="append", seed=4)))
    local = check_local(ops)
    assert local["valid"] == "unknown"
    assert_same(local, _spark(ops))


def _candidate_regress() -> list[Op]:
    """An append history with one node seen as a candidate of term 90, then in term 50
    (above every term it held before)."""
    ops = list(generate(600, workload="append", seed=8))
    n = len(ops)
    for k, (term, role, inc) in enumerate(((90, "candidate", 1), (50, "follower", 2))):
        v = {"role": role, "term": term, "incarnation": inc}
        ops.append(Op(type="invoke", process=77, f="sample", index=n + 2 * k, time=10**12 + k,
                      node="n1"))  # fmt: skip
        ops.append(Op(type="ok", process=77, f="sample", value=v, index=n + 2 * k + 1,
                      time=10**12 + k, node="n1"))  # fmt: skip
    return ops


VOLATILE = {"options": {"log-safety": {"settled_terms_only": True}}}


def test_volatile_candidate_terms_on_the_local_paths(tmp_path: Path) -> None:
    from checker.local import check_local_columns
    from harness.core.parquet import write_parquet

    ops = _candidate_regress()
    assert "term-regress" in check_local(ops)["anomalies"]
    local = check_local(ops, opts=VOLATILE)
    assert "term-regress" not in local["anomalies"]
    write_parquet(ops, tmp_path / "h.parquet")
    for opts, has in ((None, True), (VOLATILE, False)):
        cols = check_local_columns(tmp_path / "h.parquet", opts=opts)
        assert cols is not None and ("term-regress" in cols["anomalies"]) is has


@slow
def test_volatile_candidate_terms_on_spark(spark: Any) -> None:
    from checker.spark import check_spark

    ops = _candidate_regress()
    for opts in (None, VOLATILE):
        assert_same(check_local(ops, opts=opts), check_spark(ops, opts=opts))
