"""One inventory, chosen by the user, to a list of hosts (the lab when none is named).

Every source ends as :class:`~harness.core.remote.Host` records; the sources'
own modules are imported only when chosen, so a nodes file never pulls in the
Docker SDK.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace

from harness.core.errors import ConfigError, LabError
from harness.core.remote import Host

__all__ = ["resolve_hosts", "lab_hosts", "vm_lab_hosts"]


def resolve_hosts(
    *,
    lab: str | None,
    nodes_file: str | None,
    vagrant: str | None,
    docker: bool,
    insecure: bool,
    vm: bool = False,
) -> list[Host]:
    """Exactly one inventory to a host list (the lab when none is named)."""
    chosen = [
        n
        for n, v in (
            ("--nodes-file", nodes_file),
            ("--vagrant", vagrant),
            ("--docker", docker),
            ("--vm", vm),
        )
        if v
    ]
    if len(chosen) > 1:
        raise ConfigError(f"choose one inventory, not {' and '.join(chosen)}")
    if nodes_file:
        from harness.inventory.nodes_file import load_nodes_file

        hosts = load_nodes_file(nodes_file)
    elif vagrant:
        from harness.inventory.vagrant import vagrant_hosts

        hosts = vagrant_hosts(vagrant)
    elif docker:
        if importlib.util.find_spec("harness.inventory.docker") is None:
            raise ConfigError(
                "the docker inventory is not available in this build "
                "(no harness.inventory.docker); use the lab, --vagrant or --nodes-file",
                field="docker",
            )
        from harness.inventory import docker as docker_lab

        # --lab names the docker lab too; the docker driver's default lab is "docker".
        hosts = docker_lab.docker_hosts(lab if lab and lab != "default" else "docker")
    elif vm:
        hosts = vm_lab_hosts(lab if lab and lab != "default" else "vm")
    else:
        hosts = lab_hosts(lab or "default")
    if insecure:
        hosts = [replace(h, verify_host_key=False, extras=dict(h.extras)) for h in hosts]
    return hosts


def vm_lab_hosts(name: str) -> list[Host]:
    """The guests of a VM lab; each Host carries its :class:`~harness.core.machine.Machine`."""
    from harness.inventory.vm import vm_hosts

    return vm_hosts(name)


def lab_hosts(name: str) -> list[Host]:
    from harness.inventory.lab import Lab

    try:
        hosts = Lab.load(name).hosts()
    except (LabError, FileNotFoundError, OSError) as e:
        if "splitbrain lab up" in str(e):
            raise
        hint = "`splitbrain lab up`" if name == "default" else f"`splitbrain lab up --name {name}`"
        raise LabError(f"lab {name!r} is not up ({e}); start it with {hint}") from None
    if not hosts:
        raise LabError(f"lab {name!r} has no hosts; start it with `splitbrain lab up`")
    return hosts
