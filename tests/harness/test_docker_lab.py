"""The Docker lab, for real: a private dockerd, a locally built image, SSH into containers.

Skipped with the reason when no Docker engine can run here (dockerd or
debootstrap missing, or not root). The first run on a machine builds the image
with debootstrap (a couple of minutes); later runs reuse it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import zlib

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def docker_lab():
    if os.geteuid() != 0:
        pytest.skip("the docker lab needs root")
    if not shutil.which("dockerd") or not shutil.which("debootstrap"):
        pytest.skip(
            "dockerd or debootstrap is not installed (apt-get install docker.io debootstrap)"
        )
    from harness.inventory.docker import DockerEngine, DockerLab

    engine = DockerEngine(socket=DockerEngine().private_socket)
    started_here = not engine.ping()
    try:
        engine.ensure_running()
    except Exception as e:  # an engine that cannot start here is a skip, with its reason
        pytest.skip(f"no Docker engine can start on this machine: {e}")
    third = zlib.crc32(str(os.getpid()).encode()) % 200 + 20
    lab = DockerLab(
        name=f"t{os.getpid() % 10000}", nodes=3, subnet=f"127.79.{third}", engine=engine
    )
    try:
        yield lab, lab.up()
    finally:
        lab.down()
        if started_here:
            engine.stop_private()


def test_containers_are_ssh_hosts_with_verified_keys(docker_lab):
    from harness.control import connect

    lab, hosts = docker_lab
    assert [h.name for h in hosts] == ["n1", "n2", "n3"]
    for h in hosts:
        assert h.verify_host_key and h.known_hosts
        r = connect(h)
        try:
            out = r.run("hostname; python3 -c 'import msgpack'; iptables -S INPUT | head -1").stdout
            assert out.split()[0] == h.name
        finally:
            r.close()
    # Same address with another key: verification refuses it.
    from harness.core.errors import RemoteError
    from harness.core.remote import Host

    bad_known = hosts[0].known_hosts + ".bad"
    with open(hosts[0].known_hosts) as fh, open(bad_known, "w") as out:
        first = fh.readline().split()
        out.write(
            f"{hosts[0].address} {first[1]} AAAAC3NzaC1lZDI1NTE5AAAAIBad0Bad0Bad0Bad0Bad0Bad0Bad0Bad0Bad0Bad0Bad0Bad\n"
        )
    wrong = Host(**{**hosts[0].__dict__, "known_hosts": bad_known})
    with pytest.raises(RemoteError):
        connect(wrong).run("true")


def test_partition_and_clock_inside_containers(docker_lab):
    from harness.control import connect

    lab, hosts = docker_lab
    a, b = connect(hosts[0]), connect(hosts[1])
    try:
        # No time.sleep here: under libfaketime 0.9.10 with a real monotonic clock,
        # Python's absolute clock_nanosleep fails with EINVAL. accept() just blocks.
        a.start_daemon(
            'python3 -c "import socket;s=socket.socket();'
            "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            f"s.bind(('{hosts[0].address}',7777));s.listen()\n"
            'while True: s.accept()[0].close()"',
            pidfile="/tmp/l.pid",
            logfile="/tmp/l.log",
        )
        probe = (
            f"python3 -c \"import socket;socket.create_connection(('{hosts[0].address}',7777),"
            "timeout=1);print('open')\""
        )
        for _ in range(20):
            if b.run(probe, check=False).stdout.strip() == "open":
                break
        assert b.run(probe, check=False).stdout.strip() == "open"
        a.run(f"iptables -I INPUT -s {hosts[1].address} -j DROP")
        assert b.run(probe, check=False).exit_status != 0
        a.run(f"iptables -D INPUT -s {hosts[1].address} -j DROP")
        assert b.run(probe, check=False).stdout.strip() == "open"
        a.stop_daemon("/tmp/l.pid")
        # libfaketime offset for processes started over SSH in one container only.
        before = int(b.run("date +%s").stdout)
        a.run(f"echo +3600 > {hosts[0].extras['faketime_file']}")
        skewed = int(a.run("date +%s").stdout)
        a.run(f"echo +0 > {hosts[0].extras['faketime_file']}")
        assert 3500 < skewed - before < 3700
        assert abs(int(subprocess.check_output(["date", "+%s"])) - before) < 100
    finally:
        a.close()
        b.close()


def test_harness_reaches_containers_only_on_loopback_addresses(docker_lab):
    _, hosts = docker_lab
    for h in hosts:
        assert h.address.startswith("127.")
        with socket.create_connection((h.address, 22), timeout=5) as s:
            assert s.recv(4).startswith(b"SSH")
