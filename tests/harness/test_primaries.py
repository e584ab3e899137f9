"""Asking the reference node who leads: a silent node must not hold up the answer."""

from __future__ import annotations

import time

from harness.dbs import dledger


def test_a_silent_node_costs_only_the_grace_once_a_leader_answered(monkeypatch) -> None:
    def fake(host: str, port: int, timeout: float):
        if host == "paused":
            time.sleep(timeout)  # answers only by timing out
            return None
        return {"role": "leader" if host == "lead" else "follower"}

    monkeypatch.setattr(dledger, "_fetch_status", fake)
    addrs = {"n1": ("f", 1), "n2": ("paused", 2), "n3": ("lead", 3), "n4": ("paused", 4)}
    t0 = time.monotonic()
    assert dledger._leaders_now(addrs, timeout=2.0, grace=0.2) == ["n3"]
    assert time.monotonic() - t0 < 1.0
    # Nobody leads: every node gets its whole timeout before the answer "none".
    t0 = time.monotonic()
    assert dledger._leaders_now({"n1": ("f", 1), "n2": ("paused", 2)}, timeout=0.5) == []
    assert time.monotonic() - t0 >= 0.45
    # Two nodes that both believe they lead are both named, in node order.
    both = {"n1": ("lead", 1), "n2": ("f", 2), "n3": ("lead", 3)}
    assert dledger._leaders_now(both, timeout=1.0) == ["n1", "n3"]
    assert dledger._leaders_now({}) == []
