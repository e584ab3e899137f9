"""Report page benchmark: a synthetic N-op run's report, opened in headless Chromium.

The same measurement as ``splitbrain bench report`` (:mod:`harness.bench.report`),
kept here beside the other benchmarks so that it can be run from a checkout and its
JSON kept with the other figures::

    .venv/bin/python benchmarks/report_bench.py --ops 100000 --opens 3 --output report.json

Figures: ``open_to_ready_ms_*`` (navigation start to the page's first drawn frame,
the target being at most 3000 ms at 100k ops), ``page_bytes``,
``report_build_seconds`` and ``report_peak_rss_mib`` (``splitbrain report`` in a
child process), and ``loadavg_1m`` (the machine is shared: read the times with it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from harness.bench.report import measure


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000, help="client ops, about")
    ap.add_argument("--opens", type=int, default=3, help="page loads to time")
    ap.add_argument("--limit-ms", type=float, default=3000.0, help="fail above this median")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run and page here")
    ap.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        out = measure(args.ops, args.keep, opens=args.opens)
    else:
        with tempfile.TemporaryDirectory(prefix="sb-report-bench-") as tmp:
            out = measure(args.ops, Path(tmp), opens=args.opens)
            out["page"] = None
    out["limit_ms"] = args.limit_ms
    out["ok"] = out["open_to_ready_ms_median"] <= args.limit_ms
    text = json.dumps(out, indent=2)
    print(text)
    if args.output is not None:
        args.output.write_text(text + "\n")
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
