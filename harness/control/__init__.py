"""Control of remote hosts: the ``Remote`` protocol and its paramiko implementation."""

from harness.core.remote import CommandResult, Host, Remote

__all__ = ["Host", "Remote", "CommandResult", "connect"]


def connect(host: Host, **kw: object) -> Remote:
    """Open a control channel to ``host`` (paramiko, imported on first use)."""
    from harness.control.ssh import SSHRemote

    return SSHRemote(host, **kw)  # type: ignore[arg-type]
