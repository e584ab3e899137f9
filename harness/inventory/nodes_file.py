"""The nodes file: existing machines described by hand, as YAML.

The embedded lab writes the same format for its own hosts. Parsing is kept pure
(text in, hosts out) so that the error messages, which must name file, line and
field, can be tested without machines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from harness.core.errors import ConfigError
from harness.core.remote import Host

__all__ = ["load_nodes_file", "parse_nodes_yaml", "dump_nodes"]

_FIELDS = {"name", "host", "port", "user", "key", "known_hosts", "verify_host_key", "extras"}


def load_nodes_file(path: str | os.PathLike[str]) -> list[Host]:
    """Read a YAML list of hosts; relative key paths are taken from the file's directory."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read nodes file: {e.strerror}", path=str(p)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"not valid UTF-8 (byte 0x{data[e.start]:02x})", path=str(p),
                          line=data.count(b"\n", 0, e.start) + 1) from None
    return parse_nodes_yaml(text, path=str(p), base_dir=p.parent)


def parse_nodes_yaml(text: str, *, path: str = "<nodes>",
                     base_dir: str | os.PathLike[str] | None = None) -> list[Host]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise _yaml_error(e, text, path) from None
    except RecursionError:   # the composer recurses once per nesting level
        raise ConfigError("not valid YAML: nested too deeply", path=path) from None
    if root is None:
        raise ConfigError("empty nodes file: expected a list of hosts", path=path)
    if not isinstance(root, yaml.SequenceNode):
        raise ConfigError("expected a list of hosts", path=path, line=_line(root))
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    for item in root.value:
        host = _host_from_node(item, path, base_dir)
        if host.name in seen:
            raise ConfigError(f"duplicate host name {host.name!r} (first on line {seen[host.name]})",
                              path=path, line=_line(item), field="name")
        seen[host.name] = _line(item)
        hosts.append(host)
    if not hosts:
        raise ConfigError("no hosts listed", path=path, line=_line(root))
    return hosts


def _yaml_error(e: yaml.YAMLError, text: str, path: str, line: int | None = None) -> ConfigError:
    """One line naming where PyYAML stopped: ``problem_mark`` for syntax, ``position`` for
    the reader's refused characters (whose ``str`` runs over two lines)."""
    mark = getattr(e, "problem_mark", None)
    if mark is not None:
        line = mark.line + 1
    elif isinstance(getattr(e, "position", None), int):
        line = text.count("\n", 0, e.position) + 1  # type: ignore[attr-defined]
    problem = getattr(e, "problem", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]
    return ConfigError(f"not valid YAML: {problem}", path=path, line=line)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _clip(x: Any, n: int = 80) -> str:
    r = repr(x)
    return r if len(r) <= n else r[:n] + "..."


def _scalar(node: yaml.Node, path: str = "<nodes>") -> Any:
    """Construct a node's value; a bad tag (``!!int x``, ``!!python/object``) is a ConfigError."""
    constructor = yaml.constructor.SafeConstructor()
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise _yaml_error(e, "", path, line=_line(node)) from None
    except (RecursionError, TypeError, ValueError) as e:
        # TypeError: an unhashable key inside a mapping value; ValueError: e.g. a date out of range
        raise ConfigError(f"cannot read this value: {(str(e).splitlines() or [''])[0]}", path=path,
                          line=_line(node)) from None


def _host_from_node(node: yaml.Node, path: str, base_dir: Any) -> Host:
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError("each host must be a mapping with name, host, port, user, key",
                          path=path, line=_line(node))
    values: dict[str, tuple[Any, int]] = {}
    for knode, vnode in node.value:
        key = _scalar(knode, path)
        if not isinstance(key, str) or key not in _FIELDS:   # a list key is unhashable for `in`
            raise ConfigError(f"unknown field (expected one of {', '.join(sorted(_FIELDS))})",
                              path=path, line=_line(knode), field=_clip(key) if not isinstance(
                                  key, str) else key[:80])
        values[key] = (_scalar(vnode, path), _line(vnode))

    def get(field: str, kind: type | tuple[type, ...], default: Any = None,
            required: bool = False) -> Any:
        if field not in values:
            if required:
                raise ConfigError("missing", path=path, line=_line(node), field=field)
            return default
        value, line = values[field]
        # bool is an int in Python; a port of "true" is a mistake, not 1.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise ConfigError(f"expected {names}, got {_clip(value)}", path=path, line=line,
                              field=field)
        return value

    name = get("name", str, required=True)
    address = get("host", str, required=True)
    port = get("port", int, 22)
    if not 1 <= port <= 65535:
        raise ConfigError(f"port {port} out of range 1..65535", path=path,
                          line=values["port"][1], field="port")
    user = get("user", str, "root")
    key = get("key", str)
    known_hosts = get("known_hosts", str)
    verify = get("verify_host_key", bool, True)
    extras = get("extras", dict, {})
    if not name.strip():
        raise ConfigError("empty", path=path, line=values["name"][1], field="name")
    if not address.strip():
        raise ConfigError("empty", path=path, line=values["host"][1], field="host")
    return Host(name=name, address=address, port=port, user=user,
                key_path=_resolve(key, base_dir), known_hosts=_resolve(known_hosts, base_dir),
                verify_host_key=verify, extras=dict(extras))


def _resolve(p: str | None, base_dir: Any) -> str | None:
    if p is None:
        return None
    q = Path(os.path.expanduser(p))
    if not q.is_absolute() and base_dir is not None:
        q = Path(base_dir) / q
    return str(q)


def dump_nodes(hosts: list[Host]) -> str:
    """The nodes-file text for ``hosts``; :func:`parse_nodes_yaml` reads it back."""
    rows = []
    for h in hosts:
        row: dict[str, Any] = {"name": h.name, "host": h.address, "port": h.port, "user": h.user}
        if h.key_path:
            row["key"] = h.key_path
        if h.known_hosts:
            row["known_hosts"] = h.known_hosts
        if not h.verify_host_key:
            row["verify_host_key"] = False
        if h.extras:
            row["extras"] = dict(h.extras)
        rows.append(row)
    return yaml.safe_dump(rows, sort_keys=False)
