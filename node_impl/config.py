"""Command-line configuration of one node (spec: the ``python -m node_impl`` line).

Parsing is pure and raises :class:`ConfigError` with the option at fault, so both
``python -m node_impl`` and ``splitbrain node`` can print one line and exit 2.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from node_impl.bugs import Bugs, UnknownBug, parse_bugs

__all__ = ["NodeConfig", "ConfigError", "parse_peers", "parse_args", "build_parser"]


class ConfigError(ValueError):
    """A bad command-line value; the message names the option."""


@dataclass(frozen=True)
class NodeConfig:
    node_id: str
    peers: dict[str, tuple[str, int]]  # id -> (host, peer port), ordered as given
    data_dir: Path
    client_port: int
    heartbeat_ms: int = 200
    election_timeout_ms: int = 1000
    read_mode: str = "index"
    mode: str = "dledger"
    bug_spec: str = ""
    bugs: Bugs = field(default_factory=Bugs)
    bind_host: str | None = None
    ha_master: str | None = None
    ha_sync: bool = False
    ha_slave_timeout_ms: int = 3000
    join: bool = False  # docs/membership.md M6: start as a learner of an existing cluster
    log_file: Path | None = None  # node.log; None: DIR/node.log of --data-dir

    @property
    def log_path(self) -> Path:
        """Where node.log goes: outside the data dir when a harness rolls that back."""
        return self.log_file if self.log_file is not None else self.data_dir / "node.log"

    @property
    def n(self) -> int:
        return len(self.peers)

    @property
    def host(self) -> str:
        return self.bind_host or self.peers[self.node_id][0]

    @property
    def peer_port(self) -> int:
        return self.peers[self.node_id][1]

    @property
    def client_addr(self) -> str:
        return f"{self.peers[self.node_id][0]}:{self.client_port}"

    @property
    def heartbeat_s(self) -> float:
        return self.heartbeat_ms / 1000.0

    @property
    def election_s(self) -> float:
        return self.election_timeout_ms / 1000.0


def parse_peers(text: str) -> dict[str, tuple[str, int]]:
    """``n1=127.0.0.1:7001,n2=...`` -> {id: (host, port)}."""
    peers: dict[str, tuple[str, int]] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "=" not in item:
            raise ConfigError(f"--peers: {item!r} is not ID=HOST:PORT")
        pid, addr = item.split("=", 1)
        host, sep, port_s = addr.rpartition(":")
        if not pid or not sep or not host:
            raise ConfigError(f"--peers: {item!r} is not ID=HOST:PORT")
        try:
            port = int(port_s)
        except ValueError:
            raise ConfigError(f"--peers: port {port_s!r} of {pid} is not a number") from None
        if not 0 < port < 65536:
            raise ConfigError(f"--peers: port {port} of {pid} is out of range")
        if pid in peers:
            raise ConfigError(f"--peers: id {pid!r} appears twice")
        peers[pid] = (host, port)
    if not peers:
        raise ConfigError("--peers: no peers given")
    return peers


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m node_impl", description="splitbrain reference node")
    p.add_argument("--id", required=True, dest="node_id")
    p.add_argument("--peers", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--client-port", type=int, default=None)
    p.add_argument("--heartbeat-ms", type=int, default=200)
    p.add_argument("--election-timeout-ms", type=int, default=1000)
    p.add_argument(
        "--read-mode",
        choices=("index", "follower", "log"),
        default="index",
        help="index: the leader answers after a read index (§8.3); follower: any follower "
        "too, after asking the leader for one (§8.3a); log: reads go through the log",
    )
    p.add_argument("--mode", choices=("dledger", "ha", "broker"), default="dledger")
    p.add_argument("--ha-master", default=None)
    p.add_argument("--ha-sync", action="store_true")
    p.add_argument("--ha-slave-timeout-ms", type=int, default=3000)
    p.add_argument("--bug", default="")
    p.add_argument("--bind-host", default=None)
    p.add_argument("--log-file", default=None, help="node.log's path (default DATA_DIR/node.log)")
    # docs/membership.md M6: a node added to a running cluster starts with --join and
    # --peers = the current configuration plus itself; it is a learner until promoted.
    p.add_argument(
        "--join",
        action="store_true",
        help="join a running cluster as a learner (docs/membership.md M6)",
    )
    return p


def parse_args(argv: list[str]) -> NodeConfig:
    a = build_parser().parse_args(argv)
    peers = parse_peers(a.peers)
    if a.node_id not in peers:
        raise ConfigError(f"--id: {a.node_id!r} is not among --peers ({', '.join(peers)})")
    if a.heartbeat_ms <= 0:
        raise ConfigError("--heartbeat-ms must be positive")
    if a.election_timeout_ms <= a.heartbeat_ms:
        raise ConfigError("--election-timeout-ms must exceed --heartbeat-ms")
    try:
        bugs = parse_bugs(a.bug)
    except UnknownBug as e:
        raise ConfigError(f"--bug: {e}") from None
    # mode ha (node_impl/ha.py): its bugs only there, and a master among the peers
    ha_named = [b for b in bugs.names if b.startswith("ha-")]
    if a.mode != "ha" and ha_named:
        raise ConfigError(f"--bug: bug {ha_named[0]!r} belongs to --mode ha")
    broker_named = [b for b in bugs.names if b.startswith("broker-")]
    if a.mode != "broker" and broker_named:  # mode broker: node_impl/broker.py
        raise ConfigError(f"--bug: bug {broker_named[0]!r} belongs to --mode broker")
    if a.join and a.mode == "ha":
        raise ConfigError("--join belongs to --mode dledger or broker")
    if a.join and len(peers) < 2:
        raise ConfigError("--join needs --peers naming the cluster's members and this node")
    if a.mode == "ha":
        other = [b for b in bugs.names if not b.startswith("ha-")]
        if other:
            raise ConfigError(f"--bug: bug {other[0]!r} belongs to --mode dledger")
        if a.ha_master is None:
            raise ConfigError("--mode ha needs --ha-master ID")
        if a.ha_master not in peers:
            raise ConfigError(
                f"--ha-master: {a.ha_master!r} is not among --peers ({', '.join(peers)})"
            )
        if a.ha_slave_timeout_ms <= 0:
            raise ConfigError("--ha-slave-timeout-ms must be positive")
    client_port = a.client_port if a.client_port is not None else peers[a.node_id][1] + 1000
    if not 0 < client_port < 65536:
        raise ConfigError(f"--client-port {client_port} is out of range")
    return NodeConfig(
        node_id=a.node_id,
        peers=peers,
        data_dir=Path(a.data_dir),
        client_port=client_port,
        heartbeat_ms=a.heartbeat_ms,
        election_timeout_ms=a.election_timeout_ms,
        read_mode=a.read_mode,
        mode=a.mode,
        bug_spec=",".join(bugs.names),
        bugs=bugs,
        bind_host=a.bind_host,
        ha_master=a.ha_master,
        ha_sync=a.ha_sync,
        ha_slave_timeout_ms=a.ha_slave_timeout_ms,
        join=a.join,
        log_file=None if a.log_file is None else Path(a.log_file),
    )
