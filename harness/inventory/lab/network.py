"""A lab's network: one bridge, a veth and a namespace per host, loopback-range addresses.

Addresses are SUBNET.11, .12, ... with the harness side at SUBNET.1 on the
bridge; ``route_localnet`` is set on the bridge and in every namespace, or
``connect()`` to a 127.x address on an interface fails with EINVAL.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from harness.core.errors import LabError
from harness.inventory.lab.state import HostPlan, read_meta

__all__ = ["run", "link_exists", "check_conflicts", "ensure_bridge", "ensure_host_net",
           "remove_host_net", "remove_stray_links", "remove_bridge"]


def run(args: list[str], *, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LabError(f"{args[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"`{' '.join(args)}` took more than {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise LabError(f"`{' '.join(args)}` failed ({proc.returncode}): {err[-1] if err else ''}")
    return proc


def link_exists(name: str, netns: str | None = None) -> bool:
    if netns is None:
        return Path("/sys/class/net", name).exists()
    return run(["ip", "-n", netns, "link", "show", "dev", name], check=False).returncode == 0


def _addresses(args: list[str]) -> set[str]:
    out = json.loads(run(args).stdout or "[]")
    return {a.get("local") for link in out for a in link.get("addr_info", [])}


def check_conflicts(state_root: Path, name: str, subnet: str, bridge: str) -> None:
    """Refuse a subnet or bridge name that something else on this machine holds."""
    # Another lab's state claiming this subnet, while its bridge still exists.
    if state_root.exists():
        for other in state_root.iterdir():
            if other.name == name:
                continue
            meta = read_meta(other)
            if meta and meta.get("subnet") == subnet and link_exists(str(meta.get("bridge"))):
                raise LabError(f"subnet {subnet}.0/24 is used by lab {other.name!r}; "
                               "choose another --subnet")
    # Any interface but our bridge holding an address in our /24.
    for link in json.loads(run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for a in link.get("addr_info", []):
            local = a.get("local", "")
            if local.rsplit(".", 1)[0] == subnet and link.get("ifname") != bridge:
                raise LabError(f"address {local} on interface {link.get('ifname')} is in the "
                               f"lab subnet {subnet}.0/24; choose another --subnet")
    if link_exists(bridge):
        info = json.loads(run(["ip", "-j", "-d", "link", "show", "dev", bridge]).stdout)
        kind = (info[0].get("linkinfo") or {}).get("info_kind") if info else None
        if kind != "bridge":
            raise LabError(f"interface {bridge} exists and is not a bridge "
                           f"(kind {kind}); it is in the way of lab {name!r}")


def ensure_bridge(bridge: str, gateway: str) -> None:
    if not link_exists(bridge):
        run(["ip", "link", "add", bridge, "type", "bridge"])
    if gateway not in _addresses(["ip", "-j", "-4", "addr", "show", "dev", bridge]):
        run(["ip", "addr", "add", f"{gateway}/24", "dev", bridge])
    Path(f"/proc/sys/net/ipv4/conf/{bridge}/route_localnet").write_text("1\n")
    run(["ip", "link", "set", bridge, "up"])


def ensure_host_net(hp: HostPlan, bridge: str, lab_name: str) -> None:
    """The host's namespace, its veth on the bridge and its address; repairs a half-built one."""
    if not Path("/run/netns", hp.netns).exists():
        run(["ip", "netns", "add", hp.netns])
    if not link_exists("eth0", hp.netns):
        # Half-built: a veth whose peer is not (or no longer) in the namespace.
        for stale in (hp.veth, hp.peer):
            if link_exists(stale):
                run(["ip", "link", "del", stale])
        run(["ip", "link", "add", hp.veth, "type", "veth", "peer", "name", hp.peer,
             "netns", hp.netns])
        run(["ip", "-n", hp.netns, "link", "set", hp.peer, "name", "eth0"])
    elif not link_exists(hp.veth):
        raise LabError(f"namespace {hp.netns} has an eth0 that is not joined to {hp.veth}; "
                       f"run `splitbrain lab down --name {lab_name}`")
    run(["ip", "link", "set", hp.veth, "master", bridge, "up"])
    if hp.address not in _addresses(["ip", "-n", hp.netns, "-j", "-4", "addr", "show", "dev",
                                     "eth0"]):
        run(["ip", "-n", hp.netns, "addr", "add", f"{hp.address}/24", "dev", "eth0"])
    run(["ip", "-n", hp.netns, "link", "set", "eth0", "up"])
    run(["ip", "-n", hp.netns, "link", "set", "lo", "up"])


def remove_host_net(hp: HostPlan) -> list[str]:
    """Delete the host's namespace and veth pair; what could not be removed."""
    errors = []
    if Path("/run/netns", hp.netns).exists():
        r = run(["ip", "netns", "del", hp.netns], check=False)
        if r.returncode != 0:
            errors.append(f"ip netns del {hp.netns}: {r.stderr.strip()}")
    for link in (hp.veth, hp.peer):
        if link_exists(link):
            run(["ip", "link", "del", link], check=False)
    return errors


def remove_stray_links(tag: str) -> None:
    """veths of hosts beyond what the lab knows (e.g. their namespace vanished already)."""
    for link in os.listdir("/sys/class/net"):
        if link.startswith(f"sb{tag}v") or link.startswith(f"sb{tag}p"):
            run(["ip", "link", "del", link], check=False)


def remove_bridge(bridge: str) -> list[str]:
    if not link_exists(bridge):
        return []
    r = run(["ip", "link", "del", bridge], check=False)
    return [f"ip link del {bridge}: {r.stderr.strip()}"] if r.returncode != 0 else []
