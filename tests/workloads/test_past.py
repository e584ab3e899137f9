"""Workloads that read the past: archive keys, retired keys, the kv set, sticky clients (no cluster)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from types import SimpleNamespace

import pytest

from checker.local import check_local, classify
from harness.core.errors import ConfigError
from harness.core.history import Op, validate_history
from harness.core.spec import DEFAULT_CLIENT_TIMEOUT, TestSpec
from harness.core.workload import GenContext
from workloads.archive import ArchiveGen
from workloads.generator import simulate
from workloads.kvset import KvSetGen, is_kv_set_op
from workloads.mixed import workload as mixed_workload
from workloads.register import RegisterGen
from workloads.register import workload as register_workload
from workloads.sticky import Sticky, Stint, after_completion

NODES = ["n1", "n2", "n3", "n4", "n5"]


def _invokes(h: list[Op]) -> list[Op]:
    return [o for o in h if o.type == "invoke"]


def test_archive_keys_take_a_few_writes_then_only_reads_and_the_key_space_grows() -> None:
    gen = ArchiveGen(fresh=2, writes_per_key=2)
    h = _invokes(simulate(gen, 5, 3000, random.Random(1)))
    writes = Counter(o.key for o in h if o.f == "write")
    assert set(o.f for o in h) == {"read", "write"}
    assert max(writes.values()) <= 2 and len(writes) > 100
    values = [o.value for o in h if o.f == "write"]
    assert len(values) == len(set(values))  # unique: a stale read is never a fresh one
    last_write: dict[str, int] = {}
    for i, o in enumerate(h):
        if o.f == "write":
            last_write[o.key] = i  # type: ignore[index]
    # Most reads hit keys whose last write is far behind them.
    gaps = [i - last_write[o.key] for i, o in enumerate(h) if o.f == "read" and o.key in last_write]  # type: ignore[index]
    assert sum(g > 500 for g in gaps) > len(gaps) / 3


def test_archive_reads_only_in_a_lull() -> None:
    gen = ArchiveGen()
    ctx = GenContext(time_ns=0, process=0, worker=0, node="n1", rng=random.Random(0), lull=True)
    assert {gen.op(ctx).f for _ in range(200)} == {"read"}


def test_register_keys_retire_and_retired_keys_are_still_read() -> None:
    gen = RegisterGen(keys=3, ops_per_key=20, retired_reads=0.2)
    h = _invokes(simulate(gen, 5, 3000, random.Random(2)))
    by_key: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(h):
        by_key[o.key].append(i)  # type: ignore[index]
    changes = {k for k, ix in by_key.items() for i in ix if h[i].f != "read"}
    # Each key's bounded share of ops (writes, cas and live reads) is at most ops_per_key...
    for k in changes:
        live = [i for i in by_key[k] if h[i].f != "read"]
        assert len(live) <= 20
    # ... and after its last write or cas, some keys are read much later (retired reads).
    late = 0
    for k in changes:
        last_change = max(i for i in by_key[k] if h[i].f != "read")
        late += sum(1 for i in by_key[k] if i > last_change + 200)
    assert late > 100
    assert RegisterGen(keys=3, ops_per_key=20).retired_reads == 0.0


class _Reads:
    """Reads of key ``k`` on the worker's own node; keyless log appends every ``log_every``-th op."""

    def __init__(self, log_every: int = 0) -> None:
        self.n = 0
        self.log_every = log_every

    def op(self, ctx: GenContext) -> Op:
        self.n += 1
        if self.log_every and self.n % self.log_every == 0:
            return Op(type="invoke", process=ctx.process, f="append", value=self.n, node=ctx.node)
        return Op(type="invoke", process=ctx.process, f="read", key="k", node=ctx.node)

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


def _ctx(rng: random.Random, p: int = 7, worker: int = 0) -> GenContext:
    return GenContext(time_ns=0, process=p, worker=worker, node="n1", rng=rng, nodes=NODES)


