"""Seeded frame fuzzing against a live node (``node_impl.fuzz``), issue #15.

The default run sends 20k frames to one real node process (a few seconds); the
1M-frame run is marked slow and is also ``splitbrain bench fuzz-frames --frames
1000000``. Each run fails on a dead or mute node, a handler that raised on a
malformed frame (read from the node's logs), an acked entry that no longer reads
back, or a store that recovery had to cut.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import msgpack
import pytest

from node_impl.fuzz import CLIENT_TYPES, PEER_TYPES, FrameFuzzer, run_fuzz
from node_impl.wire import FrameError, decode_payload

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("node_impl.__main__") is None,
                       reason="the node server is not there"),
]


def test_fuzzer_covers_every_request_type_and_breaker() -> None:
    """The generator reaches each request type and each kind of refused frame."""
    fz = FrameFuzzer(5)
    types: set[str] = set()
    kinds: set[str] = set()
    for _ in range(3000):
        for port_types in (CLIENT_TYPES, PEER_TYPES):
            msg = fz.message(port_types)
            types.add(msg["type"])
            kinds.add(fz.breaker(port_types)[0])
    assert set(CLIENT_TYPES) | set(PEER_TYPES) <= types
    assert {"oversized-length", "truncated", "flipped-msgpack", "not-a-map", "random-bytes",
            "msgpack-bomb", "empty-frame", "bad-type-field"} <= kinds


def test_kept_frames_decode_as_maps_with_a_string_type() -> None:
    """Pipelined frames must be ones the node keeps the connection for, or the run under-counts."""
    fz = FrameFuzzer(9)
    for _ in range(2000):
        blob = fz.keep_frame(CLIENT_TYPES + PEER_TYPES)
        msg = decode_payload(blob[4:])
        assert isinstance(msg["type"], str)


def test_breakers_are_refused_by_the_decoder() -> None:
    fz = FrameFuzzer(11)
    for _ in range(2000):
        kind, blob = fz.breaker(CLIENT_TYPES)
        if kind in ("random-payload", "not-a-map", "bad-type-field", "msgpack-bomb", "trailing-bytes"):
            with pytest.raises(FrameError):
                decode_payload(blob[4:])
    # and msgpack itself does accept what the fuzzer builds as a "kept" map
    assert msgpack.unpackb(fz.keep_frame(PEER_TYPES)[4:], raw=False, strict_map_key=False)


def _assert_clean(res) -> None:  # noqa: ANN001 - FuzzResult
    d = res.to_dict()
    assert res.crashes == [], d
    assert res.store_problems == [], d
    assert not res.handler_errors, d
    assert res.acked_before >= 40, d


def test_20k_fuzzed_frames_against_a_live_node(tmp_path: Path) -> None:
    res = run_fuzz(20_000, base_dir=tmp_path, nodes=1, seed=20, check_every=5_000)
    assert res.frames >= 20_000
    assert res.by_port["peer"] > 5_000 and res.by_port["client"] > 5_000
    _assert_clean(res)


@pytest.mark.slow
def test_1m_fuzzed_frames_against_a_live_node(tmp_path: Path) -> None:
    res = run_fuzz(1_000_000, base_dir=tmp_path, nodes=1, seed=1, check_every=50_000)
    assert res.frames >= 1_000_000
    _assert_clean(res)


def test_10k_fuzzed_frames_against_an_ha_master(tmp_path: Path) -> None:
    """The classic master/slave mode (``--mode ha``) has its own handlers: same contract."""
    res = run_fuzz(10_000, base_dir=tmp_path, nodes=1, seed=21,
                   extra_args=("--mode", "ha", "--ha-master", "n1"))
    assert res.frames >= 10_000
    _assert_clean(res)
