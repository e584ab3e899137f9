"""splitbrain: nemesis. Faults as data, each shipped with its cure.

The runner needs only :func:`nemesis.package.build_package` (fault names ->
nemesis, schedule, final healing ops) and the contracts in
:mod:`harness.core.nemesis`. The modules here hold one concept each: grudges,
targets, iptables partitions, clocks, processes, loss and delay, lulls, the
fault schedule. Nothing is imported here, so importing one fault module never
drags in the others.
"""
