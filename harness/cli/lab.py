"""``splitbrain lab up|status|down``: the embedded lab from the command line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from harness.core.errors import ConfigError, LabError
from harness.inventory.lab import DEFAULT_STATE_ROOT, Lab

if TYPE_CHECKING:
    from harness.core.remote import Host
    from harness.inventory.vm import VmLab

__all__ = ["lab"]

_name_opt = click.option(
    "--name",
    default="default",
    show_default=True,
    help="Lab name; several labs with different names and subnets can coexist.",
)
_driver_opt = click.option(
    "--driver",
    type=click.Choice(["netns", "docker", "vm"]),
    default="netns",
    show_default=True,
    help="netns: namespace hosts with their own sshd; docker: containers "
    "(a private dockerd is started if none runs); vm: qemu guests with their own "
    "kernel (real clocks, netem, power loss).",
)
_root_opt = click.option(
    "--state-root",
    default=DEFAULT_STATE_ROOT,
    show_default=True,
    help="Where labs keep keys, configs, logs and their inventory.",
    hidden=True,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def lab() -> None:
    """The local lab: network-namespace hosts on this machine, each with its own sshd (needs root)."""


@lab.command()
@click.option(
    "--nodes",
    "-n",
    default=None,
    type=click.IntRange(1, 99),
    help="Number of hosts (n1..nN).  [default: 5, or the existing lab's]",
)
@_name_opt
@click.option(
    "--subnet",
    default=None,
    help="First three octets of the lab /24, inside 127.0.0.0/8.  "
    "[default: 127.77.0, or the existing lab's]",
)
@click.option(
    "--timeout",
    default=30.0,
    show_default=True,
    type=float,
    help="Seconds to wait for every sshd to answer.",
)
@_driver_opt
@click.option(
    "--memory",
    default=None,
    type=click.IntRange(128, 8192),
    help="vm: MiB of RAM per guest.  [default: 512]",
)
@click.option(
    "--package",
    "packages",
    multiple=True,
    metavar="NAME",
    help="vm: a Debian package to add to the guests' image, e.g. etcd-server "
    "(repeatable; guests reach no mirror).  [default: the existing lab's]",
)
@_root_opt
def up(
    nodes: int | None,
    name: str,
    subnet: str | None,
    timeout: float,
    driver: str,
    memory: int | None,
    packages: tuple[str, ...],
    state_root: str,
) -> None:
    """Build or repair the lab; returns once every host answers SSH."""
    if driver == "vm":
        _vm_up(name, nodes, subnet, memory, packages, timeout)
        return
    if driver == "docker":
        from harness.inventory.docker import DockerLab

        dl = DockerLab(name=name, nodes=nodes or 5, subnet=subnet or "127.79.0")
        for h in dl.up():
            click.echo(f"{h.name}\t{h.address}")
        click.echo(f"docker lab {name!r} is up; use `splitbrain run --docker --lab {name}`")
        return
    try:
        existing: Lab | None = Lab.load(name, state_root=state_root)
    except LabError:
        existing = None
    lab_ = _make(
        name,
        nodes if nodes is not None else existing.nodes if existing else 5,
        subnet if subnet is not None else existing.subnet if existing else "127.77.0",
        state_root,
    )
    hosts = lab_.up(timeout=timeout)
    for h in hosts:
        click.echo(f"{h.name}\t{h.address}")
    click.echo(f"lab {name!r} is up: {len(hosts)} hosts; inventory {lab_.inventory_path}")


@lab.command()
@_name_opt
@_driver_opt
@_root_opt
def status(name: str, driver: str, state_root: str) -> None:
    """Show each host's address, namespace, sshd and whether SSH answers."""
    if driver == "vm":
        _vm_status(name)
        return
    if driver == "docker":
        from harness.inventory.docker import DockerLab

        rows_ = DockerLab(name=name).status()
        for r in rows_:
            click.echo(f"{r['host']}\t{r['status']}")
        if not rows_ or any(r["status"] != "running" for r in rows_):
            raise LabError(f"docker lab {name!r} is not fully up")
        return
    rows = Lab.load(name, state_root=state_root).status()
    click.echo(f"{'host':<6} {'address':<16} {'netns':<6} {'sshd':<8} ssh ok")
    for r in rows:
        sshd = str(r["sshd_pid"]) if r["sshd_alive"] else "dead"
        click.echo(
            f"{r['host']:<6} {r['address']:<16} {_yn(r['netns']):<6} {sshd:<8} {_yn(r['ssh_ok'])}"
        )
    for r in rows:
        if r.get("ssh_error"):
            click.echo(f"  {r['host']}: {r['ssh_error']}")
    healthy = sum(1 for r in rows if r["ssh_ok"])
    click.echo(f"{healthy}/{len(rows)} hosts answer SSH")
    # leftovers of killed runs, per host
    _print_leftovers(Lab.load(name, state_root=state_root).hosts(), rows, name)
    if healthy < len(rows):
        raise LabError(
            f"lab {name!r}: {len(rows) - healthy} of {len(rows)} hosts do not answer "
            f"SSH; `splitbrain lab up --name {name}` repairs it"
        )


