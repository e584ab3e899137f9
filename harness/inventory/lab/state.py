"""A lab's own files on this machine: its plan, its record, its lock and its client key.

Everything a lab makes is found again from its name alone (interface names are
a hash of it, files live under ``<state root>/<name>``), so ``down`` works from
another process and after a crash of the one that ran ``up``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["DEFAULT_STATE_ROOT", "NAME_RE", "HostPlan", "write_atomic", "locked", "read_meta",
           "new_ed25519_key", "ensure_client_key", "proc_start"]

DEFAULT_STATE_ROOT = "/var/lib/splitbrain/lab"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class HostPlan:
    """Names and paths of one lab host: pure, derived from the lab's parameters."""

    index: int
    name: str
    address: str
    netns: str
    veth: str
    peer: str
    state_dir: Path


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(state_root: Path) -> Iterator[None]:
    """One lock for all labs under this root.

    Building is quick, and it makes the subnet and interface conflict checks
    race-free between concurrent test runs.
    """
    state_root.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_meta(lab_dir: Path) -> dict[str, Any] | None:
    """The lab's ``lab.json``, or None when absent or unreadable."""
    try:
        meta = json.loads((lab_dir / "lab.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def new_ed25519_key() -> tuple[str, str]:
    """A fresh key pair: (OpenSSH private key PEM, public key line)."""
    key = Ed25519PrivateKey.generate()
    priv = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                        serialization.PublicFormat.OpenSSH)
    return priv.decode(), pub.decode()


def ensure_client_key(key_path: Path, lab_name: str) -> str:
    """The harness's login key for this lab (made once); returns its public line."""
    if not key_path.exists():
        priv, pub = new_ed25519_key()
        write_atomic(key_path, priv, 0o600)
        write_atomic(key_path.with_suffix(".pub"), pub + f" splitbrain-lab-{lab_name}\n")
    return key_path.with_suffix(".pub").read_text().strip()


def proc_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
