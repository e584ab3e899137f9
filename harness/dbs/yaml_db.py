"""A DB described by a YAML file of shell commands: any system, no Python (``--db yaml:FILE``).

The harness runs each command on the node's host over its Remote (SSH), after
substituting ``{node}``, ``{nodes}``, ``{peers}``, ``{address}``, ``{port}``,
``{data_dir}``, ``{here}`` (the YAML file's directory) and any ``vars`` or
``--db-option``. Only the abilities whose commands are present are declared,
so a nemesis never tries to pause a system that cannot be paused. Example and
every field: ``examples/tinykv/system.yaml`` and ``docs/your-own-system.md``.

Fields (all optional except one of ``start`` or ``daemon``):

``name``, ``port``, ``data_dir``, ``vars`` (mapping), ``files`` (local -> remote,
uploaded before ``install``), ``install``, ``daemon`` (a foreground command the
harness runs under a pid file, which gives start/stop/kill/pause/resume for
free), ``start``, ``stop``, ``kill``, ``pause``, ``resume``, ``wipe`` (default
``rm -rf {data_dir}``), ``primaries`` (run on each node; exit 0 means "this node
leads"), ``roles`` (a mapping of role name to a command run on each node; exit 0 means
"this node holds the role now", so the deck's role scripts aim at each), ``ready`` (run on each node until it exits 0, up to ``ready_timeout``
s), ``log_files`` (list), ``timeout`` (s per command, 60).

A node's default ``data_dir`` is ``/srv/splitbrain-yaml/<lab>/<name>-<hash>/<node>``: the
hash is of the system file's and the workload's (the stdio client's) full paths, so the
directory is short and the same run after run however deep the files lie (a daemon's Unix
socket in it stays under Linux's 107 characters). The full paths and each node's directory
are recorded in the run's ``yaml-db.json``.

A bad file is one ConfigError naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shlex
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.core.db import DB
from harness.core.errors import ConfigError
from harness.core.layout import safe_name
from harness.core.remote import CommandResult
from harness.core.spec import RunContext

log = logging.getLogger(__name__)

__all__ = ["System", "load_system", "from_options", "yaml_db"]

COMMANDS = (
    "install",
    "daemon",
    "start",
    "stop",
    "kill",
    "pause",
    "resume",
    "wipe",
    "primaries",
    "ready",
)
_FIELDS = {
    "name",
    "port",
    "data_dir",
    "vars",
    "files",
    "log_files",
    "timeout",
    "ready_timeout",
    "roles",
    *COMMANDS,
}
VARIABLES = {"node", "nodes", "peers", "address", "port", "data_dir", "here"}
_VAR = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ROLE = re.compile(r"[a-z][a-z0-9-]{0,31}")
"""A role's name: a short word, as :class:`harness.core.roles.HasRoles` asks."""
_DEFAULT_ROOT = "/srv/splitbrain-yaml"
RECORD = "yaml-db.json"
"""In the run's store directory: the system and client paths behind each node's directory."""


@dataclass(frozen=True)
class System:
    """One parsed YAML system: commands by name, and where each field was (for errors)."""

    path: Path
    name: str
    commands: dict[str, str]
    port: int | None = None
    data_dir: str | None = None
    vars: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    log_files: tuple[str, ...] = ()
    timeout: float = 60.0
    ready_timeout: float = 60.0
    roles: dict[str, str] = field(default_factory=dict)
    """Role name -> the command that exits 0 on a node holding that role now."""
    lines: dict[str, int] = field(default_factory=dict)

    def has(self, *names: str) -> bool:
        return all(n in self.commands for n in names)


def _err(path: Path, lines: Mapping[str, int], fld: str, message: str) -> ConfigError:
    return ConfigError(message, path=path, line=lines.get(fld), field=fld)


