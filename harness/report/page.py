"""The interactive ``report.html``: one self-contained page that explains a run.

What a reader needs to say *why* a run failed sits on one page: the verdict and each
checker's result as tables; every anomaly kind with its true count and its examples;
a timeline of every client op per worker (a canvas: zoom with the wheel, pan by
dragging), the faults in force above it, each node's role, term and committed index
below it; and, for the example a reader clicks, its ops, the faults in force then
and every node's log lines within a second of them.

The page works offline and alone (it can be mailed): its script and style are the
files under ``static/``, read from the package and inlined, and the data is one
compact JSON document (columns of integers, :class:`harness.report.data.OpColumns`)
so that a 100k-op history is a page of a few megabytes. This module only assembles:
the numbers come from :func:`harness.report.data.digest` (one streaming pass) and
the log lines from :mod:`harness.report.nodelogs`.
"""

from __future__ import annotations

import html
import json
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from harness.core.history import Op
from harness.core.verdict import word as verdict_word
from harness.report.data import Completed, Digest, FaultPeriod, coverage_rows
from harness.report.nodelogs import LogWindows, Origin
from harness.run.summary import client_op_counts

__all__ = ["asset", "example_spans", "build_payload", "render_page", "checker_tables"]

SHORT = 400
"""Characters of an op's value kept for the detail pane (a final read holds thousands)."""

TEST_FIELDS = (
    "db",
    "workload",
    "nemesis",
    "bug",
    "time_limit",
    "concurrency",
    "rate",
    "seed",
    "nodes",
    "engine",
)


def asset(name: str) -> str:
    """A file of ``static/``, read through the package (an editable install reads the tree)."""
    return (resources.files("harness.report") / "static" / name).read_text(encoding="utf-8")


def _short(v: Any, n: int = SHORT) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str, separators=(",", ":"))
    return s if len(s) <= n else s[: n - 1] + "…"


def _us(ns: int | None) -> int | None:
    return None if ns is None else ns // 1000


def _pair_of(d: Digest) -> dict[int, Completed]:
    by: dict[int, Completed] = {}
    for c in d.named_pairs.values():
        by[c.invoke.index] = c
        if c.completion is not None:
            by[c.completion.index] = c
    return by


