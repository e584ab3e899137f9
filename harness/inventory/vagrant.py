"""Vagrant machines, through ``vagrant ssh-config`` (an OpenSSH client config).

Parsing is pure (text in, hosts out) so that errors naming file, line and field
are testable without machines; only :func:`vagrant_hosts` runs Vagrant.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from harness.core.errors import ConfigError
from harness.core.remote import Host

__all__ = ["parse_vagrant_ssh_config", "vagrant_hosts"]


def parse_vagrant_ssh_config(text: str, *, path: str = "<vagrant ssh-config>") -> list[Host]:
    """Hosts from ``vagrant ssh-config`` output (an OpenSSH client config)."""
    blocks: list[tuple[str, int, dict[str, str]]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parts = shlex.split(line)
        except ValueError as e:
            raise ConfigError(f"cannot parse: {e}", path=path, line=lineno) from None
        if "=" in parts[0] and len(parts) == 1:
            parts = parts[0].split("=", 1)
        key, args = parts[0].lower(), parts[1:]
        if not args:
            raise ConfigError("missing value", path=path, line=lineno, field=parts[0])
        if key == "host":
            blocks.append((args[0], lineno, {}))
            continue
        if not blocks:
            raise ConfigError(
                "option before the first Host line", path=path, line=lineno, field=parts[0]
            )
        opts = blocks[-1][2]
        # ssh uses the first value it sees for an option; keep that rule.
        opts.setdefault(key, " ".join(args))
        opts.setdefault(f"{key}@line", str(lineno))

    hosts = []
    for name, _lineno, opts in blocks:
        address = opts.get("hostname", name)
        port_s = opts.get("port", "22")
        try:
            port = int(port_s)
        except ValueError:
            raise ConfigError(
                f"expected a number, got {port_s!r}",
                path=path,
                line=int(opts["port@line"]),
                field="Port",
            ) from None
        strict = opts.get("stricthostkeychecking", "yes").lower()
        known: str | None = opts.get("userknownhostsfile")
        if known is not None:
            known = os.path.expanduser(known.split()[0])
        # Vagrant's usual "/dev/null + no" means "do not check"; without a file named,
        # checking uses the system known_hosts.
        verify = strict not in ("no", "off", "accept-new") and known != "/dev/null"
        if known == "/dev/null":
            known = None
        identity = opts.get("identityfile")
        hosts.append(
            Host(
                name=name,
                address=address,
                port=port,
                user=opts.get("user", "root"),
                key_path=os.path.expanduser(identity) if identity else None,
                known_hosts=known,
                verify_host_key=verify,
                extras={"inventory": "vagrant"},
            )
        )
    if not hosts:
        raise ConfigError("no Host entries", path=path)
    return hosts


def vagrant_hosts(vagrant_dir: str | os.PathLike[str], *, timeout: float = 120.0) -> list[Host]:
    """Ask Vagrant for the SSH coordinates of the machines defined in ``vagrant_dir``."""
    d = str(vagrant_dir)
    if not Path(d, "Vagrantfile").exists():
        raise ConfigError("no Vagrantfile here", path=d)
    try:
        proc = subprocess.run(
            ["vagrant", "ssh-config"], cwd=d, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError:
        raise ConfigError("vagrant is not installed (apt-get install vagrant)", path=d) from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"`vagrant ssh-config` took more than {timeout:.0f} s", path=d) from None
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise ConfigError(
            f"`vagrant ssh-config` failed ({proc.returncode}): {tail} "
            "(are the machines up? try `vagrant up`)",
            path=d,
        )
    return parse_vagrant_ssh_config(proc.stdout, path=f"{d}: vagrant ssh-config")