@lab.command()
@_name_opt
@_driver_opt
@click.option("--stop-engine", is_flag=True, help="docker: also stop the private dockerd.")
@_root_opt
def down(name: str, driver: str, stop_engine: bool, state_root: str) -> None:
    """Remove the lab and everything it made; safe to repeat.

    Kills every process in its hosts, deletes namespaces, interfaces, cgroups and files.
    """
    if driver == "vm":
        _vm_down(name)
        return
    if driver == "docker":
        from harness.inventory.docker import DockerLab

        dl = DockerLab(name=name)
        dl.down()
        if stop_engine and dl.engine is not None:
            dl.engine.stop_private()
        click.echo(f"docker lab {name!r} is down")
        return
    try:
        lab_ = Lab.load(name, state_root=state_root)
    except LabError:  # no state left: still sweep what the name alone identifies
        lab_ = _make(name, 1, "127.77.0", state_root)
    from harness.run.cleanup import down_lab  # also the DB data its runs left on this disk

    down_lab(lab_)
    click.echo(f"lab {name!r} is down")


def _vm_lab(
    name: str, nodes: int, subnet: str, memory: int, packages: tuple[str, ...] = ()
) -> VmLab:
    from harness.inventory.vm import VmLab

    try:
        return VmLab(name=name, nodes=nodes, subnet=subnet, memory_mib=memory, packages=packages)
    except ConfigError as e:
        raise click.BadParameter(str(e).split(": ", 1)[-1], param_hint=f"--{e.field}") from None


def _vm_up(
    name: str,
    nodes: int | None,
    subnet: str | None,
    memory: int | None,
    packages: tuple[str, ...],
    timeout: float,
) -> None:
    from harness.inventory.vm import DEFAULT_MEMORY_MIB, VmLab

    try:
        old: VmLab | None = VmLab.load(name)
    except (LabError, ConfigError):
        old = None
    vl = _vm_lab(
        name,
        nodes if nodes is not None else old.nodes if old else 3,
        subnet if subnet is not None else old.subnet if old else "127.91.0",
        memory if memory is not None else old.memory_mib if old else DEFAULT_MEMORY_MIB,
        packages if packages else old.packages if old else (),
    )
    # Booting under TCG is slow: never wait less than the default SSH budget of a VM.
    hosts = vl.up(timeout=max(timeout, 240.0))
    for h in hosts:
        click.echo(f"{h.name}\t{h.address}")
    click.echo(
        f"VM lab {name!r} is up ({vl.record().accel}): {len(hosts)} guests; "
        f"use `splitbrain run --vm --lab {name}`"
    )


