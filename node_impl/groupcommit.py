"""Group commit, shared by both node modes.

An fsync costs the same for one entry as for a thousand, so appends never fsync
themselves: they set an event, and one loop runs :meth:`LogStore.flush` on a worker
thread, covering every entry appended before that flush started. Whatever was
appended during it sets the event again and rides the next one. Both the DLedger
node (then its quorum may advance) and mode ``ha`` (the master's flush, and the
slave's flush-then-report) run this same loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor

from node_impl.nodelog import NodeLog
from node_impl.store import LogStore

__all__ = ["flush_on", "group_commit"]


async def flush_on(pool: Executor | None, store: LogStore) -> int:
    """One flush on the worker thread (keeps the event loop serving while the disk syncs)."""
    return await asyncio.get_running_loop().run_in_executor(pool, store.flush)


async def group_commit(
    store: LogStore,
    pool: Executor | None,
    wanted: asyncio.Event,
    *,
    running: Callable[[], bool],
    log: NodeLog,
    flushed: Callable[[], object] | None = None,
    skip_flush: bool = False,
    retry_s: float = 0.1,
    pace_s: float = 0.0,
) -> None:
    """Flush whenever ``wanted`` is set, until ``running()`` turns false.

    ``flushed`` runs after each flush, when the new durable end is known (the
    DLedger leader recounts its quorum, an HA slave reports its offset). A failed
    flush is logged and retried after ``retry_s``: the disk may come back, and the
    node should stay up to say what happened. ``pace_s`` spaces flushes out (an HA
    master flushes periodically, like RocketMQ's async flush service).
    ``skip_flush`` is the seeded bug ``no-fsync``: report without flushing.
    """
    while running():
        await wanted.wait()
        wanted.clear()
        if skip_flush:
            if flushed is not None:
                flushed()
            continue
        try:
            await flush_on(pool, store)
        except Exception as e:  # disk trouble: say so, keep the node alive
            # INFO, not SAFETY: a failed fsync is the disk's fault, which the node survives
            # by not claiming the entries durable; SAFETY lines are broken invariants
            log.info("flush-failed", error=e)
            await asyncio.sleep(retry_s)
            continue
        if flushed is not None:
            flushed()
        if pace_s > 0:
            await asyncio.sleep(pace_s)
