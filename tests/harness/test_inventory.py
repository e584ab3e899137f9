"""Inventories: nodes files, Vagrant's ssh-config, the lab's own inventory."""

from __future__ import annotations

import pytest

from harness.core.errors import ConfigError
from harness.core.remote import Host
from harness.inventory.nodes_file import dump_nodes, load_nodes_file, parse_nodes_yaml
from harness.inventory.vagrant import parse_vagrant_ssh_config, vagrant_hosts

GOOD = """\
# two machines
- name: db1
  host: 127.0.0.5
  port: 2201
  user: admin
  key: keys/id_ed25519
  known_hosts: /etc/ssh/ssh_known_hosts
- name: db2
  host: 127.0.0.6
  verify_host_key: false
"""


def test_nodes_file(tmp_path):
    p = tmp_path / "nodes.yaml"
    p.write_text(GOOD)
    a, b = load_nodes_file(p)
    assert a == Host(
        name="db1",
        address="127.0.0.5",
        port=2201,
        user="admin",
        key_path=str(tmp_path / "keys/id_ed25519"),
        known_hosts="/etc/ssh/ssh_known_hosts",
    )
    assert (b.port, b.user, b.key_path, b.verify_host_key) == (22, "root", None, False)
    again = parse_nodes_yaml(dump_nodes([a, b]))
    assert again == [a, b]


@pytest.mark.parametrize(
    ("text", "line", "field", "what"),
    [
        ("- name: a\n  host: h\n  port: ssh\n", 3, "port", "expected int"),
        ("- name: a\n  host: h\n  port: 70000\n", 3, "port", "out of range"),
        ("- name: a\n  host: h\n  port: true\n", 3, "port", "expected int"),
        ("- name: a\n  hots: h\n", 2, "hots", "unknown field"),
        ("- name: a\n  port: 22\n", 1, "host", "missing"),
        ("- name: a\n  host: h\n- name: a\n  host: h2\n", 3, "name", "duplicate"),
        ("- name: a\n  host: h\n  verify_host_key: maybe\n", 3, "verify_host_key", "expected bool"),
    ],
)
def test_bad_nodes_file_names_file_line_field(tmp_path, text, line, field, what):
    p = tmp_path / "nodes.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_nodes_file(p)
    e = ei.value
    assert (e.path, e.line, e.field) == (str(p), line, field)
    assert what in str(e)
    assert str(e).startswith(f"{p}:{line}: field {field!r}: ")


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("", "empty"),
        ("name: a\n", "expected a list"),
        ("- [a, b]\n", "mapping"),
        ("- name: a\n  host: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_nodes_file_shapes(tmp_path, text, what):
    p = tmp_path / "n.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=what):
        load_nodes_file(p)
    with pytest.raises(ConfigError, match="cannot read"):
        load_nodes_file(tmp_path / "missing.yaml")


VAGRANT = """\
Host n1
  HostName 127.0.0.1
  User vagrant
  Port 2222
  UserKnownHostsFile /dev/null
  StrictHostKeyChecking no
  PasswordAuthentication no
  IdentityFile "/home/me/my project/.vagrant/machines/n1/virtualbox/private_key"
  IdentitiesOnly yes
  LogLevel FATAL

Host n2
  HostName 192.168.56.12
  User vagrant
  Port 22
  UserKnownHostsFile /home/me/.ssh/known_hosts
  StrictHostKeyChecking yes
  IdentityFile /home/me/.vagrant.d/insecure_private_key
  IdentityFile /ignored/second
"""


def test_vagrant_ssh_config():
    n1, n2 = parse_vagrant_ssh_config(VAGRANT)
    assert (n1.name, n1.address, n1.port, n1.user) == ("n1", "127.0.0.1", 2222, "vagrant")
    assert n1.key_path == "/home/me/my project/.vagrant/machines/n1/virtualbox/private_key"
    assert (n1.known_hosts, n1.verify_host_key) == (None, False)
    assert (n2.address, n2.port, n2.known_hosts, n2.verify_host_key) == (
        "192.168.56.12",
        22,
        "/home/me/.ssh/known_hosts",
        True,
    )
    assert n2.key_path == "/home/me/.vagrant.d/insecure_private_key"
    (n3,) = parse_vagrant_ssh_config("Host n3\n  HostName 127.0.0.3\n")
    assert (n3.port, n3.user, n3.known_hosts, n3.verify_host_key) == (22, "root", None, True)


def test_vagrant_errors(tmp_path):
    with pytest.raises(ConfigError, match="before the first Host") as ei:
        parse_vagrant_ssh_config("  HostName x\nHost a\n")
    assert ei.value.line == 1
    with pytest.raises(ConfigError, match="expected a number") as ei:
        parse_vagrant_ssh_config("Host a\n  Port twenty\n")
    assert (ei.value.line, ei.value.field) == (2, "Port")
    with pytest.raises(ConfigError, match="no Host"):
        parse_vagrant_ssh_config("# nothing\n")
    with pytest.raises(ConfigError, match="no Vagrantfile"):
        vagrant_hosts(tmp_path)


def test_lab_inventory_reads_back(lab):
    from harness.inventory.resolve import lab_hosts

    hosts = lab_hosts(lab.name)
    assert [h.name for h in hosts] == ["n1", "n2", "n3", "n4", "n5"]
    assert hosts[0].extras["netns"] == f"sb-{lab.name}-n1"
