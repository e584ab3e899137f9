"""Why a history is not linearizable: data first (Knossos' invalid-analysis), text second.

The search's deepest configuration is the best explanation it has: a prefix of
ops that can be linearized, in order, with the model state after each, and
then a wall. The wall is the op whose return comes first among the rest: it
had to take effect before returning, yet from the prefix's state no order of
the ops still open at that moment (the ones concurrent with it) makes it
legal. Those ops, plus the prefix ops that overlap it in real time, are the
window a human must look at.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from checker.models import UNKNOWN, Fail, Model
from harness.core.op import NEMESIS, Op
from harness.core.paired import pair_positions

__all__ = ["build_counterexample", "render_text"]

PREFIX_SHOWN = 8


def _op_data(
    e: Any, model: Model, by_index: dict[int, Op], completions: dict[int, Op]
) -> dict[str, Any]:
    inv = by_index.get(e.index)
    comp = completions.get(e.index)
    out = e.out
    return {
        "index": e.index,
        "completion_index": comp.index if comp is not None else e.ret_index,
        "process": e.process,
        "type": comp.type if comp is not None else e.type,
        "f": inv.f if inv is not None else None,
        "value": inv.value if inv is not None else None,
        "result": (
            comp.value
            if comp is not None
            else None
            if out is UNKNOWN
            else out.value
            if isinstance(out, Fail)
            else out
        ),
        "node": inv.node if inv is not None else None,
        "description": model.describe_op(e.inp, e.out),
    }


def build_counterexample(
    entries: Sequence[Any],
    info: dict[str, Any],
    model: Model,
    *,
    key: Any = None,
    ops: Sequence[Op] = (),
    first_bad: int | None = None,
) -> dict[str, Any]:
    """The counterexample of one failing partition, as plain data.

    ``entries``/``info`` are what :func:`checker.linearizable.check_partition`
    consumed and returned. The result holds ``key``, ``model``, ``prefix``
    (every op of the longest linearizable prefix, with the state after it),
    ``op`` (the op that cannot be linearized), ``state`` (the state it met),
    ``window`` (sorted history indexes of the ops to look at), ``ops`` (those
    ops as dicts) and ``why`` (one sentence). ``first_bad`` is the history
    index of the earliest completion no linearization explains (see
    :func:`checker.linearizable.shortest_failing_prefix`), when the caller
    found it; ``entries``/``info`` then describe the history cut there, and
    that op is the one reported if the search was stuck on it.
    """
    by_index = {op.index: op for op in ops}
    client = [op for op in ops if op.process != NEMESIS]
    completions = {
        client[i].index: client[c] for i, c in pair_positions(client).items() if c is not None
    }
    by_id = {e.id: e for e in entries}
    longest = info.get("longest") or []
    done = {oid for oid, _ in longest}
    state = longest[-1][1] if longest else model.init()
    prefix = [
        {
            "index": by_id[oid].index,
            "process": by_id[oid].process,
            "op": model.describe_op(by_id[oid].inp, by_id[oid].out),
            "state": model.describe_state(s),
        }
        for oid, s in longest
    ]
    rest = [e for e in entries if e.id not in done]
    if not rest:  # cannot happen for a failed search; keep the report honest anyway
        return {
            "key": key,
            "model": model.name,
            "prefix": prefix,
            "op": None,
            "state": model.describe_state(state),
            "window": [],
            "ops": [],
            "why": "the search failed but found no blocking op",
        }
    wall = min(rest, key=lambda e: e.ret)
    if first_bad is not None:
        wall = next((e for e in rest if e.ret_index == first_bad), wall)
    open_ops = [e for e in rest if e.call < wall.ret and e.id != wall.id]
    overlapping = [
        by_id[oid]
        for oid, _ in longest
        if by_id[oid].ret > wall.call and by_id[oid].call < wall.ret
    ]
    window_entries = sorted([wall, *open_ops, *overlapping], key=lambda e: e.call)
    legal_alone, _ = model.step_fn(wall.inp, wall.out)(state)
    wall_desc = model.describe_op(wall.inp, wall.out)
    st = model.describe_state(state)
    head = (
        f"the longest linearization found ({len(longest)} ops, every other order failed "
        f"sooner) ends in state {st}, where {wall_desc} is not legal"
    )
    if not legal_alone and not open_ops:
        why = f"{head}, and no op still to be linearized could have come first"
    elif not legal_alone:
        why = (
            f"{head}, and no order of the {len(open_ops)} ops open at the same time "
            f"leads to a state where it is"
        )
    else:
        why = (
            f"{wall_desc} is legal in state {st}, but every way of placing it with the "
            f"{len(open_ops)} ops open at the same time leaves an op that must "
            f"already have happened unexplainable"
        )
    return {
        "key": key,
        "model": model.name,
        "prefix": prefix,
        "op": _op_data(wall, model, by_index, completions),
        "state": st,
        "window": sorted(e.index for e in window_entries),
        "ops": [_op_data(e, model, by_index, completions) for e in window_entries],
        "why": why,
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, (list, tuple)):
        return "[" + " ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} {_fmt(x)}" for k, x in v.items()) + "}"
    return str(v)


def render_text(cex: dict[str, Any]) -> str:
    """A few readable lines: where it breaks, which ops, and why."""
    lines = [f"key {cex.get('key')!r} is not linearizable (model {cex.get('model')})"]
    prefix = cex.get("prefix") or []
    total = cex.get("prefix_length", len(prefix))
    if prefix:
        lines.append(
            f"longest linearizable prefix: {total} ops"
            + (f", the last {PREFIX_SHOWN}:" if total > PREFIX_SHOWN else ":")
        )
        for p in prefix[-PREFIX_SHOWN:]:
            lines.append(
                f"  op {p['index']:>6}  process {p['process']!s:>8}  {p['op']}   => {p['state']}"
            )
    else:
        lines.append(f"no op can be linearized first (initial state {cex.get('state')})")
    op = cex.get("op")
    if op:
        done = op["completion_index"]
        lines.append(
            f"cannot linearize op {op['index']} (process {op['process']}, "
            f"{op['description']}, completed at "
            f"{done if done is not None else 'never'})"
        )
    lines.append(f"state it meets: {cex.get('state')}")
    if cex.get("ops"):
        lines.append("ops in the window:")
        lines.append(
            f"  {'index':>6} {'done':>6} {'process':>8} {'type':<8} {'f':<8} value -> result"
        )
        for o in cex["ops"]:
            done = "" if o["completion_index"] is None else o["completion_index"]
            mark = "*" if op and o["index"] == op["index"] else " "
            res = "?" if o["type"] in ("info", "pending") else _fmt(o["result"])
            lines.append(
                f"{mark} {o['index']:>6} {done!s:>6} {o['process']!s:>8} {o['type']:<8} "
                f"{o['f']!s:<8} {_fmt(o['value'])} -> {res}"
            )
    lines.append(f"why: {cex.get('why')}")
    return "\n".join(lines)
