"""Wrappers that keep clients and nemeses honest (Jepsen's ``validate`` wrappers).

The history is only checkable if every invocation gets exactly one completion of
the same process and ``f``. Clients are written by many hands and talk to a
system that is being broken on purpose, so the runner never trusts them: a
completion is normalised to its invocation's identity, a crash inside ``invoke``
becomes ``info`` (the op may have happened), and so does a call that outlives
its timeout. ``info`` and never ``fail``: we cannot know that nothing happened.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING, Any

from harness.core.history import NEMESIS, OP_TYPES, Op

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["normalize_completion", "ValidatingClient", "ValidatingNemesis", "InvokeTimeout"]

log = logging.getLogger(__name__)


class InvokeTimeout(Exception):
    pass


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def normalize_completion(inv: Op, result: Any, *, nemesis: bool = False) -> Op:
    """Turn whatever ``invoke`` returned into a well-formed completion of ``inv``.

    The completion keeps the invocation's process, f, key and node; its time and
    index are cleared so that the writer stamps them. A result that is not an
    ``Op`` or carries a type other than ok/fail/info becomes ``info`` with an
    error saying what was wrong. Nemesis completions are always ``info``
    (ARCHITECTURE §2): a fault's effect is reported, not judged.
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
        log.debug("completion of op %s changed process/f (%r/%r -> %r/%r); kept the invocation's",
                  inv.index, inv.process, inv.f, result.process, result.f)
    return Op(type=typ, process=inv.process, f=inv.f, value=result.value, key=inv.key,
              node=inv.node if result.node is None else result.node, error=error)


class _CallThread:
    """One long-lived thread that runs calls handed to it, so a caller can stop waiting.

    A blocking call cannot be interrupted in Python; on a timeout the caller
    abandons this thread (it is a daemon) and uses a fresh one.
    """

    def __init__(self, name: str) -> None:
        self._in: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._t = threading.Thread(target=self._loop, name=name, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while True:
            item = self._in.get()
            if item is None:
                return
            fn, box, done = item
            try:
                box.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box.append((False, e))
            done.set()

    def call(self, fn: Any, timeout: float) -> Any:
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._in.put((fn, box, done))
        if not done.wait(timeout):
            raise InvokeTimeout(f"no completion within {timeout:g} s")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._in.put(None)


class ValidatingClient:
    """A client wrapper: normalised completions, exceptions and timeouts as ``info``.

    With a ``timeout`` the inner ``invoke`` runs on a helper thread; when it
    overruns, the op is recorded as ``info`` and the wrapper marks itself
    ``broken`` so the worker opens a new client instead of reusing one whose
    call is still in flight.
    """

    def __init__(self, inner: Any, *, timeout: float | None = None) -> None:
        self.inner = inner
        self.timeout = timeout
        # The ops that change nothing (a lull lets them through); asked once, not per op.
        self.read_fs: frozenset[str] = frozenset(getattr(inner, "read_fs", ("read",)))
        self.broken = False
        self._caller: _CallThread | None = None

    def open(self, ctx: RunContext, node: str) -> ValidatingClient:
        return ValidatingClient(self.inner.open(ctx, node), timeout=self.timeout)

    def setup(self, ctx: RunContext) -> None:
        self.inner.setup(ctx)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        try:
            if self.timeout is None:
                result = self.inner.invoke(ctx, op)
            else:
                if self._caller is None:
                    self._caller = _CallThread(f"client-call-{op.process}")
                result = self._caller.call(lambda: self.inner.invoke(ctx, op), self.timeout)
        except InvokeTimeout as e:
            self.broken = True
            self._caller = None  # abandoned: its call may still be running
            return op.complete("info", error=f"timeout: {e}")
        except Exception as e:
            log.debug("client invoke of op %s raised", op.index, exc_info=True)
            return op.complete("info", error=_describe(e))
        return normalize_completion(op, result)

    def teardown(self, ctx: RunContext) -> None:
        self.inner.teardown(ctx)

    def close(self, ctx: RunContext) -> None:
        if self._caller is not None:
            self._caller.close()
            self._caller = None
        if not self.broken:
            self.inner.close(ctx)
        else:
            # The inner client may still be inside invoke on the abandoned thread;
            # closing it from here could race with that call, so try and log.
            try:
                self.inner.close(ctx)
            except Exception:
                log.debug("closing a timed-out client failed", exc_info=True)


class ValidatingNemesis:
    """A nemesis wrapper: every invocation gets one ``info`` completion, whatever happens.

    A fault that raises is recorded with its error (so the history says the
    partition may be half-applied) instead of killing the nemesis thread.
    """

    def __init__(self, inner: Any) -> None:
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

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
