"""The same-run Porcupine baseline of ``splitbrain bench checker``: the export and a live run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from checker.linearizable import make_entries
from checker.models import get_model
from harness.bench.checker_data import DEFAULT_PEERS
from harness.bench.checker_knossos import events_text as _events_text
from harness.bench.checker_porcupine import porcupine_live
from harness.core.history import Op

CORPORA = Path(__file__).parents[3] / "shared" / "corpora"


def test_knossos_export_is_what_our_search_sees() -> None:
    """Fails dropped, a nil read legal anywhere, an open cas returning after everything."""
    m = get_model("knossos-cas-register")
    rows = [
        (0, "invoke", "write", 1),
        (1, "invoke", "cas", [1, 2]),
        (0, "ok", "write", 1),
        (2, "invoke", "write", 5),
        (2, "fail", "write", 5),
        (3, "invoke", "read", None),
        (3, "ok", "read", None),
    ]
    ops = [Op(type=t, process=p, f=f, value=v, index=i) for i, (p, t, f, v) in enumerate(rows)]
    text = _events_text(make_entries(ops, m), "knossos-cas-register", {})
    assert text.splitlines() == [
        "model cas 0",
        "C 0 w 1 0 0 0",
        "C 1 c 1 2 0 1",
        "R 0",
        "C 2 r 0 0 1 0",
        "R 2",
        "R 1",
    ]


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("go") is None
    or not (DEFAULT_PEERS / "timing_test.go").exists()
    or not (CORPORA / "knossos").exists(),
    reason="needs go and the peer source",
)
def test_live_porcupine_times_both_corpora_and_agrees() -> None:
    live = porcupine_live(CORPORA, DEFAULT_PEERS)
    assert sum(1 for c, _ in live["times"] if c == "porcupine") == 108
    assert sum(1 for c, _ in live["times"] if c == "knossos") == 122
    expected = {f"jepsen/etcd_{n:03d}.log" for n in (2, 5, 7, 18)}
    assert all(live["verdicts"][("porcupine", f)] for f in expected)
    assert live["verdicts"][("knossos", "cas-register/bad/bad-analysis.edn")] is False
