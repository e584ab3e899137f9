"""Types of the compiled search loop (``checker/_wgl.c``); see :mod:`checker.linearizable`."""

from collections.abc import Sequence
from typing import Any

class Search:
    def __init__(self, *, n_ops: int, nxt: Sequence[int], prv: Sequence[int], match: Sequence[int],
                 nid: Sequence[int], prereq: Sequence[int], reads: Sequence[int],
                 need: Sequence[bool], pure: Sequence[bool], is_eqread: Sequence[bool],
                 rn: Sequence[int], rp: Sequence[int], rhead: Sequence[int], steps: list[Any],
                 intern: dict[Any, int], objs: list[Any], init: int, remaining: int,
                 kind: Sequence[int], karg: Sequence[int], karg2: Sequence[int],
                 unk: Sequence[bool], args: list[Any]) -> None: ...
    def run(self, budget: int, /) -> tuple[bool, int, list[tuple[int, int]] | None] | None: ...
    def stats(self) -> dict[str, int]: ...

def build(*, call_pos: Sequence[int], ret_pos: Sequence[int], kind: Sequence[int],
          karg: Sequence[int], karg2: Sequence[int], unk: Sequence[bool], pure: Sequence[bool],
          need: Sequence[bool], reads: Sequence[int], prereq: Sequence[int], steps: list[Any],
          args: list[Any], intern: dict[Any, int], objs: list[Any], init: int,
          remaining: int) -> Search: ...
def clients(ops: Sequence[Any], /) -> tuple[list[Any], set[Any]]: ...
def encode_register(ops: Sequence[Any], read_nil_any: bool, observe: bool, allow_cas: bool,
                    intern: dict[Any, int], objs: list[Any], /) -> Search | bool | None: ...
