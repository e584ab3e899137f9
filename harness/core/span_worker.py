"""A worker process of :func:`harness.core.parquet.jsonl_to_parquet_parts`: one span of a
JSONL history's lines into one Parquet part.

Run as ``python -m harness.core.span_worker SRC START STOP OUT values|no-values``. Any
exception is pickled to ``OUT.error`` (exit status 1) so that the parent raises it as it
is, with the file's line number; nothing is printed but what the converter logs.
"""

from __future__ import annotations

import pickle
import sys

from harness.core.parquet import convert_span


def main(argv: list[str]) -> int:
    src, start, stop, out, values = argv
    try:
        convert_span(src, (int(start), int(stop)), out, values=values == "values")
    except BaseException as e:  # every failure goes to the parent, which raises it
        try:
            data = pickle.dumps(e)
        except Exception:  # an exception that cannot travel: its words still do
            data = pickle.dumps(RuntimeError(f"{type(e).__name__}: {e}"))
        with open(f"{out}.error", "wb") as fh:
            fh.write(data)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
