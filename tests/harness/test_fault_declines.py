"""A DB declines faults by what they do or need (``declines``), never by their names.

The faults here that are not built-ins stand for a plugin's: they are never registered or
named by any DB, and are still declined, with the DB's own reason, by what they declare.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import ConfigError
from harness.core.fault import Effects, Fault, declines
from harness.core.remote import Host
from harness.dbs.dledger_java import factory
from nemesis.disk import CORRUPT, LOSE_UNFSYNCED, TORN_WRITE
from nemesis.failover import FAILOVER
from nemesis.membership import MEMBERSHIP
from nemesis.package import check_faults
from nemesis.power import POWER

FUSE_HOSTS = [Host(name=f"n{i}", address=f"127.0.0.{i}", extras={"fuse": True}) for i in (1, 2, 3)]


def _plugin_fault(name: str, **declared: Any) -> Fault:
    """A fault as a plugin would write it; its nemesis is never built here."""
    return Fault(name=name, nemesis=lambda chosen: None, heal_rank=9000, **declared)  # type: ignore[arg-type,return-value]


def test_a_plugin_fault_that_acts_through_fuse_is_declined_by_dledger_java_unnamed() -> None:
    db = factory({})
    lazy = _plugin_fault(
        "my-lazy-disk", needs=frozenset({"fuse"}), effects=Effects(kills=True, loses_writes=True)
    )
    why = lazy.why_not(db, FUSE_HOSTS)
    assert why is not None and why.startswith("my-lazy-disk: DLedger acknowledges")
    assert "DLedgerJavaDB declines fuse" in why
    # the built-ins of the same class, by the same declaration
    for f in (LOSE_UNFSYNCED, TORN_WRITE):
        assert "DLedger acknowledges" in (f.why_not(db, FUSE_HOSTS) or ""), f.name
    # not corrupt (it damages DLedger's files at rest), not the VM lab's power cut (which
    # loses un-fsynced writes too, on real disks), not a plugin fault that only kills
    assert CORRUPT.why_not(db, FUSE_HOSTS) is None
    assert POWER.declined_by(db) is None
    assert _plugin_fault("my-kill", effects=Effects(kills=True)).why_not(db, FUSE_HOSTS) is None


def test_effects_and_capabilities_are_declined_for_every_fault_that_declares_them() -> None:
    class Static:
        declines = {"changes_membership": "the ensemble is static"}

    reshape = _plugin_fault("my-reshape", effects=Effects(changes_membership=True))
    assert reshape.why_not(Static(), []) == (
        "my-reshape: the ensemble is static (Static declines changes_membership)"
    )
    assert MEMBERSHIP.declined_by(Static()) is not None  # the built-in too
    assert _plugin_fault("my-cut", effects=Effects(pauses=True)).why_not(Static(), []) is None

    class AsyncStandbys:  # has every FailsOver method, cannot fail over as configured
        declines = {"FailsOver": "asynchronous standbys lose commits on a failover"}

        def statuses(self, ctx: Any) -> dict:
            return {}

        def promote(self, ctx: Any, node: str, epoch: int) -> None: ...

        def follow(self, ctx: Any, node: str, master: str, epoch: int) -> bool:
            return True

        def reset_as_slave(self, ctx: Any, node: str, master: str, epoch: int) -> None: ...

        def kill(self, ctx: Any, node: str) -> None: ...

        def start(self, ctx: Any, node: str) -> None: ...

    from harness.core.db import FailsOver

    assert isinstance(AsyncStandbys(), FailsOver)
    assert "asynchronous standbys" in (FAILOVER.why_not(AsyncStandbys(), []) or "")
    operator = _plugin_fault("my-switchover", db_needs=(FailsOver,), targets="cluster")
    assert "declines FailsOver" in (operator.why_not(AsyncStandbys(), []) or "")


def test_an_old_dledger_declines_transfer_and_membership_a_new_one_neither() -> None:
    old, new = factory({"version": "0.1"}), factory({})
    assert "no leadership transfer" in (MEMBERSHIP.why_not(old, FUSE_HOSTS) or "")
    assert set(declines(old)) == {"fuse", "TransfersLeadership", "changes_membership"}
    assert MEMBERSHIP.why_not(new, FUSE_HOSTS) is None
    assert declines(new).keys() == {"fuse"}


@pytest.mark.parametrize(
    ("declared", "match"),
    [
        ({"changes_membrship": "typo"}, "neither an effect"),
        ({"fuse": ""}, "non-empty"),
        (["fuse"], "must map"),
    ],
)
def test_a_malformed_declaration_is_a_config_error_naming_the_db(declared: Any, match: str) -> None:
    class Typo:
        declines = declared

    with pytest.raises(ConfigError, match=match) as e:
        _plugin_fault("my-fault").why_not(Typo(), [])
    assert "Typo.declines" in str(e.value)


def test_a_declined_fault_named_with_nemesis_stops_before_the_run() -> None:
    db = factory({})
    with pytest.raises(ConfigError) as e:
        check_faults(["partition", "torn-write"], db, FUSE_HOSTS)
    msg = str(e.value)
    assert "'torn-write'" in msg and "DLedgerJavaDB" in msg and "DLedger acknowledges" in msg
    check_faults(["partition", "kill", "corrupt-bitflip"], db, FUSE_HOSTS)  # all taken
    with pytest.raises(ConfigError, match="'membership'.*no leadership transfer"):
        check_faults(["membership"], factory({"version": "0.1"}), FUSE_HOSTS)


def test_the_cli_refuses_a_declined_fault_with_the_reason_before_any_host(tmp_path: Path) -> None:
    # 127.0.0.1:1 answers nobody: reaching a host would fail with a connection error instead.
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        "".join(
            f"- {{name: n{i}, host: 127.0.0.1, port: 1, extras: {{fuse: true}}}}\n"
            for i in (1, 2, 3)
        )
    )
    splitbrain = str(Path(sys.executable).with_name("splitbrain"))
    out = subprocess.run(
        [splitbrain, "run", "--db", "dledger-java", "--nemesis", "lose-unfsynced",
         "--nodes-file", str(nodes), "--store", str(tmp_path / "store"), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 3, out.stderr
    assert "'lose-unfsynced'" in out.stderr and "DLedger acknowledges" in out.stderr
    assert not (tmp_path / "store").exists()  # nothing ran, nothing stored


def test_the_older_refused_faults_is_an_error_naming_its_replacement() -> None:
    """A DB still keyed by fault names would decline nothing if read silently."""

    class Old:
        refused_faults = {"membership": "static"}

    with pytest.raises(ConfigError, match="refused_faults names faults; declare `declines`"):
        declines(Old())
