"""``report.html`` for a stored run: what failed, when, under which fault, on which key.

One self-contained interactive page per run (:mod:`harness.report.page`): checker
results as tables, anomalies with their true counts, a zoomable timeline of every
client op with the faults in force, each node's role, term and committed index, and
for each anomaly example its ops, faults and nearby node log lines. Everything is
computed by :mod:`harness.report.data` from one streaming pass over the history, so
a run of millions of records renders in bounded memory (beyond the page's compact
columns). The matplotlib PNGs of earlier versions are gone: the page draws the same
figures itself and works offline, attachments included.
"""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any

from harness.core.history import iter_history
from harness.core.layout import history_file
from harness.report.data import DIGEST_VALUES, NodeStates, OpColumns, digest, named_indexes
from harness.report.nodelogs import LogWindows, history_origin
from harness.report.page import (
    build_payload,
    example_spans,
    op_windows,
    refresh_values,
    render_page,
)

__all__ = ["write_report", "fault_colour"]

log = logging.getLogger(__name__)


def fault_colour(kind: str) -> str:
    """The colour of a fault kind, everywhere the report draws one: the fault's own.

    Each registered fault carries its colour (``Fault.colour``, nemesis/registry.py).
    ``start-partition``'s kind is ``partition``; a kind no fault names
    (``partition-ring``, ``kill-leader``) takes the colour of the longest fault kind it
    starts with, and an unknown one grey.
    """
    from nemesis.registry import registry

    try:
        faults = registry().faults.values()
    except Exception:  # noqa: BLE001 - a broken plugin must not stop a report
        return "#999999"
    best = ""
    colour = "#999999"
    for f in faults:
        for name in (f.kind, f.name):
            if kind.startswith(name) and len(name) > len(best):
                best, colour = name, f.colour
    return colour


STALE = frozenset({"latency.png", "throughput.png", "committed.png"})
"""The PNGs older reports wrote beside the page; left alone, and not listed as the run's files."""

POINTS = 3_000
"""Points kept per latency series and per node's committed index: enough for a canvas
a few thousand pixels wide, small enough that the page stays a few megabytes."""


def write_report(run_dir: str | Path) -> Path:
    """Write the interactive ``report.html`` into a store directory; returns its path.

    The history is streamed, never held: one pass (:func:`digest`) fills the compact
    op columns, the node states and the bounded series; with a Parquet history, whose
    first pass leaves most values undecoded, a second pass reads only the time windows
    of the ops the results cite, for their values. Node logs are read a line at a
    time for the lines near those ops (:mod:`harness.report.nodelogs`).
    """
    run = Path(run_dir).resolve()
    results: dict[str, Any] = {}
    if (run / "results.json").exists():
        results = json.loads((run / "results.json").read_text())
    test: dict[str, Any] = {}
    if (run / "test.json").exists():
        test = json.loads((run / "test.json").read_text())
    named = named_indexes(results)
    d = digest(
        iter_history(run, values_for=DIGEST_VALUES),
        cap=POINTS,
        columns=OpColumns(),
        states=NodeStates(),
        named=named,
    )
    if named and history_file(run).suffix == ".parquet":
        times = [op.time for op in d.named_ops.values()]
        for c in d.named_pairs.values():
            times.append(c.start)
            if c.end is not None:
                times.append(c.end)
        windows = op_windows(times)
        refresh_values(
            d, itertools.chain.from_iterable(iter_history(run, time_range=w) for w in windows)
        )
    spans = example_spans(results, d)
    unique: dict[tuple[int, int], int] = {}
    log_of: list[int | None] = []
    for span in spans:
        if span is None:
            log_of.append(None)
            continue
        log_of.append(unique.setdefault(span, len(unique)))
    origin = history_origin(run, d.nemesis)
    logs = LogWindows(list(unique), origin, d.faults().clock_shifts())
    logs.read(run / "nodes")
    payload = build_payload(
        run=run,
        test=test,
        results=results,
        d=d,
        origin=origin,
        logs=logs,
        log_of_example=log_of,
        colour=fault_colour,
    )
    files = sorted(
        str(p.relative_to(run))
        for p in run.rglob("*")
        if p.is_file() and p.name not in STALE and p.name != "report.html"
    )
    out = run / "report.html"
    tmp = run / ".report.html.tmp"
    tmp.write_text(
        render_page(
            test=test, results=results, d=d, payload=payload, colour=fault_colour, files=files
        ),
        encoding="utf-8",
    )
    tmp.replace(out)
    log.debug("report: %s (%d bytes)", out, out.stat().st_size)
    return out
