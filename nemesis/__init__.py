"""splitbrain: nemesis. Faults as data, each shipped with its cure.

The runner needs only :func:`nemesis.package.build_package` (fault names ->
nemesis, schedule, final healing ops) and the contracts in
:mod:`harness.core.nemesis`. Each fault is one registered object
(:class:`harness.core.fault.Fault`) in its own module, declared as an entry point of
``splitbrain.faults``; :mod:`nemesis.registry` loads and checks them and derives every
table (names, heal order, journal kinds). The modules here hold one concept each:
grudges, targets, iptables partitions, clocks, processes, loss and delay, lulls, the
fault schedule. Nothing is imported here, so importing one fault module never
drags in the others.
"""
