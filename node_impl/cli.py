"""``splitbrain node``: run a reference node, list its seeded bugs, or administer
a running cluster's membership.

Every argument other than ``--list-bugs`` and ``--admin`` goes unchanged to the
node's own parser (``python -m node_impl``), so both entry points accept exactly
the same options. ``--admin HOST:PORT`` (a node's client port) turns the remaining
arguments into one membership request (docs/membership.md M10)::

    splitbrain node --admin 127.0.0.1:8001 members
    splitbrain node --admin 127.0.0.1:8001 add-member n4 127.0.0.1:7004
    splitbrain node --admin 127.0.0.1:8001 remove-member n2
    splitbrain node --admin 127.0.0.1:8001 transfer-leader n3 [TIMEOUT_MS]

It prints the reply as JSON, follows one redirect to the leader, and exits 0 on
SUCCESS, 1 on any other reply, 2 on bad arguments.
"""

from __future__ import annotations

import json
import sys

import click

from node_impl.bugs import BROKER_BUGS, BUGS, HA_BUGS

__all__ = ["node"]


@click.command(
    "node",
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
    add_help_option=False,
)
@click.option(
    "--list-bugs", is_flag=True, help="Print each seeded bug with a one-line description."
)
@click.option(
    "--admin",
    metavar="HOST:PORT",
    default=None,
    help="Send one membership request (members, add-member ID ADDR, remove-member ID, "
    "transfer-leader ID [TIMEOUT_MS]) to the node with this client address.",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def node(list_bugs: bool, admin: str | None, args: tuple[str, ...]) -> None:
    """Run one reference DLedger node (options as for `python -m node_impl --help`)."""
    if admin is not None:
        sys.exit(_admin(admin, list(args)))
    if list_bugs:
        width = max(len(k) for k in BUGS)
        for name, desc in BUGS.items():
            click.echo(f"{name:<{width}}  {desc}")
        for name, desc in (*HA_BUGS.items(), *BROKER_BUGS.items()):
            click.echo(f"{name:<{width}}  {desc}")
        return
    from node_impl.__main__ import main

    rc = main(list(args))
    if rc:
        sys.exit(rc)


def _admin_request(args: list[str]) -> dict | None:
    """The request map for ``--admin`` arguments, None if they are malformed."""
    if args == ["members"]:
        return {"type": "members"}
    if len(args) == 3 and args[0] == "add-member":
        return {"type": "add-member", "id": args[1], "addr": args[2]}
    if len(args) == 2 and args[0] == "remove-member":
        return {"type": "remove-member", "id": args[1]}
    if len(args) in (2, 3) and args[0] == "transfer-leader":
        msg: dict = {"type": "transfer-leader", "id": args[1]}
        if len(args) == 3:
            if not args[2].isdigit():
                return None
            msg["timeout_ms"] = int(args[2])
        return msg
    return None


def _admin(addr: str, args: list[str]) -> int:
    from node_impl.client import NodeClient

    msg = _admin_request(args)
    host, _, port = addr.rpartition(":")
    if msg is None or not host or not port.isdigit():
        click.echo(
            "usage: splitbrain node --admin HOST:PORT members | add-member ID PEER_ADDR | "
            "remove-member ID | transfer-leader ID [TIMEOUT_MS]",
            err=True,
        )
        return 2
    timeout = 10.0 + msg.get("timeout_ms", 0) / 1000.0
    try:
        with NodeClient(host, int(port), timeout=timeout) as c:
            reply = c.call(msg)
        if reply.get("type") == "redirect" and isinstance(reply.get("leader_addr"), str):
            lhost, _, lport = reply["leader_addr"].rpartition(":")
            with NodeClient(lhost, int(lport), timeout=timeout) as c:
                reply = c.call(msg)
    except (ConnectionError, TimeoutError, OSError) as e:
        click.echo(f"splitbrain node --admin: {e}", err=True)
        return 1
    reply.pop("rid", None)
    click.echo(json.dumps(reply, sort_keys=True, default=repr))
    return 0 if reply.get("code") == "SUCCESS" else 1
