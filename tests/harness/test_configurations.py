"""harness/run/configurations.py: the default campaign cycles the DB's declared configurations."""

from __future__ import annotations

from harness.core.spec import TestSpec
from harness.dbs.dledger import DLedgerDB
from harness.run.configurations import configuration_of, configurations, cover_configuration

DECK = {"scripts": ["crash"], "faults": ["kill"]}


def spec(seed: int, **db: str) -> TestSpec:
    return TestSpec(name="t", nodes=("n1",), seed=seed, options={"deck": dict(DECK), "db": db})


def test_one_change_at_a_time_the_default_first() -> None:
    got = configurations({"read_mode": ("index", "follower", "log"), "flush": ("sync", "async")})
    assert got == [
        {"read_mode": "index", "flush": "sync"},
        {"read_mode": "follower", "flush": "sync"},
        {"read_mode": "log", "flush": "sync"},
        {"read_mode": "index", "flush": "async"},
    ]


def test_consecutive_seeds_cover_every_read_mode_and_record_the_choice() -> None:
    db = DLedgerDB()
    modes = []
    for seed in (900, 901, 902):
        s = cover_configuration(spec(seed), db)
        modes.append(s.db_options["read_mode"])
        rec = s.options["deck"]["configuration"]
        assert rec["chosen"] == {"read_mode": modes[-1]} and "mod 3" in rec["by"]
        assert cover_configuration(s, db) is s  # chosen once: a re-check keeps it
    assert sorted(modes) == ["follower", "index", "log"]


def test_what_the_user_set_and_runs_without_the_deck_are_left_alone() -> None:
    db = DLedgerDB(read_mode="log")
    s = cover_configuration(spec(901, read_mode="log"), db)
    assert s.db_options["read_mode"] == "log"
    assert s.options["deck"]["configuration"]["by"] == "--db-option"
    plain = TestSpec(name="t", nodes=("n1",), seed=901)
    assert cover_configuration(plain, db) is plain
    broker = DLedgerDB(extra_args="--mode broker")
    assert cover_configuration(spec(901), broker).db_options == {}


def test_a_verdict_names_its_configuration() -> None:
    assert configuration_of(DLedgerDB(read_mode="follower")) == {"read_mode": "follower"}
    assert configuration_of(DLedgerDB()) == {"read_mode": "index"}
    assert configuration_of(object()) is None
