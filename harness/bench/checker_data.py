"""Where ``splitbrain bench checker`` finds its corpora, and which models judge them.

Shared by the corpus run (:mod:`harness.bench.checker_corpora`), the Knossos export
(:mod:`harness.bench.checker_knossos`) and the live Porcupine baseline
(:mod:`harness.bench.checker_porcupine`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_CORPORA", "DEFAULT_PEERS", "ABSENT", "MODELS"]

DEFAULT_CORPORA = Path(__file__).resolve().parents[3] / "shared" / "corpora"
DEFAULT_PEERS = DEFAULT_CORPORA.parent / "peers" / "porcupine"
ABSENT = {"jepsen/etcd_095.log", "mutex/bad/hazelcast.edn"}
"""Corpus files listed in the cross-check that the corpora do not ship."""
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "etcd-cas-register": ("cas-register", {}),
    "cas-register": ("knossos-cas-register", {}),
    "kv-put-get-append": ("kv", {}),
    "multi-register": ("multi-register", {"initial": {"x": 0, "y": 0}}),
    "mutex": ("mutex", {}),
}
"""The cross-check's model names -> our model and its parameters."""
