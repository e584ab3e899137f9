"""Command-line parsing of a node (pure)."""

from __future__ import annotations

import pytest

from node_impl.config import ConfigError, parse_args, parse_peers


def test_defaults_follow_the_spec(tmp_path) -> None:
    cfg = parse_args(
        [
            "--id",
            "n2",
            "--peers",
            "n1=127.0.0.1:7001,n2=127.0.0.2:7002",
            "--data-dir",
            str(tmp_path),
        ]
    )
    assert cfg.client_port == 8002  # peer port + 1000
    assert (cfg.heartbeat_ms, cfg.election_timeout_ms) == (200, 1000)
    assert (cfg.read_mode, cfg.mode, cfg.bug_spec) == ("index", "dledger", "")
    assert cfg.host == "127.0.0.2" and cfg.client_addr == "127.0.0.2:8002" and cfg.n == 2


def test_bug_and_bind_host(tmp_path) -> None:
    cfg = parse_args(
        [
            "--id",
            "n1",
            "--peers",
            "n1=127.0.0.1:7001",
            "--data-dir",
            str(tmp_path),
            "--bug",
            "no-fsync",
            "--bind-host",
            "0.0.0.0",
            "--client-port",
            "9000",
        ]
    )
    assert cfg.bugs.no_fsync and not cfg.bugs.stale_read and cfg.bug_spec == "no-fsync"
    assert cfg.host == "0.0.0.0" and cfg.client_addr == "127.0.0.1:9000"


@pytest.mark.parametrize(
    ("peers", "needle"),
    [
        ("n1", "ID=HOST:PORT"),
        ("n1=h:x", "not a number"),
        ("n1=h:0", "out of range"),
        ("n1=h:1,n1=h:2", "twice"),
        ("", "no peers"),
    ],
)
def test_bad_peers(peers, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_peers(peers)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--heartbeat-ms", "0"], "positive"),
        (["--election-timeout-ms", "100"], "exceed"),
        (["--read-mode", "x"], "invalid choice"),
        (["--bug", "zzz"], "unknown bug"),
    ],
)
def test_bad_options(tmp_path, extra, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_args(["--id", "n1", "--peers", "n1=h:1", "--data-dir", str(tmp_path), *extra])
