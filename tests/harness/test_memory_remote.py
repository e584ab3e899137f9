"""The in-memory Remote, and logic above SSH tested with it instead of a lab."""

from __future__ import annotations

import random

import pytest

from harness.control.memory import Command, MemoryRemote
from harness.core.errors import RemoteCommandError
from harness.core.remote import CommandResult, Host, Remote
from harness.core.spec import RunContext, TestSpec
from harness.dbs.null import NullDB
from nemesis.net import CHAIN, apply_grudge, heal


def test_it_is_a_remote_and_records_what_ran(tmp_path) -> None:
    r = MemoryRemote("n1", lambda c: (3, "", "boom") if c.cmd == "false" else c.cmd.upper())
    assert isinstance(r, Remote)
    assert r.run("echo hi").stdout == "ECHO HI"
    assert r.run("false", check=False).exit_status == 3
    with pytest.raises(RemoteCommandError, match="boom"):
        r.run("false")
    assert [c.cmd for c in r.commands] == ["echo hi", "false", "false"]
    res = MemoryRemote("n2", lambda c: CommandResult("n2", c.cmd, 0, "x", "")).run("y", sudo=True)
    assert res.stdout == "x"


def test_files_and_daemons_live_in_dictionaries(tmp_path) -> None:
    r = MemoryRemote(Host(name="n1", address="127.0.0.9"))
    src = tmp_path / "a"
    src.write_bytes(b"data")
    r.upload(str(src), "/remote/a")
    r.download("/remote/a", str(tmp_path / "b"))
    assert (tmp_path / "b").read_bytes() == b"data"
    with pytest.raises(RemoteCommandError, match="no such file"):
        r.download("/missing", str(tmp_path / "c"))
    pid = r.start_daemon("sleep 1", pidfile="/p", logfile="/l")
    assert r.daemon_running("/p") and r.files["/p"] == f"{pid}\n".encode()
    assert r.signal_daemon("/p", "STOP") and r.daemon_running("/p")
    assert r.signal_daemon("/p", "KILL") and not r.daemon_running("/p")
    assert not r.signal_daemon("/p")


def _ctx(remotes: dict[str, MemoryRemote]) -> RunContext:
    hosts = {n: Host(name=n, address=f"127.0.0.{i + 11}") for i, n in enumerate(remotes)}
    return RunContext(
        spec=TestSpec(name="t", nodes=tuple(hosts)),
        hosts=hosts,
        remotes=dict(remotes),
        db=NullDB(),
        history=None,  # type: ignore[arg-type]
        rng=random.Random(0),
        store_dir="/nonexistent",
    )


def test_a_partition_drops_exactly_the_grudge_on_the_receivers() -> None:
    seen: list[Command] = []
    remotes = {n: MemoryRemote(n, lambda c: seen.append(c)) for n in ("n1", "n2", "n3")}
    ctx = _ctx(remotes)
    errors = apply_grudge(ctx, {"n1": {"n2", "n3"}, "n2": {"n1"}, "n3": set()})
    assert errors == {}
    drops = {n: " ".join(c.cmd for c in r.commands) for n, r in remotes.items()}
    assert "127.0.0.12" in drops["n1"] and "127.0.0.13" in drops["n1"]
    assert "127.0.0.11" in drops["n2"] and "127.0.0.13" not in drops["n2"]
    assert "-j DROP" not in drops["n3"]
    assert all(CHAIN in d for d in drops.values())


def test_a_host_that_fails_to_heal_is_named_and_the_others_still_heal() -> None:
    remotes = {
        "n1": MemoryRemote("n1", lambda c: (1, "", "iptables: locked")),
        "n2": MemoryRemote("n2"),
    }
    errors = heal(_ctx(remotes), ["n1", "n2"])
    assert set(errors) == {"n1"} and "locked" in errors["n1"]
    assert any(f"-F {CHAIN}" in c.cmd for c in remotes["n2"].commands)
