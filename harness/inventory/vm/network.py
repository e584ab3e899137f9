"""The VM lab's network: one bridge with a loopback-range address, one tap per guest.

The harness side is SUBNET.1 on the bridge, guests are SUBNET.11, .12, ...
(set from their kernel command line). 127.x off the ``lo`` interface is only
routed with ``route_localnet`` on both ends: the bridge here, every guest
interface in the guest's init. Names derive from a hash of the lab name, so
``down`` finds them from the name alone after a crash of the ``up`` process.
"""

from __future__ import annotations

import ipaddress
import zlib
from pathlib import Path

from harness.core.errors import ConfigError
from harness.inventory.lab.network import ensure_bridge, link_exists, run

__all__ = [
    "bridge_name",
    "tap_name",
    "guest_address",
    "gateway",
    "check_subnet",
    "ensure_network",
    "ensure_tap",
    "lab_links",
    "remove_links",
]

FIRST_GUEST = 11


def _tag(lab: str) -> str:
    return f"{zlib.crc32(lab.encode()) % 100000:05d}"


def bridge_name(lab: str) -> str:
    return f"sbv{_tag(lab)}br"


def tap_name(lab: str, index: int) -> str:
    """Guest ``index`` (1-based) of lab ``lab``; at most 15 characters (IFNAMSIZ)."""
    return f"sbv{_tag(lab)}t{index}"


def check_subnet(subnet: str) -> str:
    """``127.X.Y``, the first three octets of a /24 inside the loopback range."""
    parts = subnet.split(".")
    try:
        ok = len(parts) == 3 and all(0 <= int(p) <= 255 for p in parts)
        net = ipaddress.IPv4Network(f"{subnet}.0/24") if ok else None
    except ValueError:
        net = None
    if net is None or not net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
        raise ConfigError(
            f"{subnet!r} is not the first three octets of a /24 in 127.0.0.0/8 "
            "(the lab uses loopback-range addresses only), e.g. 127.91.0",
            field="subnet",
        )
    if subnet.startswith("127.0.0"):
        raise ConfigError(
            "127.0.0.x is this machine's own loopback; choose another", field="subnet"
        )
    return subnet


def gateway(subnet: str) -> str:
    return f"{subnet}.1"


def guest_address(subnet: str, index: int) -> str:
    """Guest ``index`` (1-based): SUBNET.11, .12, ..."""
    host = FIRST_GUEST - 1 + index
    if not 1 <= index <= 240:
        raise ConfigError(f"guest index {index} is outside 1..240", field="nodes")
    return f"{subnet}.{host}"


def ensure_network(lab: str, subnet: str) -> str:
    """The lab's bridge, addressed and routable in the loopback range; its name."""
    br = bridge_name(lab)
    ensure_bridge(br, gateway(subnet))
    return br


def ensure_tap(lab: str, index: int) -> str:
    tap = tap_name(lab, index)
    if not link_exists(tap):
        run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
    run(["ip", "link", "set", tap, "master", bridge_name(lab), "up"])
    return tap


def lab_links(lab: str) -> list[str]:
    """Every interface this lab made that still exists (taps and bridge)."""
    prefix = f"sbv{_tag(lab)}"
    return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(prefix))


def remove_links(lab: str) -> list[str]:
    """Delete the lab's taps, then its bridge; what could not be removed."""
    errors = []
    br = bridge_name(lab)
    for name in sorted(lab_links(lab), key=lambda n: n == br):
        r = run(["ip", "link", "del", name], check=False)
        if r.returncode != 0 and link_exists(name):
            errors.append(f"{name}: {r.stderr.strip()}")
    return errors
