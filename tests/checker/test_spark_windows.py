"""The Spark jobs' window frames, read from the source: no Spark session needed."""

from __future__ import annotations

import re
from pathlib import Path


def test_no_window_frame_runs_to_the_end_of_its_partition() -> None:
    """Spark recomputes a frame bounded by ``unboundedFollowing`` for every row of the
    partition: quadratic, and a partition here is a node's share of the history (one such
    frame made a 1.9M-record check run for many minutes instead of about 90 s). A frame
    that grows from the partition's start is updated row by row; "the next" is "the
    previous" in reverse order."""
    spark_dir = Path(__file__).resolve().parents[2] / "checker" / "spark"
    found = [
        f"{p.name}:{n}"
        for p in sorted(spark_dir.glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"unboundedFollowing|Window\.unboundedFollowing", line)
    ]
    assert not found, found
