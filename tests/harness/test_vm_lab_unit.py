"""The VM lab's pure parts: image hash, guest plans, qemu command lines, seed disks, records."""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from pathlib import Path

import pytest

from harness.core.errors import ConfigError, LabError
from harness.inventory.vm import network as vmnet
from harness.inventory.vm import qemu
from harness.inventory.vm.image import DEFAULT_IMAGE, config_hash, debian_mirror, with_packages
from harness.inventory.vm.lifecycle import VmLab
from harness.inventory.vm.state import VmLabRecord, read_record, write_record


def test_config_hash_is_stable_and_follows_the_recipe():
    assert config_hash(DEFAULT_IMAGE) == config_hash(dataclasses.replace(DEFAULT_IMAGE))
    assert len(config_hash(DEFAULT_IMAGE)) == 16
    changed = dataclasses.replace(DEFAULT_IMAGE, init=DEFAULT_IMAGE.init + "# changed\n")
    assert config_hash(changed) != config_hash(DEFAULT_IMAGE)
    more = dataclasses.replace(DEFAULT_IMAGE, packages=(*DEFAULT_IMAGE.packages, "strace"))
    assert config_hash(more) != config_hash(DEFAULT_IMAGE)


def test_image_recipe_has_what_the_guests_need():
    pkgs = set(DEFAULT_IMAGE.packages)
    for need in ("linux-image-amd64", "openssh-server", "python3", "python3-msgpack", "chrony"):
        assert need in pkgs
    assert "sch_netem" in DEFAULT_IMAGE.init
    assert "route_localnet=1" in DEFAULT_IMAGE.init


def test_guest_addresses_and_names_are_in_the_loopback_range(tmp_path):
    lab = VmLab(name="unit", nodes=3, subnet="127.91.7", root=tmp_path)
    plan = lab.plan()
    assert [g.address for g in plan] == ["127.91.7.11", "127.91.7.12", "127.91.7.13"]
    assert [g.name for g in plan] == ["n1", "n2", "n3"]
    assert all(len(g.tap) <= 15 for g in plan) and len(lab.bridge) <= 15
    assert len({g.tap for g in plan} | {lab.bridge}) == 4
    assert len({g.mac for g in plan}) == 3
    assert all(g.directory.parent == tmp_path / "labs" / "unit" for g in plan)
    # Another lab gets other interface names and MACs.
    other = VmLab(name="unit2", nodes=1, subnet="127.91.8", root=tmp_path).guest(1)
    assert other.tap != plan[0].tap and other.mac != plan[0].mac


@pytest.mark.parametrize(
    "bad", ["10.0.0", "192.168.56", "172.16.0", "127.0.0", "127.300.0", "127.1", "x"]
)
def test_only_loopback_subnets_are_accepted(bad):
    with pytest.raises(ConfigError) as e:
        vmnet.check_subnet(bad)
    assert e.value.field == "subnet"


def test_bad_lab_parameters_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="name"):
        VmLab(name="bad name", root=tmp_path)
    with pytest.raises(ConfigError, match="guests"):
        VmLab(name="ok", nodes=0, root=tmp_path)
    with pytest.raises(ConfigError, match="MiB"):
        VmLab(name="ok", memory_mib=64, root=tmp_path)


def test_qemu_command_line(tmp_path):
    g = VmLab(name="unit", nodes=2, subnet="127.91.7", memory_mib=384, root=tmp_path).guest(2)
    cmd = qemu.qemu_command(g, kernel=Path("/k"), initrd=Path("/i"), accel="tcg")
    assert cmd[0] == "qemu-system-x86_64"
    joined = " ".join(cmd)

    def arg(flag: str) -> str:
        return cmd[cmd.index(flag) + 1]

    assert arg("-m") == "384" and arg("-smp") == "1"
    assert arg("-accel").startswith("tcg,tb-size=")
    assert arg("-kernel") == "/k" and arg("-initrd") == "/i"
    assert f"ifname={g.tap}," in joined and f"mac={g.mac}" in joined
    assert arg("-qmp") == f"unix:{g.qmp_socket},server=on,wait=off"
    assert arg("-serial") == f"file:{g.console_log}"
    assert "-daemonize" in cmd and "-no-reboot" in cmd
    assert f"file={g.overlay},format=qcow2" in joined
    assert f"file={g.seed},format=raw,if=virtio,readonly=on" in joined
    append = arg("-append")
    assert "sb.name=n2" in append and "sb.addr=127.91.7.12/24" in append
    assert "init=/sbin/splitbrain-init" in append
    # the guest keeps time on the HPET: a TSC calibrated under TCG can run 6x fast
    assert "clocksource=hpet" in append and "tsc=reliable" not in append
    kvm = qemu.qemu_command(g, kernel=Path("/k"), initrd=Path("/i"), accel="kvm", daemonize=False)
    assert kvm[kvm.index("-accel") + 1] == "kvm" and "-daemonize" not in kvm
    with pytest.raises(ValueError):
        qemu.qemu_command(g, kernel=Path("/k"), initrd=Path("/i"), accel="hvf")


