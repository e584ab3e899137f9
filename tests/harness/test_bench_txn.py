"""``splitbrain bench checker --txn``: the figures it prints are measured, not assumed."""

from __future__ import annotations

from harness.bench.checker_txn import txn_bench


def test_the_txn_bench_times_ours_and_the_baselines_on_one_history() -> None:
    out = txn_bench(3000)
    assert out["txns"] == 3000 and out["generate"]["records"] >= 6000 - 2 * 3000 * 0.1
    for level in ("serializable", "strict-serializable"):
        r = out["ours"][level]
        assert r["valid"] is True and r["cpu_s"] > 0 and r["txn_per_s_cpu"] > 0
    assert out["ours"]["strict-serializable"]["edges"]["realtime"] > 0
    assert out["baseline_networkx"]["cyclic"] is False
    planted = out["planted_stale_read"]
    assert planted["valid"] is False and planted["found_the_op"] is True
    assert out["machine"]["dict_inserts_cpu_s"] > 0 and "Clojars" in out["elle_published"]
