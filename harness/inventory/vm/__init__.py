"""The VM lab: N qemu guests on this machine, each with its own kernel, disk and sshd.

For faults a namespace cannot have: a real clock per host, tc netem in the
host's own kernel, and power loss (the guest's page cache is lost, which a
process kill never does). The package splits along its seams:

- ``image``: the Debian base image, built once with debootstrap and cached by a
  hash of its recipe, with the kernel and initramfs booted directly;
- ``accel``: KVM when a real probe boot shows it works, else TCG;
- ``qemu``: one guest's plan, command line, seed disk, overlay and process;
- ``qmp``: qemu's control socket and the :class:`~harness.core.machine.Machine`
  on it (power cut, power on, suspend, resume);
- ``network``: the lab's bridge (127.x, ``route_localnet``) and one tap per guest;
- ``state``: the lab's record, written before any guest starts;
- ``lifecycle``: :class:`VmLab` (up, hosts, status, leftovers, down).
"""

from harness.inventory.vm.image import VM_ROOT
from harness.inventory.vm.lifecycle import DEFAULT_MEMORY_MIB, VmLab, vm_hosts

__all__ = ["VmLab", "vm_hosts", "VM_ROOT", "DEFAULT_MEMORY_MIB"]
