"""``report.html`` for a stored run: what failed, when, under which fault, on which key.

One standalone page per run, with PNG plots beside it (matplotlib, Agg): the
verdict and each checker's result; latency over time per operation, ok/fail/info
marked; throughput; the committed index of every node; fault periods shaded on
every time axis, one colour per fault kind; and a timeline of the failing key or
anomaly with the offending ops highlighted. Everything is computed by
:mod:`harness.report.data`; this module streams the history into it and draws.
The history is never held whole: a run of tens of millions of records renders in
the memory of a short one.
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.core.history import iter_history
from harness.core.verdict import word as verdict_word
from harness.report.data import (
    DIGEST_VALUES,
    Digest,
    FaultPeriod,
    Focus,
    FocusRequest,
    digest,
    focus_request,
    focus_window,
    pair_stream,
    select_focus,
    timeline,
)

__all__ = ["write_report", "render_html"]

log = logging.getLogger(__name__)

FAULT_COLOURS = {
    "partition": "#e4572e",
    "clock": "#f3a712",
    "kill": "#8e44ad",
    "pause": "#29335c",
    "loss": "#669bbc",
    "delay": "#2a9d8f",
}
TYPE_COLOURS = {"ok": "#2a9d8f", "fail": "#e76f51", "info": "#f4a261"}
NS = 1e9


def _fault_colour(kind: str) -> str:
    for name, colour in FAULT_COLOURS.items():
        if kind.startswith(name):
            return colour
    return "#999999"


def _shade(ax: Any, periods: Sequence[FaultPeriod]) -> None:
    seen: set[str] = set()
    for p in periods:
        label = p.kind if p.kind not in seen else None
        seen.add(p.kind)
        ax.axvspan(
            p.start / NS, p.end / NS, color=_fault_colour(p.kind), alpha=0.15, lw=0, label=label
        )


def _plots(out: Path, d: Digest, periods: Sequence[FaultPeriod]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: list[tuple[str, str]] = []

    fig, ax = plt.subplots(figsize=(11, 4))
    _shade(ax, periods)
    fs = sorted({f for f, _ in d.latency})
    markers = dict(zip(fs, "o^sDvP*X", strict=False))
    shown = total = 0
    for f in fs:
        for typ, colour in TYPE_COLOURS.items():
            env = d.latency.get((f, typ))
            if env is None or not env.n:
                continue
            total += env.n
            pts = env.points()
            shown += len(pts)
            xs, ys = zip(*pts, strict=True)
            ax.scatter(
                xs,
                ys,
                s=6,
                c=colour,
                marker=markers.get(f, "o"),
                label=f"{f} {typ}",
                alpha=0.7,
                linewidths=0,
            )
    ax.set_yscale("log")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("latency (ms)")
    title = "Latency by operation; shaded: faults in force"
    if shown < total:
        title += f" ({shown:,} of {total:,} ops drawn: each stretch's first, fastest, slowest)"
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=7, ncol=4, markerscale=2)
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=90)
    plt.close(fig)
    made.append(("latency.png", "Latency over time"))

    fig, ax = plt.subplots(figsize=(11, 3.5))
    _shade(ax, periods)
    for (f, typ), rates in d.throughput.rates().items():
        ax.plot(
            [x for x, _ in rates],
            [r for _, r in rates],
            label=f"{f} {typ}",
            lw=1.2,
            ls="-" if typ == "ok" else ":",
        )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("completions / s")
    width_s = d.throughput.bucket_ns / NS
    ax.set_title("Throughput" + (f" (mean over {width_s:g} s buckets)" if width_s > 1 else ""))
    ax.legend(loc="upper left", fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=90)
    plt.close(fig)
    made.append(("throughput.png", "Throughput"))

    if d.committed:
        fig, ax = plt.subplots(figsize=(11, 3.5))
        _shade(ax, periods)
        for node in sorted(d.committed):
            steps = d.committed[node].points()
            ax.step(
                [t / NS for t, _ in steps], [c for _, c in steps], where="post", label=node, lw=1.2
            )
        ax.set_xlabel("time (s)")
        ax.set_ylabel("committedIndex")
        ax.set_title("Committed index per node (from status samples)")
        ax.legend(loc="upper left", fontsize=7, ncol=6)
        fig.tight_layout()
        fig.savefig(out / "committed.png", dpi=90)
        plt.close(fig)
        made.append(("committed.png", "Committed index per node"))
    return made


def _esc(x: Any) -> str:
    return html.escape(x if isinstance(x, str) else json.dumps(x, default=str))


def _timeline_html(focus: Focus | None, periods: Sequence[FaultPeriod]) -> str:
    if focus is None:
        return ""
    lanes, t0, t1 = timeline(focus)
    span = t1 - t0
    rows = []
    for lane in lanes:
        bars = []
        for c, hot in lane.bars:
            left = 100 * (c.start - t0) / span
            width = max(0.4, 100 * (((c.end or t1) - c.start) / span))
            out_val = None if c.completion is None else c.completion.value
            title = (
                f"#{c.invoke.index} p{c.invoke.process} {c.invoke.f} {c.invoke.value!r} -> "
                f"{c.type} {out_val!r} on {c.invoke.node} "
                f"[{c.start / NS:.3f}s..{(c.end or t1) / NS:.3f}s]"
            )
            label = f"{c.invoke.f} {_short(c.invoke.value)}→{_short(out_val)}"
            cls = f"bar {c.type}" + (" hot" if hot else "")
            bars.append(
                f'<div class="{cls}" style="left:{left:.3f}%;width:{width:.3f}%" '
                f'title="{html.escape(title)}">{html.escape(label)}</div>'
            )
        rows.append(
            f'<div class="lane"><span class="lname">p{_esc(lane.process)}</span>'
            f'<div class="track">{"".join(bars)}</div></div>'
        )
    faults = []
    for p in periods:
        if p.end < t0 or p.start > t1:
            continue
        lo, hi = max(p.start, t0), min(p.end, t1)
        faults.append(
            f'<div class="bar" style="left:{100 * (lo - t0) / span:.3f}%;'
            f"width:{max(0.4, 100 * (hi - lo) / span):.3f}%;"
            f'background:{_fault_colour(p.kind)}" title="{html.escape(p.kind)} '
            f'{p.start / NS:.3f}s..{p.end / NS:.3f}s">{html.escape(p.kind)}</div>'
        )
    if faults:
        rows.insert(
            0,
            '<div class="lane"><span class="lname">faults</span>'
            f'<div class="track">{"".join(faults)}</div></div>',
        )
    return (
        f"<h2>Timeline: {html.escape(focus.title)}</h2>"
        f'<p class="hint">Processes as lanes, ops as bars (hover for details); highlighted bars '
        f"are the ops the checker names. {t0 / NS:.3f}s to {t1 / NS:.3f}s.</p>"
        f'<div class="timeline">{"".join(rows)}</div>'
    )


def _short(v: Any) -> str:
    s = json.dumps(v, default=str)
    return s if len(s) <= 24 else s[:21] + "..."


CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{margin-bottom:4px}.verdict{font-size:28px;font-weight:700;padding:4px 12px;border-radius:6px}
.VALID{background:#d8f3dc;color:#1b4332}.INVALID{background:#ffd6d6;color:#9d0208}
.UNKNOWN{background:#fff3bf;color:#7f5539}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top;font-size:13px}
pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px;max-height:320px}
.timeline{border:1px solid #ddd;padding:4px}.lane{display:flex;align-items:center;height:22px}
.lname{width:70px;font-size:11px;color:#555}.track{position:relative;flex:1;height:18px;
background:#fafafa}.bar{position:absolute;height:16px;top:1px;font-size:10px;overflow:hidden;
white-space:nowrap;border-radius:3px;padding:0 2px;box-sizing:border-box;color:#fff}
.bar.ok{background:#2a9d8f}.bar.fail{background:#e76f51}.bar.info{background:#f4a261}
.bar.hot{outline:3px solid #d00000;z-index:2}.hint{color:#666;font-size:12px}
.fault{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
"""


