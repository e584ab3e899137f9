#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine for splitbrain: OS packages (as root),
# then a virtual environment in .venv with splitbrain installed editable.
# Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

OS_PACKAGES=(openssh-server openssh-client iptables iproute2 faketime tini util-linux procps
             openjdk-17-jdk-headless maven libnetfilter-queue-dev python3-venv python3-dev gcc
             etcd-server etcd-client redis-server libfuse3-3 postgresql)
# The VM lab (`splitbrain lab up --driver vm`): qemu, qcow2 tools, and debootstrap and
# mkfs.ext4 to build the guests' Debian image here (the guest kernel comes from the image).
VM_PACKAGES=(qemu-system-x86 qemu-utils debootstrap e2fsprogs openssh-client)
# `vagrant up --provider libvirt` with this repository's Vagrantfile: libvirt's daemons, and
# dnsmasq, without which `splitbrain lab vagrant-prep` fails on a lean install (virsh says
# "Unable to find 'dnsmasq'") even though the prepared network uses no DHCP.
VAGRANT_PACKAGES=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients dnsmasq-base
                  qemu-system-x86 qemu-utils)
for arg in "$@"; do
  case "$arg" in
    # Only the test suite needs these: a real browser for the results page, vagrant to
    # validate the Vagrantfile, ZooKeeper, nats-server and jq for the plugin examples, and the VM
    # lab's tools for its tests.
    --with-test-tools)
      OS_PACKAGES+=(chromium chromium-driver vagrant docker.io debootstrap zookeeper nats-server jq perl
                    "${VM_PACKAGES[@]}") ;;
    --with-vm) OS_PACKAGES+=("${VM_PACKAGES[@]}") ;;
    --with-vagrant) OS_PACKAGES+=("${VM_PACKAGES[@]}" "${VAGRANT_PACKAGES[@]}") ;;
    *) echo "setup: unknown option $arg (use --with-test-tools, --with-vm and/or --with-vagrant)" >&2
       exit 2 ;;
  esac
done

missing=()
for p in "${OS_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Any JDK >= 17 will do for PySpark 4 and for building the Java DBs (dledger-java, jraft),
# and any Maven 3 for resolving their jars from Maven Central (harness/dbs/maven.py).
if command -v javac >/dev/null && javac -version 2>&1 | grep -Eq 'javac (1[7-9]|[2-9][0-9])'; then
  missing=("${missing[@]/openjdk-17-jdk-headless}")
fi
if command -v mvn >/dev/null; then
  missing=("${missing[@]/maven}")
fi
missing=($(printf '%s\n' "${missing[@]}" | sed '/^$/d'))
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install: ${missing[*]}" >&2; exit 3
  fi
  echo "setup: installing OS packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import harness, checker, node_impl, nemesis, workloads" \
  || { echo "setup: installing splitbrain into .venv failed" >&2; exit 3; }
# The default releases of the DBs built from the Go module proxy (etcd, nats-server), built
# once into /var/lib/splitbrain/go so that the first run and the test suite build nothing;
# a later setup finds both builds and fetches nothing. First build on 2 shared cores: etcd
# 3.7.3 78 s, nats-server 2.15.2 45 s. SPLITBRAIN_NO_PREBUILD=1 skips it; without Go, or
# when the proxy cannot be reached, a run builds (or says why it cannot) when asked.
if command -v go >/dev/null && [ -z "${SPLITBRAIN_NO_PREBUILD:-}" ]; then
  nice -n 10 .venv/bin/python -c "
from harness.dbs.etcd import NEWEST, build_etcd
from harness.dbs import nats
build_etcd(NEWEST); nats.build_nats(nats.NEWEST)" \
    || echo "setup: could not build etcd and nats-server ahead; a run builds them when asked" >&2
fi
echo "setup: ready (.venv/bin/splitbrain)"
