"""A FIFO queue on sequential znodes, and the model its history must linearize to.

Enqueue creates ``/splitbrain-queue/<key>/item-`` with the sequential flag, so the
leader numbers items in commit order. Dequeue syncs its server, lists the
children, and claims the lowest by deleting it with the version it just read:
of two dequeuers racing for one item exactly one delete succeeds; the loser
moves on to the next child, and one that lost every child it listed lists
again (answering "empty" then would be wrong: items may have come since). ``sync`` first makes the listing include every item
committed before the dequeue began, which is what makes "empty" and "the
head" linearizable answers (ZooKeeper's plain reads may be stale).

History: ``enqueue`` v -> ok v; ``dequeue`` null -> ok the item's value, or
null when the queue was empty. Keys are independent queues; each is checked
for linearizability against :func:`fifo_queue`, and after healing every key is
drained until a dequeue says empty, so an acknowledged item that vanished shows
up as an "empty" the model cannot explain.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from harness.api import PENDING, UNKNOWN, Fail, GenContext, Model, Op, RunContext

from . import ZkClient, server_address

__all__ = ["ZkQueueClient", "QueueGen", "FinalDrain", "fifo_queue", "ROOT"]

ROOT = "/splitbrain-queue"


def fifo_queue(**_: Any) -> Model:
    """A FIFO queue: enqueue appends; dequeue takes the head, or answers null when empty.

    The state is the tuple of queued values. A dequeue whose answer is unknown
    may have taken the head or not (the search tries both).
    """

    def step(state: Any, inp: Any, out: Any) -> tuple[bool, Any]:
        f, value = inp
        if f == "enqueue":
            return True, (*state, value)
        if out is UNKNOWN or isinstance(out, Fail):
            return True, state[1:]
        if out is None:
            return not state, state
        return bool(state) and state[0] == out, state[1:]

    return Model(
        name="fifo-queue",
        init=tuple,
        step=step,
        partition=lambda ops: [without_unseen_enqueues(ops)],
        fs=frozenset({"enqueue", "dequeue"}),
        describe_state=lambda s: "[" + " ".join(map(str, s)) + "]",
    )


def without_unseen_enqueues(ops: Sequence[Op]) -> list[Op]:
    """One queue's ops minus the unknown enqueues whose item no dequeue ever returned.

    Such an enqueue (ended ``info``, or never completed) makes the search try its
    item at every position of the queue, exponentially many, although dropping
    it cannot change the verdict when every dequeue's outcome is known: had it
    taken effect, its item would sit in the queue to the end, blocking every
    item behind it and every "empty" answer, so any linearization that includes
    it stays valid without it (and unknown ops may always not take effect).
    With an unknown dequeue about (it may have taken the item), nothing is dropped.
    """
    ops = list(ops)
    open_: dict[Any, Op] = {}
    unknown: list[Op] = []  # invocations that ended info, or never ended
    for op in ops:
        if op.type == "invoke":
            open_[op.process] = op
        elif (inv := open_.pop(op.process, None)) is not None and op.type == "info":
            unknown.append(inv)
    unknown += open_.values()
    if any(op.f == "dequeue" for op in unknown):
        return ops
    taken = {op.value for op in ops if op.f == "dequeue" and op.type == "ok"}
    unseen = {(op.process, op.value) for op in unknown if op.value not in taken}
    return [op for op in ops if not (op.f == "enqueue" and (op.process, op.value) in unseen)]


class ZkQueueClient(ZkClient):
    """The register client's session (one server only), with queue ops instead."""

    read_fs: frozenset[str] = frozenset()

    def open(self, ctx: RunContext, node: str) -> ZkQueueClient:
        return ZkQueueClient(server_address(ctx, node), self.timeout)

    def invoke(self, ctx: RunContext, op: Op) -> Op:
        try:
            zk = self._session()
        except Exception as e:  # no session: nothing was sent
            return op.complete("fail", op.value, error=f"no session: {type(e).__name__}")
        path = f"{ROOT}/{op.key}"
        if op.f == "enqueue":
            return self._enqueue(zk, path, op)
        if op.f == "dequeue":
            return self._dequeue(zk, path, op)
        raise ValueError(f"zk-queue cannot do {op.f!r}")

    def _enqueue(self, zk: Any, path: str, op: Op) -> Op:
        from kazoo.exceptions import NodeExistsError, NoNodeError  # type: ignore[import-untyped]

        t, data = self.timeout, str(op.value).encode()
        try:
            try:
                zk.create_async(f"{path}/item-", data, sequence=True).get(timeout=t)
            except NoNodeError:  # the key's parent is new: make it (racing others), retry
                with contextlib.suppress(NodeExistsError):
                    zk.create_async(path, b"", makepath=True).get(timeout=t)
                zk.create_async(f"{path}/item-", data, sequence=True).get(timeout=t)
        except Exception as e:  # connection loss, timeout: it may have been created
            return op.complete("info", op.value, error=f"{type(e).__name__}: {e}"[:200])
        return op.complete("ok", op.value)

    def _dequeue(self, zk: Any, path: str, op: Op, rounds: int = 5) -> Op:
        """Claim the lowest child; "empty" only when a listing is empty.

        Losing the race for every child listed says nothing about the queue now
        (others may have enqueued since), so that lists again; after ``rounds``
        lost rounds the dequeue is ``fail``: it deleted nothing.
        """
        from kazoo.exceptions import BadVersionError, NoNodeError  # type: ignore[import-untyped]

        t = self.timeout
        for _ in range(rounds):
            try:
                zk.sync_async(path).get(timeout=t)
                try:
                    children = sorted(zk.get_children_async(path).get(timeout=t))
                except NoNodeError:
                    children = []
            except Exception as e:  # only reads so far: nothing changed
                return op.complete("fail", op.value, error=f"{type(e).__name__}: {e}"[:200])
            if not children:
                return op.complete("ok", None)
            for child in children:
                try:
                    data, stat = zk.get_async(f"{path}/{child}").get(timeout=t)
                except NoNodeError:
                    continue  # another dequeuer took it
                except Exception as e:
                    return op.complete("fail", op.value, error=f"{type(e).__name__}: {e}"[:200])
                try:
                    zk.delete_async(f"{path}/{child}", version=stat.version).get(timeout=t)
                except (NoNodeError, BadVersionError):
                    continue  # lost the race for it
                except Exception as e:  # the delete may have gone through
                    return op.complete("info", op.value, error=f"{type(e).__name__}: {e}"[:200])
                return op.complete("ok", int(data))
        return op.complete("fail", op.value, error=f"lost the race for every item {rounds} times")


