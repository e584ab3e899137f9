"""``schedule.json``: the faults of a run as they landed, replayable on their own.

A seed replays the schedule's *draws*, not the cluster's timing: the same seed can pass
because the leader was elsewhere when the kill landed. What a replay needs is the
faults as they actually landed, so this module derives them from the one record that
holds them, the history's nemesis ops (architecture §3): each ``start-<kind>`` with its
offset from the start of the load, the ``stop-<kind>`` that ended it (or the final heal),
its value and what the nemesis answered, and whom it hit: as concrete nodes and as a ROLE
relative to the leader of that moment (from the value's ``target`` when the schedule drew
one, and from the sampler's ``sample`` ops, who led at that instant, for every fault).

Everything here is pure over a list of ops except :func:`write_schedule` and
:func:`load_schedule`, so it works on the history of an interrupted or killed run too
(the JSONL prefix is enough), and on any DB and workload: a DB without a sampler just
leaves the leader unknown and every fault aimed at its recorded nodes.

Format (``version`` 1)::

    {"version": 1, "source": RUN_DIR or null,
     "spec": {test.json's TestSpec: name, nodes, db, workload, nemesis, time_limit,
              concurrency, rate, seed, bug, nemesis_interval, options},
     "load_start_ns": history time of the first op,
     "expect": {"verdict": ..., "anomaly_kinds": [...]}   (when known),
     "faults": [{"id", "kind", "offset_s", "duration_s", "healed_by": "stop"|"final"|"none",
                 "f", "value", "result", "error", "stop": {"f", "value", "offset_s"} | null,
                 "nodes", "target", "leader", "role", "aim": "role"|"nodes"}, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError
from harness.core.layout import RESULTS, TEST, is_run_dir
from harness.core.op import NEMESIS, Op
from harness.core.periods import op_kind
from nemesis.registry import fault_of

__all__ = [
    "SCHEDULE",
    "VERSION",
    "LeaderTracker",
    "role_of",
    "partition_role",
    "fault_nodes",
    "extract_schedule",
    "write_schedule",
    "load_schedule",
    "expected_kinds",
    "fault_end_s",
]

SCHEDULE = "schedule.json"
VERSION = 1

LEADER_STALE_S = 3.0
"""A sample older than this says nothing about who leads now (a sampler polls every ~0.1-1 s;
a node that stopped answering, killed or paused, is not trusted as leader after this)."""

FINAL_SLACK_S = 1.0
"""A trailing ``stop-*`` this close to (or after) the end of the load is the final heal."""


class LeaderTracker:
    """Who leads at an instant, from the sampler's ``sample`` ops seen so far.

    Feed it ops in history order; :meth:`leader` answers for the latest time fed: the
    node whose own latest sample (no older than :data:`LEADER_STALE_S`) says ``leader``,
    the highest term winning when an isolated old leader has not noticed yet.
    """

    def __init__(self) -> None:
        self.latest: dict[str, tuple[int, str, int]] = {}

    def feed(self, op: Op) -> None:
        if op.f != "sample" or op.type != "ok" or not op.node or not isinstance(op.value, dict):
            return
        term = op.value.get("term")
        self.latest[op.node] = (
            op.time,
            str(op.value.get("role") or ""),
            int(term) if isinstance(term, int) and not isinstance(term, bool) else -1,
        )

    def leader(self, now_ns: int) -> str | None:
        best: tuple[int, str] | None = None
        for node, (t, role, term) in self.latest.items():
            if role != "leader" or now_ns - t > LEADER_STALE_S * 1e9:
                continue
            if best is None or (term, node) > best:
                best = (term, node)
        return best[1] if best else None


def _size_class(k: int, n: int) -> str:
    if k == 1:
        return "one"
    return "minority" if 2 * k < n else "majority"


def role_of(nodes: Sequence[str], all_nodes: Sequence[str], leader: str | None) -> str:
    """The role of a node set relative to the leader: what a replay aims at.

    ``all``; ``leader`` (the leader alone); ``minority+leader`` / ``majority+leader``
    (a set that holds the leader); ``one-follower``, ``minority-followers``,
    ``majority-followers`` (a set without it); with the leader unknown, only the size
    (``one``, ``minority``, ``majority``); ``none`` for no node.
    """
    chosen = set(nodes)
    if not chosen:
        return "none"
    if chosen >= set(all_nodes):
        return "all"
    size = _size_class(len(chosen), len(all_nodes))
    if leader is None:
        return size
    if leader in chosen:
        return "leader" if len(chosen) == 1 else f"{size}+leader"
    return "one-follower" if size == "one" else f"{size}-followers"


def _side_of(node: str, grudge: Mapping[str, Sequence[str]], all_nodes: Sequence[str]) -> set[str]:
    """The nodes ``node`` still exchanges messages with both ways (its side of the cut)."""
    drops = {k: set(v) for k, v in grudge.items()}
    return {
        m
        for m in all_nodes
        if m == node or (m not in drops.get(node, set()) and node not in drops.get(m, set()))
    }


def partition_role(
    grudge: Mapping[str, Sequence[str]], all_nodes: Sequence[str], leader: str | None
) -> str:
    """A network cut's role: where it leaves the leader (``leader-isolated``,
    ``leader-in-minority``, ``leader-in-majority``), or ``cut`` when nobody led."""
    if leader is None or leader not in all_nodes:
        return "cut"
    side = _side_of(leader, grudge, all_nodes)
    if len(side) == 1:
        return "leader-isolated"
    if len(side) >= len(all_nodes):
        return "leader-connected"
    return "leader-in-minority" if 2 * len(side) < len(all_nodes) else "leader-in-majority"


def fault_nodes(value: Any, result: Any) -> list[str]:
    """The concrete nodes a fault hit: what the nemesis answered it did (``nodes``,
    ``killed``, ``paused``), else what the invocation named, else the grudge's nodes."""
    for src in (result, value):
        if not isinstance(src, dict):
            continue
        for key in ("nodes", "killed", "paused", "cut"):
            got = src.get(key)
            if isinstance(got, list) and got:
                return [str(n) for n in got]
    for src in (value, result):
        if isinstance(src, dict) and isinstance(src.get("grudge"), dict):
            g = src["grudge"]
            out = set(g)
            for peers in g.values():
                out |= set(peers or ())
            return sorted(str(n) for n in out)
    return []


