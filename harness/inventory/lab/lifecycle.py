"""A named lab: its hosts planned from the name, built by ``up``, removed by ``down``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, LabError
from harness.core.remote import Host
from harness.inventory.lab import hosts as hostlife
from harness.inventory.lab import network as net
from harness.inventory.lab.state import (
    DEFAULT_STATE_ROOT,
    NAME_RE,
    HostPlan,
    ensure_client_key,
    locked,
    read_meta,
    write_atomic,
)
from harness.inventory.nodes_file import dump_nodes, load_nodes_file

__all__ = ["Lab"]

log = logging.getLogger(__name__)


def _checked_meta(meta_path: Path, name: str) -> dict[str, Any]:
    """``nodes`` and ``subnet`` from a lab's ``lab.json``, checked field by field.

    The file is ours, but a crash, a full disk or a hand edit can leave anything
    in it; every failure is a ConfigError naming the file (and line or field),
    with the command that clears the lab. Exact types, not ``int()``: ``int(1e999)``
    raises OverflowError and ``int(true)`` would quietly mean one node.
    """
    hint = f"`splitbrain lab down --name {name}` removes what is left"
    try:
        text = meta_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"cannot read: {getattr(e, 'strerror', None) or e}; {hint}", path=meta_path
        ) from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"not valid JSON ({e.msg}); {hint}", path=meta_path, line=e.lineno
        ) from None
    except (RecursionError, ValueError):
        raise ConfigError(f"not valid JSON; {hint}", path=meta_path) from None
    if not isinstance(meta, dict):
        raise ConfigError(
            f"expected a JSON object, got {type(meta).__name__}; {hint}", path=meta_path
        )
    nodes, subnet = meta.get("nodes"), meta.get("subnet")
    if type(nodes) is not int:
        raise ConfigError(
            f"expected an integer, got {repr(nodes)[:60]}; {hint}", path=meta_path, field="nodes"
        )
    if not isinstance(subnet, str):
        raise ConfigError(
            f"expected a string, got {repr(subnet)[:60]}; {hint}", path=meta_path, field="subnet"
        )
    try:
        Lab(name=name, nodes=nodes, subnet=subnet)  # its range checks, before anything uses them
    except ConfigError as e:
        why = str(e).removeprefix(f"field {e.field!r}: ")
        raise ConfigError(f"{why}; {hint}", path=meta_path, field=e.field) from None
    return {"nodes": nodes, "subnet": subnet}


class Lab:
    """A named lab on this machine. Cheap to construct; ``up`` and ``down`` do the work."""

    def __init__(
        self,
        name: str = "default",
        nodes: int = 5,
        subnet: str = "127.77.0",
        state_root: str | os.PathLike[str] = DEFAULT_STATE_ROOT,
    ) -> None:
        if not NAME_RE.match(name):
            raise ConfigError(
                f"lab name {name!r} must be 1-32 letters, digits, '-' or '_'", field="name"
            )
        if not 1 <= nodes <= 99:
            raise ConfigError(f"nodes must be between 1 and 99, got {nodes}", field="nodes")
        parts = subnet.split(".")
        if (
            len(parts) != 3
            or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts)
            or parts[0] != "127"
        ):
            raise ConfigError(
                f"subnet {subnet!r} must be three octets in 127.0.0.0/8, e.g. 127.77.0",
                field="subnet",
            )
        self.name = name
        self.nodes = nodes
        self.subnet = ".".join(str(int(p)) for p in parts)
        self.state_root = Path(state_root)
        self.dir = self.state_root / name
        self.tag = hashlib.sha1(name.encode()).hexdigest()[:6]
        self.bridge = f"sb{self.tag}br"
        self.gateway = f"{self.subnet}.1"

    def __repr__(self) -> str:
        return f"Lab(name={self.name!r}, nodes={self.nodes}, subnet={self.subnet!r})"

    # --- pure naming -------------------------------------------------------------------

    def host_plan(self, i: int, netns: str | None = None) -> HostPlan:
        return HostPlan(
            index=i,
            name=f"n{i}",
            address=f"{self.subnet}.{10 + i}",
            netns=netns or f"sb-{self.name}-n{i}",
            veth=f"sb{self.tag}v{i}",
            peer=f"sb{self.tag}p{i}",
            state_dir=self.dir / f"n{i}",
        )

    def plan(self) -> list[HostPlan]:
        return [self.host_plan(i) for i in range(1, self.nodes + 1)]

    @property
    def key_path(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.yaml"

    def shares(self, path: str) -> bool:
        """Whether ``path`` in this lab's hosts is this machine's own ``path``; a host's
        ``/etc``, ``/var/lib``, ``/var/log``, ``/run``, ``/tmp`` and ``/srv`` are its own
        (under :attr:`dir`), except the harness's paths bound back into them."""
        return hostlife.shared_with_machine(path, self.state_root)

    # --- loading -----------------------------------------------------------------------

    @classmethod
    def load(
        cls, name: str = "default", state_root: str | os.PathLike[str] = DEFAULT_STATE_ROOT
    ) -> Lab:
        meta_path = Path(state_root) / name / "lab.json"
        if not meta_path.exists():
            raise LabError(
                f"no lab named {name!r} (nothing at {meta_path}); "
                "start one with `splitbrain lab up`"
            )
        return cls(name=name, state_root=state_root, **_checked_meta(meta_path, name))

    def hosts(self) -> list[Host]:
        if not self.inventory_path.exists():
            raise LabError(
                f"lab {self.name!r} is not up (no {self.inventory_path}); run `splitbrain lab up`"
            )
        return load_nodes_file(self.inventory_path)

    # --- up ----------------------------------------------------------------------------

    def up(self, *, timeout: float = 30.0) -> list[Host]:
        """Build whatever is missing, restart dead hosts, wait for every sshd; idempotent."""
        hostlife.require_root()
        missing = [t for t in hostlife.TOOLS if shutil.which(t) is None]
        if not os.path.exists(hostlife.SSHD):
            missing.append("sshd (openssh-server)")
        if missing:
            raise LabError(f"the lab needs these programs, not found: {', '.join(missing)}")
        with locked(self.state_root):
            self._check_meta()
            net.check_conflicts(self.state_root, self.name, self.subnet, self.bridge)
            self.dir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.dir, 0o755)
            write_atomic(
                self.dir / "lab.json",
                json.dumps(
                    {
                        "name": self.name,
                        "nodes": self.nodes,
                        "subnet": self.subnet,
                        "bridge": self.bridge,
                    },
                    indent=2,
                )
                + "\n",
            )
            client_pub = ensure_client_key(self.key_path, self.name)
            faketime = hostlife.find_libfaketime()
            if faketime is None:
                log.warning("libfaketime not found: clock faults will be unavailable")
            net.ensure_bridge(self.bridge, self.gateway)
            cgroup_base, cgroup_kind = hostlife.cgroup_base(self.name)
            plan = self.plan()
            hosts: list[Host] = []
            known: list[str] = []
            launched: list[HostPlan] = []
            for hp in plan:
                pub = hostlife.write_host_files(hp, plan, client_pub, faketime, self.name)
                known.append(f"{hp.address} {pub}")
                net.ensure_host_net(hp, self.bridge, self.name)
                cg = hostlife.ensure_cgroup(cgroup_base, hp)
                if not hostlife.host_alive(hp):
                    hostlife.launch(hp, cg, faketime, self.name)
                    launched.append(hp)
                else:
                    # `up` means "healthy": undo a pause or clock skew a run left behind.
                    if cg is not None:
                        hostlife.thaw(cg)
                    if faketime:
                        write_atomic(hp.state_dir / "faketime", "+0\n")
                hosts.append(
                    Host(
                        name=hp.name,
                        address=hp.address,
                        port=22,
                        user="root",
                        key_path=str(self.key_path),
                        known_hosts=str(self.known_hosts),
                        extras={
                            "lab": self.name,
                            "netns": hp.netns,
                            "state_dir": str(hp.state_dir),
                            "faketime_file": str(hp.state_dir / "faketime") if faketime else None,
                            "cgroup": str(cg) if cg else None,
                            "cgroup_kind": cgroup_kind if cg else None,
                            # a namespace host sees this machine's /dev: disk faults' lazy fs
                            "fuse": os.path.exists("/dev/fuse"),
                            # where the machine sees what the host wrote there
                            "private_dirs": {
                                d: str(hp.state_dir / d.strip("/").replace("/", "_"))
                                for d in hostlife.BOUND
                            },
                            "overlay_upper_dirs": {
                                d: str(hp.state_dir / "upper" / d.strip("/").replace("/", "_"))
                                for d in hostlife.OVERLAID
                            },
                        },
                    )
                )
            write_atomic(self.known_hosts, "\n".join(known) + "\n")
            write_atomic(self.inventory_path, dump_nodes(hosts))
            hostlife.wait_ssh(plan, timeout, self.name)
            if launched:
                log.info("lab %s: started %s", self.name, ", ".join(h.name for h in launched))
            return hosts

    def _check_meta(self) -> None:
        meta = read_meta(self.dir)
        if meta is None:
            return
        if meta.get("nodes") != self.nodes or meta.get("subnet") != self.subnet:
            raise LabError(
                f"lab {self.name!r} already exists with {meta.get('nodes')} nodes on "
                f"{meta.get('subnet')}.0/24; run `splitbrain lab down --name {self.name}` first "
                "or use another --name"
            )

    # --- down and status ---------------------------------------------------------------

    def down(self) -> None:
        """Remove every process, namespace, interface, cgroup and file of this lab; safe twice."""
        hostlife.require_root()
        with locked(self.state_root):
            plan = {hp.name: hp for hp in self.plan()}
            # Hosts of a lab built with more nodes than this object knows about.
            prefix = f"sb-{self.name}-n"
            if Path("/run/netns").exists():
                for ns in os.listdir("/run/netns"):
                    rest = ns[len(prefix) :]
                    if ns.startswith(prefix) and rest.isdigit() and f"n{rest}" not in plan:
                        plan[f"n{int(rest)}"] = self.host_plan(int(rest), ns)
            base, _kind = hostlife.cgroup_base(self.name)
            errors: list[str] = []
            for hp in plan.values():
                cg = base / hp.name if base is not None else None
                try:
                    hostlife.kill_host(hp, cg, self.name)
                except LabError as e:
                    errors.append(str(e))
                errors += net.remove_host_net(hp)
                if cg is not None:
                    hostlife.rmdir_retry(cg)
            net.remove_stray_links(self.tag)
            errors += net.remove_bridge(self.bridge)
            if base is not None:
                hostlife.rmdir_retry(base)
                with contextlib.suppress(OSError):
                    base.parent.rmdir()  # shared by all labs: only when the last one is gone
            if errors:
                raise LabError(f"lab {self.name} not fully removed: {'; '.join(errors)}")
            shutil.rmtree(self.dir, ignore_errors=True)

    def status(self) -> list[dict[str, Any]]:
        """Per host: address, whether its namespace exists, its sshd runs, and whether the
        harness can log in with the lab's key and known_hosts (a real SSH session)."""
        plan = self.plan()
        try:
            hosts = {h.name: h for h in self.hosts()}
        except (LabError, ConfigError):
            hosts = {}

        def one(hp: HostPlan) -> dict[str, Any]:
            netns = Path("/run/netns", hp.netns).exists()
            sshd = hostlife.sshd_pid(hp)
            ok, why = False, "no inventory" if hp.name not in hosts else ""
            if netns and hp.name in hosts:
                ok, why = hostlife.ssh_login(hosts[hp.name])
            return {
                "host": hp.name,
                "address": hp.address,
                "netns": netns,
                "sshd_pid": sshd,
                "sshd_alive": sshd is not None,
                "ssh_ok": ok,
                "ssh_error": why or None,
            }

        with ThreadPoolExecutor(max_workers=min(16, len(plan))) as ex:
            return list(ex.map(one, plan))
