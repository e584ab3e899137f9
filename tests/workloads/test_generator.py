"""Generator combinators, checked by deterministic simulation (no cluster)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core.history import Op, pair_ops, validate_history
from harness.core.workload import PENDING, GenContext
from workloads.append import AppendGen, final_log_reads
from workloads.generator import (
    any_of,
    each_node,
    idle,
    invoke,
    limit,
    make_rng,
    mix,
    once,
    phases,
    repeat,
    simulate,
    throttle,
    time_limit,
)
from workloads.register import RegisterGen
from workloads.sampler import sampler_generator
from workloads.sets import SetGen


def op_fn(f: str):
    return lambda ctx: invoke(ctx, f, ctx.rng.randrange(100))


def invokes(h: list[Op]) -> list[Op]:
    return [o for o in h if o.type == "invoke"]


def flaky(p_info: float = 0.2, p_fail: float = 0.1):
    def complete(op: Op, rng: random.Random):
        x = rng.random()
        if x < p_info:
            return "info", op.value, "timeout"
        if x < p_info + p_fail:
            return "fail", op.value, "NOT_LEADER"
        return "ok", op.value, None

    return complete


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 60), workers=st.integers(1, 6), seed=st.integers(0, 2**32))
def test_limit_is_respected_and_history_well_formed(n, workers, seed):
    h = simulate(
        limit(n, repeat(op_fn("write"))), workers, 10_000, random.Random(seed), complete=flaky()
    )
    assert len(invokes(h)) == n
    pairs = pair_ops(h)
    assert all(c is not None for c in pairs.values())
    validate_history(h)  # no process reused after info


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), workers=st.integers(1, 5))
def test_same_seed_same_history(seed, workers):
    def run():
        g = mix([AppendGen(read_fraction=0.3), RegisterGen()], [2, 1])
        return [
            o.to_dict() for o in simulate(g, workers, 300, random.Random(seed), complete=flaky())
        ]

    assert run() == run()


def test_different_seeds_differ():
    def run(seed):
        return [o.to_dict() for o in simulate(RegisterGen(), 3, 100, random.Random(seed))]

    assert run(1) != run(2)


def append_complete(op: Op, rng: random.Random):
    # ok appends get increasing indexes so AppendGen learns the committed tail
    if op.f == "append":
        append_complete.i += 1
        return "ok", dict(op.value, index=append_complete.i, term=1), None
    return "ok", {"entries": [], "committed": append_complete.i}, None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), workers=st.integers(1, 8))
def test_append_payloads_unique_even_after_infos(seed, workers):
    h = simulate(
        AppendGen(read_fraction=0.2), workers, 500, random.Random(seed), complete=flaky(p_info=0.3)
    )
    payloads = [o.value["payload"] for o in invokes(h) if o.f == "append"]
    assert payloads and len(payloads) == len(set(payloads))
    reads = [o for o in invokes(h) if o.f == "read"]
    assert all(0 <= r.value["from"] <= r.value["to"] for r in reads)
    validate_history(h)


def test_append_reads_follow_the_committed_tail_within_a_chunk():
    append_complete.i = -1
    h = simulate(
        AppendGen(read_fraction=0.3, chunk=50), 4, 2000, random.Random(3), complete=append_complete
    )
    reads = [o for o in invokes(h) if o.f == "read"]
    assert reads
    assert max(r.value["to"] for r in reads) > 500
    assert all(r.value["to"] - r.value["from"] < 50 for r in reads)


def test_time_limit_stops_invocations():
    rng = random.Random(7)
    h = simulate(
        time_limit(0.5, repeat(op_fn("write"))), 3, 100_000, rng, latency_ns=(5_000_000, 20_000_000)
    )
    inv = invokes(h)
    assert inv
    assert max(o.time for o in inv) < 500_000_000
    assert max(o.time for o in h) >= 480_000_000  # it did run for about the limit


def test_mix_respects_zero_weight_and_exhaustion():
    h = simulate(
        mix([limit(30, repeat(op_fn("a"))), repeat(op_fn("b"))], [1, 0]), 3, 1000, random.Random(1)
    )
    assert Counter(o.f for o in invokes(h)) == {"a": 30}
    h = simulate(
        mix([limit(10, repeat(op_fn("a"))), limit(20, repeat(op_fn("b")))]),
        3,
        1000,
        random.Random(1),
    )
    assert Counter(o.f for o in invokes(h)) == {"a": 10, "b": 20}


def test_mix_skips_a_pending_child():
    h = simulate(
        mix([idle(), limit(5, repeat(op_fn("b")))]),
        2,
        100,
        random.Random(0),
        max_idle_ns=50_000_000,
    )
    assert Counter(o.f for o in invokes(h)) == {"b": 5}


def test_phases_wait_for_completion_of_previous_phase():
    g = phases(limit(20, repeat(op_fn("one"))), limit(20, repeat(op_fn("two"))))
    h = simulate(g, 4, 1000, random.Random(5), complete=flaky())
    last_one = max(i for i, o in enumerate(h) if o.f == "one")
    first_two = min(i for i, o in enumerate(h) if o.f == "two")
    assert h[last_one].type != "invoke"
    assert last_one < first_two
    assert Counter(o.f for o in invokes(h)) == {"one": 20, "two": 20}


def test_once_and_any_of_serve_every_child():
    g = any_of([once(op_fn("a")), once(op_fn("b")), limit(3, repeat(op_fn("c")))])
    h = simulate(g, 2, 100, random.Random(0))
    assert Counter(o.f for o in invokes(h)) == {"a": 1, "b": 1, "c": 3}


def test_each_node_builds_one_child_per_context_node():
    g = each_node(lambda node: once(lambda ctx: invoke(ctx, "ping", None, node=node)))
    h = simulate(g, 2, 100, random.Random(0), nodes=["a", "b", "c", "d"])
    assert sorted(o.node for o in invokes(h)) == ["a", "b", "c", "d"]


def test_register_keys_are_bounded_and_rotate():
    h = simulate(RegisterGen(keys=2, ops_per_key=10, max_value=3), 3, 95, random.Random(2))
    per_key = Counter(o.key for o in invokes(h))
    assert all(c <= 10 for c in per_key.values())
    assert len(per_key) >= 10  # 95 ops over keys of 10
    for o in invokes(h):
        if o.f == "cas":
            assert len(o.value) == 2 and all(0 <= v < 3 for v in o.value)
        elif o.f == "write":
            assert 0 <= o.value < 3
        else:
            assert o.value is None


def test_set_elements_unique():
    h = simulate(SetGen(), 4, 200, random.Random(0), complete=flaky())
    adds = [o.value for o in invokes(h)]
    assert adds == list(range(200))


def test_throttled_sampler_keeps_its_rate():
    g = time_limit(2.0, sampler_generator("n2", 10.0))
    h = simulate(g, 1, 10_000, random.Random(0), latency_ns=(1_000_000, 3_000_000))
    inv = invokes(h)
    assert 19 <= len(inv) <= 21
    assert all(o.node == "n2" and o.f == "sample" for o in inv)
    gaps = [b.time - a.time for a, b in zip(inv, inv[1:], strict=False)]
    assert min(gaps) >= 99_000_000


def test_throttle_does_not_burst_after_a_stall():
    g = throttle(10.0, repeat(op_fn("s")))
    ctx = GenContext(time_ns=0, process=0, worker=0, node="n1", rng=random.Random(0))
    assert isinstance(g.op(ctx), Op)
    assert g.op(ctx) is PENDING
    ctx.time_ns = 5_000_000_000  # a long stall
    assert isinstance(g.op(ctx), Op)
    assert g.op(ctx) is PENDING


def log_node_complete(ends: dict[str, int], down: set[str]):
    def complete(op: Op, rng: random.Random):
        if op.node in down:
            return "fail", op.value, "ConnectionError"
        end = ends[op.node]
        a, b = op.value["from"], min(op.value["to"], end)
        entries = [[i, 1, f"{op.node}-{i}"] for i in range(a, b + 1)]
        return "ok", {"entries": entries, "committed": end, "end": end}, None

    return complete


def test_final_log_reads_cover_every_node_in_chunks():
    ends = {"n1": 2500, "n2": 999, "n3": -1, "n4": 40}
    h = simulate(
        final_log_reads(chunk=1000),
        3,
        1000,
        random.Random(0),
        nodes=list(ends),
        complete=log_node_complete(ends, {"n4"}),
    )
    for node, end in ends.items():
        oks = [o for o in h if o.type == "ok" and o.node == node]
        seen = sorted(e[0] for o in oks for e in o.value["entries"])
        if node == "n4":
            assert [o.type for o in h if o.node == node and o.type != "invoke"] == ["fail"] * 3
        else:
            assert seen == list(range(end + 1))
    reads = invokes(h)
    assert all(o.value["final"] and o.value["local"] for o in reads)
    assert all(o.value["to"] - o.value["from"] == 999 for o in reads)
    # n1 needs chunks 0, 1000, 2000 (the last one reaches past its end)
    assert sorted(o.value["from"] for o in reads if o.node == "n1") == [0, 1000, 2000]


def test_make_rng_is_stable():
    assert make_rng(42, "w", 1).random() == make_rng(42, "w", 1).random()
    assert make_rng(42, "w", 1).random() != make_rng(42, "w", 2).random()


def test_a_lull_turns_the_log_and_register_generators_to_reads() -> None:
    """During a lull (harness/core/traffic.py) writes are held, so lull-aware generators only read."""
    g = mix([AppendGen(read_fraction=0.0), RegisterGen()], [1, 1])
    rng = random.Random(4)

    def fs(lull: bool) -> Counter[str]:
        return Counter(
            g.op(GenContext(time_ns=0, process=0, worker=0, node="n1", rng=rng, lull=lull)).f
            for _ in range(300)
        )

    quiet, busy = fs(True), fs(False)
    assert set(quiet) == {"read"} and quiet["read"] == 300
    assert busy["append"] > 50 and busy["write"] + busy["cas"] > 50
