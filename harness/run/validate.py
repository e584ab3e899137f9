"""Wrappers that keep clients and nemeses honest (Jepsen's ``validate`` wrappers).

The history is only checkable if every invocation gets exactly one completion of
the same process and ``f``. Clients are written by many hands and talk to a
system that is being broken on purpose, so the runner never trusts them: a
completion is normalised to its invocation's identity, a crash inside ``invoke``
becomes ``info`` (the op may have happened). ``info`` and never ``fail``: we
cannot know that nothing happened. A call that outlives the client timeout is
the run's watchdog's business (harness.run.phases), not a thread per op here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from harness.core.history import NEMESIS, OP_TYPES, Op
from harness.core.nemesis import Nemesis
from harness.core.workload import Client, DeclaresReads

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["normalize_completion", "ValidatingClient", "ValidatingNemesis"]

log = logging.getLogger(__name__)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def normalize_completion(inv: Op, result: Any, *, nemesis: bool = False) -> Op:
    """Turn whatever ``invoke`` returned into a well-formed completion of ``inv``.

    The completion keeps the invocation's process, f, key and node; its time and
    index are cleared so that the writer stamps them. A result that is not an
    ``Op`` or carries a type other than ok/fail/info becomes ``info`` with an
    error saying what was wrong. Nemesis completions are always ``info``
    (docs/architecture.md §3): a fault's effect is reported, not judged.
    """
    if not isinstance(result, Op):
        return inv.complete("info", error=f"invoke returned {type(result).__name__}, not an Op")
    typ = result.type
    error = result.error
    if typ not in OP_TYPES or typ == "invoke":
        error = f"invoke returned a completion of type {typ!r}"
        typ = "info"
    if nemesis:
        typ = "info"
    if result.f != inv.f or result.process != inv.process:
        log.debug(
            "completion of op %s changed process/f (%r/%r -> %r/%r); kept the invocation's",
            inv.index,
            inv.process,
            inv.f,
            result.process,
            result.f,
        )
    return Op(
        type=typ,
        process=inv.process,
        f=inv.f,
        value=result.value,
        key=inv.key,
        node=inv.node if result.node is None else result.node,
        error=error,
    )


class ValidatingClient:
    """A client wrapper: normalised completions, and exceptions as ``info``.

    The worker reopens a client after any ``info``, so a client whose call went
    astray is never reused.
    """

    def __init__(self, inner: Client) -> None:
        self.inner = inner
        # The ops that change nothing (a lull lets them through); asked once, not per op.
        self.read_fs: frozenset[str] = (
            frozenset(inner.read_fs) if isinstance(inner, DeclaresReads) else frozenset({"read"})
        )

    def open(self, ctx: RunContext, node: str) -> ValidatingClient:
        return ValidatingClient(self.inner.open(ctx, node))

    def setup(self, ctx: RunContext) -> None:
        self.inner.setup(ctx)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        try:
            result = self.inner.invoke(ctx, op)
        except Exception as e:
            log.debug("client invoke of op %s raised", op.index, exc_info=True)
            return op.complete("info", error=_describe(e))
        return normalize_completion(op, result)

    def teardown(self, ctx: RunContext) -> None:
        self.inner.teardown(ctx)

    def close(self, ctx: RunContext) -> None:
        self.inner.close(ctx)


class ValidatingNemesis:
    """A nemesis wrapper: every invocation gets one ``info`` completion, whatever happens.

    A fault that raises is recorded with its error (so the history says the
    partition may be half-applied) instead of killing the nemesis thread.
    """

    def __init__(self, inner: Nemesis) -> None:
        self.inner = inner

    def setup(self, ctx: RunContext) -> None:
        self.inner.setup(ctx)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        inv = op if op.process == NEMESIS else op.replace(process=NEMESIS)
        try:
            result = self.inner.invoke(ctx, inv)
        except Exception as e:
            log.warning("nemesis %s failed: %s", inv.f, _describe(e))
            log.debug("nemesis traceback", exc_info=True)
            return inv.complete("info", value=inv.value, error=_describe(e))
        return normalize_completion(inv, result, nemesis=True)

    def teardown(self, ctx: RunContext) -> None:
        self.inner.teardown(ctx)

    def fs(self) -> set[str]:
        return self.inner.fs()