def test_sticky_workers_keep_the_node_that_answered_for_n_ops_then_let_go() -> None:
    gen = Sticky(_Reads(), ops=3, fraction=1.0, follow_up=False)
    rng = random.Random(0)

    def ctx(p: int = 7) -> GenContext:
        return _ctx(rng, p)

    first = gen.op(ctx())
    assert first.node == "n1"
    # redirected: the leader n4 answered, so the client keeps asking n4 even when it fails
    gen.update(ctx(), first.complete("ok", 1).replace(node="n4"))
    nodes = []
    for _ in range(4):
        o = gen.op(ctx())
        nodes.append(o.node)
        gen.update(ctx(), o.complete("fail", None, error="NOT_LEADER").replace(node="n2"))
    assert nodes == ["n4", "n4", "n4", "n1"]
    # completions of other workers' ops are not ours: nobody sticks to their node
    gen.update(_ctx(rng, 9, worker=1), Op(type="ok", process=9, f="read", node="n3"))
    assert gen.op(_ctx(rng, 9, worker=1)).node == "n1"


def test_a_worker_whose_op_ended_info_keeps_its_node_for_its_next_process() -> None:
    gen = Sticky(_Reads(), ops=5, fraction=1.0)
    rng = random.Random(0)
    o = gen.op(_ctx(rng, 7))
    gen.update(_ctx(rng, 7), o.complete("ok", 1).replace(node="n5"))
    o = gen.op(_ctx(rng, 7))
    assert o.node == "n5"
    write = o.replace(f="write", value=3)  # a write to the stuck node times out
    gen.update(_ctx(rng, 7), write.complete("info", 3, error="TimeoutError").replace(node="n5"))
    # the runner gives worker 0 a fresh process (7 + concurrency); like a client
    # that reconnects, it still asks the node it cached
    # ... and first reads the key of that write, to learn whether it took effect
    o = gen.op(_ctx(rng, 22))
    assert (o.f, o.key, o.node, o.process) == ("read", "k", "n5", 22)


def test_a_failed_read_is_sent_again_at_once_to_the_sticky_node_until_the_stint_ends() -> None:
    # every third op of the inner generator is a keyless append, which never sticks
    gen = Sticky(_Reads(log_every=3), ops=4, fraction=1.0, applies=lambda op: op.key is not None)
    rng = random.Random(0)
    o = gen.op(_ctx(rng))
    gen.update(_ctx(rng), o.complete("ok", 1).replace(node="n4"))
    sent = []
    for _ in range(5):
        o = gen.op(_ctx(rng))
        sent.append((o.f, o.key, o.node))
        # the sleeper never answers in time: every read to it times out
        gen.update(
            _ctx(rng), o.complete("fail", None, error="TimeoutError: no reply").replace(node=o.node)
        )
    # four ops of the stint, all the same read of k re-sent to n4 (the inner
    # generator is not asked meanwhile), then the worker lets go; the inner
    # generator's next op, a keyless append, goes to the worker's own node
    assert sent[:4] == [("read", "k", "n4")] * 4
    assert sent[4] == ("append", None, "n1")
    assert gen.gen.n == 3  # type: ignore[attr-defined]


def test_stint_after_completion_is_a_pure_step() -> None:
    st = Stint("n2", 3)
    read = Op(type="fail", process=1, f="read", key="k", value=None, node="n2")
    lost = Op(type="info", process=1, f="cas", key="k1", value=[1, 2], node="n2")
    refused = Op(type="fail", process=1, f="write", key="k", value=1, node="n2")
    append = Op(type="info", process=1, f="append", value=1, node="n2")
    # a failed read is read again; a write of unknown fate is checked by reading its key
    assert after_completion(st, read, follow_up=True) == Stint("n2", 3, read="k")
    assert after_completion(st, lost, follow_up=True) == Stint("n2", 3, read="k1")
    # a write that surely did not happen, or an op with no key, needs nothing
    assert after_completion(st, refused, follow_up=True) == st
    assert after_completion(st, append, follow_up=True) == st
    assert after_completion(st, read, follow_up=False) == st
    assert after_completion(None, read, follow_up=True) is None
    assert after_completion(Stint("n2", 0), read, follow_up=True) is None


