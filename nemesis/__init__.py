"""splitbrain: nemesis. Faults as data, each shipped with its cure.

The runner needs only :func:`build_package` (fault names -> nemesis, schedule,
final healing ops) and the :class:`Nemesis` protocol; the modules below hold
one concept each: grudges, targets, iptables partitions, clocks, processes,
loss and delay.
"""

from harness.core.nemesis import Nemesis
from nemesis.package import FAULTS, NemesisPackage, Schedule, build_package

__all__ = ["Nemesis", "NemesisPackage", "Schedule", "build_package", "FAULTS"]