def load_system(path: str | Path, extra_vars: Mapping[str, Any] | None = None) -> System:
    """Parse and check a YAML system file; every problem is a ConfigError with file:line: field."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(
            f"cannot read the YAML system: {e.strerror or e}", path=p, field="db"
        ) from None
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(
            f"not valid YAML: {problem}", path=p, line=mark.line + 1 if mark is not None else None
        ) from None
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise ConfigError(
            "a YAML system is a mapping of fields (install, start, ...)", path=p, line=1
        )
    lines = {str(k.value): v.start_mark.line + 1 for k, v in root.value}
    for k, v in root.value:  # a role's own line, for an error about that role
        if k.value == "roles" and isinstance(v, yaml.MappingNode):
            lines.update({f"roles.{rk.value}": rk.start_mark.line + 1 for rk, _ in v.value})
    for key in data:
        if key not in _FIELDS:
            raise _err(p, lines, str(key), f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    commands: dict[str, str] = {}
    for name in COMMANDS:
        if data.get(name) is None:
            continue
        if not isinstance(data[name], str) or not data[name].strip():
            raise _err(p, lines, name, "a command is a non-empty string")
        commands[name] = data[name]
    if "start" not in commands and "daemon" not in commands:
        raise ConfigError("give `daemon` (a foreground command) or `start`", path=p, field="start")
    for a, b in (("pause", "resume"), ("resume", "pause")):
        if a in commands and b not in commands and "daemon" not in commands:
            raise _err(p, lines, a, f"`{a}` needs `{b}` too")
    if "kill" in commands and "start" not in commands and "daemon" not in commands:
        raise _err(p, lines, "kill", "`kill` needs `start` (to bring the node back)")
    port = data.get("port")
    if port is not None and (
        not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536
    ):
        raise _err(p, lines, "port", f"a TCP port number, not {port!r}")
    variables = data.get("vars") or {}
    if not isinstance(variables, dict):
        raise _err(p, lines, "vars", "a mapping of name: value")
    variables = {str(k): str(v) for k, v in {**variables, **(extra_vars or {})}.items()}
    files = data.get("files") or {}
    if not isinstance(files, dict):
        raise _err(p, lines, "files", "a mapping of local path: remote path")
    for local in files:
        if not (p.parent / str(local)).is_file():
            raise _err(p, lines, "files", f"no such local file {str(local)!r}")
    logs = data.get("log_files") or []
    if not isinstance(logs, list) or not all(isinstance(x, str) for x in logs):
        raise _err(p, lines, "log_files", "a list of remote paths")
    for fld in ("timeout", "ready_timeout"):
        v = data.get(fld, 60.0)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise _err(p, lines, fld, f"a positive number of seconds, not {v!r}")
    roles = _roles(p, lines, data.get("roles"))
    known = VARIABLES | set(variables)
    templated = {
        **commands,
        **{f"roles.{k}": v for k, v in roles.items()},
        "data_dir": data.get("data_dir") or "",
        **{f"files.{k}": str(v) for k, v in files.items()},
        **{f"log_files[{i}]": s for i, s in enumerate(logs)},
    }
    for fld, template in templated.items():
        for m in _VAR.finditer(template):
            if m.group(1) not in known:
                top = fld if fld.startswith("roles.") else fld.split(".")[0].split("[")[0]
                raise _err(
                    p,
                    lines,
                    top,
                    f"unknown variable {{{m.group(1)}}} in {fld} (known: "
                    f"{', '.join(sorted(known))}; a shell ${{VAR}} is left alone)",
                )
    return System(
        path=p.resolve(),
        name=str(data.get("name") or p.stem),
        commands=commands,
        port=port,
        data_dir=data.get("data_dir"),
        vars=variables,
        files={str(k): str(v) for k, v in files.items()},
        log_files=tuple(logs),
        timeout=float(data.get("timeout", 60.0)),
        ready_timeout=float(data.get("ready_timeout", 60.0)),
        roles=roles,
        lines=lines,
    )


def _roles(p: Path, lines: Mapping[str, int], raw: Any) -> dict[str, str]:
    """The ``roles`` field checked: short role names, each a non-empty command."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise _err(p, lines, "roles", "a mapping of role name: command (exit 0 = holds it)")
    out: dict[str, str] = {}
    for name, cmd in raw.items():
        fld = f"roles.{name}"
        if not isinstance(name, str) or not _ROLE.fullmatch(name):
            raise _err(p, lines, fld, "a role's name is a short lower-case word (a-z, 0-9, -)")
        if not isinstance(cmd, str) or not cmd.strip():
            raise _err(p, lines, fld, "a command is a non-empty string")
        out[name] = cmd
    return out


