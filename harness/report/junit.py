"""JUnit XML for CI: one test case per campaign run, failed when the verdict is.

CI systems render JUnit natively, so a nightly chaos job shows which run broke
and why without anyone opening results.json. Pure: results in, XML text out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

__all__ = ["junit_xml"]


def junit_xml(
    runs: Sequence[Mapping[str, Any]], *, suite: str = "splitbrain", fail_on_unknown: bool = False
) -> str:
    """``runs``: dicts with name, path, seconds and results (the results.json map)."""
    cases, failures, errors = [], 0, 0
    total = 0.0
    for run in runs:
        res = run.get("results") or {}
        valid = res.get("valid", "unknown")
        secs = float(run.get("seconds") or 0.0)
        total += secs
        body = ""
        anomalies = res.get("anomalies") or {}
        detail = json.dumps({k: v[:2] for k, v in anomalies.items()}, indent=1, default=str)
        if valid is False:
            failures += 1
            kinds = ", ".join(sorted(anomalies)) or "invalid"
            body = (
                f'<failure message={quoteattr("anomalies: " + kinds)} type="invalid">'
                f"{escape(detail)}</failure>"
            )
        elif valid is not True:
            reason = str(res.get("reason") or "the checker could not decide")
            if fail_on_unknown:
                failures += 1
                body = f'<failure message={quoteattr(reason)} type="unknown"/>'
            else:
                body = f"<skipped message={quoteattr('unknown: ' + reason)}/>"
        out = f"<system-out>{escape(str(run.get('path', '')))}</system-out>"
        cases.append(
            f"  <testcase classname={quoteattr(suite)} name={quoteattr(str(run.get('name')))}"
            f' time="{secs:.3f}">{body}{out}</testcase>'
        )
    head = (
        f'<testsuite name={quoteattr(suite)} tests="{len(runs)}" failures="{failures}" '
        f'errors="{errors}" time="{total:.3f}">'
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        + head
        + "\n"
        + "\n".join(cases)
        + "\n</testsuite>\n"
    )
