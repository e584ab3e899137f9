"""The iptables and netem command text, checked as data (real rules are in test_lab_faults)."""

from __future__ import annotations

from nemesis.net import drop_script, ensure_chain_script, remove_chain_script
from nemesis.netem import delay_rules, loss_rules, netem_args


def test_drop_script_flushes_then_drops_each_source_once() -> None:
    s = drop_script("ipt", "SB", ["10.0.0.2", "10.0.0.1", "10.0.0.2"])
    assert s.startswith(ensure_chain_script("ipt", "SB"))
    assert s.endswith("ipt -F SB && ipt -A SB -s 10.0.0.1 -j DROP && ipt -A SB -s 10.0.0.2 -j DROP")


def test_chain_position() -> None:
    assert "-I INPUT 1 -j SB" in ensure_chain_script("ipt", "SB")
    assert "-A INPUT -j SB" in ensure_chain_script("ipt", "SB", first=False)
    assert remove_chain_script("ipt", "SB").endswith("! ipt -n -L SB >/dev/null 2>&1")


def test_netem_args() -> None:
    assert netem_args(None, None) == ""
    assert netem_args(0.2, None) == "loss 20%"
    assert netem_args(0.05, (100.0, 20.0)) == "delay 100ms 20ms loss 5%"
    assert netem_args(None, (50.0, 0.0)) == "delay 50ms"


def test_fallback_rules() -> None:
    assert loss_rules("ipt", ["a"], 0.25) == [
        "ipt -A SPLITBRAIN_LOSS -s a -m statistic --mode random --probability 0.250000 -j DROP"
    ]
    assert delay_rules("ipt", ["b", "a"], 7) == [
        "ipt -A SPLITBRAIN_DELAY -s a -j NFQUEUE --queue-num 7 --queue-bypass",
        "ipt -A SPLITBRAIN_DELAY -s b -j NFQUEUE --queue-num 7 --queue-bypass",
    ]