def _vm_status(name: str) -> None:
    from harness.inventory.vm import VmLab

    vl = VmLab.load(name)
    click.echo(f"accelerator: {vl.record().accel}")
    rows = vl.status()
    click.echo(f"{'host':<6} {'address':<16} {'qemu pid':<9} {'RSS MiB':<8} {'state':<8} ssh ok")
    for r in rows:
        pid = str(r["pid"]) if r["pid"] else "-"
        rss = str(r["rss_mib"]) if r["rss_mib"] is not None else "-"
        click.echo(
            f"{r['host']:<6} {r['address']:<16} {pid:<9} {rss:<8} {r['state']:<8} {_yn(r['ssh_ok'])}"
        )
    for r in rows:
        if r.get("ssh_error"):
            click.echo(f"  {r['host']}: {r['ssh_error']}")
    healthy = sum(1 for r in rows if r["ssh_ok"])
    click.echo(f"{healthy}/{len(rows)} guests answer SSH")
    strays = vl.leftovers()
    for s in strays:
        click.echo(f"  stray: {s}")
    _print_leftovers(vl.hosts(), rows, name)
    if healthy < len(rows) or strays:
        raise LabError(
            f"VM lab {name!r}: {len(rows) - healthy} of {len(rows)} guests do not answer SSH"
            f"{', ' + str(len(strays)) + ' stray resources' if strays else ''}; "
            f"`splitbrain lab up --driver vm --name {name}` repairs it"
        )


def _vm_down(name: str) -> None:
    from harness.inventory.vm import VmLab

    try:
        vl = VmLab.load(name)
    except (LabError, ConfigError):  # no record: sweep what the name alone identifies
        vl = VmLab(name=name)
    vl.down()
    click.echo(f"VM lab {name!r} is down")


def _print_leftovers(hosts: list[Host], rows: list[dict[str, Any]], name: str) -> None:
    """``lab status``: each host's leftovers of earlier runs; DirtyClusterError (exit 3) if any.

    Hosts that do not answer SSH are still checked for what this machine can see (their
    journal, a frozen cgroup, a guest held off).
    """
    from harness.run.cleanup import DirtyClusterError
    from harness.run.leftovers import format_leftovers, offline_leftovers, scan_hosts

    reachable = {r["host"] for r in rows if r["ssh_ok"]}
    found = scan_hosts([h for h in hosts if h.name in reachable])
    for h in hosts:
        if h.name not in reachable:
            found[h.name] = offline_leftovers(h)
    lines = format_leftovers(found)
    if not lines:
        click.echo("leftovers: none")
        return
    click.echo(f"leftovers ({len(lines)}):")
    for line in lines:
        click.echo(f"  {line}")
    raise DirtyClusterError(
        f"lab {name!r}: {len(lines)} leftovers of earlier runs; "
        f"`splitbrain heal --lab {name}` removes them"
    )


def _make(name: str, nodes: int, subnet: str, state_root: str) -> Lab:
    try:
        return Lab(name=name, nodes=nodes, subnet=subnet, state_root=state_root)
    except ConfigError as e:
        raise click.BadParameter(str(e).split(": ", 1)[-1], param_hint=f"--{e.field}") from None


def _yn(b: bool) -> str:
    return "yes" if b else "no"


@lab.command("vagrant-prep")
@click.option(
    "--subnet",
    default="127.91.1",
    show_default=True,
    help="First three octets of the Vagrant network's /24, inside 127.0.0.0/8.",
)
@click.option("--env", "as_env", is_flag=True, help="Print only `export` lines for the shell.")
@click.option(
    "--teardown", is_flag=True, help="Remove the network; stop libvirtd if this tool started it."
)
def vagrant_prep(subnet: str, as_env: bool, teardown: bool) -> None:
    """Get `vagrant up --provider libvirt` ready: libvirtd, a 127.x network, the box, a key."""
    from harness.inventory.vm import vagrant_box

    if teardown:
        vagrant_box.teardown()
        click.echo("vagrant network removed")
        return
    env = vagrant_box.prepare(subnet)
    if as_env:
        for k, v in env.items():
            click.echo(f"export {k}={v}")
        return
    for k, v in env.items():
        click.echo(f"{k}={v}")
    click.echo("ready: export these, then `vagrant up --provider libvirt` in the repository")
