"""The validate wrappers: every invocation gets one well-formed completion."""

from __future__ import annotations

from harness.core.history import Op
from harness.run.validate import ValidatingClient, ValidatingNemesis, normalize_completion

INV = Op(type="invoke", process=3, f="append", value={"payload": "x"}, node="n1", index=7, time=5)


class Fn:
    def __init__(self, fn):
        self.fn = fn
        self.closed = False

    def open(self, ctx, node):
        return self

    def setup(self, ctx):
        pass

    def invoke(self, ctx, op):
        return self.fn(op)

    def teardown(self, ctx):
        pass

    def close(self, ctx):
        self.closed = True


def test_completion_keeps_process_and_f():
    c = ValidatingClient(Fn(lambda op: Op(type="ok", process=99, f="read", value=1)))
    out = c.invoke(None, INV)
    assert (out.type, out.process, out.f, out.node, out.value) == ("ok", 3, "append", "n1", 1)
    assert out.index == -1 and out.time == 0  # stamped by the writer


def test_exception_becomes_info_with_error():
    def boom(op):
        raise ConnectionResetError("peer reset")

    out = ValidatingClient(Fn(boom)).invoke(None, INV)
    assert out.type == "info" and "ConnectionResetError: peer reset" in out.error
    assert out.process == 3 and out.f == "append"


def test_bad_results_become_info():
    out = ValidatingClient(Fn(lambda op: {"type": "ok"})).invoke(None, INV)
    assert out.type == "info" and "not an Op" in out.error
    out = ValidatingClient(Fn(lambda op: op.replace(type="invoke"))).invoke(None, INV)
    assert out.type == "info" and "'invoke'" in out.error


def test_fail_passes_through():
    out = normalize_completion(INV, INV.complete("fail", error="NOT_LEADER"))
    assert out.type == "fail" and out.error == "NOT_LEADER"


def test_nemesis_errors_are_info_and_process_is_nemesis():
    class N:
        def invoke(self, ctx, op):
            if op.f == "start-partition":
                raise RuntimeError("iptables: no chain")
            return op.complete("ok", value="done")

    n = ValidatingNemesis(N())
    inv = Op(type="invoke", process="nemesis", f="start-partition", value="halves")
    out = n.invoke(None, inv)
    assert (out.type, out.process, out.f) == ("info", "nemesis", "start-partition")
    assert "iptables: no chain" in out.error and out.value == "halves"
    out = n.invoke(None, Op(type="invoke", process="nemesis", f="kill", value=["n1"]))
    assert out.type == "info" and out.value == "done" and out.error is None
