"""One history record, checked: the field rules every reader applies (docs/architecture.md §3).

Kept below the format modules (:mod:`harness.core.jsonl`, :mod:`harness.core.parquet`,
:mod:`harness.core.foreign`) so each can validate what it decoded with the same words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from harness.core.errors import HistoryError
from harness.core.op import NEMESIS, OP_TYPES, Op

__all__ = ["parse_op", "clip", "json_kind"]


def parse_op(
    obj: Any, *, path: object | None = None, line: int | None = None, record: int | None = None
) -> Op:
    """Validate one decoded record; errors name file, line (or ``record``, for Parquet) and field."""
    rec = f"record {record}: " if record is not None else ""
    if not isinstance(obj, Mapping):
        raise HistoryError(f"{rec}record is not a JSON object", path=path, line=line)
    index = obj.get("index", -1)

    def bad(field: str, why: str) -> HistoryError:
        return HistoryError(
            rec + why,
            path=path,
            line=line,
            index=index if isinstance(index, int) else None,
            field=field,
        )

    if not isinstance(index, int) or isinstance(index, bool):
        raise bad("index", f"must be an integer, got {index!r}")
    t = obj.get("time", 0)
    if not isinstance(t, int) or isinstance(t, bool):
        raise bad("time", f"must be integer nanoseconds, got {t!r}")
    typ = obj.get("type")
    if typ not in OP_TYPES:
        raise bad("type", f"must be one of {', '.join(OP_TYPES)}, got {typ!r}")
    if "process" not in obj:
        raise bad("process", "is missing")
    proc = obj["process"]
    if not ((isinstance(proc, int) and not isinstance(proc, bool)) or proc == NEMESIS):
        raise bad("process", f"must be an integer or 'nemesis', got {proc!r}")
    f = obj.get("f")
    if not isinstance(f, str) or not f:
        raise bad("f", f"must be a non-empty string, got {f!r}")
    key = obj.get("key")
    if key is not None and not isinstance(key, str):
        raise bad("key", f"must be a string or null, got {key!r}")
    node = obj.get("node")
    if node is not None and not isinstance(node, str):
        raise bad("node", f"must be a string or null, got {node!r}")
    err = obj.get("error")
    if err is not None and not isinstance(err, str):
        err = json.dumps(err)
    return Op(
        type=typ,
        process=proc,
        f=f,
        value=obj.get("value"),
        key=key,
        time=t,
        index=index,
        node=node,
        error=err,
    )


def clip(x: Any, n: int = 60) -> str:
    """``repr(x)``, cut to ``n`` characters for an error message."""
    r = repr(x)
    return r if len(r) <= n else r[:n] + "..."


def json_kind(v: Any) -> str:
    """The JSON kind of a value: ``null``, ``boolean``, ``number``, ``string``, ``array`` or
    ``object`` (what the Parquet history's ``v_kind`` column holds and checkers claim by)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "array"
    return "object"
