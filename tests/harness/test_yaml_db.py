"""The YAML-described DB: parsing errors name file, line and field; abilities follow the file.

Command composition runs over the in-memory Remote (what would be sent over
SSH); the campaign against a real system is in tests/harness/test_own_system.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from harness.control.memory import MemoryRemote
from harness.core.db import (
    DB,
    Addressable,
    HasLogFiles,
    HasPrimaries,
    Killable,
    Pausable,
    WaitsReady,
)
from harness.core.errors import ConfigError
from harness.core.remote import Host
from harness.core.spec import RunContext, TestSpec
from harness.dbs import get_db
from harness.dbs.yaml_db import load_system, yaml_db

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tinykv" / "system.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "system.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "line", "field", "says"),
    [
        ("start: x\nstrat: y\n", 2, "strat", "unknown field"),
        ("start: x\nport: http\n", 2, "port", "a TCP port number"),
        ("start: x\npause: kill -STOP 1\n", 2, "pause", "needs `resume`"),
        ("start: x\nstop: 'echo {nod}'\n", 2, "stop", r"unknown variable \{nod\}"),
        ("start: x\nlog_files: /var/log/x\n", 2, "log_files", "a list"),
        ("start: [x\n", 2, None, "not valid YAML"),
        ("install: x\n", None, "start", "give `daemon`"),
        ("start: x\nroles: [master]\n", 2, "roles", "a mapping of role name"),
        ("start: x\nroles:\n  a: 'true'\n  Master: 'true'\n", 4, "roles.Master", "lower-case"),
        ("start: x\nroles:\n  master: ''\n", 3, "roles.master", "non-empty string"),
        ("start: x\nroles:\n  master: 'is {leadr}'\n", 3, "roles.master", "unknown variable"),
    ],
)
def test_a_bad_file_is_one_config_error_with_file_line_and_field(tmp_path, text, line, field, says):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=says) as e:
        load_system(p)
    assert e.value.path == p and e.value.line == line and e.value.field == field
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_only_the_abilities_given_are_declared(tmp_path):
    bare = yaml_db(load_system(_write(tmp_path, "start: run-it\n")))
    assert isinstance(bare, DB)
    for cap in (Killable, Pausable, HasPrimaries, HasLogFiles, WaitsReady, Addressable):
        assert not isinstance(bare, cap), cap
    full = get_db(f"yaml:{EXAMPLE}")
    for cap in (Killable, Pausable, HasPrimaries, HasLogFiles, WaitsReady, Addressable):
        assert isinstance(full, cap), cap
    killonly = yaml_db(load_system(_write(tmp_path, "start: s\nkill: k\n")))
    assert isinstance(killonly, Killable) and not isinstance(killonly, Pausable)


def _ctx(db, tmp_path, remotes):
    hosts = {
        n: Host(name=n, address=f"127.9.0.{i}", extras={"lab": "L"})
        for i, n in enumerate(("n1", "n2"), 11)
    }
    return RunContext(
        spec=TestSpec(name="t/1", nodes=("n1", "n2")),
        hosts=hosts,
        remotes=remotes,
        db=db,
        history=None,  # type: ignore[arg-type]
        rng=random.Random(0),
        store_dir=str(tmp_path),
    )


def test_roles_are_declared_only_when_given_and_asked_of_every_node(tmp_path):
    """``roles`` makes the DB HasRoles (so the deck adds its role scripts); each role holds
    the nodes whose command exits 0 now, an unreachable node holding none."""
    from harness.core.roles import HasRoles, roles_now
    from nemesis.deck import deck_for
    from nemesis.role_motifs import ROLE_MOTIFS

    assert not isinstance(yaml_db(load_system(_write(tmp_path, "start: s\n"))), HasRoles)
    p = _write(
        tmp_path,
        "daemon: srv\nroles:\n  master: 'test {node} = n1'\n  slave: 'test {node} != n1'\n",
    )
    db = yaml_db(load_system(p))
    assert isinstance(db, HasRoles)

    def answer(c):
        if c.cmd.startswith("test "):
            _, left, op, right = c.cmd.split()
            return (0 if (left == right) == (op == "=") else 1, "", "")
        return None

    remotes = {n: MemoryRemote(Host(name=n, address="x"), handler=answer) for n in ("n1", "n2")}
    ctx = _ctx(db, tmp_path, remotes)
    assert db.roles(ctx) == {"master": ["n1"], "slave": ["n2"]}
    assert roles_now(db, ctx) == {"master": ["n1"], "slave": ["n2"]}

    def down(c):
        raise OSError("no route to host")

    remotes["n2"] = MemoryRemote(Host(name="n2", address="x"), handler=down)
    ctx = _ctx(db, tmp_path, remotes)
    assert db.roles(ctx) == {"master": ["n1"], "slave": []}
    deck = deck_for(db, [ctx.hosts[n] for n in ctx.nodes])
    assert set(ROLE_MOTIFS) <= set(deck.scripts) | set(deck.left_out)
    assert not set(ROLE_MOTIFS) & set(deck.left_out), deck.left_out


def test_commands_are_substituted_and_run_on_the_node(tmp_path):
    p = _write(
        tmp_path,
        "port: 9000\nvars: {flavour: salty}\ninstall: 'echo {flavour}'\n"
        "start: 'srv --id {node} --peers {peers} --dir {data_dir} "
        "--listen {address}:{port} ${HOME}'\nstop: 'pkill -f {data_dir}'\n"
        "primaries: 'test {node} = n2'\n",
    )
    db = get_db(f"yaml:{p}", {"extra": "x"})
    remotes = {
        n: MemoryRemote(
            Host(name=n, address="x"),
            handler=lambda c: (1, "", "") if "test n1 = n2" in c.cmd else None,
        )
        for n in ("n1", "n2")
    }
    ctx = _ctx(db, tmp_path, remotes)
    db.setup(ctx, "n1")
    cmds = [c.cmd for c in remotes["n1"].commands]
    data_dir = f"/srv/splitbrain-yaml/L/{db.dir_name(ctx)}/n1"
    assert "echo salty" in cmds
    assert (
        f"srv --id n1 --peers n1=127.9.0.11:9000,n2=127.9.0.12:9000 --dir {data_dir} "
        f"--listen 127.9.0.11:9000 ${{HOME}}"
    ) in cmds
    assert cmds.index("echo salty") < len(cmds) - 1  # install before start
    assert db.addresses(ctx) == {"client": {"n1": ("127.9.0.11", 9000), "n2": ("127.9.0.12", 9000)}}
    assert db.primaries(ctx) == ["n2"]
    db.teardown(ctx, "n1")
    assert remotes["n1"].commands[-1].cmd == f"rm -rf {data_dir}"


def test_a_daemon_gets_kill_pause_and_logs_from_its_pid_file(tmp_path):
    db = get_db(f"yaml:{EXAMPLE}")
    remotes = {n: MemoryRemote(Host(name=n, address="x")) for n in ("n1", "n2")}
    ctx = _ctx(db, tmp_path, remotes)
    db.setup(ctx, "n1")
    ((pidfile, (_, cmd)),) = remotes["n1"].daemons.items()
    assert "tinykv.py --node n1 --peers n1=127.9.0.11:7400,n2=127.9.0.12:7400" in cmd
    assert remotes["n1"].files  # tinykv.py uploaded
    assert f"/srv/splitbrain-yaml/L/{db.dir_name(ctx)}/n1/daemon.log" in db.log_files(ctx, "n1")
    db.kill(ctx, "n1")
    assert not remotes["n1"].daemons
    db.start(ctx, "n1")
    assert remotes["n1"].daemons


def _deep(tmp_path: Path, text: str, levels: int = 7) -> tuple[Path, Path]:
    """A system file and a stdio client ``levels`` directories of 20 characters deep."""
    deep = tmp_path.joinpath(*(f"level-{i}-of-a-deep-tree" for i in range(levels)))
    deep.mkdir(parents=True)
    client = deep / "client.sh"
    client.write_text("#!/bin/sh\n")
    client.chmod(0o755)
    return _write(deep, text), client


def _cli_spec(system: Path, client: Path, nodes: tuple[str, ...]) -> TestSpec:
    """The spec `splitbrain run --db yaml:SYSTEM -w stdio:CLIENT` builds (its default name)."""
    db, workload = f"yaml:{system}", f"stdio:{client}"
    return TestSpec(name=f"{db}-{workload}", nodes=nodes, db=db, workload=workload)


def test_a_deep_system_file_gets_a_short_stable_directory_and_the_paths_are_recorded(tmp_path):
    """Issue 45: the directory was named after both whole paths (MariaDB's socket went over
    Linux's 107 characters); now a hash of them, the same for the same files, and different
    for another client, with the full paths in the run's yaml-db.json."""
    p, client = _deep(tmp_path, "name: a-system-with-a-rather-long-name-indeed\nstart: s\n")
    assert len(str(p)) > 150
    db = get_db(f"yaml:{p}")
    remotes = {n: MemoryRemote(Host(name=n, address="x")) for n in ("n1", "n2")}
    ctx = _ctx(db, tmp_path, remotes)
    ctx.spec = _cli_spec(p, client, ("n1", "n2"))
    d = db.data_dir(ctx, "n1")
    assert len(f"{d}/mysqld.sock") < 80, d
    assert d.startswith("/srv/splitbrain-yaml/L/a-system-with-a-rather-") and d.endswith("/n1")
    assert db.data_dir(ctx, "n1") == get_db(f"yaml:{p}").data_dir(ctx, "n1")  # stable
    other = RunContext(**{**vars(ctx), "spec": _cli_spec(p, p.parent / "other.sh", ctx.spec.nodes)})
    assert db.data_dir(other, "n1") != d
    db.setup(ctx, "n1")
    record = json.loads((tmp_path / "yaml-db.json").read_text())
    assert record == {
        "system": str(p.resolve()),
        "workload": f"stdio:{client}",
        "data_dirs": {"n1": d, "n2": db.data_dir(ctx, "n2")},
    }


def _lab_ctx(db, tmp_path, lab, nodes):
    from harness.control.ssh import SSHRemote

    hosts = {h.name: h for h in lab.hosts() if h.name in nodes}
    return RunContext(
        spec=TestSpec(name=f"ready-{tmp_path.name}", nodes=tuple(nodes)),
        hosts=hosts,
        remotes={n: SSHRemote(h) for n, h in hosts.items()},
        db=db,
        history=None,  # type: ignore[arg-type]
        rng=random.Random(0),
        store_dir=str(tmp_path),
    )


@pytest.mark.integration
def test_a_daemon_that_exits_ends_the_ready_wait_at_once_with_its_last_words(tmp_path, lab):
    """`ready` polls a dead daemon no longer: the error comes in seconds, not after
    ready_timeout, naming the exit and quoting both `ready`'s output and the daemon's log."""
    import time

    p = _write(
        tmp_path,
        "daemon: 'sh -c \"echo listening on {port}; echo cannot open {data_dir}/db >&2; exit 7\"'\n"
        "port: 7999\nready: 'echo probing {node}; echo connection refused >&2; exit 3'\n"
        "ready_timeout: 150\n",
    )
    db = get_db(f"yaml:{p}")
    ctx = _lab_ctx(db, tmp_path, lab, ["n1", "n2"])
    try:
        for n in ctx.nodes:
            db.setup(ctx, n)
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as e:
            db.wait_ready(ctx)
        took = time.monotonic() - t0
        msg = str(e.value)
        assert took < 30, f"waited {took:.0f} s for a daemon that had exited"
        assert "daemon exited" in msg and ".splitbrain-daemon.pid" in msg
        assert "ready exited 3: connection refused | probing n" in msg
        assert "daemon.log: listening on 7999 | cannot open" in msg
        assert "\n" not in msg and e.value.field == "ready" and e.value.line == 3
    finally:
        for n in ctx.nodes:
            db.teardown(ctx, n)
            ctx.remotes[n].close()


@pytest.mark.integration
def test_a_deeply_nested_system_file_starts_a_daemon_with_a_unix_socket(tmp_path, lab):
    """Issue 45: a YAML DB whose system file lies deep starts (its daemon binds a Unix
    socket in its data directory, as MariaDB does), on the lab, under the spec `run` makes."""
    daemon = (
        "python3 -c 'import socket, time; s = socket.socket(socket.AF_UNIX); "
        's.bind(\\"{data_dir}/db.sock\\"); s.listen(); time.sleep(300)\''
    )
    p, client = _deep(  # two levels: the old name fitted a path component, not a socket
        tmp_path,
        f'daemon: "{daemon}"\nready: "test -S {{data_dir}}/db.sock"\nready_timeout: 20\n',
        levels=2,
    )
    db = get_db(f"yaml:{p}")
    ctx = _lab_ctx(db, tmp_path, lab, ["n4"])
    ctx.spec = _cli_spec(p, client, ("n4",))
    try:
        db.setup(ctx, "n4")
        db.wait_ready(ctx)  # ConfigError on the old names: the socket's path was too long
    finally:
        db.teardown(ctx, "n4")
        ctx.remotes["n4"].close()


@pytest.mark.integration
def test_a_ready_timeout_quotes_ready_and_the_log(tmp_path, lab):
    """A daemon that runs but never gets ready: the timeout's error quotes what `ready`
    printed last and the tail of the daemon's log."""
    p = _write(
        tmp_path,
        "daemon: 'sh -c \"echo starting; exec sleep 300\"'\n"
        "ready: 'echo still syncing >&2; false'\nready_timeout: 2\n",
    )
    db = get_db(f"yaml:{p}")
    ctx = _lab_ctx(db, tmp_path, lab, ["n3"])
    try:
        db.setup(ctx, "n3")
        with pytest.raises(ConfigError) as e:
            db.wait_ready(ctx)
        msg = str(e.value)
        assert "n3 not ready after 2 s" in msg
        assert "n3 ready exited 1: still syncing" in msg
        assert "daemon.log: starting" in msg
    finally:
        db.teardown(ctx, "n3")
        ctx.remotes["n3"].close()
