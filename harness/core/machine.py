"""The hypervisor's hold on a host that is a virtual machine.

A process kill loses only that process's buffers; a power cut loses the guest's
page cache too, which is the only way to find a node that never fsyncs. Only an
inventory that owns the hypervisor (the VM lab) can give a host a
:class:`Machine`; nemeses declare power faults available exactly when every
targeted host has one (``Host.machine is not None``), never by probing.

A host with a machine also has its own kernel: its clock, its qdiscs and its
page cache are its own, so clock and netem faults act on the real thing there.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Machine"]


@runtime_checkable
class Machine(Protocol):
    """Power and whole-VM pause of one guest, from outside it.

    Every method is idempotent (cutting power to a guest that is off, resuming
    one that runs: no error), because heals are replayed after a crash of the
    harness without knowing how far the fault got.
    """

    name: str

    def power_cut(self) -> None:
        """Stop the guest at once, as a pulled plug: no sync, page cache lost."""
        ...

    def power_on(self) -> None:
        """Boot a guest whose power was cut; returns once it is booting (not
        once sshd answers: the caller waits for that)."""
        ...

    def suspend(self) -> None:
        """Freeze every vCPU and the guest's clock-visible progress (QMP ``stop``)."""
        ...

    def resume(self) -> None:
        """Undo :meth:`suspend`."""
        ...

    def state(self) -> str:
        """``running``, ``paused`` or ``off``."""
        ...