class _YamlBase:
    """The DB protocol itself: setup and teardown, always present."""

    system: System

    def __init__(self, system: System) -> None:
        self.system = system
        # When each node's daemon was last started: a `ready` failure says how long it lived.
        self._started: dict[str, float] = {}

    # -- substitution and running -------------------------------------------------------
    def data_dir(self, ctx: RunContext, node: str) -> str:
        if self.system.data_dir:
            return self._fill(self.system.data_dir, ctx, node, data_dir="")
        lab = ctx.hosts[node].extras.get("lab")
        base = f"{_DEFAULT_ROOT}/{safe_name(str(lab))}" if lab else _DEFAULT_ROOT
        return f"{base}/{self.dir_name(ctx)}/{safe_name(node)}"

    def dir_name(self, ctx: RunContext) -> str:
        """``<name>-<hash>``: short and stable, the hash of the system's and client's paths."""
        key = f"{self.system.path}\0{ctx.spec.workload}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return f"{safe_name(self.system.name)[:24]}-{digest}"

    def _record(self, ctx: RunContext) -> None:
        """Write ``yaml-db.json``: the full paths behind the short directory names."""
        record = {
            "system": str(self.system.path),
            "workload": ctx.spec.workload,
            "data_dirs": {n: self.data_dir(ctx, n) for n in ctx.nodes},
        }
        path = Path(ctx.store_dir) / RECORD
        tmp = path.with_name(f".{RECORD}.{os.getpid()}.{threading.get_ident()}")
        try:
            tmp.write_text(json.dumps(record, indent=2) + "\n")
            os.replace(tmp, path)  # every node's setup writes the same record
        except OSError as e:  # a missing record must not stop the node
            log.warning("%s not written: %s", path, e)

    def _fill(self, template: str, ctx: RunContext, node: str, **override: str) -> str:
        port = self.system.port
        values: dict[str, str] = {
            **self.system.vars,
            "node": node,
            "nodes": ",".join(ctx.nodes),
            "peers": ",".join(f"{n}={ctx.hosts[n].address}:{port or 0}" for n in ctx.nodes),
            "address": ctx.hosts[node].address,
            "port": str(port or 0),
            "here": str(self.system.path.parent),
        }
        values.update(override)
        if "data_dir" not in values:
            values["data_dir"] = self.data_dir(ctx, node)
        return _VAR.sub(lambda m: values.get(m.group(1), m.group(0)), template)

    def _run(self, ctx: RunContext, node: str, name: str, *, check: bool = True) -> int:
        return self._run_template(ctx, node, self.system.commands[name], check=check)

    def _run_template(
        self, ctx: RunContext, node: str, template: str, *, check: bool = True
    ) -> int:
        cmd = self._fill(template, ctx, node)
        res = ctx.remotes[node].run(cmd, timeout=self.system.timeout, check=check)
        return res.exit_status

    def _nodes_where(self, ctx: RunContext, template: str) -> list[str]:
        """The nodes on which ``template`` exits 0, asked in parallel, in the run's order.

        An unreachable node is not one we can name: it answers no."""

        def ask(node: str) -> bool:
            try:
                return self._run_template(ctx, node, template, check=False) == 0
            except Exception:  # noqa: BLE001 - a node that cannot answer holds nothing now
                return False

        with ThreadPoolExecutor(max_workers=max(1, len(ctx.nodes))) as pool:
            answers = list(pool.map(ask, ctx.nodes))
        return [n for n, yes in zip(ctx.nodes, answers, strict=True) if yes]

    def _pidfile(self, ctx: RunContext, node: str) -> str:
        return f"{self.data_dir(ctx, node)}/.splitbrain-daemon.pid"

    def _start(self, ctx: RunContext, node: str) -> None:
        self._started[node] = time.monotonic()
        if "start" in self.system.commands:
            self._run(ctx, node, "start")
            return
        d = self.data_dir(ctx, node)
        ctx.remotes[node].start_daemon(
            self._fill(self.system.commands["daemon"], ctx, node),
            pidfile=self._pidfile(ctx, node),
            logfile=f"{d}/daemon.log",
            chdir=d,
        )

    def _stop(self, ctx: RunContext, node: str) -> None:
        if "stop" in self.system.commands:
            self._run(ctx, node, "stop", check=False)
        if "daemon" in self.system.commands:
            ctx.remotes[node].stop_daemon(self._pidfile(ctx, node))

    def _wipe(self, ctx: RunContext, node: str) -> None:
        if "wipe" in self.system.commands:
            self._run(ctx, node, "wipe")
        else:
            d = self.data_dir(ctx, node)
            ctx.remotes[node].run(f"rm -rf {shlex.quote(d)}", timeout=self.system.timeout)

    # -- DB ---------------------------------------------------------------------------------
    def setup(self, ctx: RunContext, node: str) -> None:
        """Heal leftovers (stop, wipe), upload ``files``, ``install``, start."""
        remote = ctx.remotes[node]
        self._record(ctx)
        self._stop(ctx, node)
        self._wipe(ctx, node)
        remote.run(f"mkdir -p {shlex.quote(self.data_dir(ctx, node))}", timeout=self.system.timeout)
        for local, dest in self.system.files.items():
            target = self._fill(dest, ctx, node)
            remote.run(
                f"mkdir -p {shlex.quote(str(Path(target).parent))}", timeout=self.system.timeout
            )
            remote.upload(str(self.system.path.parent / local), target)
        if "install" in self.system.commands:
            self._run(ctx, node, "install")
        self._start(ctx, node)

    def teardown(self, ctx: RunContext, node: str) -> None:
        """Stop (``stop`` and/or the daemon), then wipe the data directory."""
        self._stop(ctx, node)
        self._wipe(ctx, node)


