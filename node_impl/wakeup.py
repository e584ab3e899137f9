"""A wake-up: waiters sleep until the next ``notify`` or a timeout.

Used wherever a coroutine must re-check some state (committed, applied, role)
after it changes; the waiter always re-reads the state, so a missed or spurious
wake-up costs one loop, never correctness.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["Signal", "cancel_all"]


class Signal:
    def __init__(self) -> None:
        self._fut: asyncio.Future | None = None

    def notify(self) -> None:
        f = self._fut
        if f is not None:
            self._fut = None
            if not f.done():
                f.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        if self._fut is None or self._fut.done():
            self._fut = asyncio.get_running_loop().create_future()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._fut), timeout)


async def cancel_all(tasks: set[asyncio.Task] | list[asyncio.Task], *, rounds: int = 20) -> None:
    """Cancel until every task has ended.

    On 3.11 a ``wait_for`` that completes in the same step as the cancel can swallow
    it, so one cancel is not always enough: keep cancelling what is still alive.
    """
    for _ in range(rounds):
        live = [t for t in tasks if not t.done()]
        if not live:
            return
        for t in live:
            t.cancel()
        await asyncio.wait(live, timeout=0.1)