def test_seed_disk_is_a_tar_of_whole_sectors(tmp_path):
    g = VmLab(name="unit", nodes=1, subnet="127.91.7", root=tmp_path).guest(1)
    g.directory.mkdir(parents=True)
    qemu.write_seed(g, "PRIVATE\n", "ssh-ed25519 AAAA host", "ssh-ed25519 BBBB lab")
    blob = g.seed.read_bytes()
    assert len(blob) % 512 == 0
    with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
        files = {m.name: (m.mode, tf.extractfile(m).read().decode()) for m in tf.getmembers()}
    assert files["etc/ssh/ssh_host_ed25519_key"] == (0o600, "PRIVATE\n")
    assert files["etc/ssh/ssh_host_ed25519_key.pub"][1].startswith("ssh-ed25519 AAAA")
    assert files["root/.ssh/authorized_keys"][1].strip() == "ssh-ed25519 BBBB lab"


def test_debian_mirror_from_apt_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://one.example/debian/ bookworm main\n"
    )
    assert debian_mirror(tmp_path) == "http://one.example/debian"
    (tmp_path / "sources.list").unlink()
    assert debian_mirror(tmp_path) == "http://deb.debian.org/debian"


def test_lab_record_round_trip_and_damage(tmp_path):
    rec = VmLabRecord("unit", "127.91.7", 3, 512, "sbvbr", "abc", "/img", "tcg")
    write_record(tmp_path / "unit", rec)
    assert read_record(tmp_path / "unit") == rec
    with pytest.raises(LabError, match="lab up --driver vm"):
        read_record(tmp_path / "missing")
    raw = json.loads((tmp_path / "unit" / "lab.json").read_text())
    del raw["accel"]
    (tmp_path / "unit" / "lab.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as e:
        read_record(tmp_path / "unit")
    assert e.value.field == "accel"


def test_extra_packages_make_another_image_and_are_recorded(tmp_path):
    etcd = with_packages(("etcd-server", "etcd-client"))
    assert {"etcd-server", "etcd-client"} <= set(etcd.packages)
    assert config_hash(etcd) != config_hash(DEFAULT_IMAGE)
    assert with_packages(("etcd-client", "etcd-server")) == etcd  # order does not matter
    assert with_packages(("python3",)) == DEFAULT_IMAGE  # already in the recipe
    with pytest.raises(ConfigError, match="not a Debian package") as e:
        with_packages(("etcd;reboot",))
    assert e.value.field == "package"
    rec = VmLabRecord("unit", "127.91.7", 3, 512, "sbvbr", "abc", "/img", "tcg")
    rec = dataclasses.replace(rec, packages=("etcd-server",))
    write_record(tmp_path / "unit", rec)
    assert read_record(tmp_path / "unit") == rec
    raw = json.loads((tmp_path / "unit" / "lab.json").read_text())
    raw["packages"] = "etcd-server"
    (tmp_path / "unit" / "lab.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as e:
        read_record(tmp_path / "unit")
    assert e.value.field == "packages"


def test_hosts_carry_a_machine_and_what_faults_need(tmp_path):
    lab = VmLab(name="unit", nodes=2, subnet="127.91.7", root=tmp_path)
    write_record(lab.dir, VmLabRecord("unit", "127.91.7", 2, 512, lab.bridge, "k", "/img", "tcg"))
    hosts = lab.hosts()
    assert [h.address for h in hosts] == ["127.91.7.11", "127.91.7.12"]
    for h in hosts:
        assert h.verify_host_key and h.known_hosts == str(lab.known_hosts)
        assert h.machine is not None and h.machine.name == h.name
        # Nothing runs: the machine says so without touching a socket.
        assert h.machine.state() == "off"
        h.machine.suspend()  # idempotent on a guest that is off
        assert h.extras["faketime_file"] is None and h.extras["cgroup"] is None
        assert h.emulated_cpu and h.extras["driver"] == "vm"


def test_vm_is_one_inventory_among_others():
    from harness.inventory.resolve import resolve_hosts

    with pytest.raises(ConfigError, match="--docker and --vm"):
        resolve_hosts(lab="x", nodes_file=None, vagrant=None, docker=True, insecure=False, vm=True)


def test_reference_node_waits_longer_on_emulated_cpus():
    from types import SimpleNamespace

    from harness.core.remote import Host
    from harness.dbs.dledger import EMULATED_TIMING, DLedgerDB, emulated

    fast = SimpleNamespace(hosts={"n1": Host("n1", "127.91.7.11")})
    slow = SimpleNamespace(
        hosts={"n1": Host("n1", "127.91.7.11", emulated_cpu=True), "n2": Host("n2", "x")}
    )
    assert not emulated(fast) and emulated(slow)  # type: ignore[arg-type]
    db = DLedgerDB()
    assert db.leader_wait(fast) == 30.0  # type: ignore[arg-type]
    assert db.leader_wait(slow) == EMULATED_TIMING["leader_timeout"]  # type: ignore[arg-type]
    assert DLedgerDB(leader_timeout=7).leader_wait(slow) == 7  # type: ignore[arg-type]


def test_vagrant_network_is_isolated_and_in_the_loopback_range():
    from harness.inventory.vm.vagrant_box import NETWORK_NAME, network_xml

    xml = network_xml("127.91.1")
    assert f"<name>{NETWORK_NAME}</name>" in xml
    assert "address='127.91.1.1'" in xml
    # No <forward> means no NAT (libvirt would add MASQUERADE rules), and no DHCP.
    assert "<forward" not in xml and "<dhcp" not in xml
    with pytest.raises(ConfigError):
        network_xml("192.168.121")
