"""Where the disk faults land: the end of a log's data, its last record, each variant.

Pure tests on real files (no FUSE, no lab): the corruption operations the
``corrupt`` fault runs on a host, aimed the way ``nemesis/disk.py`` aims them, on
a reference node's ``data.log``; then the recovery of the correct store and of the
seeded bugs on the result. What they pin is why a 45 s campaign finds
``skip-crc``: a flip spread over a 4 KiB tail lands in a record header (48 of a
~67-byte entry) that every recovery checks, a flip in the last ``span`` bytes of
the data lands in a body that only the CRC guards.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.control.disk import corrupt
from harness.core.fault import Draw
from nemesis.disk import CORRUPT_OPS, CorruptOptions, _draw
from node_impl.kv import body_append, entry_view
from node_impl.store import HEADER_SIZE, LogStore


def _log(d: Path, n: int = 40) -> list[bytes]:
    """A reference node's log of ``n`` appends like the append workload's."""
    s = LogStore(d)
    bodies = [body_append(f"{i % 5}-{i}") for i in range(n)]
    for b in bodies:
        s.append_leader(1, b)
    s.flush()
    s.close()
    return bodies


def test_data_end_skips_a_preallocated_files_zeros(tmp_path: Path) -> None:
    f = tmp_path / "seg.wal"
    f.write_bytes(b"\x01" * 1000 + b"\x00" * 200_000)
    assert corrupt.data_end(str(f)) == 1000
    rec = corrupt.bitflip(str(f), bits=8, seed=3, offset=-16, from_data_end=True)
    assert rec["region"] == [984, 1000] and rec["data_end"] == 1000
    assert all(984 <= b[0] < 1000 for b in rec["bits"])
    assert f.stat().st_size == 201_000  # the padding is not touched
    # without it, the same flip lands in the zeros every reader skips
    plain = corrupt.bitflip(str(f), bits=8, seed=3, offset=-16)
    assert all(b[0] >= 200_984 for b in plain["bits"])
    empty = tmp_path / "empty"
    empty.write_bytes(b"\x00" * 100)
    assert corrupt.data_end(str(empty)) == 0


def test_truncate_and_copy_chunk_count_from_the_data_end(tmp_path: Path) -> None:
    f = tmp_path / "seg"
    f.write_bytes(bytes(range(1, 201)) + b"\x00" * 1000)
    rec = corrupt.truncate(str(f), drop=10, from_data_end=True)
    assert rec["data_end"] == 200 and rec["new_size"] == 190 and f.stat().st_size == 190
    rec = corrupt.copy_chunk(str(f), src=-100, dst=-16, length=16, from_data_end=True)
    assert (rec["src"], rec["dst"], rec["length"]) == (90, 174, 16)
    assert f.read_bytes()[174:190] == bytes(range(91, 107))
    assert rec["changed"] == 16


def _starts(d: Path) -> list[int]:
    s = LogStore(d)
    starts = [s._pos[i] for i in range(s.end_index + 1)]
    s.close()
    return starts


@pytest.mark.parametrize("seed", range(12))
def test_a_flip_aimed_at_text_lands_in_bodies_the_crc_alone_guards(
    tmp_path: Path, seed: int
) -> None:
    """Every seed: the correct store cuts at the first flipped entry, skip-crc serves it."""
    opts = CorruptOptions()
    assert opts.aim == "text"
    logs = {}
    for name in ("good", "buggy"):
        d = tmp_path / name
        bodies = _log(d, n=120)
        starts = _starts(d)  # before the flip: opening a store recovers (cuts) it
        logs[name] = d
        rec = corrupt.bitflip(
            str(d / "data.log"),
            bits=opts.bits,
            seed=seed,
            offset=-opts.tail,
            from_data_end=True,
            text=True,
        )
    hit = sorted({max(i for i, p in enumerate(starts) if p <= b[0]) for b in rec["bits"]})
    assert all(
        b[0] - starts[max(i for i, p in enumerate(starts) if p <= b[0])] >= HEADER_SIZE
        for b in rec["bits"]
    )  # every flip is in a body, none in a header
    first = hit[0]
    good = LogStore(logs["good"])
    assert good.end_index == first - 1  # cut at the first record failing its CRC
    good.close()
    buggy = LogStore(logs["buggy"], verify_crc=False)
    assert buggy.end_index == len(bodies) - 1  # nothing cut
    e = buggy.get(first)
    assert e.body != bodies[first]
    assert entry_view(e)[3] != f"{first % 5}-{first}"  # a read shows another payload
    buggy.close()


def test_a_flip_over_the_whole_tail_mostly_hits_headers(tmp_path: Path) -> None:
    """Why the default changed: the old 4 KiB region, 4 bits, 40 seeds."""
    d = tmp_path / "data"
    _log(d, n=120)
    starts = _starts(d)
    size = (d / "data.log").stat().st_size
    first_in_header = 0
    for seed in range(40):
        rng = random.Random(seed)
        picks = sorted(rng.sample(range((size - 4096) * 8, size * 8), 4))
        off = picks[0] // 8
        pos = max(p for p in starts if p <= off)
        first_in_header += off - pos < HEADER_SIZE
    assert first_in_header > 20  # most flips meet a checked header first


def test_corrupt_variants_are_dealt_so_a_short_run_meets_each() -> None:
    rng = random.Random(5)
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    d = Draw(
        rng=rng,
        nodes=nodes,
        leader_ok=True,
        interval=5.0,
        options=CorruptOptions(),
        variants=CORRUPT_OPS,
        targets=("one",),
    )
    drawn = [_draw(d, "corrupt")["op"] for _ in range(8)]
    assert sorted(drawn[:4]) == sorted(CORRUPT_OPS) and sorted(drawn[4:]) == sorted(CORRUPT_OPS)
    again = random.Random(5)
    d2 = Draw(
        rng=again,
        nodes=nodes,
        leader_ok=True,
        interval=5.0,
        options=CorruptOptions(),
        variants=CORRUPT_OPS,
        targets=("one",),
    )
    assert [_draw(d2, "corrupt")["op"] for _ in range(8)] == drawn  # seeded
    one = Draw(
        rng=random.Random(1),
        nodes=nodes,
        leader_ok=True,
        interval=5.0,
        options=CorruptOptions(),
        variants=("bitflip",),
        targets=("one",),
    )
    assert {_draw(one, "corrupt")["op"] for _ in range(5)} == {"bitflip"}
