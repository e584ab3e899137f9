"""``splitbrain serve``: a local page listing stored runs, with links to their reports.

A plain ``http.server`` over the results store: the index is computed from the
files each run left (test.json, results.json, history.jsonl), and every other
path is served as a file from the store, so a report and the raw history
are one click away. A run without a report gets one on first visit.
Binds to 127.0.0.1 unless told otherwise: results can hold hostnames and
payloads a user may not want on the network.
"""

from __future__ import annotations

import html
import json
import logging
import os
import posixpath
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.core.layout import HISTORY_JSONL, RESULTS, TEST, is_run_dir
from harness.core.verdict import word as verdict_word
from harness.run.summary import client_op_counts

__all__ = ["RunSummary", "list_runs", "render_index", "make_server"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSummary:
    test: str
    time: str
    path: str  # relative to the store
    valid: Any
    faults: list[str]
    ops: int
    bug: str | None
    anomalies: list[str]


def _count_client_ops(run: Path, results: Mapping[str, Any]) -> int:
    """The run's client ops, as its summary line and report count them
    (:func:`harness.run.summary.client_op_counts`); for a run that recorded none (still
    running, or killed), its history's client invocations, the samplers' left out as the
    report leaves them out."""
    counts = client_op_counts(results)
    if counts is not None:
        return sum(counts.values())
    n = 0
    try:
        with open(run / HISTORY_JSONL, "rb") as fh:
            for line in fh:
                if (
                    b'"type":"invoke"' in line
                    and b'"process":"nemesis"' not in line
                    and b'"f":"sample"' not in line
                ):
                    n += 1
    except OSError:
        return 0
    return n


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def list_runs(store: Path) -> list[RunSummary]:
    """Every ``store/<test>/<time>/`` with a history, newest first."""
    runs: list[RunSummary] = []
    if not store.is_dir():
        return runs
    for test_dir in sorted(p for p in store.iterdir() if p.is_dir() and not p.is_symlink()):
        for run in test_dir.iterdir():
            if run.is_symlink() or not run.is_dir():
                continue
            if not is_run_dir(run):
                continue
            spec = _load_json(run / TEST)
            results = _load_json(run / RESULTS)
            nem = spec.get("nemesis") or []
            runs.append(
                RunSummary(
                    test=test_dir.name,
                    time=run.name,
                    path=f"{test_dir.name}/{run.name}",
                    valid=results.get("valid", "unknown") if results else "running or crashed",
                    faults=list(nem) if isinstance(nem, list) else [str(nem)],
                    ops=_count_client_ops(run, results),
                    bug=spec.get("bug"),
                    anomalies=sorted((results.get("anomalies") or {}).keys()),
                )
            )
    runs.sort(key=lambda r: r.time, reverse=True)
    return runs


def render_index(runs: Sequence[RunSummary], store: Path) -> str:
    rows = []
    for r in runs:
        v = verdict_word(r.valid)
        q = urllib.parse.quote
        rows.append(
            f"<tr class='{v}'><td>{html.escape(r.test)}</td><td>{html.escape(r.time)}</td>"
            f"<td class='v'>{v}</td><td>{html.escape(', '.join(r.faults))}</td>"
            f"<td>{html.escape(r.bug or '')}</td><td>{r.ops}</td>"
            f"<td>{html.escape(', '.join(r.anomalies))}</td>"
            f"<td><a href='/{q(r.path)}/report.html'>report</a> · "
            f"<a href='/{q(r.path)}/'>files</a></td></tr>"
        )
    body = (
        "".join(rows)
        or "<tr><td colspan='8'>No runs yet: try <code>splitbrain run</code>.</td></tr>"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>splitbrain runs</title><style>"
        "body{font-family:system-ui,sans-serif;margin:24px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ddd;padding:6px 10px;font-size:14px}"
        ".VALID .v{background:#d8f3dc}.INVALID .v{background:#ffd6d6;font-weight:700}"
        ".UNKNOWN .v{background:#fff3bf}</style></head><body>"
        f"<h1>splitbrain runs</h1><p>store: {html.escape(str(store))}</p>"
        "<table><tr><th>test</th><th>time (UTC)</th><th>verdict</th><th>faults</th><th>bug</th>"
        f"<th>client ops</th><th>anomalies</th><th>links</th></tr>{body}</table></body></html>"
    )


class _Handler(SimpleHTTPRequestHandler):
    store: Path

    def log_message(self, fmt: str, *args: Any) -> None:
        log.info("%s " + fmt, self.address_string(), *args)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = urllib.parse.urlparse(self.path).path
        if path in ("/", "/index.html"):
            self._send_html(render_index(list_runs(self.store), self.store))
            return
        if path.endswith("/report.html"):
            run_dir = self._local(path[: -len("/report.html")])
            if run_dir is not None and run_dir.is_dir() and not (run_dir / "report.html").exists():
                try:
                    from harness.report.html import write_report

                    write_report(run_dir)
                except Exception as e:  # a broken run must not take the browser down
                    self._send_html(
                        f"<p>Could not build the report: {html.escape(str(e))}</p>", 500
                    )
                    return
        super().do_GET()

    def _local(self, url_path: str) -> Path | None:
        parts = [
            p
            for p in posixpath.normpath(urllib.parse.unquote(url_path)).split("/")
            if p not in ("", ".", "..")
        ]
        candidate = self.store.joinpath(*parts) if parts else self.store
        try:
            candidate.resolve().relative_to(self.store.resolve())
        except ValueError:
            return None
        return candidate

    def _send_html(self, text: str, code: int = 200) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def make_server(store: Path, host: str = "127.0.0.1", port: int = 8080) -> ThreadingHTTPServer:
    store = store.resolve()
    handler = type("StoreHandler", (_Handler,), {"store": store})
    return ThreadingHTTPServer((host, port), partial(handler, directory=os.fspath(store)))
