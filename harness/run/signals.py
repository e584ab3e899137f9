"""SIGINT and SIGTERM during a run: stop the load once, never cut a heal in half."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

__all__ = ["SignalGuard"]

log = logging.getLogger(__name__)


class SignalGuard:
    """SIGINT/SIGTERM become KeyboardInterrupt in the main thread, once.

    After cleanup has begun, further signals are logged and ignored: a second
    Ctrl-C must not cut a heal in half and leave a partition behind.
    """

    def __init__(self) -> None:
        self.cleaning = False
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.cleaning:
            log.warning("%s received while cleaning up; finishing the cleanup first", name)
            return
        raise KeyboardInterrupt(name)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
