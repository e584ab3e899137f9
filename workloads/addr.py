"""Where a node's client API listens, as seen from the harness.

The DB lifecycle knows the truth (it chose the port when it started the node),
so it declares them (``Addressable``), the runner puts them in
``ctx.addresses["client"] = {node: (host, port)}``, and every
client reads it here. Without that entry we fall back to the host's address and
``spec.options["client_port"]`` (default 9001), which is right whenever all
nodes listen on one port at distinct addresses (the lab, VMs, a nodes file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.core.errors import ConfigError

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["DEFAULT_CLIENT_PORT", "client_addr", "node_for_addr", "parse_addr"]

DEFAULT_CLIENT_PORT = 9001


def parse_addr(value: Any, *, what: str = "address") -> tuple[str, int]:
    """Accept ``(host, port)``, ``[host, port]`` or ``"host:port"``."""
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"{what} {value!r} is not host:port")
        value = (host, port)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        host, port = value
        try:
            return str(host), int(port)
        except (TypeError, ValueError):
            raise ConfigError(f"{what} {value!r} has a non-integer port") from None
    raise ConfigError(f"{what} {value!r} is not (host, port) or host:port")


def client_addr(ctx: RunContext, node: str) -> tuple[str, int]:
    """The (host, port) of ``node``'s client API."""
    published = ctx.addresses.get("client", {})
    if node in published:
        return parse_addr(published[node], what=f"client address of node {node!r}")
    host = ctx.hosts.get(node)
    if host is None:
        raise ConfigError(f"no host and no client address known for node {node!r}", field="nodes")
    port = ctx.spec.options.get("client_port", DEFAULT_CLIENT_PORT)
    try:
        return host.address, int(port)
    except (TypeError, ValueError):
        raise ConfigError(f"must be an integer, got {port!r}", field="client_port") from None


def node_for_addr(ctx: RunContext, addr: tuple[str, int]) -> str | None:
    """The node whose client API is at ``addr``, if any (to name a redirect's target)."""
    for node in ctx.nodes:
        try:
            if client_addr(ctx, node) == addr:
                return node
        except ConfigError:
            continue
    return None
