"""``splitbrain heal``: undo whatever earlier (possibly killed) runs left on the hosts.

Replays the fault journal (nemesis/journal.py), then scans every host
(harness/run/leftovers.py) and
removes what it finds (rules, qdiscs, clock offsets, stopped processes, fault
daemons, DB processes and data), then scans again. Exit 0 when every host is
clean, 3 when something remains (each leftover is printed with its host).
"""

from __future__ import annotations

import json

import click

from harness.cli.inventory import inventory_options
from harness.run.cleanup import DirtyClusterError, heal_hosts
from harness.run.leftovers import format_leftovers, scan_hosts

__all__ = ["heal"]


@click.command(name="heal")
@inventory_options("Embedded lab to heal.")
@click.option("--dry-run", is_flag=True, help="Only list what is left; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def heal(
    lab: str,
    nodes_file: str | None,
    vagrant: str | None,
    docker: bool,
    vm: bool,
    insecure: bool,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Heal every fault and remove every cluster earlier runs left; verify the hosts are clean."""
    from harness.inventory.resolve import resolve_hosts

    hosts = resolve_hosts(
        lab=lab, nodes_file=nodes_file, vagrant=vagrant, docker=docker, insecure=insecure, vm=vm
    )
    if dry_run:
        found = scan_hosts(hosts)
        lines = format_leftovers(found)
        if as_json:
            click.echo(json.dumps({h: [str(x) for x in v] for h, v in found.items()}, indent=1))
        else:
            for line in lines or ["nothing left on " + ", ".join(h.name for h in hosts)]:
                click.echo(line)
        if lines:
            raise DirtyClusterError(f"{len(lines)} leftovers on the hosts")
        return 0
    rep = heal_hosts(hosts)
    if as_json:
        click.echo(json.dumps(rep.to_json(), indent=1))
    else:
        for line in format_leftovers(rep.before):
            click.echo(f"healed {line}")
        for line in rep.remaining():
            click.echo(f"STILL THERE {line}")
        click.echo("clean" if rep.clean else "not clean")
    if not rep.clean:
        raise DirtyClusterError("hosts still dirty after healing: " + "; ".join(rep.remaining()))
    return 0
