"""``corrupt`` aims at the DB's own files (``harness.core.db.DataFiles``), or is refused.

The globs are expanded by a real shell on real directories laid out as each DB lays out
its data (DLedger's ``dledger-<id>/data/<offset>``, JRaft's RocksDB ``log/`` and
``meta/raft_meta``): the file a corruption would hit is the one the DB reads.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.core.db import DataFiles, data_files
from harness.core.errors import ConfigError, NemesisError
from harness.core.fault import Selected
from harness.core.remote import CommandResult, Host
from harness.dbs.dledger_java import DLedgerJavaDB, DLedgerJavaOptions
from harness.dbs.jraft import JRaftDB
from nemesis.deck import deck_for
from nemesis.disk import CORRUPT, CorruptNemesis, CorruptOptions, corrupt_refusal


class ShellRemote:
    """Runs a command in this machine's shell: the glob expansion is the host's."""

    def run(self, cmd: str, check: bool = True, timeout: float | None = None) -> CommandResult:
        p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=timeout)
        return CommandResult("n1", cmd, p.returncode, p.stdout, p.stderr)


class Dir:
    """A Killable DB with a footprint whose node directory is ``root/<node>``."""

    root = "/"

    def __init__(self, root: Path, files: DataFiles | None) -> None:
        self.base = root
        if files is not None:
            self.data_files = files

    def setup(self, ctx: Any, node: str) -> None: ...

    def teardown(self, ctx: Any, node: str) -> None: ...

    def kill(self, ctx: Any, node: str) -> None: ...

    def start(self, ctx: Any, node: str) -> None: ...

    def primaries(self, ctx: Any) -> list[str]:
        return ["n1"]

    def node_dir(self, ctx: Any, node: str) -> str:
        return str(self.base / node)

    def pidfiles(self, ctx: Any, node: str) -> list[str]:
        return []

    def ports(self, ctx: Any, node: str) -> list[int]:
        return []


def _touch(root: Path, *names: str) -> None:
    for n in names:
        p = root / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")


def _aim(db: Any, options: CorruptOptions | None = None) -> tuple[str, str]:
    ctx = SimpleNamespace(db=db, remotes={"n1": ShellRemote()}, nodes=["n1"])
    nem = CorruptNemesis({"corrupt": Selected(options=options or CorruptOptions())})
    nem.setup(ctx)  # type: ignore[arg-type]
    log = nem._file(ctx, "n1", nem._globs(ctx, "log"))  # type: ignore[arg-type]
    state = nem._file(ctx, "n1", nem._globs(ctx, "state"))  # type: ignore[arg-type]
    return log, state


def test_dledger_java_corrupt_hits_its_newest_segment_and_its_term_file(tmp_path: Path) -> None:
    db = DLedgerJavaDB(DLedgerJavaOptions())
    dl = Dir(tmp_path, data_files(db))
    d = tmp_path / "n1" / "data" / "dledger-n1"
    _touch(d, "data/00000000000000000000", "data/00000000000067108864", "currterm",
           "currterm.bak", "index/00000000000000000000")  # fmt: skip
    log, state = _aim(dl)
    assert log == str(d / "data" / "00000000000067108864")
    assert state == str(d / "currterm")


def test_jraft_corrupt_hits_rocksdb_and_the_raft_meta(tmp_path: Path) -> None:
    dl = Dir(tmp_path, JRaftDB.data_files)
    d = tmp_path / "n1" / "data"
    _touch(d, "log/000009.sst", "log/000012.log", "log/MANIFEST-000005", "log/CURRENT",
           "meta/raft_meta")  # fmt: skip
    log, state = _aim(dl)
    assert log == str(d / "log" / "000012.log") and state == str(d / "meta" / "raft_meta")


def test_the_runs_own_file_option_wins_over_the_declaration(tmp_path: Path) -> None:
    dl = Dir(tmp_path, DataFiles(log=("data.log",), state=("term.json",)))
    _touch(tmp_path / "n1" / "data", "data.log", "term.json", "other.log", "other.state")
    log, state = _aim(dl, CorruptOptions(file="*.log", state_file="other.state"))
    assert log.endswith("/other.log") and state.endswith("/other.state")


def test_no_match_and_no_state_glob_are_errors_naming_what_is_missing(tmp_path: Path) -> None:
    dl = Dir(tmp_path, DataFiles(log=("member/wal/*.wal",)))
    (tmp_path / "n1" / "data").mkdir(parents=True)
    with pytest.raises(NemesisError, match="no file matches 'member/wal/\\*.wal'"):
        _aim(dl)
    _touch(tmp_path / "n1" / "data", "member/wal/0000000000000000-0000000000000000.wal")
    with pytest.raises(NemesisError, match="declares no state file"):
        _aim(dl)


def test_a_db_without_the_declaration_is_refused_by_the_deck_and_at_setup(
    tmp_path: Path,
) -> None:
    bare = Dir(tmp_path, None)
    why = CORRUPT.why_not(bare, [])
    assert why is not None and "data_files" in why and "Dir" in why
    assert corrupt_refusal(Dir(tmp_path, DataFiles(log=("x",))), []) is None
    hosts = [Host(name=f"n{i}", address="127.0.0.1", extras={"fuse": True}) for i in (1, 2, 3)]
    deck = deck_for(bare, hosts, ("disk", "restart-all"))
    assert deck.scripts == ("disk", "restart-all") and not deck.left_out  # disk, less corrupt
    assert "data_files" in deck.dropped["disk"]["corrupt"] and "corrupt" not in deck.faults
    ctx = SimpleNamespace(db=bare, remotes={}, nodes=["n1"])
    with pytest.raises(NemesisError, match="data_files"):
        CorruptNemesis({}).setup(ctx)  # type: ignore[arg-type]
    # named files make an undeclared DB corruptible all the same
    CorruptNemesis({"corrupt": Selected(options=CorruptOptions(file="x"))}).setup(ctx)  # type: ignore[arg-type]


def test_a_declaration_is_checked() -> None:
    for bad in (
        {"log": ()},
        {"log": ("../x",)},
        {"log": ("a;rm",)},
        {"under": "/abs", "log": ("x",)},
    ):
        with pytest.raises(ConfigError):
            DataFiles(**bad)

    class Wrong:
        data_files = "data.log"

    with pytest.raises(ConfigError, match="Wrong.data_files"):
        data_files(Wrong())