class _Killable:
    def kill(self: Any, ctx: RunContext, node: str) -> None:
        """``kill``, or SIGKILL the daemon and wait until it is gone (5 s at most)."""
        if "kill" in self.system.commands:
            self._run(ctx, node, "kill", check=False)
            return
        remote, pid = ctx.remotes[node], self._pidfile(ctx, node)
        remote.signal_daemon(pid, "KILL")
        deadline = time.monotonic() + 5
        while remote.daemon_running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def start(self: Any, ctx: RunContext, node: str) -> None:
        self._start(ctx, node)


class _Pausable:
    def pause(self: Any, ctx: RunContext, node: str) -> None:
        if "pause" in self.system.commands:
            self._run(ctx, node, "pause")
        else:
            ctx.remotes[node].signal_daemon(self._pidfile(ctx, node), "STOP")

    def resume(self: Any, ctx: RunContext, node: str) -> None:
        if "resume" in self.system.commands:
            self._run(ctx, node, "resume")
        else:
            ctx.remotes[node].signal_daemon(self._pidfile(ctx, node), "CONT")


class _HasPrimaries:
    def primaries(self: Any, ctx: RunContext) -> list[str]:
        """Nodes whose ``primaries`` command exits 0 (asked in parallel)."""
        nodes: list[str] = self._nodes_where(ctx, self.system.commands["primaries"])
        return nodes


class _HasRoles:
    def roles(self: Any, ctx: RunContext) -> dict[str, list[str]]:
        """Each role of ``roles`` with the nodes whose command for it exits 0 now."""
        return {role: self._nodes_where(ctx, cmd) for role, cmd in self.system.roles.items()}


class _HasLogFiles:
    def log_files(self: Any, ctx: RunContext, node: str) -> list[str]:
        files = [self._fill(t, ctx, node) for t in self.system.log_files]
        if "daemon" in self.system.commands:
            files.append(f"{self.data_dir(ctx, node)}/daemon.log")
        return files


