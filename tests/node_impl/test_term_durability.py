"""R1 on a failing disk: the node takes a term or a vote only once term.json holds it.

Measured on the default campaign (seed 4102, docs/zoo.md): a candidate whose term.json
writes failed with EIO under the ``torn-write`` fault took a new term at every elector
tick in memory, answered a vote request in a term it had never persisted, and came back
from the power cut in its old term, which the samples showed as a term going backwards.
The failing disk here is the one thing faked: ``TermStore.save`` raising EIO.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from node_impl.config import parse_args
from node_impl.node import Node
from node_impl.store import TermStore


def _node(data: Path) -> Node:
    argv = ["--id", "n1", "--peers", "n1=127.0.0.1:1,n2=127.0.0.1:2,n3=127.0.0.1:3"]
    return Node(parse_args([*argv, "--data-dir", str(data)]))


def _failing(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    def save(term: int, voted: str | None) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(node.term_store, "save", save)


def test_a_term_that_cannot_be_written_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _node(tmp_path)
    node.next_term()
    assert node.term == 1 and TermStore(tmp_path).load()[0] == 1
    with monkeypatch.context() as m:
        _failing(node, m)
        for _ in range(5):  # the elector retries every tick
            with pytest.raises(OSError):
                node.next_term()
        assert (node.term, node.known_max_term) == (1, 1)
        with pytest.raises(OSError):
            node.adopt_term(9)
        assert node.term == 1
        with pytest.raises(OSError):
            node.grant_vote("n2")
        assert node.voted_for is None
    node.next_term()  # the disk works again: one step, not one per failed tick
    assert node.term == 2 and TermStore(tmp_path).load()[0] == 2
    node.grant_vote("n3")
    assert TermStore(tmp_path).load() == (2, "n3")
