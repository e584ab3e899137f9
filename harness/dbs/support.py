"""Small helpers every DB plugin ended up writing for itself, exported by ``harness.api``.

The examples (examples/*/) each had their own node directory per lab, "kill and wait
until it is gone", "poll until ready or give up", "is this port open" and address
lookup; these are those, once, with the harness's error types, so a plugin's own code is
only what is particular to its system.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.core.errors import ConfigError, RemoteError

if TYPE_CHECKING:
    from harness.core.remote import Remote
    from harness.core.spec import RunContext

__all__ = [
    "node_dir",
    "host_addresses",
    "address",
    "port_open",
    "wait_until",
    "wait_for_port",
    "kill_daemon",
]


def node_dir(ctx: RunContext, node: str, base: str) -> str:
    """``base/<lab>/<node>``: one directory per node, apart per lab (hosts of two labs may
    share a file system) and ``base/hosts/<node>`` outside a lab. ``base`` is absolute."""
    if not base.startswith("/"):
        raise ConfigError(f"a node directory's base must be absolute, got {base!r}", field="root")
    lab = ctx.hosts[node].extras.get("lab") or "hosts"
    return f"{base.rstrip('/')}/{lab}/{node}"


def host_addresses(
    ctx: RunContext, port: int, service: str = "client"
) -> dict[str, dict[str, tuple[str, int]]]:
    """``Addressable.addresses`` of a system that listens on ``port`` at every host's address."""
    return {service: {n: (ctx.hosts[n].address, port) for n in ctx.nodes}}


def address(ctx: RunContext, node: str, service: str = "client") -> tuple[str, int]:
    """Where ``node``'s ``service`` listens (from the DB's ``addresses``, copied into
    ``ctx.addresses`` before setup); a ConfigError naming what is missing otherwise."""
    try:
        host, port = ctx.addresses[service][node]
    except KeyError:
        known = ", ".join(sorted(ctx.addresses)) or "none (the DB is not Addressable)"
        raise ConfigError(
            f"no {service!r} address for node {node!r}; services published: {known}",
            field="addresses",
        ) from None
    return str(host), int(port)


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a TCP connection to ``host:port`` is accepted now."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    host: str = "cluster",
    interval: float = 0.2,
) -> None:
    """Call ``check`` until it returns True; after ``timeout`` seconds a RemoteError (on
    ``host``) saying ``what`` never happened. ``check`` runs at least once."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise RemoteError(f"{what}: not after {timeout:g} s", host=host)
        time.sleep(interval)


def wait_for_port(host: str, port: int, *, timeout: float = 30.0) -> None:
    """Wait until ``host:port`` accepts connections (a RemoteError after ``timeout``)."""
    wait_until(
        lambda: port_open(host, port),
        timeout=timeout,
        what=f"port {port} accepting connections",
        host=host,
        interval=0.1,
    )


def kill_daemon(remote: Remote, pidfile: str, *, timeout: float = 5.0) -> None:
    """SIGKILL the daemon of ``pidfile`` and wait until it is gone, so a ``start`` that
    follows never meets the dying process (its ports, its lock files). Already gone: fine."""
    remote.signal_daemon(pidfile, "KILL")
    wait_until(
        lambda: not remote.daemon_running(pidfile),
        timeout=timeout,
        what=f"process of {pidfile} gone after SIGKILL",
        host=remote.host.name,
        interval=0.05,
    )