def _kind(f: str) -> str:
    edge = op_kind(f)
    return f if edge is None else edge[1]


def _grudge(kind: str, value: Any) -> Mapping[str, Sequence[str]] | None:
    """The grudge of a fault that declares it cuts the network (who drops whom), else None."""
    f = fault_of(kind)
    if f is None or not f.effects.cuts_network or not isinstance(value, dict):
        return None
    got = value.get(f.periods.grudge)
    return got if isinstance(got, dict) else None


def extract_schedule(
    ops: Iterable[Op],
    spec: Mapping[str, Any],
    *,
    load_end_ns: int | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The schedule document of a history (one pass; only nemesis and sample ops kept).

    The load starts at the first op (the samplers and the pool start together, and the
    nemesis schedule with them). A ``stop-<kind>`` ends every open fault of its kind
    (that is what it heals); the trailing stops at or after the end of the load
    (``load_end_ns``, else the load start plus the time limit) are the final heal.
    """
    nodes = [str(n) for n in spec.get("nodes") or ()]
    tracker = LeaderTracker()
    start_ns: int | None = None
    events: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    for op in ops:
        if start_ns is None:
            start_ns = op.time
        if op.process != NEMESIS:
            tracker.feed(op)
            continue
        if op.f == "converge":  # the wait after the heal (harness/run/converge.py), no fault
            continue
        if op.type == "invoke":
            pending = {
                "f": op.f,
                "value": op.value,
                "t": op.time,
                "leader": tracker.leader(op.time),
            }
        elif pending is not None and op.f == pending["f"]:
            pending["result"], pending["error"] = op.value, op.error
            events.append(pending)
            pending = None
    if pending is not None:  # the harness died while a fault was being applied
        pending["result"], pending["error"] = None, "no completion (the run was cut short)"
        events.append(pending)
    t0 = start_ns or 0
    limit = float(spec.get("time_limit") or 0.0)
    end_ns = load_end_ns if load_end_ns is not None else t0 + int(limit * 1e9)
    final_from = len(events)
    while (
        final_from > 0
        and events[final_from - 1]["f"].startswith("stop-")
        and events[final_from - 1]["t"] >= end_ns - FINAL_SLACK_S * 1e9
    ):
        final_from -= 1
    faults: list[dict[str, Any]] = []
    open_by_kind: dict[str, list[dict[str, Any]]] = {}
    for i, ev in enumerate(events):
        kind, final = _kind(ev["f"]), i >= final_from
        offset = round((ev["t"] - t0) / 1e9, 3)
        if ev["f"].startswith("stop-"):
            for fault in open_by_kind.pop(kind, []):
                fault["duration_s"] = round(offset - fault["offset_s"], 3)
                fault["healed_by"] = "final" if final else "stop"
                if not final:
                    fault["stop"] = {"f": ev["f"], "value": ev["value"], "offset_s": offset}
            continue
        value = ev["value"]
        target = value.get("target") if isinstance(value, dict) else None
        hit = fault_nodes(value, ev["result"])
        grudge = _grudge(kind, value)
        if grudge is not None:
            role = partition_role(grudge, nodes, ev["leader"])
        else:
            role = role_of(hit, nodes, ev["leader"])
        fault = {
            "id": len(faults),
            "kind": kind,
            "offset_s": offset,
            "duration_s": None,
            "healed_by": "none",
            "f": ev["f"],
            "value": value,
            "result": ev["result"],
            "error": ev["error"],
            "stop": None,
            "nodes": hit,
            "target": target,
            "leader": ev["leader"],
            "role": role,
            # Leader known then: a replay keeps every node's relation to the leader (the
            # recorded leader and the leader now swap places); else the same nodes.
            "aim": "role" if (target == "leader" or ev["leader"] is not None) else "nodes",
        }
        faults.append(fault)
        if ev["f"].startswith("start-"):
            open_by_kind.setdefault(kind, []).append(fault)
    return {
        "version": VERSION,
        "source": source,
        "spec": dict(spec),
        "load_start_ns": t0,
        "faults": faults,
    }


def fault_end_s(fault: Mapping[str, Any], hold: float) -> float:
    """When a fault ends, in seconds from the load start; one healed only by the final heal
    (or never) is taken to last ``hold`` seconds (the schedule's typical hold)."""
    dur = fault.get("duration_s")
    if fault.get("healed_by") != "stop" or dur is None:
        dur = hold
    return float(fault["offset_s"]) + float(dur)


def _spec_fields(test: Mapping[str, Any]) -> dict[str, Any]:
    from harness.core.spec import TestSpec

    return TestSpec.from_json(dict(test)).to_json()


def expected_kinds(results: Mapping[str, Any]) -> list[str]:
    """The anomaly kinds a results map reports (what a reproduction must show again)."""
    return sorted(str(k) for k in (results.get("anomalies") or {}))


def write_schedule(run_dir: Path, *, load_end_ns: int | None = None) -> Path:
    """Derive ``schedule.json`` from the run directory's history and test.json."""
    from harness.core.history import iter_history

    run_dir = Path(run_dir)
    test = json.loads((run_dir / TEST).read_text(encoding="utf-8"))
    doc = extract_schedule(
        (
            op
            for op in iter_history(run_dir / "history.jsonl")
            if op.process == NEMESIS or op.f == "sample"
        ),
        _spec_fields(test),
        load_end_ns=load_end_ns,
        source=str(run_dir),
    )
    _attach_expect(doc, run_dir)
    path = run_dir / SCHEDULE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def _attach_expect(doc: dict[str, Any], run_dir: Path) -> None:
    try:
        results = json.loads((run_dir / RESULTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if results.get("run") is None:  # the placeholder written at the start: no verdict yet
        return
    doc["expect"] = {"verdict": results.get("valid"), "anomaly_kinds": expected_kinds(results)}


def load_schedule(path: str | Path) -> dict[str, Any]:
    """A schedule document from ``schedule.json`` or a run directory.

    A run directory without one (an older run, or a harness killed before it wrote it)
    gets it derived from its history now; its ``expect`` comes from results.json.
    """
    p = Path(path)
    if p.is_dir():
        if not (p / SCHEDULE).exists():
            if not is_run_dir(p) or not (p / TEST).exists():
                raise ConfigError(f"{p}: not a run directory (no test.json or history)")
            write_schedule(p)
        doc = json.loads((p / SCHEDULE).read_text(encoding="utf-8"))
        if "expect" not in doc:
            _attach_expect(doc, p)
        doc.setdefault("source", str(p))
        return dict(doc)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such schedule file or run directory", field="path") from None
    except ValueError as e:
        raise ConfigError(f"{p}: not JSON: {e}", field="schedule") from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION or "spec" not in doc:
        raise ConfigError(f"{p}: not a splitbrain schedule (version {VERSION})", field="schedule")
    return dict(doc)
