"""What every DB that runs one daemon per node by pid file shares.

The reference node, etcd and Redis differ in how they install and configure a
node, not in how a node's process is killed, paused or found on disk. Keeping
that here means a fix to, say, waiting for a killed process applies to all three.
"""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.core.spec import RunContext

__all__ = ["PidfileDaemonDB"]


class PidfileDaemonDB:
    """Killable and Pausable through the pid file named by ``_paths(ctx, node)["pid"]``.

    Subclasses set ``self.root`` (an absolute directory) and define ``_paths``.
    """

    root: str

    def _paths(self, ctx: RunContext, node: str) -> dict[str, str]:
        raise NotImplementedError

    def pidfiles(self, ctx: RunContext, node: str) -> list[str]:
        return [v for k, v in sorted(self._paths(ctx, node).items()) if k in ("pid", "spid")]

    def ports(self, ctx: RunContext, node: str) -> list[int]:
        raise NotImplementedError

    def node_dir(self, ctx: RunContext, node: str) -> str:
        from harness.core.layout import safe_name

        # Labs share this machine's disk: two labs running the same test must not
        # share directories, so a lab host gets its lab's name as an extra level.
        lab = ctx.hosts[node].extras.get("lab")
        base = f"{self.root}/{safe_name(str(lab))}" if lab else self.root
        return f"{base}/{safe_name(ctx.spec.name)}/{safe_name(node)}"

    def remove_node_dir(self, ctx: RunContext, node: str) -> None:
        """Wipe the node's directory, then its parents up to ``root`` once empty (the
        test's and the lab's levels; another node of the same host may still use them)."""
        d = self.node_dir(ctx, node)
        parents = []
        up = d
        while True:
            up = up.rsplit("/", 1)[0]
            if len(up) <= len(self.root.rstrip("/")):
                break
            parents.append(f"rmdir {shlex.quote(up)} 2>/dev/null")
        ctx.remotes[node].run(f"rm -rf {shlex.quote(d)}; " + "; ".join([*parents, "true"]))

    def kill(self, ctx: RunContext, node: str) -> None:
        """SIGKILL, then wait (up to 5 s) until the process is really gone."""
        remote = ctx.remotes[node]
        pid = self._paths(ctx, node)["pid"]
        remote.signal_daemon(pid, "KILL")
        deadline = time.monotonic() + 5
        while remote.daemon_running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def pause(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(self._paths(ctx, node)["pid"], "STOP")

    def resume(self, ctx: RunContext, node: str) -> None:
        ctx.remotes[node].signal_daemon(self._paths(ctx, node)["pid"], "CONT")
