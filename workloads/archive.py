"""Keys written a few times, then only read, for the rest of the test.

Hot registers hide a state machine rebuilt wrongly after a restart: every read
sees a write made since. Here the key space grows: a few *fresh* keys take
writes (``writes_per_key`` each, unique values), then join the archive, and
reads pick any key ever made, uniformly, so most reads hit keys whose last
write is long past (before the last restart, the last election). Each key is
an independent register (key ``a<n>``), checked per key for linearizability by
the register checker; values are unique per test, so a stale read is never
mistaken for a fresh one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.generator import invoke

if TYPE_CHECKING:
    from harness.core.history import Op
    from harness.core.workload import GenContext

__all__ = ["ArchiveGen"]


class ArchiveGen:
    """Writes to a few fresh keys, reads over every key ever made (reads only in a lull)."""

    def __init__(
        self,
        *,
        fresh: int = 2,
        writes_per_key: int = 2,
        write_fraction: float = 0.25,
        prefix: str = "a",
    ) -> None:
        if fresh < 1 or writes_per_key < 1 or not 0.0 < write_fraction <= 1.0:
            raise ValueError(
                "archive: fresh and writes_per_key must be positive, write_fraction in (0, 1]"
            )
        self.writes_per_key = writes_per_key
        self.write_fraction = write_fraction
        self.prefix = prefix
        self.made = fresh
        self.fresh: list[list[str | int]] = [[f"{prefix}{i}", writes_per_key] for i in range(fresh)]
        self.keys: list[str] = [f"{prefix}{i}" for i in range(fresh)]
        self.value = 0

    def _fresh_write(self, ctx: GenContext) -> Op:
        slot = self.fresh[ctx.rng.randrange(len(self.fresh))]
        key = str(slot[0])
        slot[1] = int(slot[1]) - 1
        if int(slot[1]) <= 0:
            slot[0], slot[1] = f"{self.prefix}{self.made}", self.writes_per_key
            self.keys.append(str(slot[0]))
            self.made += 1
        self.value += 1
        return invoke(ctx, "write", self.value, key=key)

    def op(self, ctx: GenContext) -> Op:
        if not ctx.lull and ctx.rng.random() < self.write_fraction:
            return self._fresh_write(ctx)
        return invoke(ctx, "read", None, key=ctx.rng.choice(self.keys))

    def update(self, ctx: GenContext, event: Op) -> None:
        pass