def _last_lines(text: str, n: int = 5) -> str:
    """The last ``n`` non-blank lines of ``text``, joined into one line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


class _WaitsReady:
    def wait_ready(self: Any, ctx: RunContext) -> None:
        """Run ``ready`` on every node until each exits 0.

        A ConfigError naming the laggards, with the last lines of their ``ready``
        output and of their logs, when the time is up, or at once when a node's
        ``daemon`` has exited: no ``ready`` can succeed then, and waiting out
        ``ready_timeout`` only hides why.
        """
        deadline = time.monotonic() + self.system.ready_timeout
        waiting = list(ctx.nodes)
        last: dict[str, CommandResult] = {}
        while waiting:
            still = []
            for n in waiting:
                cmd = self._fill(self.system.commands["ready"], ctx, n)
                res = ctx.remotes[n].run(cmd, timeout=self.system.timeout, check=False)
                if res.exit_status != 0:
                    last[n] = res
                    still.append(n)
            waiting = still
            if not waiting:
                return
            if "daemon" in self.system.commands:
                for n in waiting:
                    if not ctx.remotes[n].daemon_running(self._pidfile(ctx, n)):
                        raise self._not_ready(ctx, [n], last, exited=True)
            if time.monotonic() > deadline or ctx.stop.is_set():
                raise self._not_ready(ctx, waiting, last, exited=False)
            time.sleep(0.2)

    def _not_ready(
        self: Any,
        ctx: RunContext,
        nodes: list[str],
        last: dict[str, CommandResult],
        *,
        exited: bool,
    ) -> ConfigError:
        """One line: which nodes, why the wait ended, and what ready and the logs said last."""
        if exited:
            n = nodes[0]
            lived = time.monotonic() - self._started.get(n, time.monotonic())
            why = (
                f"{n}'s daemon exited (no process for its pid file "
                f"{self._pidfile(ctx, n)}, found gone {lived:.0f} s after its start), "
                "so `ready` cannot succeed"
            )
        else:
            why = (
                f"{', '.join(nodes)} not ready after {self.system.ready_timeout:g} s "
                "(the `ready` command never exited 0)"
            )
        parts = [why]
        for n in nodes:
            res = last.get(n)
            if res is not None:
                out = _last_lines(res.stderr + "\n" + res.stdout) or "(no output)"
                parts.append(f"{n} ready exited {res.exit_status}: {out}")
            for path in self.log_files(ctx, n) if hasattr(self, "log_files") else ():
                tail = ctx.remotes[n].run(
                    f"tail -n 5 {shlex.quote(path)} 2>&1", timeout=self.system.timeout, check=False
                )
                parts.append(f"{n} {path}: {_last_lines(tail.stdout) or '(empty)'}")
        return ConfigError(
            "; ".join(parts),
            path=self.system.path,
            line=self.system.lines.get("ready"),
            field="ready",
        )


class _Addressable:
    def addresses(self: Any, ctx: RunContext) -> dict[str, dict[str, tuple[str, int]]]:
        return {"client": {n: (ctx.hosts[n].address, int(self.system.port)) for n in ctx.nodes}}


def yaml_db(system: System) -> DB:
    """A DB object for ``system`` whose class has exactly the abilities the file describes."""
    bases: list[type] = []
    c, daemon = system.commands, "daemon" in system.commands
    if daemon or ("kill" in c and "start" in c):
        bases.append(_Killable)
    if daemon or ("pause" in c and "resume" in c):
        bases.append(_Pausable)
    if "primaries" in c:
        bases.append(_HasPrimaries)
    if system.roles:
        bases.append(_HasRoles)
    if system.log_files or daemon:
        bases.append(_HasLogFiles)
    if "ready" in c:
        bases.append(_WaitsReady)
    if system.port is not None:
        bases.append(_Addressable)
    cls = type(f"YamlDB_{safe_name(system.name).replace('-', '_')}", (*bases, _YamlBase), {})
    db: DB = cls(system)
    return db


def from_options(options: Mapping[str, Any]) -> DB:
    """The ``yaml`` entry point: ``--db yaml:FILE`` (or ``--db-option file=FILE``).

    Every other ``--db-option`` becomes a variable the commands can use.
    """
    opts = dict(options)
    path = opts.pop("argument", None) or opts.pop("file", None)
    if not path:
        raise ConfigError("the yaml DB needs a file: --db yaml:path/to/system.yaml", field="db")
    opts.pop("leave_running", None)
    return yaml_db(load_system(str(path), extra_vars=opts))
