"""What a user reads of a results map: true anomaly counts and the one-line verdict.

results.json keeps at most a few examples of each anomaly kind (``checker.results.CAP``)
while each checker's ``stats.anomaly_counts`` has the totals; a summary that counted the
examples would say ``queue-lost (20)`` of 262 losses. ``splitbrain run`` and
``splitbrain check`` both count here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core.verdict import word as verdict_word

__all__ = ["anomaly_totals", "client_op_counts", "verdict_line", "coverage_bits", "evidence_bits"]


def anomaly_totals(results: Mapping[str, Any]) -> dict[str, int]:
    """Every anomaly kind's total: the checkers' ``stats.anomaly_counts``, else the number of
    examples kept (a checker that reports no totals)."""
    counts: dict[str, int] = {}
    for res in (results.get("checkers") or {}).values():
        if not isinstance(res, Mapping):
            continue
        for kind, n in ((res.get("stats") or {}).get("anomaly_counts") or {}).items():
            if isinstance(n, int) and not isinstance(n, bool):
                counts[kind] = counts.get(kind, 0) + n
    out: dict[str, int] = {}
    for kind, examples in (results.get("anomalies") or {}).items():
        kept = len(examples) if isinstance(examples, (list, tuple)) else int(examples or 0)
        out[kind] = max(counts.get(kind, kept), kept)
    return out


def client_op_counts(results: Mapping[str, Any]) -> dict[str, int] | None:
    """The run's client ops by completion, ``{"ok", "fail", "info"}``: the one count the
    summary line, the report and the results browser show.

    From ``results.json``'s ``run`` block, what the runner counted (the samplers' ops and
    the nemesis's are not client ops); None when the run recorded none (still running,
    killed, or a history checked on its own): the readers then count the history the
    report's way (:func:`harness.report.data.digest`).
    """
    run = results.get("run")
    if not isinstance(run, Mapping):
        return None
    counts = {k: run.get(k) for k in ("ok", "fail", "info")}
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in counts.values()):
        return None
    return {k: int(n) for k, n in counts.items() if n is not None}


def verdict_line(results: Mapping[str, Any]) -> str:
    """``verdict: X; anomalies: kind (total), ...; reason: ...; ops ok/fail/info: a/b/c; ...``

    The op counts are client ops only (the samplers' are not); faults named in ``--nemesis``
    that the schedule never started are listed, since the run says nothing about them, and
    so are the situations of the coverage block never reached or not observable.
    """
    bits = [f"verdict: {verdict_word(results.get('valid'))}"]
    totals = anomaly_totals(results)
    if totals:
        bits.append("anomalies: " + ", ".join(f"{k} ({n})" for k, n in sorted(totals.items())))
    if results.get("reason"):
        bits.append(f"reason: {results['reason']}")
    elif results.get("error"):
        bits.append(f"reason: {results['error']}")
    run_info = results.get("run") or {}
    if run_info:
        c = client_op_counts(results) or {}
        bits.append(f"ops ok/fail/info: {c.get('ok', 0)}/{c.get('fail', 0)}/{c.get('info', 0)}")
        not_drawn = run_info.get("faults_not_drawn") or []
        if not_drawn:
            bits.append(f"faults never injected: {', '.join(not_drawn)}")
        deck = run_info.get("deck") or {}
        if deck.get("not_played"):
            bits.append(f"fault scripts not reached in time: {', '.join(deck['not_played'])}")
        if deck.get("dropped"):
            bits.append(
                "fault scripts played without some faults: "
                + ", ".join(f"{k} (no {', '.join(v)})" for k, v in deck["dropped"].items())
            )
        if deck.get("left_out"):
            bits.append(f"fault scripts left out: {', '.join(deck['left_out'])}")
        from harness.run.converge import convergence_text

        converged = convergence_text(run_info.get("converge"))
        if converged and not (results.get("reason") or "").startswith(converged):
            bits.append(converged)
    bits.extend(evidence_bits(results.get("evidence")))
    bits.extend(coverage_bits(results.get("coverage")))
    return "; ".join(bits)


def evidence_bits(ev: Any) -> list[str]:
    """``configuration: k=v`` (what the DB ran as, when it declares dimensions) and
    ``ok ops before/during/after faults: a/b/c`` (harness/run/evidence.py)."""
    if not isinstance(ev, Mapping):
        return []
    out = []
    conf = ev.get("configuration")
    if isinstance(conf, Mapping) and conf:
        out.append("configuration: " + ", ".join(f"{k}={v}" for k, v in sorted(conf.items())))
    ok = ev.get("ok")
    if isinstance(ok, Mapping):
        n = len(ev.get("windows") or [])
        parts = "/".join(str(ok.get(k, 0)) for k in ("before", "during", "after"))
        out.append(f"ok ops before/during/after {n} fault windows: {parts}")
    return out


def coverage_bits(cov: Any) -> list[str]:
    """``never reached: ...`` and ``not observable: ...`` from a results' coverage block.

    A situation the DB cannot show is named apart, never as not reached: a user must not
    read "this DB cannot tell" as "the campaign never got there".
    """
    if not isinstance(cov, Mapping):
        return []
    from harness.run.coverage import never_reached, situation_titles

    out = []
    missed = never_reached(cov)
    titles = situation_titles()
    why = cov.get("why_unreached")
    if missed and isinstance(why, Mapping) and why:  # nemesis/steering.py's reasons
        by_title = {titles.get(n, n): w for n, w in why.items()}
        missed = [f"{t} ({by_title[t]})" if t in by_title else t for t in missed]
    if missed:
        out.append("never reached: " + ", ".join(missed))
    blind = [titles.get(n, n) for n in (cov.get("unobservable") or {})]
    if blind:
        out.append("not observable with this DB: " + ", ".join(blind))
    return out
