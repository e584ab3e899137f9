"""Peak memory and load while a check runs: the scale benchmark's sampler."""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Iterable

__all__ = ["MemorySampler"]


class MemorySampler:
    """Peak RSS of this process and of its JVM child (and its Python workers), sampled,
    with the machine's 1-minute load average over the same time (others' jobs share it)."""

    def __init__(self, every: float = 0.2, exclude: Iterable[int] = ()) -> None:
        import psutil

        self.me = psutil.Process()
        # A standalone cluster the benchmark started is this process's child too, but is
        # not the driver: its JVMs (and their executors' Python workers) are left out.
        self.exclude = set(exclude)
        self.every = every
        self.peak = {"python_driver": 0, "jvm_driver": 0, "python_workers": 0}
        self.driver_total = 0
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = self.me.memory_info().rss
        self.peak["python_driver"] = max(self.peak["python_driver"], me)
        self.loads.append(os.getloadavg()[0])
        jvm = workers = 0
        skip: set[int] = set()
        for pid in self.exclude:
            try:
                skip.add(pid)
                skip.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                pass
        try:
            for c in self.me.children(recursive=True):
                if c.pid in skip:
                    continue
                try:
                    name = c.name()
                    rss = c.memory_info().rss
                except psutil.Error:
                    continue
                if "java" in name:
                    jvm += rss
                elif "python" in name:
                    workers += rss
        except psutil.Error:
            pass
        self.peak["jvm_driver"] = max(self.peak["jvm_driver"], jvm)
        self.peak["python_workers"] = max(self.peak["python_workers"], workers)
        self.driver_total = max(self.driver_total, me + jvm)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def __enter__(self) -> MemorySampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self._sample()

    def mib(self) -> dict[str, float]:
        """Peaks in MiB; ``driver_total`` is the peak of Python driver + JVM at one instant."""
        out = {k: round(v / 2**20, 1) for k, v in self.peak.items()}
        out["driver_total"] = round(self.driver_total / 2**20, 1)
        return out

    def load(self) -> dict[str, float]:
        if not self.loads:
            return {}
        return {"mean": round(statistics.fmean(self.loads), 2), "max": round(max(self.loads), 2)}
