"""``splitbrain check PATH``: re-analyse a stored run or any history file.

Exit status is the verdict (0 valid, 1 invalid, 2 unknown) so CI can gate on
it; user mistakes raise :class:`~harness.core.errors.SplitbrainError`, which
``harness.cli.main`` turns into a one-line message and exit 3.

A run directory (one with ``test.json``) is re-checked as the run checked it:
:func:`harness.run.roles.recheck` rebuilds the workload's and the DB's checker options
from ``test.json`` through the function the runner used, and a run that did not finish
stays ``unknown`` (exit 2) with its interruption on record. The result goes to
``recheck.json`` beside the run's ``results.json``, which stays the run's own record (how
it ended, its cleanup problems, the report built from it); a history file or a directory
without ``test.json`` is checked as before, into ``results.json`` beside it. The result
is written atomically (a temporary file renamed over it), so a check killed at any
point leaves what was there whole, and running it again redoes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from checker.dispatch import check_history
from harness.cli import options
from harness.core.errors import CheckerError
from harness.core.layout import TEST
from harness.core.verdict import word as verdict_word
from harness.run.roles import RECHECK
from harness.run.store import write_atomic_json
from harness.run.summary import anomaly_totals

__all__ = ["check", "default_output", "summarize"]

EXAMPLES_SHOWN = 3


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / TEST).is_file()


def default_output(path: Path) -> Path:
    """recheck.json in a run's directory (its results.json is the run's record), else
    results.json in the directory or beside the history file."""
    if _is_run_dir(path):
        return path / RECHECK
    if path.is_dir():
        return path / "results.json"
    if path.stem == "history":
        return path.parent / "results.json"
    return path.parent / f"{path.stem}.results.json"


def summarize(results: dict[str, Any]) -> str:
    """The short text a user sees: verdict, one line per checker, then the evidence."""
    from checker.counterexample import render_text

    lines = [
        f"verdict: {verdict_word(results.get('valid'), loud=False)} (engine {results.get('engine', '?')}, "
        f"{results.get('elapsed_s', '?')} s)"
    ]
    if results.get("error"):
        lines.append(f"  note: {results['error']}")
    run = results.get("run") or {}
    if run.get("interrupted"):
        lines.append(
            f"  run: did not finish ({run.get('reason') or 'interrupted'}); "
            f"the checker alone said {verdict_word(results.get('checked_valid'), loud=False)}"
        )
    for name, res in (results.get("checkers") or {}).items():
        extra = ""
        if name.startswith("linearizable"):
            extra = f", model {res.get('model')}, {res.get('keys', 0)} key(s)"
            if res.get("unknown_keys"):
                extra += f", {len(res['unknown_keys'])} timed out"
        if res.get("unknown"):
            extra += f", could not judge: {', '.join(res['unknown'])}"
        if res.get("error"):
            extra += f", error: {res['error']}"
        lines.append(f"  {name}: {verdict_word(res.get('valid'), loud=False)}{extra}")
        for kind, notes in (res.get("notes") or {}).items():
            lines.append(f"    note {kind}: {len(notes)}")
    if results.get("valid") is False:
        for res in (results.get("checkers") or {}).values():
            cex = res.get("counterexample")
            if cex:
                lines.append("")
                lines.append(render_text(cex))
        counts = anomaly_totals(results)
        for kind, examples in (results.get("anomalies") or {}).items():
            if kind == "nonlinearizable":
                continue
            lines.append("")
            lines.append(f"{kind}: {counts.get(kind, len(examples))} case(s)")
            for ex in examples[:EXAMPLES_SHOWN]:
                lines.append("  " + json.dumps(ex, default=str))
    return "\n".join(lines)


def _parse_params(items: tuple[str, ...]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=JSON", param_hint="--model-param")
        try:
            params[name] = json.loads(raw)
        except ValueError:
            raise click.BadParameter(f"{raw!r} is not JSON", param_hint="--model-param") from None
    return params


@click.command("check")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--model",
    default=None,
    help="Model for linearizability (default: inferred from the ops), e.g. "
    "cas-register, knossos-cas-register, kv, multi-register, mutex.",
)
@click.option(
    "--model-param",
    "model_params",
    multiple=True,
    metavar="NAME=JSON",
    help="A model parameter, e.g. initial=0 or 'initial={\"x\": 0}' (repeatable).",
)
@options.engine(help="Where to check: in process, on Spark, or Spark only for huge histories.")
@options.spark_master()
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds for the linearizability search; past it the verdict is unknown.",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write the result (default: recheck.json in a run's directory, "
    "else results.json beside the history).",
)
def check(
    path: Path,
    model: str | None,
    model_params: tuple[str, ...],
    engine: str,
    spark_master: str | None,
    timeout: float | None,
    output: Path | None,
) -> int:
    """Check a stored run or a history file (JSONL, Parquet, EDN, Porcupine log).

    Exits 0 if valid, 1 if invalid, 2 if unknown.
    """
    params = _parse_params(model_params)
    if params and model is None:
        raise click.BadParameter("needs --model", param_hint="--model-param")
    if model is not None:
        from checker.models import get_model

        get_model(model, **params)  # a bad name or parameter fails here, before any reading
    if path.is_file() and path.stem == "history" and _is_run_dir(path.parent):
        path = path.parent  # a run's own history: re-check the run, never its results.json
    from harness.run.progress import step_status

    with step_status(f"checking {path} ({engine} engine)"):
        if _is_run_dir(path):
            from harness.run.roles import recheck

            results = recheck(
                path,
                engine=engine,
                timeout=timeout,
                master=spark_master,
                model=model,
                model_params=params,
            )
        else:
            results = check_history(
                path,
                model=model,
                engine=engine,
                timeout=timeout,
                master=spark_master,
                opts={"model_params": params},
            )
    out = output or default_output(path)
    try:
        if output is None and not out.parent.stat().st_mode & 0o222:
            # Marked read-only (e.g. a shared corpus): root could write anyway; don't.
            raise PermissionError(13, "directory is read-only")
        # Beside it, then renamed over it: a check killed (SIGKILL, OOM) or a disk that fills
        # at any moment leaves the results already there as they were.
        write_atomic_json(out, results)
        written = f"results: {out}"
    except OSError as e:
        if output is not None:
            raise CheckerError(f"cannot write results to {out}: {e.strerror or e}") from None
        written = f"results not written ({out}: {e.strerror or e}); use --output"
    click.echo(summarize(results))
    click.echo(written)
    v = results.get("valid")
    return 0 if v is True else 1 if v is False else 2
