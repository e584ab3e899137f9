"""LogStore, TermStore and Checkpoint against real files: appends, recovery, truncation."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node_impl.store import (
    HEADER_SIZE,
    INDEX_RECORD,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    Checkpoint,
    Entry,
    InconsistentState,
    LogStore,
    StateFileError,
    TermStore,
    chain_crc,
    decode_body,
    encode_body,
    parse_entries,
)


def body(i: int) -> bytes:
    return encode_body({"op": "append", "p": f"v{i}"})


def fill(store: LogStore, terms: list[int]) -> list[Entry]:
    return [store.append_leader(t, body(i)) for i, t in enumerate(terms)]


def reopen(d: Path) -> LogStore:
    return LogStore(d)


def test_append_get_reopen(tmp_path: Path) -> None:
    s = LogStore(tmp_path)
    assert (s.begin_index, s.end_index, s.end_term, s.data_length) == (-1, -1, -1, 0)
    es = fill(s, [1, 1, 2])
    noop = s.append_leader(3, b"", MAGIC_NOOP)
    assert (s.begin_index, s.end_index, s.end_term) == (0, 3, 3)
    assert es[1].pos == es[0].size and es[0].size == HEADER_SIZE + len(body(0))
    assert es[1].chain_crc == chain_crc(es[0].chain_crc, 1, 1, zlib.crc32(body(1)))
    assert s.durable_end == -1
    assert s.flush() == 3 and s.durable_end == 3
    s.close()
    s.close()  # idempotent

    s = reopen(tmp_path)
    assert s.end_index == 3 and s.end_term == 3 and s.durable_end == 3
    for e in [*es, noop]:
        got = s.get(e.index)
        assert got.same_as(e) and got.chain_crc == e.chain_crc
    assert s.get(3).magic == MAGIC_NOOP and s.get(0).magic == MAGIC_NORMAL
    assert decode_body(s.get(2).body) == {"op": "append", "p": "v2"}
    assert [e.index for e in s.entries(-5, 99)] == [0, 1, 2, 3]
    assert s.entries(2, 1) == []
    assert (s.term_at(2), s.term_at(4), s.term_at(-1)) == (2, -1, -1)
    with pytest.raises(IndexError):
        s.get(4)
    assert os.path.getsize(tmp_path / "index.idx") == 4 * INDEX_RECORD
    # appends continue the chain after a reopen
    e4 = s.append_leader(3, b"x")
    assert e4.index == 4 and e4.chain_crc == chain_crc(noop.chain_crc, 4, 3, zlib.crc32(b"x"))
    s.close()


def test_entry_wire_round_trip_and_validation(tmp_path: Path) -> None:
    s = LogStore(tmp_path)
    e = s.append_leader(5, b"abc")
    assert Entry.from_wire(e.to_wire()) == e
    bad = dict(e.to_wire(), pos="0")
    with pytest.raises(ValueError, match="pos"):
        Entry.from_wire(bad)
    with pytest.raises(ValueError, match="body"):
        Entry.from_wire(dict(e.to_wire(), body="abc"))
    other = Entry(e.index, e.term, e.magic, e.pos, e.size, e.body_crc, e.chain_crc, b"abd")
    assert not e.same_as(other)
    s.close()


def test_reads_served_from_disk_after_cache_and_buffers(tmp_path: Path) -> None:
    s = LogStore(tmp_path)
    es = fill(s, [1] * 50)
    s._cache.clear()  # force the disk/buffer read path
    assert all(a.same_as(b) for a, b in zip(s.entries(0, 49), es, strict=True))
    s.flush()
    s._cache.clear()
    assert s.get(17).same_as(es[17])
    s.close()


def _valid_log(tmp_path: Path, n: int = 5) -> list[Entry]:
    s = LogStore(tmp_path)
    es = fill(s, [1, 1, 2, 2, 3, 3, 3, 4][:n])
    s.flush()
    s.close()
    return es


@pytest.mark.parametrize("where", ["mid-header", "mid-body", "one-byte"])
def test_recovery_drops_torn_tail(tmp_path: Path, where: str) -> None:
    es = _valid_log(tmp_path)
    last = es[-1]
    cut = {
        "mid-header": last.pos + 20,
        "mid-body": last.pos + HEADER_SIZE + 3,
        "one-byte": last.pos + last.size - 1,
    }[where]
    os.truncate(tmp_path / "data.log", cut)
    s = reopen(tmp_path)
    assert s.end_index == len(es) - 2
    assert os.path.getsize(tmp_path / "data.log") == last.pos
    assert os.path.getsize(tmp_path / "index.idx") == (len(es) - 1) * INDEX_RECORD
    # the torn slot is reusable
    e = s.append_leader(9, b"new")
    assert e.index == last.index and e.pos == last.pos
    s.close()
    assert reopen(tmp_path).get(last.index).body == b"new"


def test_flipped_body_byte_truncates_there(tmp_path: Path) -> None:
    es = _valid_log(tmp_path)
    bad = es[2]
    with open(tmp_path / "data.log", "r+b") as f:
        f.seek(bad.pos + HEADER_SIZE + 1)
        b = f.read(1)
        f.seek(bad.pos + HEADER_SIZE + 1)
        f.write(bytes([b[0] ^ 0xFF]))
    s = reopen(tmp_path)
    assert s.end_index == 1
    assert all(s.get(i).same_as(es[i]) for i in range(2))
    assert s.data_length == bad.pos
    s.close()


def test_corruption_detected_on_read_while_open(tmp_path: Path) -> None:
    s = LogStore(tmp_path)
    es = fill(s, [1, 1, 1])
    s.flush()
    with open(tmp_path / "data.log", "r+b") as f:
        f.seek(es[1].pos + HEADER_SIZE)
        f.write(b"\xff")
    s._cache.clear()
    with pytest.raises(InconsistentState, match="bodyCrc"):
        s.get(1)
    s.close()


def test_broken_chain_or_term_order_truncates(tmp_path: Path) -> None:
    es = _valid_log(tmp_path)
    # Rewrite entry 3's chainCrc and its term so that only the chain check catches one
    with open(tmp_path / "data.log", "r+b") as f:
        f.seek(es[3].pos + 36)
        f.write(struct.pack(">I", es[3].chain_crc ^ 1))
    s = reopen(tmp_path)
    assert s.end_index == 2
    s.close()


def test_garbage_after_valid_entries(tmp_path: Path) -> None:
    es = _valid_log(tmp_path)
    with open(tmp_path / "data.log", "ab") as f:
        f.write(os.urandom(1000))
    s = reopen(tmp_path)
    assert s.end_index == len(es) - 1
    assert s.data_length == es[-1].pos + es[-1].size
    assert os.path.getsize(tmp_path / "data.log") == s.data_length
    s.close()


@pytest.mark.parametrize("damage", ["missing", "shorter", "longer", "wrong-record"])
def test_index_rebuilt(tmp_path: Path, damage: str) -> None:
    es = _valid_log(tmp_path)
    idx = tmp_path / "index.idx"
    good = idx.read_bytes()
    if damage == "missing":
        idx.unlink()
    elif damage == "shorter":
        os.truncate(idx, 2 * INDEX_RECORD + 5)
    elif damage == "longer":
        with open(idx, "ab") as f:
            f.write(b"\x01" * 100)
    else:
        with open(idx, "r+b") as f:
            f.seek(3 * INDEX_RECORD + 4)
            f.write(struct.pack(">q", 12345))
    s = reopen(tmp_path)
    assert s.end_index == len(es) - 1
    assert idx.read_bytes() == good
    assert all(s.get(e.index).same_as(e) for e in es)
    s.close()


def test_follower_append_checks(tmp_path: Path) -> None:
    leader = LogStore(tmp_path / "l")
    es = fill(leader, [1, 1, 2])
    f = LogStore(tmp_path / "f")
    f.append_follower(es[0])
    with pytest.raises(InconsistentState, match="index"):
        f.append_follower(es[2])
    wrong_pos = Entry(
        1, 1, 1, es[1].pos + 1, es[1].size, es[1].body_crc, es[1].chain_crc, es[1].body
    )
    with pytest.raises(InconsistentState, match="pos"):
        f.append_follower(wrong_pos)
    bad_crc = Entry(1, 1, 1, es[1].pos, es[1].size, es[1].body_crc ^ 1, es[1].chain_crc, es[1].body)
    with pytest.raises(InconsistentState, match="bodyCrc"):
        f.append_follower(bad_crc)
    bad_chain = Entry(
        1, 1, 1, es[1].pos, es[1].size, es[1].body_crc, es[1].chain_crc ^ 1, es[1].body
    )
    with pytest.raises(InconsistentState, match="chainCrc"):
        f.append_follower(bad_chain)
    assert f.end_index == 0
    f.append_follower(es[1])
    f.append_follower(es[2])
    assert f.last_chain_crc == leader.last_chain_crc
    f.close()
    f = LogStore(tmp_path / "f")
    assert all(f.get(e.index).same_as(e) for e in es)
    f.close()
    leader.close()


def test_truncate_equal_entry_cuts_after_it(tmp_path: Path) -> None:
    s = LogStore(tmp_path)
    es = fill(s, [1, 1, 1, 2, 2])
    assert s.truncate(es[2]) is True
    assert s.end_index == 2 and s.data_length == es[3].pos and s.durable_end == 2
    assert s.truncate(es[2]) is False  # nothing left to remove
    e3 = s.append_leader(3, b"after")
    assert e3.index == 3 and e3.pos == es[3].pos
    s.close()
    s = reopen(tmp_path)
    assert s.end_index == 3 and s.get(3).body == b"after"
    s.close()


def test_truncate_different_entry_replaces(tmp_path: Path) -> None:
    old = LogStore(tmp_path / "old")
    fill(old, [1, 1, 2, 2])  # a follower with a dirty suffix from term 2
    new = LogStore(tmp_path / "new")
    les = fill(new, [1, 1])
    l2 = new.append_leader(3, b"leader-3")
    # followers share the first two entries
    assert old.truncate(l2) is True
    assert old.end_index == 2 and old.get(2).same_as(l2) and old.last_chain_crc == l2.chain_crc
    old.append_follower(new.append_leader(3, b"next"))
    # truncate at end+1 writes it without removing anything
    empty = LogStore(tmp_path / "empty")
    assert empty.truncate(les[0]) is False and empty.end_index == 0
    # an entry that does not fit the local prefix is refused
    with pytest.raises(InconsistentState):
        empty.truncate(l2)
    for s in (old, new, empty):
        s.close()
    old = reopen(tmp_path / "old")
    assert [e.term for e in old.entries(0, 9)] == [1, 1, 3, 3]
    old.close()


def test_flush_on_worker_thread_claims_only_captured_end(tmp_path: Path) -> None:
    s = LogStore(tmp_path)
    fill(s, [1] * 10)
    results: list[int] = []
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            results.append(s.flush())

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(3000):
            s.append_leader(1, body(i))
            assert s.durable_end <= s.end_index
    finally:
        stop.set()
        t.join()
    assert results == sorted(results)
    assert s.flush() == s.end_index == 3009
    s.close()


def test_no_fsync_mode_still_recovers(tmp_path: Path) -> None:
    s = LogStore(tmp_path, fsync=False)
    fill(s, [1, 2])
    assert s.flush() == 1
    s.close()
    assert reopen(tmp_path).end_index == 1


def test_byte_level_reads_span_the_unflushed_tail(tmp_path: Path) -> None:
    """Mode ha streams data.log bytes: the file and the in-process buffer read as one."""
    with LogStore(tmp_path) as s:
        es = fill(s, [1, 1])
        s.flush()
        es += fill(s, [2])  # buffered, not yet on disk
        raw = s.read_data(0, 1 << 20)
        assert len(raw) == s.data_length == s.end_offset(2)
        got, used = parse_entries(raw, 0)
        assert len(got) == 3 and all(e.same_as(x) for e, x in zip(got, es, strict=True))
        assert used == len(raw)
        assert s.read_data(es[1].pos + 5, 10) == raw[es[1].pos + 5 : es[1].pos + 15]
        assert s.read_data(s.data_length, 10) == b""
        assert s.end_offset(-1) == 0 and s.end_offset(0) == es[1].pos
        assert s.index_within(es[1].pos) == 0 and s.index_within(es[2].pos - 1) == 0
        assert s.index_within(s.data_length) == 2 and s.index_within(0) == -1
        with pytest.raises(InconsistentState, match="bad entry header"):
            parse_entries(raw, 0, max_size=es[0].size - 1)


def test_term_store_and_checkpoint(tmp_path: Path) -> None:
    ts = TermStore(tmp_path)
    assert ts.load() == (0, None)
    ts.save(3, "n2")
    assert ts.load() == (3, "n2")
    (tmp_path / "term.json.tmp").write_text('{"term": 99, "votedF')  # a crash mid-write
    assert ts.load() == (3, "n2")
    ts.save(4, None)
    assert ts.load() == (4, None)
    assert not (tmp_path / "term.json.tmp").exists()

    cp = Checkpoint(tmp_path)
    assert cp.load() == -1
    cp.save(17)
    (tmp_path / "checkpoint.json.tmp").write_text("garbage")
    assert cp.load() == 17
    (tmp_path / "checkpoint.json").write_text("[1]")
    with pytest.raises(StateFileError, match="checkpoint.json"):
        cp.load()


# ---------------------------------------------------------------- property


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 2), st.binary(max_size=40), st.booleans()),
        min_size=1,
        max_size=25,
    ),
    cut_frac=st.floats(0, 1),
)
def test_any_cut_recovers_a_prefix(ops: list[tuple[int, bytes, bool]], cut_frac: float) -> None:
    d = Path(tempfile.mkdtemp(prefix="sb-store-"))
    try:
        s = LogStore(d)
        term = 1
        written: list[Entry] = []
        flushed_end = -1
        for bump, b, do_flush in ops:
            term += bump
            written.append(s.append_leader(term, b))
            if do_flush:
                flushed_end = s.flush()
        s.close()
        total = os.path.getsize(d / "data.log")
        cut = int(total * cut_frac)
        os.truncate(d / "data.log", cut)
        r = LogStore(d)
        got = r.entries(0, r.end_index)
        assert len(got) <= len(written)
        for g, w in zip(got, written, strict=False):
            assert g.same_as(w) and g.chain_crc == w.chain_crc
        # every complete entry before the cut survives, flushed ones in particular
        complete = [w for w in written if w.pos + w.size <= cut]
        assert len(got) == len(complete)
        if flushed_end >= 0 and written[flushed_end].pos + written[flushed_end].size <= cut:
            assert r.end_index >= flushed_end
        r.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
