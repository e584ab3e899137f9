"""The embedded lab: N hosts on this machine, each a network namespace with its own sshd.

The package splits along its seams: ``state`` (the lab's own files and lock),
``network`` (bridge, veths, namespaces), ``hosts`` (a host's files, cgroup,
init and sshd) and ``lifecycle`` (the :class:`Lab` that plans and drives them).

It exists so that every fault splitbrain injects is real (iptables inside a host,
signals to real processes, a skewed clock seen by real programs) without VMs.
What each host gets, and why (see docs lab-notes):

- a network namespace joined by a veth to one bridge per lab; addresses are in the
  loopback range (SUBNET.11, .12, ...; the harness side is SUBNET.1), which needs
  ``route_localnet`` in every namespace and on the bridge;
- its own UTS, mount and PID namespace with ``tini -s`` as init, so a whole host
  dies with one SIGKILL to its init and killed daemons never linger as zombies;
- its own ``/etc``, ``/var/lib`` and ``/var/log`` (overlayfs over the machine's, the
  host's changes in its state dir), and empty private ``/run`` (sshd needs
  ``/run/sshd``), ``/tmp``, ``/srv`` and ``/dev/shm``, so a packaged database's config,
  data, pid files and logs are per host; ``/var/lib/splitbrain`` (the lab's state,
  the journal, the built-in DBs' data) and the rest of the file system (``/usr``,
  ``/opt``, ``/home``, ...) are shared with the machine (``hosts`` says exactly how);
- no ``CAP_SYS_TIME`` in its bounding set, so nothing in a host can move the real
  clock; clock faults go through libfaketime, preloaded by sshd into every session
  and steered by a per-host offset file;
- a freezer cgroup when the kernel has one, for whole-host pauses.

Interface names are derived from a hash of the lab name so that several labs (with
different names and subnets) can coexist, e.g. while several test runs share the
machine. Everything a lab makes is found again from its name alone, so ``down``
works from another process and after a crash of the one that ran ``up``.
"""

from harness.inventory.lab.hosts import find_libfaketime
from harness.inventory.lab.lifecycle import Lab
from harness.inventory.lab.state import DEFAULT_STATE_ROOT

__all__ = ["Lab", "DEFAULT_STATE_ROOT", "find_libfaketime"]
