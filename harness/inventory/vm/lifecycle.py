"""The VM lab: plans its guests, brings them up, reports on them and removes them.

``up`` is repair as much as creation: a guest whose qemu runs is left alone, a
missing one is booted again on its existing overlay. ``down`` kills every qemu
of the lab (by pid file, then by process name), deletes its taps and bridge and
its directory, and works from the name alone after a crash of ``up``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness.core.errors import ConfigError, LabError
from harness.core.remote import Host
from harness.inventory.lab import network as labnet
from harness.inventory.lab.hosts import ssh_banner
from harness.inventory.lab.state import (
    DEFAULT_STATE_ROOT,
    NAME_RE,
    ensure_client_key,
    locked,
    new_ed25519_key,
    write_atomic,
)
from harness.inventory.vm import network as vmnet
from harness.inventory.vm import qemu
from harness.inventory.vm.accel import choose_accel
from harness.inventory.vm.image import (
    VM_ROOT,
    BaseImage,
    ensure_image,
    require_tools,
    with_packages,
)
from harness.inventory.vm.qmp import QmpMachine
from harness.inventory.vm.state import VmLabRecord, read_record, write_record

__all__ = ["VmLab", "vm_hosts", "DEFAULT_MEMORY_MIB"]

log = logging.getLogger(__name__)

DEFAULT_MEMORY_MIB = 512


@dataclass
class VmLab:
    """N guests of one lab; everything lives under ``<root>/labs/<name>``."""

    name: str
    nodes: int = 3
    subnet: str = "127.91.0"
    memory_mib: int = DEFAULT_MEMORY_MIB
    root: Path = VM_ROOT
    packages: tuple[str, ...] = ()
    """Debian packages added to the guests' image (``lab up --package``)."""

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise ConfigError(
                f"lab name {self.name!r} must be 1-32 letters, digits, '-' or '_'", field="name"
            )
        if not 1 <= self.nodes <= 32:
            raise ConfigError(f"{self.nodes} guests: choose 1..32", field="nodes")
        if not 128 <= self.memory_mib <= 8192:
            raise ConfigError(f"{self.memory_mib} MiB per guest: choose 128..8192", field="memory")
        vmnet.check_subnet(self.subnet)

    # --- plan (pure) ---------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self.root / "labs" / self.name

    @property
    def key_path(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def bridge(self) -> str:
        return vmnet.bridge_name(self.name)

    def guest(self, index: int) -> qemu.GuestPlan:
        name = f"n{index}"
        return qemu.GuestPlan(
            lab=self.name,
            index=index,
            name=name,
            address=vmnet.guest_address(self.subnet, index),
            prefix=24,
            tap=vmnet.tap_name(self.name, index),
            directory=self.dir / name,
            memory_mib=self.memory_mib,
        )

    def plan(self) -> list[qemu.GuestPlan]:
        return [self.guest(i) for i in range(1, self.nodes + 1)]

    @classmethod
    def load(cls, name: str, root: Path = VM_ROOT) -> VmLab:
        rec = read_record(root / "labs" / name)
        return cls(
            name=name,
            nodes=rec.nodes,
            subnet=rec.subnet,
            memory_mib=rec.memory_mib,
            root=root,
            packages=rec.packages,
        )

    def record(self) -> VmLabRecord:
        return read_record(self.dir)

    # --- up ------------------------------------------------------------------------

    def up(self, *, timeout: float = 240.0) -> list[Host]:
        """Build or repair the lab; returns once every guest answers SSH (verified key)."""
        _require_root()
        require_tools(["qemu-system-x86_64", "qemu-img"])
        image = ensure_image(with_packages(self.packages), root=self.root)
        accel = choose_accel(image.kernel, image.initrd, self.root / "accel.json")
        with locked(self.root / "labs"):
            self._check_existing()
            for state_root in (self.root / "labs", Path(DEFAULT_STATE_ROOT)):
                labnet.check_conflicts(state_root, self.name, self.subnet, self.bridge)
            write_record(
                self.dir,
                VmLabRecord(
                    name=self.name,
                    subnet=self.subnet,
                    nodes=self.nodes,
                    memory_mib=self.memory_mib,
                    bridge=self.bridge,
                    image_key=image.key,
                    image_dir=str(image.directory),
                    accel=accel,
                    packages=self.packages,
                ),
            )
            vmnet.ensure_network(self.name, self.subnet)
            client_pub = ensure_client_key(self.key_path, self.name)
            known: list[str] = []
            started = []
            for g in self.plan():
                g.directory.mkdir(parents=True, exist_ok=True)
                known.append(f"{g.address} {self._host_key(g, client_pub)}")
                qemu.make_overlay(g, image.disk)
                vmnet.ensure_tap(self.name, g.index)
                if qemu.qemu_pid(g) is None:
                    self._boot(g, image, accel)
                    started.append(g.name)
                else:
                    # `up` means healthy: a guest a run left paused is resumed.
                    self.machine(g, image, accel).resume()
            write_atomic(self.known_hosts, "\n".join(known) + "\n")
        log.info("VM lab %s (%s): started %s", self.name, accel, ", ".join(started) or "none")
        hosts = self.hosts()
        self.wait_ssh(hosts, timeout)
        return hosts

    def _check_existing(self) -> None:
        with contextlib.suppress(LabError, ConfigError):
            rec = read_record(self.dir)
            if (rec.nodes, rec.subnet, rec.memory_mib) != (
                self.nodes,
                self.subnet,
                self.memory_mib,
            ):
                raise LabError(
                    f"VM lab {self.name!r} already exists with {rec.nodes} guests of "
                    f"{rec.memory_mib} MiB on {rec.subnet}.0/24; run `splitbrain lab down "
                    f"--driver vm --name {self.name}` first or use another --name"
                )

    def _host_key(self, g: qemu.GuestPlan, client_pub: str) -> str:
        """The guest's own host key, made once with its overlay; the seed disk carries it."""
        pub_path = g.host_key.with_suffix(".pub")
        if not (g.host_key.exists() and pub_path.exists()):
            priv, pub = new_ed25519_key()
            write_atomic(g.host_key, priv, 0o600)
            write_atomic(pub_path, pub + "\n")
        pub = pub_path.read_text().strip()
        qemu.write_seed(g, g.host_key.read_text(), pub, client_pub)
        return pub

    def _boot(self, g: qemu.GuestPlan, image: BaseImage, accel: str) -> None:
        qemu.repair_overlay(g)
        qemu.launch(g, kernel=image.kernel, initrd=image.initrd, accel=accel)

    def wait_ssh(self, hosts: list[Host], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = {h.name: h for h in hosts}
        by_plan = {g.name: g for g in self.plan()}
        while pending:
            for name, h in list(pending.items()):
                if qemu.qemu_pid(by_plan[name]) is None:
                    raise LabError(
                        f"VM lab {self.name}: guest {name}'s qemu exited during boot; "
                        f"its console: {_tail(by_plan[name].console_log)}"
                    )
                if ssh_banner(h.address, h.port, 10.0) and ssh_login(h)[0]:
                    del pending[name]
            if not pending:
                return
            if time.monotonic() > deadline:
                name = sorted(pending)[0]
                raise LabError(
                    f"VM lab {self.name}: {', '.join(sorted(pending))} did not answer SSH within "
                    f"{timeout:.0f} s; {name}'s console: {_tail(by_plan[name].console_log)}"
                )
            time.sleep(1.0)

    # --- hosts and machines ----------------------------------------------------------

    def _image(self, rec: VmLabRecord) -> BaseImage:
        return BaseImage(rec.image_key, Path(rec.image_dir))

    def machine(self, g: qemu.GuestPlan, image: BaseImage, accel: str) -> QmpMachine:
        return QmpMachine(
            g.name,
            g.qmp_socket,
            running=lambda: qemu.qemu_pid(g) is not None,
            kill=lambda: qemu.kill_qemu(g),
            boot=lambda: self._boot(g, image, accel),
        )

    def hosts(self) -> list[Host]:
        """The guests as harness hosts, each with its :class:`QmpMachine`; from the record
        alone, so any process can use them."""
        rec = self.record()
        image = self._image(rec)
        return [
            Host(
                name=g.name,
                address=g.address,
                port=22,
                user="root",
                key_path=str(self.key_path),
                known_hosts=str(self.known_hosts),
                verify_host_key=True,
                extras={
                    "lab": self.name,
                    "driver": "vm",
                    "state_dir": str(g.directory),
                    "python": "python3",
                    "accel": rec.accel,
                    # A guest has its own kernel: no faketime file, no freezer cgroup.
                    "faketime_file": None,
                    "cgroup": None,
                },
                machine=self.machine(g, image, rec.accel),
                # Under TCG a guest runs ~20x slower: DBs lengthen their timeouts.
                emulated_cpu=rec.accel == "tcg",
            )
            for g in self.plan()
        ]

    # --- status and down -------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """Per guest: address, qemu pid and RSS, machine state and whether SSH logs in."""
        hosts = {h.name: h for h in self.hosts()}

        def one(g: qemu.GuestPlan) -> dict[str, Any]:
            pid = qemu.qemu_pid(g)
            h = hosts[g.name]
            assert h.machine is not None
            try:
                state = h.machine.state()
            except LabError as e:
                state = f"unknown ({e})"
            ok, why = ssh_login(h) if state == "running" else (False, f"guest is {state}")
            rss = None
            with contextlib.suppress(psutil.Error, TypeError):
                rss = psutil.Process(pid).memory_info().rss // 2**20 if pid else None
            return {
                "host": g.name,
                "address": g.address,
                "pid": pid,
                "rss_mib": rss,
                "state": state,
                "ssh_ok": ok,
                "ssh_error": why or None,
            }

        plan = self.plan()
        with ThreadPoolExecutor(max_workers=min(8, len(plan))) as ex:
            return list(ex.map(one, plan))

    def leftovers(self) -> list[str]:
        """This lab's qemu processes, interfaces and directories outside its plan."""
        planned_pids = {qemu.qemu_pid(g) for g in self.plan()}
        planned_links = {self.bridge} | {g.tap for g in self.plan()}
        out = [
            f"qemu pid {p} (not a planned guest)"
            for p in qemu.stray_qemus(self.name)
            if p not in planned_pids
        ]
        out += [f"interface {n}" for n in vmnet.lab_links(self.name) if n not in planned_links]
        names = {g.name for g in self.plan()}
        if self.dir.exists():
            out += [
                f"guest directory {d}"
                for d in sorted(self.dir.iterdir())
                if d.is_dir() and d.name.startswith("n") and d.name not in names
            ]
        return out

    def down(self) -> None:
        """Kill every qemu of this lab, delete its taps, bridge, overlays and files; safe twice."""
        _require_root()
        with locked(self.root / "labs"):
            errors: list[str] = []
            for g in self.plan():
                qemu.kill_qemu(g)
            for pid in qemu.stray_qemus(self.name):
                with contextlib.suppress(psutil.Error):
                    p = psutil.Process(pid)
                    p.kill()
                    p.wait(10)
            left = qemu.stray_qemus(self.name)
            if left:
                errors.append(f"qemu pids {left} survived SIGKILL")
            errors += vmnet.remove_links(self.name)
            if errors:
                raise LabError(f"VM lab {self.name} not fully removed: {'; '.join(errors)}")
            shutil.rmtree(self.dir, ignore_errors=True)
            if self.dir.exists():
                raise LabError(f"VM lab {self.name}: could not remove {self.dir}")


def vm_hosts(name: str, root: Path = VM_ROOT) -> list[Host]:
    """``splitbrain run --vm --lab NAME``: the guests of a VM lab that is up."""
    lab = VmLab.load(name, root)
    return lab.hosts()


def ssh_login(host: Host) -> tuple[bool, str]:
    """Whether the harness logs in with the lab's key and known_hosts (a real session),
    with the patience an emulated guest needs."""
    from harness.control.ssh import SSHRemote
    from harness.core.errors import RemoteError

    try:
        with SSHRemote(host) as r:
            r.run("true", timeout=30.0)
        return True, ""
    except RemoteError as e:
        return False, str(e)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the VM lab needs root (bridges, taps and qemu networking)")


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no console log)"
    return " | ".join(text[-lines:]) or "(empty)"
