"""A fault is one registered object: the built-ins, an external package's fault, refusals.

The external fault lives in tests/plugins/sb_ext_fault, a package of its own with its own
pyproject.toml. :func:`installed` installs it for one test the way pip would leave it on
``sys.path`` (the package directory plus a ``.dist-info`` whose entry points are read from
that pyproject.toml), and takes it away again afterwards: no pip run, no network, nothing
left in the venv.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import ConfigError
from nemesis import registry
from tests.plugins import installed as install_plugin

EXT = Path(__file__).resolve().parents[1] / "plugins" / "sb_ext_fault"


def installed(tmp_path: Path, extra: dict[str, str] | None = None) -> Any:
    """sb-ext-fault on ``sys.path`` with its entry points (plus ``extra``) for the block."""
    return install_plugin(EXT, "splitbrain.faults", tmp_path, registry.refresh, extra)


# --- the built-ins ------------------------------------------------------------------


def test_every_builtin_is_registered_and_the_tables_are_derived() -> None:
    import harness.run.cleanup  # noqa: F401 - registers the run's own journal kind, db-node

    reg = registry.registry()

    def in_order(seen: tuple[str, ...] | list[str], expected: list[str]) -> list[str]:
        """``seen`` restricted to ``expected``'s items (other packages may add faults)."""
        return [k for k in seen if k in expected]

    heal = [
        *("vm-pause", "power", "partition", "loss", "delay", "duplicate", "reorder"),
        *("clock", "pause", "kill", "failover", "lull", "upgrade"),
    ]
    assert in_order(reg.heal_order, heal) == heal
    assert set(reg.names) >= {"freeze", "partition-ring", "partition-leader", "vm-pause"}
    journal = [
        *("power", "vm-pause", "freeze", "iptables-chain", "netem", "daemon", "faketime"),
        *("real-clock", "sigstop", "upgrade", "db-node"),
    ]
    assert in_order(list(reg.journal), journal) == journal
    assert list(reg.journal)[-1] == "db-node"  # the cluster itself goes last
    assert reg.kinds(needs="machine") == ("vm-pause", "power")
    assert set(reg.kinds(targets="cluster")) >= {"partition", "failover", "lull", "upgrade"}
    assert all(reg.faults[k].package == "splitbrain" for k in heal)
    assert registry.fault("freeze").kind == "pause"


def test_an_unknown_nemesis_name_lists_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match="unknown nemesis fault 'meteor'; known: .*partition-ring"
    ):
        registry.fault("meteor")


# --- refusals -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("no-heal = sb_ext_fault.broken:NO_HEAL", "has no heal"),
        ("bad-rank = sb_ext_fault.broken:BAD_RANK", "heal_rank must be an integer"),
        ("kill = sb_ext_fault.broken:TAKEN", "name 'kill' is already taken by fault 'kill'"),
        (
            "alias-taken = sb_ext_fault.broken:ALIAS_TAKEN",
            "name 'partition-ring' is already taken by fault 'partition'",
        ),
        ("misnamed = sb_ext_fault.broken:TAKEN", "is declared as entry point 'misnamed'"),
        ("not-a-fault = sb_ext_fault:marker_path", "not a harness.core.fault.Fault"),
    ],
)
def test_an_incomplete_fault_is_a_registration_error_naming_it_and_its_package(
    tmp_path: Path, entry: str, why: str
) -> None:
    name, _, value = (x.strip() for x in entry.partition("="))
    with installed(tmp_path, {name: value}), pytest.raises(ConfigError) as e:
        registry.registry()
    msg = str(e.value)
    assert why in msg and "sb-ext-fault" in msg, msg
    if name != "not-a-fault":
        assert f"fault '{name if name != 'misnamed' else 'kill'}'" in msg, msg