class QueueGen:
    """Enqueues of unique values and dequeues, half and half; a fresh queue every ``per_key`` ops."""

    def __init__(self, per_key: int = 60) -> None:
        self.per_key, self.n = per_key, 0

    @property
    def keys(self) -> list[str]:
        """Every key handed out so far (the final drain empties each)."""
        return [f"q{i}" for i in range(self.n // self.per_key + 1)]

    def op(self, ctx: GenContext) -> Op:
        key = f"q{self.n // self.per_key}"
        self.n += 1
        if ctx.rng.random() < 0.5:
            return Op(
                type="invoke",
                process=ctx.process,
                f="enqueue",
                value=self.n,
                key=key,
                node=ctx.node,
            )
        return Op(
            type="invoke", process=ctx.process, f="dequeue", value=None, key=key, node=ctx.node
        )

    def update(self, ctx: GenContext, event: Op) -> None:
        pass


class FinalDrain:
    """After healing, dequeue every key until one dequeue answers empty (``attempts`` tries each)."""

    def __init__(self, keys: Callable[[], list[str]], attempts: int = 200) -> None:
        self.keys_fn, self.attempts = keys, attempts
        self.left: dict[str, int] | None = None
        self.inflight: dict[int | str, str] = {}

    def op(self, ctx: GenContext) -> Any:
        if self.left is None:
            self.left = {k: self.attempts for k in self.keys_fn()}
        busy = set(self.inflight.values())
        free = [k for k, n in self.left.items() if n > 0 and k not in busy]
        if not free:
            return PENDING if self.inflight else None
        key = free[0]
        self.left[key] -= 1
        self.inflight[ctx.process] = key
        return Op(
            type="invoke", process=ctx.process, f="dequeue", value=None, key=key, node=ctx.node
        )

    def update(self, ctx: GenContext, event: Op) -> None:
        if event.type == "invoke" or self.left is None:
            return
        key = self.inflight.pop(event.process, None)
        if key is not None and event.type == "ok" and event.value is None:
            self.left[key] = 0  # drained