def render_html(
    *,
    test: Mapping[str, Any],
    results: Mapping[str, Any],
    digest: Digest,
    focus: Focus | None,
    plots: Sequence[tuple[str, str]],
    files: Sequence[str] = (),
) -> str:
    periods = digest.periods()
    verdict = verdict_word(results.get("valid"))
    counts = digest.counts
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>splitbrain: "
        f"{_esc(test.get('name', 'run'))} {verdict}</title><style>{CSS}</style></head><body>",
        f"<h1>{_esc(test.get('name', 'run'))}</h1>",
        f"<p><span class='verdict {verdict}'>{verdict}</span></p>",
    ]
    if results.get("reason"):
        parts.append(f"<p><b>Why:</b> {_esc(results['reason'])}</p>")
    summary = {
        k: test.get(k)
        for k in (
            "db",
            "workload",
            "nemesis",
            "bug",
            "time_limit",
            "concurrency",
            "rate",
            "seed",
            "nodes",
        )
        if k in test
    }
    parts.append(
        "<table>"
        + "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in summary.items())
        + f"<tr><th>client ops</th><td>{_esc(counts)}</td></tr></table>"
    )
    parts.append(
        "<h2>Checkers</h2><table><tr><th>checker</th><th>verdict</th><th>details</th></tr>"
    )
    for name, res in (results.get("checkers") or {}).items():
        v = verdict_word(res.get("valid") if isinstance(res, Mapping) else None)
        detail = {
            k: val
            for k, val in (res.items() if isinstance(res, Mapping) else [])
            if k not in ("valid", "counterexample", "anomalies")
        }
        parts.append(
            f"<tr><td>{_esc(name)}</td><td class='{v}'>{v}</td>"
            f"<td><pre>{_esc(json.dumps(detail, indent=1, default=str)[:3000])}</pre></td></tr>"
        )
    parts.append("</table>")
    anomalies = results.get("anomalies") or {}
    if anomalies:
        parts.append(
            "<h2>Anomalies</h2><table><tr><th>kind</th><th>count</th><th>first examples</th></tr>"
        )
        for kind, exs in anomalies.items():
            parts.append(
                f"<tr><td>{_esc(kind)}</td><td>{len(exs)}</td><td><pre>"
                f"{_esc(json.dumps(exs[:3], indent=1, default=str))}</pre></td></tr>"
            )
        parts.append("</table>")
    lin = (results.get("checkers") or {}).get("linearizable") or {}
    if isinstance(lin, Mapping) and lin.get("counterexample_text"):
        parts.append(f"<h2>Counterexample</h2><pre>{_esc(lin['counterexample_text'])}</pre>")
    parts.append(_timeline_html(focus, periods))
    if periods:
        parts.append(
            "<h2>Faults</h2><table><tr><th>kind</th><th>from (s)</th><th>to (s)</th>"
            "<th>what</th></tr>"
        )
        for p in periods:
            parts.append(
                f"<tr><td><span class='fault' style='background:{_fault_colour(p.kind)}'>"
                f"</span>{_esc(p.kind)}</td><td>{p.start / NS:.2f}</td>"
                f"<td>{p.end / NS:.2f}</td><td>{_esc(_short(p.detail) if p.detail else '')}"
                f"</td></tr>"
            )
        parts.append("</table>")
    for name, title in plots:
        parts.append(
            f"<h2>{_esc(title)}</h2><img src='{_esc(name)}' alt='{_esc(title)}' "
            f"style='max-width:100%'>"
        )
    if files:
        parts.append(
            "<h2>Files</h2><ul>"
            + "".join(f"<li><a href='{_esc(f)}'>{_esc(f)}</a></li>" for f in files)
            + "</ul>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(run_dir: str | Path) -> Path:
    """Render ``report.html`` (and its PNGs) into a store directory; returns its path.

    The history is streamed, never held: one pass builds the :class:`Digest` (bounded
    memory whatever the history's length), and a second pass reads only the records
    of the failing key's window, widened by the longest latency seen so that every op
    overlapping the window is paired whole.
    """
    run = Path(run_dir).resolve()
    results: dict[str, Any] = {}
    if (run / "results.json").exists():
        results = json.loads((run / "results.json").read_text())
    test: dict[str, Any] = {}
    if (run / "test.json").exists():
        test = json.loads((run / "test.json").read_text())
    req = focus_request(results)
    d = digest(iter_history(run, values_for=DIGEST_VALUES), focus=req)
    focus = None if req is None else _focus(run, req, d)
    periods = d.periods()
    plots = _plots(run, d, periods)
    files = sorted(
        str(p.relative_to(run))
        for p in run.rglob("*")
        if p.is_file() and p.suffix not in (".png",) and p.name != "report.html"
    )
    out = run / "report.html"
    out.write_text(
        render_html(test=test, results=results, digest=d, focus=focus, plots=plots, files=files)
    )
    return out


def _focus(run: Path, req: FocusRequest, d: Digest) -> Focus:
    """The second pass: the records around the named ops only (all of them if none were found)."""
    window = focus_window(d.hits)
    if window is None and req.key is None:
        return select_focus(req, (), None)
    span = None
    if window is not None:
        span = (window[0] - d.max_latency_ns, window[1] + d.max_latency_ns)
    return select_focus(req, pair_stream(iter_history(run, time_range=span)), window)
