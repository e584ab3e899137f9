"""Clock offsets in libfaketime's format, and the strobe loop run by a real shell on a temp file."""

from __future__ import annotations

import subprocess
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.errors import NemesisError
from harness.core.remote import Host
from nemesis.clock import RealClock, format_offset, parse_offset, strobe_script


def test_format_offset_literals() -> None:
    assert format_offset(0) == "+0"
    assert format_offset(0.0001) == "+0"
    assert format_offset(1500) == "+1.5"
    assert format_offset(-250) == "-0.25"
    assert format_offset(120_000) == "+120"
    assert format_offset(3) == "+0.003"


def test_parse_offset_accepts_faketime_units() -> None:
    assert parse_offset("+0\n") == 0
    assert parse_offset("-10m") == -600_000
    assert parse_offset("+1,5h") == 5_400_000
    assert parse_offset("") == 0


@given(st.integers(-(10**9), 10**9))
def test_offset_round_trip_at_microsecond_precision(us: int) -> None:
    ms = us / 1000
    assert abs(parse_offset(format_offset(ms)) - ms) < 0.001


def test_faketime_reads_our_offsets() -> None:
    """libfaketime itself accepts what format_offset writes (fractional, negative)."""
    from harness.inventory.lab import find_libfaketime

    lib = find_libfaketime()
    if lib is None:
        pytest.skip("libfaketime not installed")
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".rc") as f:
        for ms in (90_500, -30_250):
            f.seek(0), f.truncate(), f.write(format_offset(ms) + "\n"), f.flush()
            out = subprocess.run(
                ["date", "+%s.%N"],
                capture_output=True,
                text=True,
                check=True,
                env={
                    "LD_PRELOAD": lib,
                    "FAKETIME_TIMESTAMP_FILE": f.name,
                    "FAKETIME_NO_CACHE": "1",
                    "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                },
            ).stdout
            assert abs(float(out) - time.time() - ms / 1000) < 0.5


def test_strobe_script_flips_and_ends_at_base(tmp_path) -> None:
    path = tmp_path / "faketime"
    path.write_text("+5\n")
    script = strobe_script(str(path), 5000, 100_000, 10, 0.3)
    proc = subprocess.Popen(["sh", "-c", script])
    seen = set()
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        seen.add(path.read_text().strip())
        time.sleep(0.002)
    assert proc.wait(timeout=5) == 0
    assert seen >= {"+5", "+105"} and seen <= {"+5", "+105", ""}
    assert path.read_text() == "+5\n"


def test_strobe_script_restores_base_on_term(tmp_path) -> None:
    path = tmp_path / "faketime"
    proc = subprocess.Popen(["sh", "-c", strobe_script(str(path), 0, 1000, 5, 60)])
    time.sleep(0.2)
    proc.terminate()
    assert proc.wait(timeout=5) == 0
    assert path.read_text() == "+0\n"


class _NoRemote:
    def __init__(self, address: str) -> None:
        self.host = Host(name="n1", address=address)


@pytest.mark.parametrize("address", ["127.77.0.11", "localhost"])
def test_real_clock_refuses_hosts_sharing_this_machines_clock(address: str) -> None:
    with pytest.raises(NemesisError, match="refusing to change the real clock"):
        RealClock(_NoRemote(address))  # type: ignore[arg-type]


def test_clock_faults_are_refused_for_a_db_outside_libfaketime() -> None:
    """A DB that opts out of the preload on hosts whose clock is libfaketime's alone would
    see no clock fault at all: the nemesis must refuse at setup, not record faults that did
    nothing."""
    from types import SimpleNamespace

    from nemesis.clock import ClockNemesis

    class JvmDB:
        runs_under_faketime = False

    host = Host(name="n1", address="127.0.0.1", extras={"faketime_file": "/tmp/sb-none.rc"})
    ctx = SimpleNamespace(nodes=["n1"], hosts={"n1": host}, db=JvmDB(), remotes={})
    with pytest.raises(NemesisError, match="clock cannot reach JvmDB"):
        ClockNemesis().setup(ctx)  # type: ignore[arg-type]