def _examples(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Anomaly kinds (then notes) with their true counts, their checkers and examples."""
    checkers = results.get("checkers") or {}
    out: list[dict[str, Any]] = []
    totals: dict[str, int] = {}
    sources: dict[str, list[str]] = {}
    for name, res in checkers.items():
        if not isinstance(res, Mapping):
            continue
        counts = (res.get("stats") or {}).get("anomaly_counts") or {}
        for kind, exs in (res.get("anomalies") or {}).items():
            totals[kind] = totals.get(kind, 0) + int(counts.get(kind, len(exs or [])))
            sources.setdefault(kind, []).append(str(name))
    for kind, exs in (results.get("anomalies") or {}).items():
        exs = list(exs or [])
        out.append(
            {
                "kind": kind,
                "note": False,
                "count": totals.get(kind, len(exs)),
                "exact": kind in totals,
                "checkers": sources.get(kind, []),
                "examples": exs,
            }
        )
    for name, res in checkers.items():
        if not isinstance(res, Mapping):
            continue
        for kind, exs in (res.get("notes") or {}).items():
            exs = list(exs or [])
            out.append(
                {
                    "kind": kind,
                    "note": True,
                    "count": len(exs),
                    "exact": False,
                    "checkers": [str(name)],
                    "examples": exs,
                }
            )
    return out


def example_spans(results: Mapping[str, Any], d: Digest) -> list[tuple[int, int] | None]:
    """The history time span of each example's ops, in :func:`_examples` order (flattened)."""
    pairs = _pair_of(d)
    spans: list[tuple[int, int] | None] = []
    for group in _examples(results):
        for ex in group["examples"]:
            times: list[int] = []
            for i in ex.get("indexes") or [] if isinstance(ex, Mapping) else []:
                c = pairs.get(i)
                if c is not None:
                    times.append(c.start)
                    times.append(c.end if c.end is not None else c.start)
                elif i in d.named_ops:
                    times.append(d.named_ops[i].time)
            spans.append((min(times), max(times)) if times else None)
    return spans


def _named(d: Digest) -> dict[str, Any]:
    """The ops the results cite, whole, keyed by every index they are cited by."""
    entries: list[dict[str, Any]] = []
    alias: dict[str, int] = {}
    for c in sorted(d.named_pairs.values(), key=lambda c: c.invoke.index):
        inv, comp = c.invoke, c.completion
        alias[str(inv.index)] = len(entries)
        if comp is not None:
            alias[str(comp.index)] = len(entries)
        entries.append(
            {
                "i": inv.index,
                "c": None if comp is None else comp.index,
                "p": inv.process,
                "f": inv.f,
                "type": c.type if comp is not None else "open",
                "node": (comp.node if comp is not None and comp.node else inv.node),
                "key": inv.key,
                "t0": _us(inv.time),
                "t1": None if comp is None else _us(comp.time),
                "in": _short(inv.value),
                "out": None if comp is None else _short(comp.value),
                "error": None if comp is None else comp.error,
            }
        )
    for i, op in sorted(d.named_ops.items()):
        if str(i) in alias:
            continue
        alias[str(i)] = len(entries)
        entries.append(
            {
                "i": i,
                "c": None,
                "p": op.process,
                "f": op.f,
                "type": op.type,
                "node": op.node,
                "key": op.key,
                "t0": _us(op.time),
                "t1": None,
                "in": _short(op.value),
                "out": None,
                "error": op.error,
            }
        )
    return {"ops": entries, "by": alias}


def _flat_points(points: Iterable[tuple[float, float]], xs: float, ys: float) -> list[float]:
    out: list[float] = []
    for x, y in points:
        out.append(round(x * xs))
        out.append(round(y * ys, 3))
    return out


def _fault_summary(p: FaultPeriod) -> str:
    """What a fault did, for the timeline's tooltip and the faults table: its declared
    effects on the nodes it hit (``kills n1, n3``), then its start value's main keys."""
    did = ", ".join(p.effects)
    if did and p.nodes:
        did += " " + ", ".join(p.nodes)
    rest = _value_summary(p.detail)
    return f"{did}; {rest}" if did and rest else did or rest


def _value_summary(v: Any) -> str:
    if isinstance(v, Mapping):
        bits = []
        for k in ("shape", "target", "nodes", "mode", "offset_ms", "probability", "delay_ms"):
            if v.get(k) not in (None, [], {}):
                bits.append(f"{k}={_short(v[k], 60)}")
        if bits:
            return " ".join(bits)
    return "" if v is None else _short(v, 120)


def build_payload(
    *,
    run: Path,
    test: Mapping[str, Any],
    results: Mapping[str, Any],
    d: Digest,
    origin: Origin | None,
    logs: LogWindows,
    log_of_example: Sequence[int | None],
    colour: Callable[[str], str],
) -> dict[str, Any]:
    """Everything the page's script draws, as JSON-ready values (times in µs)."""
    assert d.columns is not None and d.states is not None
    groups = _examples(results)
    n = 0
    anomalies = []
    for g in groups:
        exs = []
        for ex in g["examples"]:
            fields = (
                {k: _short(v, 200) for k, v in ex.items() if k != "indexes"}
                if isinstance(ex, Mapping)
                else {"example": _short(ex, 200)}
            )
            idx = list(ex.get("indexes") or []) if isinstance(ex, Mapping) else []
            exs.append({"fields": fields, "indexes": idx, "log": log_of_example[n]})
            n += 1
        anomalies.append({**{k: v for k, v in g.items() if k != "examples"}, "examples": exs})
    focus_key = None
    for name, res in (results.get("checkers") or {}).items():
        # `linearizable`, or `linearizable-<model>` when a mixed workload has several.
        cex = res.get("counterexample") if isinstance(res, Mapping) else None
        if str(name).startswith("linearizable") and isinstance(cex, Mapping):
            focus_key = cex.get("key")
            break
    states: dict[str, Any] = {}
    roles: list[str] = []
    for node in sorted(d.states.rows):
        rows = d.states.rows[node]
        col: dict[str, list[Any]] = {"t": [], "role": [], "term": [], "leader": []}
        for t, role, term, leader in rows:
            if role not in roles:
                roles.append(role)
            col["t"].append(t)
            col["role"].append(roles.index(role))
            col["term"].append(term)
            col["leader"].append(leader)
        states[node] = col
    periods = d.periods()
    return {
        "meta": {
            "name": test.get("name") or run.name,
            "verdict": verdict_word(results.get("valid")),
            "end": _us(d.end_time),
            "records": d.records,
            "counts": d.counts,
            "focusKey": None if focus_key is None else str(focus_key),
            "origin": None
            if origin is None
            else {"method": origin.method, "spread_ms": origin.spread_ms},
            "sampler": bool(d.states.rows),
            "statesCut": sorted(d.states.cut),
        },
        "ops": d.columns.to_json(),
        "faults": [
            [p.kind, _us(p.start), _us(p.end), colour(p.kind), _fault_summary(p)] for p in periods
        ],
        "states": states,
        "roles": roles,
        "committed": {
            node: _flat_points(env.points(), 1e-3, 1) for node, env in sorted(d.committed.items())
        },
        "latency": {
            f"{f} {typ}": _flat_points(env.points(), 1e6, 1)
            for (f, typ), env in sorted(d.latency.items())
        },
        "throughput": {
            f"{f} {typ}": _flat_points(rates, 1e6, 1)
            for (f, typ), rates in d.throughput.rates().items()
        },
        "anomalies": anomalies,
        "named": _named(d),
        "logs": {
            "windows": logs.lines,
            "cut": sorted(logs.cut),
            "unreliable": sorted(logs.unreliable),
            "files": logs.files,
            "padMs": logs.pad_ns / 1e6,
        },
    }


def _cell(v: Any, *, grouped: bool = True) -> str:
    """A value as a table cell: scalars as they are, short lists inline, the rest cut.

    ``grouped``: counts get thousands separators (not seeds and settings).
    """
    if isinstance(v, list):
        if not v:
            return "<span class='dim'>none</span>"
        if all(not isinstance(x, (list, dict)) for x in v):  # names, e.g. the nemesis's faults
            return html.escape(_short(", ".join(str(x) for x in v), 300))
        return (
            f"{len(v):,} items; first: <code>{html.escape(_short(v[:3], 200))}</code>"
            if len(v) > 3
            else f"<code>{html.escape(_short(v, 200))}</code>"
        )
    if isinstance(v, bool) or v is None:
        return html.escape(str(v).lower())
    if isinstance(v, (int, float)):
        if not grouped:
            return html.escape(str(v))
        return f"{v:,}" if isinstance(v, int) else f"{v:,.3f}"
    return html.escape(_short(v, 300))


def _rows(prefix: str, v: Mapping[str, Any], out: list[tuple[str, Any]], depth: int = 0) -> None:
    for k, val in v.items():
        name = f"{prefix}{k}"
        if isinstance(val, Mapping) and val and depth < 2:
            _rows(name + " · ", val, out, depth + 1)
        else:
            out.append((name, val))


def checker_tables(results: Mapping[str, Any]) -> str:
    """Each checker's verdict and figures as tables (no JSON dump): what a reader scans."""
    checkers = results.get("checkers") or {}
    if not checkers:
        return "<p class='dim'>No checker results (the run did not finish, or nothing applied).</p>"
    head = [
        "<table class='checkers'><tr><th>checker</th><th>verdict</th><th>anomalies</th>"
        "<th>notes</th><th>error</th></tr>"
    ]
    detail = []
    for name, res in checkers.items():
        res = res if isinstance(res, Mapping) else {"valid": res}
        v = verdict_word(res.get("valid"))
        counts = (res.get("stats") or {}).get("anomaly_counts") or {
            k: len(x or []) for k, x in (res.get("anomalies") or {}).items()
        }
        an = ", ".join(f"{k}: {c:,}" for k, c in counts.items()) or "none"
        notes = ", ".join(f"{k}: {len(x or [])}" for k, x in (res.get("notes") or {}).items())
        head.append(
            f"<tr><td>{html.escape(str(name))}</td><td class='v {v}'>{v}</td>"
            f"<td>{html.escape(an)}</td><td>{html.escape(notes or 'none')}</td>"
            f"<td>{html.escape(str(res.get('error') or ''))}</td></tr>"
        )
        rows: list[tuple[str, Any]] = []
        rest = {
            k: val
            for k, val in res.items()
            if k not in ("valid", "anomalies", "notes", "counterexample", "counterexample_text")
        }
        stats = rest.get("stats")
        if isinstance(stats, Mapping):
            rest = {**rest, "stats": {k: x for k, x in stats.items() if k != "anomaly_counts"}}
        _rows("", rest, rows)
        body = "".join(
            f"<tr><th>{html.escape(k)}</th><td>{_cell(val)}</td></tr>" for k, val in rows
        )
        text = res.get("counterexample_text")
        cex = f"<pre class='cex'>{html.escape(str(text))}</pre>" if text else ""
        detail.append(
            f"<details class='checker'><summary>{html.escape(str(name))}: "
            f"<span class='v {v}'>{v}</span></summary>"
            f"<table class='kv'>{body or '<tr><td>nothing more</td></tr>'}</table>{cex}</details>"
        )
    head.append("</table>")
    return "".join(head) + "".join(detail)


def _summary(test: Mapping[str, Any], results: Mapping[str, Any], d: Digest) -> str:
    rows = [(k, test[k]) for k in TEST_FIELDS if k in test]
    run = results.get("run") or {}
    c = client_op_counts(results) or d.counts
    rows.append(
        (
            "client ops",
            f"{sum(c.values()):,} (ok {c.get('ok', 0):,}, fail {c.get('fail', 0):,}, "
            f"info {c.get('info', 0):,})",
        )
    )
    rows.append(("history records", f"{d.records:,}"))
    if run.get("reason"):
        rows.append(("stopped because", run["reason"]))
    if run.get("cleanup_problems"):
        rows.append(("cleanup problems", run["cleanup_problems"]))
    if run.get("faults_not_drawn"):
        rows.append(("faults never injected", ", ".join(run["faults_not_drawn"])))
    deck: Mapping[str, Any] = run["deck"] if isinstance(run.get("deck"), Mapping) else {}
    if deck.get("played"):  # the default campaign's scripts (nemesis/deck.py)
        rows.append(("fault scripts played", ", ".join(deck["played"])))
    if deck.get("not_played"):
        rows.append(("fault scripts time did not reach", ", ".join(deck["not_played"])))
    for script, kinds in dict(deck.get("dropped") or {}).items():
        rows.append((f"played without: {script}", "; ".join(f"{k}: {w}" for k, w in kinds.items())))
    for script, why in dict(deck.get("left_out") or {}).items():
        rows.append((f"left out: {script}", str(why)))
    if isinstance(run.get("converge"), Mapping):  # the wait after the heal (run/converge.py)
        from harness.run.converge import convergence_text

        conv = run["converge"]
        rows.append(("after the heal", convergence_text(conv) or ""))
        if conv.get("last"):
            rows.append(("replicas last seen", conv["last"]))
    return (
        "<table class='kv'>"
        + "".join(
            f"<tr><th>{html.escape(k)}</th><td>{_cell(v, grouped=False)}</td></tr>" for k, v in rows
        )
        + "</table>"
    )


def coverage_section(results: Mapping[str, Any]) -> str:
    """The Coverage section: each situation reached (how often, first when), not reached,
    or not observable with this DB (and why): what this run can and cannot vouch for."""
    rows = coverage_rows(results)
    if not rows:
        return "<p class='dim'>This run's results have no coverage block.</p>"
    body = []
    for r in rows:
        state = r["state"]
        if state == "reached":
            t = r["first_s"]
            first = (
                f"<button class='cov-t' data-t='{round(float(t) * 1e6)}' "
                f"title='show this moment on the timeline'>{float(t):.3f}</button>"
                if isinstance(t, (int, float))
                else "-"
            )
            count = str(r["count"])
        else:
            first, count = "-", "-" if state == "unobservable" else "0"
        note = r["why"] if state in ("unobservable", "by design") else r["doc"]
        body.append(
            f"<tr class='cov {state.replace(' ', '-')}' data-situation='{html.escape(r['name'])}'>"
            f"<td title='{html.escape(r['doc'])}'>{html.escape(r['title'])}</td>"
            f"<td class='state'>{html.escape(state)}</td><td>{count}</td><td>{first}</td>"
            f"<td class='note'>{html.escape(str(note or ''))}</td></tr>"
        )
    reached = sum(1 for r in rows if r["state"] == "reached")
    blind = sum(1 for r in rows if r["state"] == "unobservable")
    design = sum(1 for r in rows if r["state"] == "by design")
    return (
        f"<p>{reached} of {len(rows) - blind - design} observable situations reached"
        + (f"; {blind} not observable with this DB" if blind else "")
        + (f"; {design} ruled out by its design (a symptom if reached)" if design else "")
        + ".</p><table id='coverage-table'><tr><th>situation</th><th>state</th><th>count</th>"
        "<th>first (s)</th><th>what it is / why it cannot be seen</th></tr>"
        + "".join(body)
        + "</table>"
    )


def _faults_table(periods: Sequence[FaultPeriod], colour: Callable[[str], str]) -> str:
    if not periods:
        return "<p class='dim'>No faults in this history.</p>"
    rows = "".join(
        f"<tr><td><span class='swatch' style='background:{colour(p.kind)}'></span>"
        f"{html.escape(p.kind)}</td><td>{p.start / 1e9:.3f}</td><td>{p.end / 1e9:.3f}</td>"
        f"<td>{html.escape(_fault_summary(p))}</td></tr>"
        for p in periods
    )
    return (
        f"<table><tr><th>fault</th><th>from (s)</th><th>to (s)</th><th>what</th></tr>{rows}</table>"
    )


def render_page(
    *,
    test: Mapping[str, Any],
    results: Mapping[str, Any],
    d: Digest,
    payload: Mapping[str, Any],
    colour: Callable[[str], str],
    files: Sequence[str] = (),
) -> str:
    """The whole page: static tables in HTML, the interactive part drawn by the script."""
    name = html.escape(str(payload["meta"]["name"]))
    verdict = payload["meta"]["verdict"]
    # "<" only occurs inside JSON strings, where \u003c means the same: nothing in the
    # data can close the script element or open a comment in it.
    data = json.dumps(payload, separators=(",", ":"), default=str).replace("<", "\\u003c")
    reason = results.get("reason") or results.get("error")
    why = f"<p class='why'><b>Why:</b> {html.escape(str(reason))}</p>" if reason else ""
    file_list = "".join(
        f"<li><a href='{html.escape(urllib.parse.quote(f))}'>{html.escape(f)}</a></li>"
        for f in files
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>splitbrain: {name} {verdict}</title>
<style>{asset("report.css")}</style></head>
<body>
<header><h1>{name} <span class="verdict {verdict}">{verdict}</span></h1>{why}
{_summary(test, results, d)}</header>
<section id="explain">
  <aside id="side"><h2>Anomalies</h2><div id="anomalies"></div></aside>
  <div id="main">
    <div id="toolbar">
      <button id="zoom-all" title="show the whole run (or double-click the timeline)">whole run</button>
      <button id="zoom-in">zoom in</button><button id="zoom-out">zoom out</button>
      <span id="view-label"></span>
      <span class="hint">wheel: zoom · drag: pan · hover: details · click an anomaly</span>
    </div>
    <div id="legend"></div>
    <div id="canvas-wrap"><canvas id="timeline" data-view=""></canvas></div>
    <div id="tip" hidden></div>
    <div id="detail"><h2>Detail</h2><p class="dim">Click an anomaly to see its ops,
      the faults in force and the nodes' logs around them.</p></div>
  </div>
</section>
<section><h2>Checkers</h2>{checker_tables(results)}</section>
<section id="coverage"><h2>Coverage</h2>{coverage_section(results)}</section>
<section><h2>Faults</h2>{_faults_table(d.periods(), colour)}</section>
<section><h2>Files</h2><ul class="files">{file_list}</ul></section>
<script type="application/json" id="report-data">{data}</script>
<script>{asset("report.js")}</script>
</body></html>
"""


def op_windows(times: Iterable[int], gap_ns: int = 2_000_000_000) -> list[tuple[int, int]]:
    """History time ranges covering ``times``, neighbours closer than ``gap_ns`` merged."""
    out: list[tuple[int, int]] = []
    for t in sorted(times):
        if out and t - out[-1][1] <= gap_ns:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def refresh_values(d: Digest, ops: Iterable[Op]) -> None:
    """Put the decoded values of the named ops into ``d`` (from a second, windowed read)."""
    wanted = dict(d.named_ops)
    pairs = list(d.named_pairs.values())
    by_index: dict[int, Op] = {}
    keep = set(wanted)
    for c in pairs:
        keep.add(c.invoke.index)
        if c.completion is not None:
            keep.add(c.completion.index)
    for op in ops:
        if op.index in keep:
            by_index[op.index] = op
    for i in list(d.named_ops):
        if i in by_index:
            d.named_ops[i] = by_index[i]
    for k, c in list(d.named_pairs.items()):
        inv = by_index.get(c.invoke.index, c.invoke)
        comp = c.completion
        if comp is not None:
            comp = by_index.get(comp.index, comp)
        d.named_pairs[k] = Completed(inv, comp)