def test_mixed_reads_time_out_after_read_timeout_and_writes_after_client_timeout() -> None:
    # The client timeout is the run's (spec.options["client_timeout"], --client-timeout):
    # a client learns it when opened; read_timeout is the workload's own.
    ctx = SimpleNamespace(spec=TestSpec(name="t", nodes=("n1",), options={"client_timeout": 4.0}))
    w = mixed_workload({"read_timeout": 0.5}).client.open(ctx, "n1")  # type: ignore[arg-type]
    assert (w.timeout, w.read_timeout) == (4.0, 0.5)  # type: ignore[attr-defined]
    # no read_timeout: a kv read waits as long as any call (None = the connection's timeout)
    plain = mixed_workload({}).client.open(ctx, "n1")  # type: ignore[arg-type]
    assert (plain.timeout, plain.read_timeout) == (4.0, None)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="read_timeout' must be at least"):
        mixed_workload({"read_timeout": 0})
    # client_timeout is no workload's option any more: a typo-proof error names the known keys
    with pytest.raises(ConfigError, match="unknown workload mixed option 'client_timeout'"):
        mixed_workload({"client_timeout": 4.0})
    default = SimpleNamespace(spec=TestSpec(name="t", nodes=("n1",)))
    r = register_workload({"read_timeout": 0.25}).client.open(default, "n1")  # type: ignore[arg-type]
    assert (r.timeout, r.read_timeout) == (DEFAULT_CLIENT_TIMEOUT, 0.25)  # type: ignore[attr-defined]


def test_kv_set_adds_each_element_once_and_final_reads_start_at_every_node() -> None:
    gen = KvSetGen()
    h = _invokes(simulate(gen, 3, 50, random.Random(0)))
    assert [o.value for o in h] == list(range(50)) and {o.f for o in h} == {"add"}
    final = _invokes(simulate(gen.final_reads(), 2, 100, random.Random(0), nodes=NODES))
    assert sorted(o.node for o in final) == NODES  # type: ignore[type-var]
    assert all(o.f == "read" and o.value == 50 and o.key is None for o in final)
    assert all(is_kv_set_op(o) for o in final + h)


def test_mixed_with_four_weights_runs_every_part_and_its_final_phase_reads_every_node() -> None:
    w = mixed_workload(
        {"mixed_weights": [1, 2, 2, 0.5], "sticky_ops": 5, "retired_reads": 0.1, "ops_per_key": 30}
    )
    h = simulate(w.generator, 10, 3000, random.Random(3), nodes=NODES)
    inv = _invokes(h)
    kinds = Counter(
        "set" if is_kv_set_op(o) else (o.key[0] if o.key else "log")  # type: ignore[index]
        for o in inv
    )
    assert kinds["set"] > 50 and kinds["a"] > 300 and kinds["k"] > 300 and kinds["log"] > 200
    final = _invokes(simulate(w.final_generator, 10, 10_000, random.Random(3), nodes=NODES))  # type: ignore[arg-type]
    set_reads = [o for o in final if is_kv_set_op(o)]
    assert sorted(o.node for o in set_reads) == NODES  # type: ignore[type-var]
    log_nodes = {o.node for o in final if not is_kv_set_op(o)}
    assert log_nodes == set(NODES)
    assert "set" in w.checker["checks"]
    with pytest.raises(Exception, match="archive, kv-set"):
        mixed_workload({"mixed_weights": [1, 2, 3]})


def test_a_kv_set_history_is_judged_by_the_set_checker_beside_the_registers() -> None:
    def op(i: int, typ: str, p: int, f: str, v: object, key: str | None = None) -> Op:
        return Op(index=i, time=i, type=typ, process=p, f=f, value=v, key=key, node="n1")

    h = [
        op(0, "invoke", 0, "add", 0),
        op(1, "ok", 0, "add", 0),
        op(2, "invoke", 1, "write", 3, "a0"),
        op(3, "ok", 1, "write", 3, "a0"),
        op(4, "invoke", 0, "add", 1),
        op(5, "ok", 0, "add", 1),
        op(6, "invoke", 1, "read", None, "a0"),
        op(7, "ok", 1, "read", 3, "a0"),
        op(8, "invoke", 0, "read", 2),
        op(9, "ok", 0, "read", [1]),  # element 0 was lost
    ]
    validate_history(h)
    groups = classify(h)
    assert {o.f for o in groups["set"]} == {"add", "read"} and len(groups["register"]) == 4
    res = check_local(h, model="cas-register")
    assert res["checkers"]["set"]["valid"] is False
    assert res["checkers"]["linearizable"]["valid"] is True