def _splitbrain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the real CLI entry point in-process: (exit code, stdout)."""
    from harness.cli import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    return int(e.value.code or 0), capsys.readouterr().out


def test_plugins_lists_the_faults_and_check_loads_and_validates_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with installed(tmp_path):
        code, out = _splitbrain(capsys, "plugins", "--check")
        assert code == 0, out
        section = out.split("splitbrain.faults:")[1].split("splitbrain.checkers:")[0]
        assert "vm-pause" in section and "nemesis.power:VM_PAUSE" in section
        assert "marker" in section and "sb-ext-fault" in section
    with installed(tmp_path / "broken", {"no-heal": "sb_ext_fault.broken:NO_HEAL"}):
        code, out = _splitbrain(capsys, "plugins", "--check")
        assert code == 3
        assert "no-heal" in out and "BROKEN" in out and "has no heal" in out


def _present(hosts: list, paths: list[str]) -> list[str]:
    """Which of ``paths`` exist, asked on each host over SSH (a lab host has its own /tmp)."""
    from harness.control.ssh import SSHRemote

    found = []
    for h in hosts:
        with SSHRemote(h) as r:
            for p in paths:
                if r.run(f"test -e {p}", check=False).ok:
                    found.append(f"{h.name}:{p}")
    return found


# --- the worked example: adding a fault -------------------------------------------------


def test_the_worked_example_composes_like_a_builtin(tmp_path: Path) -> None:
    from nemesis.package import build_package

    with installed(tmp_path):
        pkg = build_package(
            ["marker", "kill"], interval=1, rng=random.Random(5), marker_targets="all"
        )
        assert {"start-marker", "stop-marker"} <= pkg.nemesis.fs()
        assert [o.f for o in pkg.final_ops] == ["stop-kill", "stop-marker"]  # by heal_rank
        assert pkg.schedule.targets["marker"] == ("all",)  # type: ignore[attr-defined]
        with pytest.raises(ConfigError, match="unknown nemesis option 'marker_colour'"):
            build_package(["marker"], interval=1, rng=random.Random(5), marker_colour="red")
        from harness.report.html import fault_colour

        assert fault_colour("marker") == "#ff006e"
        assert "marker-file" in registry.journal_kinds()
    assert "marker" not in registry.registry().names  # uninstalled: gone again


@pytest.mark.lab
def test_the_external_fault_runs_heals_and_is_journaled_in_a_real_campaign(
    lab, tmp_path: Path
) -> None:
    from harness.core.history import read_jsonl
    from harness.core.layout import HISTORY_JSONL
    from harness.core.spec import TestSpec
    from harness.run.runner import RunOptions, run_test
    from nemesis import journal as jr

    hosts = lab.hosts()
    spec = TestSpec(
        name=f"ext-fault-{lab.name}",
        nodes=tuple(h.name for h in hosts),
        db="null",
        workload="null",
        nemesis=("marker",),
        time_limit=3.0,
        nemesis_interval=0.4,
        rate=20.0,
        concurrency=2,
        seed=4,
        options={"nemesis": {"max_ops": 3, "marker_targets": ["all"]}},
    )
    with installed(tmp_path):
        from sb_ext_fault import marker_path

        res = run_test(
            spec,
            hosts,
            store_root=tmp_path / "store",
            options=RunOptions(progress=False, check=False, recovery_s=0.0),
        )
        assert not res.interrupted, res.reason
        ops = [o for o in read_jsonl(res.store_dir / HISTORY_JSONL) if o.process == "nemesis"]
        fs = [(o.type, o.f) for o in ops]
        # start, stop, start by the schedule (max_ops 3), then the final heal's stop
        assert [f for t, f in fs if t == "info"] == [
            "start-marker",
            "stop-marker",
            "start-marker",
            "stop-marker",
        ], fs
        started = [o for o in ops if o.type == "info" and o.f == "start-marker"]
        paths = sorted(marker_path(spec.name, h.name) for h in hosts)
        # the file was there on each host when the fault landed (ls over the host's SSH)
        assert sorted(started[-1].value["seen"]) == paths
        assert sorted(o.value["nodes"] for o in ops if o.f == "stop-marker" and o.type == "info")[
            -1
        ] == sorted(h.name for h in hosts)
        assert _present(hosts, paths) == []
        assert all(jr.HostJournal(h).entries() == [] for h in hosts)


@pytest.mark.lab
def test_a_killed_runs_external_fault_is_undone_from_its_journal_entry(lab, tmp_path: Path) -> None:
    from harness.control.ssh import SSHRemote
    from harness.core.history import HistoryWriter, Op
    from harness.core.spec import RunContext, TestSpec
    from harness.run.cleanup import heal_hosts
    from nemesis import journal as jr

    hosts = {h.name: h for h in lab.hosts()}
    names = sorted(hosts)
    with installed(tmp_path):
        from sb_ext_fault import MARKER, marker_path

        remotes = {n: SSHRemote(h) for n, h in hosts.items()}
        writer = HistoryWriter(tmp_path / "history.jsonl")
        ctx = RunContext(
            spec=TestSpec(name=f"ext-killed-{lab.name}", nodes=tuple(names)),
            hosts=hosts,
            remotes=remotes,
            db=None,  # type: ignore[arg-type]
            history=writer,
            rng=random.Random(1),
            store_dir=str(tmp_path),
        )
        ctx.journal = jr.run_journal(ctx)
        nem = MARKER.nemesis({})
        done = nem.invoke(
            ctx, Op(type="invoke", process="nemesis", f="start-marker", value={"nodes": names[:2]})
        )
        paths = [marker_path(ctx.spec.name, n) for n in names[:2]]
        assert sorted(done.value["seen"]) == paths
        assert _present([hosts[n] for n in names[:2]], paths[:1]) == [f"{names[0]}:{paths[0]}"]
        # The harness dies here: no stop, no teardown; only the journal knows.
        for r in remotes.values():
            r.close()
        writer.close()
        kinds = {n: [e.kind for e in jr.HostJournal(hosts[n]).entries()] for n in names}
        assert kinds == {n: ["marker-file"] if n in names[:2] else [] for n in names}
        rep = heal_hosts(list(hosts.values()))  # a later command, fresh connections
        assert rep.clean, rep.remaining()
        assert sum(x.kind == "journal" for v in rep.before.values() for x in v) == 2
        assert _present(list(hosts.values()), paths) == []
        assert all(jr.HostJournal(h).entries() == [] for h in hosts.values())
